//! Reading a response head: the status line and header fields
//! (`httparse`), interim (1xx) responses skipped, and the body's framing
//! (RFC 9112 §6.3) from its fields.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderName};
use http::{StatusCode, Version};

use super::decode::{Decoder, field};
use super::error::Error;
use super::limits::{MAX_HEAD, MAX_HEADERS, READ_MIN};

/// A response head.
pub(super) struct Head {
    pub(super) status: StatusCode,
    /// The reason phrase, when it is not the status code's usual one (as
    /// hyper keeps it, for its server to write the same).
    pub(super) reason: Option<hyper::ext::ReasonPhrase>,
    pub(super) version: Version,
    pub(super) headers: HeaderMap,
    pub(super) framing: Decoder,
    /// The framing was ambiguous (`Transfer-Encoding` beside
    /// `Content-Length`): the connection is closed after this response.
    pub(super) ambiguous: bool,
}

/// Reads into `buf` until it holds a final response head, which it takes
/// off the front of `buf`; interim (1xx) responses are taken and skipped.
/// `received` is set once any byte has been read.
pub(super) fn poll_head(
    io: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut BytesMut,
    received: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Result<Head, Error>> {
    loop {
        if !buf.is_empty() {
            match parse_head(buf)? {
                Parsed::Final(head) => return Poll::Ready(Ok(head)),
                // An interim response, taken off: the next one follows.
                Parsed::Interim => continue,
                Parsed::Partial if buf.len() >= MAX_HEAD => {
                    return Poll::Ready(Err(Error::Head("longer than 64 KiB")));
                }
                Parsed::Partial => {}
            }
        }
        buf.reserve(READ_MIN);
        let n = match ready!(tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, buf)) {
            Ok(n) => n,
            // A TLS stream the upstream closed without its close_notify.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Poll::Ready(Err(e.into())),
        };
        if n == 0 {
            return Poll::Ready(Err(Error::ClosedBeforeHead));
        }
        *received = true;
    }
}

/// What the front of the read buffer holds.
pub(super) enum Parsed {
    /// Part of a response head: more to read.
    Partial,
    /// An interim (1xx) response, taken off the buffer.
    Interim,
    /// The final response head, taken off the buffer.
    Final(Head),
}

/// Parses the response head at the front of `buf`.
pub(super) fn parse_head(buf: &mut BytesMut) -> Result<Parsed, Error> {
    // The slots are not zeroed first (a memset of 3 KiB a response).
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    let len = match config.parse_response_with_uninit_headers(&mut parsed, buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(e) => return Err(Error::Head(head_error(e, buf))),
    };
    let code = parsed.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| Error::Head("invalid status code"))?;
    if status.is_informational() {
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(Error::Head("protocol upgrades are not forwarded"));
        }
        buf.advance(len);
        return Ok(Parsed::Interim);
    }
    let reason = parsed
        .reason
        .filter(|r| Some(*r) != status.canonical_reason())
        .and_then(|r| hyper::ext::ReasonPhrase::try_from(r.as_bytes()).ok());
    let version = match parsed.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    let mut length: Option<u64> = None;
    // The transfer codings, over every Transfer-Encoding line: `Some(true)`
    // while they are `chunked` alone.
    let mut chunked = None;
    for h in parsed.headers.iter() {
        let (name, value) = field(h).ok_or(Error::Head("invalid header"))?;
        if name == header::TRANSFER_ENCODING {
            for coding in value.as_bytes().split(|&b| b == b',') {
                let coding = coding.trim_ascii();
                if !coding.is_empty() {
                    chunked = Some(chunked.is_none() && coding.eq_ignore_ascii_case(b"chunked"));
                }
            }
            chunked.get_or_insert(false);
        } else if name == header::CONTENT_LENGTH {
            let n = content_length(value.as_bytes())?;
            if length.is_some_and(|l| l != n) {
                return Err(Error::Head("conflicting Content-Length"));
            }
            length = Some(n);
        }
        headers.append(name, value);
    }
    // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
    // framing (its sender may not mean what an HTTP/1.1 recipient reads).
    if chunked.is_some() && version == Version::HTTP_10 {
        return Err(Error::Head("Transfer-Encoding in an HTTP/1.0 response"));
    }
    // A body in another transfer coding (`gzip, chunked`) cannot be passed
    // on: Transfer-Encoding is hop-by-hop, so the client would get the
    // coded bytes unlabelled. Refused, as nginx does.
    if chunked == Some(false) {
        return Err(Error::Head("a transfer coding other than chunked"));
    }
    // Transfer-Encoding overrides Content-Length, which is dropped so that
    // the client is not told a length the body does not have, and the
    // connection, whose framing a third party may read differently, is not
    // kept (RFC 9112 §6.3).
    let ambiguous = chunked.is_some() && length.is_some();
    if ambiguous {
        headers.remove(header::CONTENT_LENGTH);
    }
    let framing = match (chunked, length) {
        (Some(_), _) => Decoder::CHUNKED,
        (None, None) => Decoder::Close,
        (None, Some(0)) => Decoder::Done,
        (None, Some(n)) => Decoder::Length(n),
    };
    buf.advance(len);
    Ok(Parsed::Final(Head {
        status,
        reason,
        version,
        headers,
        framing,
        ambiguous,
    }))
}

/// What is wrong with a response head that `httparse` refused.
fn head_error(e: httparse::Error, buf: &[u8]) -> &'static str {
    match e {
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::HeaderName => {
            // A field line that begins with whitespace continues the last
            // one (obs-fold, RFC 9112 §5.2): refused, not unfolded.
            let head = memchr::memmem::find(buf, b"\r\n\r\n").map_or(buf, |end| &buf[..end]);
            if memchr::memmem::find(head, b"\n ").is_some()
                || memchr::memmem::find(head, b"\n\t").is_some()
            {
                "obsolete line folding"
            } else {
                "invalid header name"
            }
        }
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status code",
        httparse::Error::Token | httparse::Error::Version => "not HTTP/1.x",
    }
}

/// A `Content-Length` value: digits, or the same digits repeated in a list
/// (`42, 42`), as RFC 9110 §8.6 lets a recipient accept.
pub(super) fn content_length(value: &[u8]) -> Result<u64, Error> {
    let mut out = None;
    for part in value.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Err(Error::Head("invalid Content-Length"));
        }
        let n = part.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        if out.is_some_and(|o| o != n) {
            return Err(Error::Head("conflicting Content-Length"));
        }
        out = Some(n);
    }
    out.ok_or(Error::Head("invalid Content-Length"))
}

/// Whether the `Connection` header has the `close` option.
pub(super) fn connection_close(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|o| o.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

/// The `Keep-Alive: timeout=N, max=M` hint of a response (RFC 2068
/// §19.7.1.1, kept by Apache, Node, cpp-httplib and others): how long the
/// upstream keeps the connection idle, and how many more requests it
/// takes on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepAliveHint {
    pub timeout: Option<std::time::Duration>,
    pub max: Option<u64>,
}

impl KeepAliveHint {
    /// The hint of a response's headers (unknown parameters ignored).
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut hint = KeepAliveHint::default();
        for value in headers.get_all(HeaderName::from_static("keep-alive")) {
            for param in value.as_bytes().split(|&b| b == b',') {
                let Some((name, value)) = std::str::from_utf8(param)
                    .ok()
                    .and_then(|p| p.split_once('='))
                else {
                    continue;
                };
                let Ok(n) = value.trim().trim_matches('"').parse::<u64>() else {
                    continue;
                };
                match name.trim().to_ascii_lowercase().as_str() {
                    "timeout" => hint.timeout = Some(std::time::Duration::from_secs(n)),
                    "max" => hint.max = Some(n),
                    _ => {}
                }
            }
        }
        hint
    }

    /// How long the connection may wait idle in the pool: a margin short of
    /// the upstream's own timeout (a second, or half of a timeout shorter
    /// than two seconds), so the pool lets go of it before the upstream
    /// does; `None` without a timeout hint.
    pub fn idle_limit(self) -> Option<std::time::Duration> {
        let t = self.timeout?;
        Some(
            t.saturating_sub(std::time::Duration::from_secs(1))
                .max(t / 2),
        )
    }

    /// Whether the upstream takes another request on the connection.
    pub fn allows_another(self) -> bool {
        self.max != Some(0)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use http::HeaderValue;

    use super::*;

    pub(in super::super) fn head(wire: &[u8]) -> Result<Parsed, Error> {
        parse_head(&mut BytesMut::from(wire))
    }

    /// The final head `wire` is (any other answer fails the test).
    fn final_head(wire: &[u8]) -> Head {
        match head(wire) {
            Ok(Parsed::Final(head)) => head,
            _ => panic!("not a final head: {:?}", String::from_utf8_lossy(wire)),
        }
    }

    pub(in super::super) fn framing(wire: &str) -> Decoder {
        final_head(wire.as_bytes()).framing
    }

    #[test]
    fn the_head_says_how_the_body_is_framed() {
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n"),
            Decoder::Length(12)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 12, 12\r\n\r\n"),
            Decoder::Length(12)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            Decoder::Done
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Decoder::CHUNKED
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: , chunked\r\n\r\n"),
            Decoder::CHUNKED
        );
        // Transfer-Encoding beside Content-Length: the length is dropped
        // and the connection will not be kept.
        let both = final_head(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        assert_eq!(both.framing, Decoder::CHUNKED);
        assert!(both.ambiguous && !both.headers.contains_key(header::CONTENT_LENGTH));
        let one = final_head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n");
        assert!(!one.ambiguous);
        assert_eq!(framing("HTTP/1.0 200 OK\r\n\r\n"), Decoder::Close);
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            // Transfer codings other than chunked are not passed on.
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding:\r\n\r\n",
            "HTTP/2 200 OK\r\n\r\n",
            "hello\r\n\r\n",
        ] {
            assert!(head(bad.as_bytes()).is_err(), "{bad:?}");
        }
        // Incomplete: more to read.
        assert!(matches!(
            head(b"HTTP/1.1 200 OK\r\ncontent-le"),
            Ok(Parsed::Partial)
        ));
    }

    /// An I/O error's text comes once in the error's chain (the proxy
    /// logs and answers with the chain on one line).
    #[test]
    fn an_io_error_is_the_source_not_repeated() {
        use std::error::Error as _;
        let e = Error::<std::convert::Infallible>::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert_eq!(e.to_string(), "upstream connection");
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("reset")
        );
    }

    #[test]
    fn an_unusual_reason_phrase_is_kept() {
        let reason = |wire: &str| final_head(wire.as_bytes()).reason;
        assert!(reason("HTTP/1.1 200 OK\r\n\r\n").is_none());
        let kept = reason("HTTP/1.1 200 Fine Thanks\r\n\r\n").expect("kept");
        assert_eq!(kept.as_bytes(), b"Fine Thanks");
    }

    #[test]
    fn interim_responses_are_skipped() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"[..]);
        assert!(matches!(parse_head(&mut buf), Ok(Parsed::Interim)));
        let Ok(Parsed::Final(head)) = parse_head(&mut buf) else {
            panic!("no final head after the interim one");
        };
        assert_eq!(head.status, StatusCode::OK);
        assert!(buf.is_empty());
    }

    #[test]
    fn keep_alive_hints_are_read_and_a_margin_kept() {
        let hint = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("keep-alive", HeaderValue::from_str(value).unwrap());
            KeepAliveHint::of(&headers)
        };
        let secs = std::time::Duration::from_secs;
        let h = hint("timeout=5, max=100");
        assert_eq!((h.timeout, h.max), (Some(secs(5)), Some(100)));
        assert_eq!(h.idle_limit(), Some(secs(4)));
        assert!(h.allows_another());
        assert_eq!(hint("Timeout=1").idle_limit(), Some(secs(1) / 2));
        assert_eq!(hint("timeout=0").idle_limit(), Some(secs(0)));
        assert!(!hint("max=0").allows_another());
        assert_eq!(hint("max=0").idle_limit(), None);
        // Unknown or malformed parameters are ignored.
        assert_eq!(
            hint("foo, timeout=x, max=-1, timeout=\"7\""),
            KeepAliveHint {
                timeout: Some(secs(7)),
                max: None
            }
        );
        assert_eq!(
            KeepAliveHint::of(&HeaderMap::new()),
            KeepAliveHint::default()
        );
    }
}
