//! Writing a response: its head, with the framing of its body chosen
//! (RFC 9112 §6), and its body's frames queued as they are, each with its
//! chunk's framing around it, for one vectored write ([`Out`]).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, StatusCode, Version};
use http_body::SizeHint;
use tokio::io::AsyncWrite;

use super::request::has_token;
use crate::head::content_length;
use crate::write::may_trail;

/// What the response is answering: what of the request decides how the
/// response is framed and whether the connection is kept.
#[derive(Debug, Clone)]
pub(super) struct Asked {
    pub(super) head: bool,
    pub(super) version: Version,
    pub(super) keep_alive: bool,
    /// The client takes trailers (`TE: trailers`).
    pub(super) trailers: bool,
}

impl Asked {
    pub(super) fn of(request: &http::request::Parts, keep_alive: bool) -> Self {
        Asked {
            head: request.method == Method::HEAD,
            version: request.version,
            keep_alive,
            trailers: request
                .headers
                .get(header::TE)
                .is_some_and(|te| has_token(te.as_bytes(), b"trailers")),
        }
    }
}

/// How the response body is framed on the wire.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Framing {
    /// No body is written (`HEAD`, 1xx, 204, 304).
    None,
    /// Exactly this many bytes remain.
    Length(u64),
    /// Chunked; the trailer fields the response declared (`Trailer`), which
    /// are written if the client takes trailers.
    Chunked {
        trailers: Option<Vec<header::HeaderName>>,
    },
    /// Until the connection closes (an HTTP/1.0 client, a length unknown).
    Close,
}

/// The response head, encoded into `out`: its framing, and whether the
/// connection can be kept after it.
pub(super) fn head(
    parts: &mut http::response::Parts,
    body: SizeHint,
    asked: &Asked,
    keep: bool,
    out: &mut Vec<u8>,
) -> (Framing, bool) {
    let mut keep = keep && asked.keep_alive;
    if parts.status.is_informational() {
        // A service cannot answer with an interim response.
        tracing::warn!(status = %parts.status, "a 1xx response answered as 500");
        parts.status = StatusCode::INTERNAL_SERVER_ERROR;
        parts.headers.clear();
    }
    let status = parts.status;
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if parts.version == Version::HTTP_10 {
        out.extend_from_slice(b"HTTP/1.0 ");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
    }
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match reason {
        Some(reason) => out.extend_from_slice(reason.as_bytes()),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");

    let has_body =
        !(asked.head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED);
    let can_chunk = has_body && asked.version == Version::HTTP_11;
    let mut length = None;
    let mut chunked = false;
    let mut connection = false;
    let mut date = false;
    let mut declared: Option<Vec<header::HeaderName>> = None;
    for (name, value) in &parts.headers {
        match *name {
            header::CONTENT_LENGTH => {
                match content_length(value.as_bytes()) {
                    Ok(n) if length.is_none() => length = Some(n),
                    // The same length again, or one that cannot be read:
                    // not written (the body's own length is).
                    _ => continue,
                }
                if status == StatusCode::NO_CONTENT {
                    continue;
                }
            }
            header::TRANSFER_ENCODING => {
                if !can_chunk {
                    continue;
                }
                chunked = true;
                out.extend_from_slice(b"transfer-encoding: ");
                out.extend_from_slice(value.as_bytes());
                if !ends_chunked(value.as_bytes()) {
                    out.extend_from_slice(b", chunked");
                }
                out.extend_from_slice(b"\r\n");
                continue;
            }
            header::CONNECTION => {
                connection = true;
                if has_token(value.as_bytes(), b"close") {
                    keep = false;
                }
            }
            header::DATE => date = true,
            header::TRAILER => {
                if !can_chunk {
                    continue;
                }
                let names = value
                    .to_str()
                    .unwrap_or("")
                    .split(',')
                    .filter_map(|n| header::HeaderName::from_bytes(n.trim().as_bytes()).ok());
                declared.get_or_insert_with(Vec::new).extend(names);
            }
            _ => {}
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    // Trailers go only to a client that takes them.
    let declared = declared.filter(|_| asked.trailers);
    let framing = if !has_body {
        Framing::None
    } else if chunked {
        // A length beside chunked framing is not written.
        if length.is_some() {
            remove_field(out, b"content-length: ");
        }
        Framing::Chunked { trailers: declared }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else if let Some(n) = body.exact() {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
        Framing::Length(n)
    } else if can_chunk {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Framing::Chunked { trailers: declared }
    } else {
        keep = false;
        Framing::Close
    };
    if !connection {
        if !keep && asked.version == Version::HTTP_11 {
            out.extend_from_slice(b"connection: close\r\n");
        } else if keep && asked.version == Version::HTTP_10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
    }
    if !date {
        out.extend_from_slice(b"date: ");
        super::date::write(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    (framing, keep)
}

/// Whether the last transfer coding of a `Transfer-Encoding` value is
/// `chunked`.
fn ends_chunked(value: &[u8]) -> bool {
    value
        .rsplit(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .find(|c| !c.is_empty())
        .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"))
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Takes the line that starts with `prefix` out of the head in `out`.
fn remove_field(out: &mut Vec<u8>, prefix: &[u8]) {
    let Some(start) = memchr::memmem::find(out, &[b"\r\n", prefix].concat()).map(|i| i + 2) else {
        return;
    };
    let end = memchr::memmem::find(&out[start..], b"\r\n").map_or(out.len(), |i| start + i + 2);
    out.drain(start..end);
}

/// The trailer section ending a chunked body: the fields the response
/// declared in `Trailer` that may be trailers, if the client takes them.
pub(super) fn trailers(
    fields: &HeaderMap,
    declared: Option<&[header::HeaderName]>,
) -> Option<Vec<u8>> {
    let declared = declared?;
    let mut out = Vec::new();
    for (name, value) in fields {
        if declared.contains(name) && may_trail(name) {
            field(&mut out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A part of what is to be written.
enum Seg {
    /// A response head, or a trailer section.
    Owned(Vec<u8>),
    Static(&'static [u8]),
    /// A data frame, with its chunk's size line before it and CRLF after
    /// it when the body is chunked (`line` empty when it is not).
    Data {
        line: Line,
        data: Bytes,
    },
}

/// A chunk size line: up to 16 hex digits and CRLF.
#[derive(Clone, Copy)]
struct Line {
    bytes: [u8; 18],
    len: u8,
}

impl Line {
    const NONE: Line = Line {
        bytes: [0; 18],
        len: 0,
    };

    fn of(size: usize) -> Line {
        let mut bytes = [0u8; 18];
        let digits = hex(size as u64, &mut bytes);
        bytes[digits..digits + 2].copy_from_slice(b"\r\n");
        Line {
            bytes,
            len: (digits + 2) as u8,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Seg {
    fn len(&self) -> usize {
        match self {
            Seg::Owned(v) => v.len(),
            Seg::Static(s) => s.len(),
            Seg::Data { line, data } if line.len > 0 => usize::from(line.len) + data.len() + 2,
            Seg::Data { data, .. } => data.len(),
        }
    }

    /// Its bytes from `at` on, as up to three slices put into `out`; how
    /// many.
    fn slices<'a>(&'a self, at: usize, out: &mut [IoSlice<'a>]) -> usize {
        let parts: [&'a [u8]; 3] = match self {
            Seg::Owned(v) => [v, &[], &[]],
            Seg::Static(s) => [s, &[], &[]],
            Seg::Data { line, data } if line.len > 0 => [line.as_bytes(), data, b"\r\n"],
            Seg::Data { data, .. } => [data, &[], &[]],
        };
        let mut skip = at;
        let mut n = 0;
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            if n == out.len() {
                break;
            }
            out[n] = IoSlice::new(&part[skip..]);
            skip = 0;
            n += 1;
        }
        n
    }
}

/// What is queued to be written to the client, in order, with how much of
/// its first part has been.
pub(super) struct Out {
    segs: VecDeque<Seg>,
    /// Bytes of the first part already written.
    at: usize,
    /// Bytes queued and not yet written.
    queued: usize,
    /// The last head's buffer, written and kept for the next.
    spare: Vec<u8>,
}

/// A head's buffer is kept for the next one up to this size.
const SPARE_MAX: usize = 4 * 1024;

/// Slices gathered into one write at most (Linux takes up to 1,024): 21
/// chunks of a burst, each its size line, data and CRLF.
const MAX_SLICES: usize = 64;
/// A queue of up to this many parts is gathered into ...
const FEW_SEGS: usize = 2;
/// ... this many slices.
const FEW_SLICES: usize = 6;

impl Out {
    pub(super) fn new() -> Self {
        Out {
            segs: VecDeque::with_capacity(8),
            at: 0,
            queued: 0,
            spare: Vec::new(),
        }
    }

    /// An empty buffer for a head: the last one's, when it was kept.
    pub(super) fn head_buffer(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.spare);
        buf.clear();
        if buf.capacity() == 0 {
            buf.reserve(256);
        }
        buf
    }

    /// A written part: its buffer kept for the next head if it has one.
    fn written(&mut self, seg: Seg) {
        if let Seg::Owned(buf) = seg
            && buf.capacity() <= SPARE_MAX
            && buf.capacity() > self.spare.capacity()
        {
            self.spare = buf;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queued == 0
    }

    pub(super) fn len(&self) -> usize {
        self.queued
    }

    fn push(&mut self, seg: Seg) {
        let n = seg.len();
        if n > 0 {
            self.queued += n;
            self.segs.push_back(seg);
        }
    }

    pub(super) fn owned(&mut self, bytes: Vec<u8>) {
        self.push(Seg::Owned(bytes));
    }

    pub(super) fn fixed(&mut self, bytes: &'static [u8]) {
        self.push(Seg::Static(bytes));
    }

    /// A data frame: a chunk of its own when `chunked`.
    pub(super) fn data(&mut self, data: Bytes, chunked: bool) {
        if data.is_empty() {
            return;
        }
        let line = if chunked {
            Line::of(data.len())
        } else {
            Line::NONE
        };
        self.push(Seg::Data { line, data });
    }

    /// Writes as much as `io` takes now; ready once all is written.
    pub(super) fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        while self.queued > 0 {
            // A frame or two at a time (a stream's usual write) gathers
            // into a small array; a burst, into one of `MAX_SLICES`.
            let n = if self.segs.len() <= FEW_SEGS {
                ready!(self.poll_gathered::<FEW_SLICES, W>(io, cx))?
            } else {
                ready!(self.poll_gathered::<MAX_SLICES, W>(io, cx))?
            };
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// One write of up to `N` slices of the queue's front.
    fn poll_gathered<const N: usize, W: AsyncWrite + Unpin>(
        &self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        let mut slices = [IoSlice::new(&[]); N];
        let mut count = 0;
        let mut at = self.at;
        for seg in &self.segs {
            count += seg.slices(at, &mut slices[count..]);
            at = 0;
            if count == N {
                break;
            }
        }
        if count == 1 || !io.is_write_vectored() {
            Pin::new(&mut *io).poll_write(cx, &slices[0])
        } else {
            Pin::new(&mut *io).poll_write_vectored(cx, &slices[..count])
        }
    }

    fn advance(&mut self, mut n: usize) {
        self.queued -= n;
        if self.queued == 0 {
            self.at = 0;
            while let Some(seg) = self.segs.pop_front() {
                self.written(seg);
            }
            return;
        }
        while let Some(first) = self.segs.front() {
            let left = first.len() - self.at;
            if n < left {
                self.at += n;
                return;
            }
            n -= left;
            self.at = 0;
            if let Some(seg) = self.segs.pop_front() {
                self.written(seg);
            }
        }
    }
}

/// Writes `n` in hex at the start of `out`; the number of digits.
fn hex(n: u64, out: &mut [u8; 18]) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = (16 - n.leading_zeros() as usize / 4).max(1);
    for i in 0..digits {
        out[digits - 1 - i] = DIGITS[((n >> (4 * i)) & 0xf) as usize];
    }
    digits
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport that takes at most `max` bytes a write.
    struct Trickle {
        max: usize,
        got: Vec<u8>,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.got.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let mut n = 0;
            for buf in bufs {
                let take = buf.len().min(self.max - n);
                self.got.extend_from_slice(&buf[..take]);
                n += take;
                if n == self.max {
                    break;
                }
            }
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Whatever a write takes of the queue, the bytes go out whole and in
    /// order, each frame in its chunk's framing.
    #[test]
    fn the_queue_goes_out_whole_however_the_writes_cut_it() {
        let want: &[u8] =
            b"HEAD\r\n\r\n5\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\nraw0\r\n\r\n";
        for max in 1..=want.len() {
            let mut out = Out::new();
            out.owned(b"HEAD\r\n\r\n".to_vec());
            out.data(Bytes::from_static(b"hello"), true);
            out.data(Bytes::new(), true);
            out.data(Bytes::from_static(b"abcdefghijklmnopqrstuvwxyz"), true);
            out.data(Bytes::from_static(b"raw"), false);
            out.fixed(b"0\r\n\r\n");
            assert_eq!(out.len(), want.len());
            let mut io = Trickle {
                max,
                got: Vec::new(),
            };
            let mut cx = Context::from_waker(std::task::Waker::noop());
            assert!(matches!(
                out.poll_write(&mut io, &mut cx),
                Poll::Ready(Ok(()))
            ));
            assert_eq!(io.got, want, "{max} bytes a write");
            assert!(out.is_empty());
        }
    }

    #[test]
    fn a_size_is_written_in_hex() {
        for n in [
            1u64,
            9,
            10,
            15,
            16,
            255,
            256,
            4096,
            65_535,
            1 << 40,
            u64::MAX,
        ] {
            let mut out = [0u8; 18];
            let digits = hex(n, &mut out);
            assert_eq!(&out[..digits], format!("{n:x}").as_bytes(), "{n}");
        }
    }
}
