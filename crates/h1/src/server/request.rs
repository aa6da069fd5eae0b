//! Reading a request head: the request line and header fields
//! (`httparse`), the body's framing (RFC 9112 §6.3) and whether the
//! connection stays open after the exchange.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Uri, Version};
use smallvec::SmallVec;

use crate::decode::Decoder;
use crate::head::content_length;
use crate::limits::MAX_HEADERS;

/// A request head, with what the connection needs to know of it.
pub(super) struct Head {
    pub(super) parts: http::request::Parts,
    /// How its body is framed: `Done` when it has none.
    pub(super) framing: Decoder,
    /// Whether the client asked to keep the connection after this exchange
    /// (HTTP/1.1 unless `Connection: close`; HTTP/1.0 with
    /// `Connection: keep-alive`), and its framing lets it.
    pub(super) keep_alive: bool,
    /// `Expect: 100-continue`: the client waits for an interim `100` before
    /// it sends the body.
    pub(super) expect_continue: bool,
}

/// Why a request head was refused: answered with this status, then the
/// connection is closed (its framing is unknown past the head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `400`: not HTTP/1.x, or a malformed line or field, or a framing
    /// that cannot be read safely.
    BadRequest(&'static str),
    /// `431`: longer than the head limit, or more than 100 fields.
    TooLarge,
    /// `414`: a request target too long for a URI.
    UriTooLong,
}

impl Refused {
    pub(super) fn status_line(self) -> &'static [u8] {
        match self {
            Refused::BadRequest(_) => b"HTTP/1.1 400 Bad Request\r\n",
            Refused::TooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Refused::UriTooLong => b"HTTP/1.1 414 URI Too Long\r\n",
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Refused::BadRequest(why) => why,
            Refused::TooLarge => "request head too large",
            Refused::UriTooLong => "request target too long",
        }
    }
}

/// The longest request target taken (`http::Uri`'s own bound).
const MAX_URI: usize = 65_534;

/// Parses the request head at the front of `buf` and takes it off: `None`
/// while more is to be read (and `buf` still under `max_head`). Empty
/// lines before the request line are skipped (RFC 9112 §2.2).
pub(super) fn parse(buf: &mut BytesMut, max_head: usize) -> Result<Option<Head>, Refused> {
    // Neither the slots nor the fields' offsets below are zeroed first (a
    // memset of some 6 KiB a request, more than the parse itself).
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let len = match parsed.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) if len > max_head => return Err(Refused::TooLarge),
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= max_head => {
            return Err(Refused::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Refused::TooLarge),
        Err(e) => return Err(Refused::BadRequest(refusal(e, parsed.method.is_none()))),
    };
    let (Some(method), Some(target), Some(minor)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(Refused::BadRequest("incomplete request line"));
    };
    if target.len() > MAX_URI {
        return Err(Refused::UriTooLong);
    }
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|_| Refused::BadRequest("invalid method"))?;
    let version = if minor == 1 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    // The fields' names and values, as offsets into the head: its bytes are
    // then split off `buf` once, and each value shares them.
    let base = buf.as_ptr() as usize;
    // httparse's slices all lie in `buf`, empty values too (a test below).
    let offset = |s: &[u8]| s.as_ptr() as usize - base;
    let target_at = (offset(target.as_bytes()), target.len());
    let fields: SmallVec<[(usize, usize, usize, usize); 32]> = parsed
        .headers
        .iter()
        .map(|h| {
            let name = h.name.as_bytes();
            (offset(name), name.len(), offset(h.value), h.value.len())
        })
        .collect();
    let count = fields.len();
    let head = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target_at.0..target_at.0 + target_at.1))
        .map_err(|_| Refused::BadRequest("invalid request target"))?;

    let mut headers = HeaderMap::with_capacity(count);
    let mut keep_alive = version == Version::HTTP_11;
    let mut saw_close = false;
    let mut expect_continue = false;
    let mut length: Option<u64> = None;
    // The transfer codings, over every Transfer-Encoding line: `Some(true)`
    // while the last one is `chunked`.
    let mut chunked: Option<bool> = None;
    for &(name_at, name_len, value_at, value_len) in &fields {
        let name = http::HeaderName::from_bytes(&head[name_at..name_at + name_len])
            .map_err(|_| Refused::BadRequest("invalid header name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(value_at..value_at + value_len))
            .map_err(|_| Refused::BadRequest("invalid header value"))?;
        match name {
            header::TRANSFER_ENCODING => {
                if version == Version::HTTP_10 {
                    // RFC 9112 §6.1: its framing is faulty.
                    return Err(Refused::BadRequest(
                        "Transfer-Encoding in an HTTP/1.0 request",
                    ));
                }
                for coding in value.as_bytes().split(|&b| b == b',') {
                    let coding = coding.trim_ascii();
                    if !coding.is_empty() {
                        chunked = Some(coding.eq_ignore_ascii_case(b"chunked"));
                    }
                }
                chunked.get_or_insert(false);
            }
            header::CONTENT_LENGTH => {
                let n = content_length(value.as_bytes())
                    .map_err(|_| Refused::BadRequest("invalid Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Refused::BadRequest("conflicting Content-Length"));
                }
                if length.is_some() {
                    // The same length again: one line is enough.
                    continue;
                }
                length = Some(n);
            }
            header::CONNECTION => {
                // Once any line asks to close, a later `keep-alive` does not
                // undo it.
                if saw_close || has_token(value.as_bytes(), b"close") {
                    saw_close = true;
                    keep_alive = false;
                } else if version == Version::HTTP_10 {
                    keep_alive = has_token(value.as_bytes(), b"keep-alive");
                }
            }
            // An HTTP/1.0 client does not know the expectation: ignored
            // (RFC 9110 §10.1.1).
            header::EXPECT if version == Version::HTTP_11 => {
                expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue");
            }
            _ => {}
        }
        headers.append(name, value);
    }
    // RFC 9112 §6.3: a request whose last transfer coding is not chunked
    // cannot be delimited.
    if chunked == Some(false) {
        return Err(Refused::BadRequest("a transfer coding other than chunked"));
    }
    // Transfer-Encoding overrides Content-Length, which is dropped; a
    // message framed both ways may be read otherwise by another hop, so the
    // connection is not kept after it.
    if chunked.is_some() && length.is_some() {
        headers.remove(header::CONTENT_LENGTH);
        keep_alive = false;
    }
    let framing = match (chunked, length) {
        (Some(_), _) => Decoder::CHUNKED,
        (None, None | Some(0)) => Decoder::Done,
        (None, Some(n)) => Decoder::Length(n),
    };
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        framing,
        keep_alive,
        expect_continue: expect_continue && framing != Decoder::Done,
    }))
}

/// Whether a comma-separated field value holds `token` (case-insensitive).
pub(super) fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// What is wrong with a request head that `httparse` refused.
fn refusal(e: httparse::Error, before_method: bool) -> &'static str {
    match e {
        httparse::Error::Token if before_method => "invalid method",
        httparse::Error::Token => "invalid request target",
        httparse::Error::Version => "not HTTP/1.x",
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status | httparse::Error::TooManyHeaders => "invalid request head",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty values, and values with only whitespace, are taken as empty
    /// fields, each where it stood.
    #[test]
    fn an_empty_field_value_is_an_empty_value() {
        let mut buf = BytesMut::from(
            &b"GET /x HTTP/1.1\r\nhost: h\r\nx-empty:\r\nx-blank:   \r\nx-after: 1\r\n\r\n"[..],
        );
        let head = parse(&mut buf, 8192).unwrap().unwrap();
        let headers = &head.parts.headers;
        assert_eq!(headers["x-empty"], "");
        assert_eq!(headers["x-blank"], "");
        assert_eq!(headers["x-after"], "1");
        assert_eq!(headers["host"], "h");
        assert!(buf.is_empty());
    }
}
