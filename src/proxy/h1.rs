//! An HTTP/1.1 client connection of our own, for plain-HTTP upstreams:
//! writes one request, reads its response head, and hands the response
//! body to the client's connection frame by frame, from the task that
//! writes to the client.
//!
//! hyper's client connection (used here before) decodes a chunked body one
//! byte at a time through its buffered reader, and hands every frame to the
//! response's body through a channel, with a wake-up for each end: 26 % of
//! the proxy's instructions per streamed chunk went there (callgrind,
//! docs/benchmarks.md). Here the response body *is* the connection: a poll
//! of it decodes what is in the read buffer ([`Decoder`]) and reads the
//! socket only when that is empty, so a frame costs a scan of its size line
//! and a copy.
//!
//! What it forwards is what hyper's did: each chunk's data as it arrived
//! (one frame per chunk, or per part of a chunk that arrived in one read:
//! never two chunks in one frame), trailers as a trailers frame, and the
//! body framed as RFC 9112 §6.3 says (`HEAD`, 1xx, 204 and 304 have none,
//! whatever their `Content-Length` or `Transfer-Encoding`;
//! `Transfer-Encoding` ending in `chunked`, else `Content-Length`, else
//! until the upstream closes). Interim (1xx) responses are skipped. An
//! HTTP/1.0 response with `Transfer-Encoding` is refused (RFC 9112 §6.1:
//! its framing is faulty), as hyper's client refuses it.
//!
//! The request goes out with the framing of its body: its
//! `Content-Length`, the exact length of a body read ahead (unless the
//! request declares `Trailer`), or chunked. A chunked body's trailers end
//! it as its trailer section (less the fields that must not be trailers,
//! RFC 9110 §6.5.1, as hyper's client leaves them out); a body sent with a
//! `Content-Length` has no room for them, and they are dropped.
//!
//! The exchange is full duplex, as hyper's was: if the response head
//! arrives before the request body is all sent (an upstream that answers
//! an upload early, or streams its answer while it reads), the response
//! body sends the rest as it is polled, for as long as the upstream takes
//! it, still with no task of its own. A request that is not all sent when
//! the response ends (the upstream answered without reading all of it),
//! or whose sending failed once the response had begun (the upstream
//! stopped reading and closed, the client's body failed), is not sent
//! further; the response goes on, and the connection is closed after it.
//!
//! A connection is kept for the next request only when both messages
//! ended cleanly at their framing's end: HTTP/1.1, no `Connection: close`,
//! a body that was not delimited by the close, the whole request sent, and
//! nothing read past the response.

use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body as _, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::RequestBody;
use super::body::OWN_BUFFER_MAX;
use super::upstream::H1Pool;

/// A read takes at least this much room in the read buffer.
const READ_MIN: usize = 8 * 1024;
/// ... and at most this much: a read that filled its room doubles the next
/// one's, up to here (bulk bodies), one that used less than half halves it.
const READ_MAX: usize = 64 * 1024;
/// Longest response head (status line and headers), and longest trailer
/// section, read.
const MAX_HEAD: usize = 64 * 1024;
/// Most headers in a response head (hyper's default too).
const MAX_HEADERS: usize = 100;
/// Longest chunk size line (size and extensions).
const MAX_SIZE_LINE: usize = 4 * 1024;
/// Request body bytes gathered before a write (frames that are ready at
/// once go out together with the head).
const WRITE_GATHER: usize = 64 * 1024;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("upstream connection")]
    Io(#[from] std::io::Error),
    #[error("upstream closed the connection before the response head")]
    ClosedBeforeHead,
    #[error("upstream closed the connection before the end of the response body")]
    ClosedInBody,
    #[error("invalid response head from upstream: {0}")]
    Head(&'static str),
    #[error("invalid chunked response body from upstream: {0}")]
    Chunked(&'static str),
    #[error(transparent)]
    RequestBody(super::body::ClientBodyError),
    #[error("request body does not match its Content-Length")]
    RequestLength,
}

/// An exchange that failed before its response head.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    /// Not one byte of a response had arrived: on a connection that served
    /// a request before, the upstream closed it as it was reused (the
    /// keep-alive race), and has not seen the request.
    pub silent: bool,
}

/// How a reused connection failed in the keep-alive race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Race {
    /// The upstream ended the connection.
    Closed,
    /// The upstream reset it (or the write found the pipe broken).
    Reset,
}

impl Race {
    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Race::Closed => "closed",
            Race::Reset => "reset",
        }
    }
}

impl Failed {
    /// How a silent failure on a reused connection was the keep-alive
    /// race, or `None` for any other failure.
    pub fn keepalive_race(&self) -> Option<Race> {
        if !self.silent {
            return None;
        }
        match &self.error {
            Error::ClosedBeforeHead => Some(Race::Closed),
            Error::Io(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                Some(Race::Reset)
            }
            _ => None,
        }
    }
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed {
            error,
            silent: false,
        }
    }
}

/// A request ready to be written: its head's bytes, its body and how that
/// is framed.
pub struct Prepared {
    head: Vec<u8>,
    framing: RequestFraming,
    method: Method,
    body: RequestBody,
}

impl Prepared {
    /// `req` (origin-form target, `Host` set) made ready to be written.
    pub fn new(req: Request<RequestBody>) -> Self {
        let (parts, body) = req.into_parts();
        let (head, framing) = request_head(&parts, &body);
        Prepared {
            head,
            framing,
            method: parts.method,
            body,
        }
    }

    /// The same request again, if it can be sent again whole: its body is
    /// empty or all held by the proxy (read ahead), none of it still to
    /// come from the client.
    pub fn replay(&self) -> Option<Prepared> {
        Some(Prepared {
            head: self.head.clone(),
            framing: self.framing,
            method: self.method.clone(),
            body: self.body.replay()?,
        })
    }
}

/// What a connection runs over: a TCP stream to the upstream (or, in
/// tests, an in-memory one), and where one that can be kept goes.
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Sized {
    /// Keeps `conn`, whose exchange ended cleanly, for the next request.
    fn give_back(conn: Conn<Self>, pool: &Weak<H1Pool>);
}

impl Transport for TcpStream {
    fn give_back(conn: Conn<Self>, pool: &Weak<H1Pool>) {
        if let Some(pool) = pool.upgrade() {
            pool.give_back(conn);
        }
    }
}

/// An open connection to the upstream, between exchanges.
pub struct Conn<T = TcpStream> {
    io: T,
    /// Bytes read and not yet decoded; empty between exchanges.
    buf: BytesMut,
    /// What the upstream's last `Keep-Alive` header said, if anything.
    hint: KeepAliveHint,
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
    fn of(headers: &HeaderMap) -> Self {
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

impl Conn {
    /// Whether an idle connection can take a request: the upstream has not
    /// closed it (nor sent anything unasked). Reads nothing that matters:
    /// what an idle connection has to read is its end.
    pub fn is_open(&self) -> bool {
        let mut probe = [0u8; 1];
        match self.io.try_read(&mut probe) {
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }
}

impl<T: Transport> Conn<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            hint: KeepAliveHint::default(),
        }
    }

    /// What the upstream's last response said of keeping this connection.
    pub fn hint(&self) -> KeepAliveHint {
        self.hint
    }

    /// Sends `req` and reads the response head; the response's body reads
    /// the rest from this connection (and sends the rest of the request,
    /// if the head came first), and gives it back to `pool` at its end if
    /// it can be kept.
    pub async fn send(
        mut self,
        req: Prepared,
        pool: Weak<H1Pool>,
    ) -> Result<Response<Body<T>>, Failed> {
        let Prepared {
            head: out,
            framing,
            method,
            body,
        } = req;
        let mut sending = Sending::new(out, framing, body);
        let mut buf = std::mem::take(&mut self.buf);
        let mut received = false;
        let mut sent = None;
        let head = std::future::poll_fn(|cx| {
            if sent.is_none()
                && let Poll::Ready(result) = sending.poll(&mut self.io, cx)
            {
                sent = Some(result);
            }
            // A request that cannot be completed (the client's body
            // failed) gets no answer: no use waiting for one.
            if matches!(
                sent,
                Some(Err(Error::RequestBody(_) | Error::RequestLength))
            ) && let Some(Err(e)) = sent.take()
            {
                return Poll::Ready(Err(e));
            }
            poll_head(&mut self.io, &mut buf, &mut received, cx)
        })
        .await;
        let (head, sending, request_failed) = match (head, sent) {
            // The response came first: its body sends the rest.
            (Ok(head), None) => (head, Some(Box::new(sending)), false),
            (Ok(head), Some(Ok(()))) => (head, None, false),
            // The upstream stopped taking the request, and answered.
            (Ok(head), Some(Err(e))) => {
                tracing::debug!(error = ?e, "the upstream answered a request it did not take whole");
                (head, None, true)
            }
            // An upstream that could not take the request whole and
            // closed: the write's error is the one to report.
            (Err(_), Some(Err(e))) | (Err(e), _) => {
                // A client's failed body is not the upstream's silence.
                let silent =
                    !received && !matches!(e, Error::RequestBody(_) | Error::RequestLength);
                return Err(Failed { error: e, silent });
            }
        };
        self.buf = buf;
        let Head {
            status,
            reason,
            version,
            headers,
            framing,
            ambiguous,
        } = head;
        let framing = if method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            Decoder::Done
        } else {
            framing
        };
        self.hint = KeepAliveHint::of(&headers);
        let keep = !request_failed
            && !ambiguous
            && version == Version::HTTP_11
            && framing != Decoder::Close
            && !connection_close(&headers)
            && self.hint.allows_another();
        let mut resp = Response::new(Body {
            conn: Some(self),
            decoder: framing,
            keep,
            sending,
            pool,
            read_size: READ_MIN,
        });
        *resp.status_mut() = status;
        *resp.version_mut() = version;
        *resp.headers_mut() = headers;
        if let Some(reason) = reason {
            resp.extensions_mut().insert(reason);
        }
        // A body that is empty from the start has ended already.
        resp.body_mut().ended();
        Ok(resp)
    }
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RequestFraming {
    /// Exactly this many bytes (`Content-Length`; 0 for no body).
    Length(u64),
    Chunked,
}

/// The request's head, ready to be written, and its body's framing: the
/// request's own `Content-Length` if it has one, else the body's exact
/// length when it is known (none for an empty body of a method that has
/// no body semantics, as hyper does) and the request declares no
/// `Trailer` (trailers can only follow a chunked body), else chunked.
fn request_head(parts: &http::request::Parts, body: &RequestBody) -> (Vec<u8>, RequestFraming) {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // hyper's server has checked it (one valid length).
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| content_length(v.as_bytes()).ok());
    let framing = match declared {
        Some(n) => RequestFraming::Length(n),
        None => match body.size_hint().exact() {
            Some(0) if !has_body_semantics(&parts.method) => RequestFraming::Length(0),
            Some(n) if !parts.headers.contains_key(header::TRAILER) => {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
                RequestFraming::Length(n)
            }
            _ => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                RequestFraming::Chunked
            }
        },
    };
    out.extend_from_slice(b"\r\n");
    (out, framing)
}

/// Methods whose requests are expected to carry a body.
fn has_body_semantics(method: &Method) -> bool {
    *method == Method::POST || *method == Method::PUT || *method == Method::PATCH
}

/// The request as it goes out: its head, then its body, the frames that
/// are ready at once gathered into one write. The request's future drives
/// it until the response head arrives; if the request is not all sent by
/// then, the response body drives the rest as it is polled.
struct Sending {
    body: RequestBody,
    /// Bytes to write: the head, then the frames gathered, framed.
    out: Vec<u8>,
    /// How many bytes of `out` have been written.
    written: usize,
    /// What the body still owes its `Content-Length`; `None` when chunked.
    remaining: Option<u64>,
    /// The body has ended: `out` holds its last bytes.
    last: bool,
}

impl Sending {
    fn new(head: Vec<u8>, framing: RequestFraming, body: RequestBody) -> Self {
        let remaining = match framing {
            RequestFraming::Length(n) => Some(n),
            RequestFraming::Chunked => None,
        };
        let last = remaining == Some(0) && body.is_end_stream();
        Sending {
            body,
            out: head,
            written: 0,
            remaining,
            last,
        }
    }

    /// Writes on: ready when the request is all sent, or has failed.
    fn poll(
        &mut self,
        io: &mut (impl AsyncWrite + Unpin),
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Error>> {
        loop {
            while self.written < self.out.len() {
                let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out[self.written..]))?;
                if n == 0 {
                    return Poll::Ready(Err(
                        std::io::Error::from(std::io::ErrorKind::WriteZero).into()
                    ));
                }
                self.written += n;
            }
            if !self.out.is_empty() {
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                self.out.clear();
                self.written = 0;
            }
            if self.last {
                return Poll::Ready(Ok(()));
            }
            ready!(self.gather(cx))?;
        }
    }

    /// Takes the body's frames that are ready now into `out`, framed, up
    /// to `WRITE_GATHER` bytes or the body's end: pending only while not
    /// one is ready.
    fn gather(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        use std::io::Write as _;
        loop {
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending if self.out.is_empty() => return Poll::Pending,
                Poll::Pending => return Poll::Ready(Ok(())),
                Poll::Ready(frame) => frame,
            };
            match frame {
                None => {
                    if self.remaining.is_some_and(|n| n > 0) {
                        return Poll::Ready(Err(Error::RequestLength));
                    }
                    if self.remaining.is_none() {
                        self.out.extend_from_slice(b"0\r\n\r\n");
                    }
                    self.last = true;
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => return Poll::Ready(Err(Error::RequestBody(e))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        match &mut self.remaining {
                            Some(n) => {
                                *n = n
                                    .checked_sub(data.len() as u64)
                                    .ok_or(Error::RequestLength)?;
                                self.out.extend_from_slice(&data);
                            }
                            None => {
                                // A Vec's write cannot fail.
                                let _ = write!(self.out, "{:x}\r\n", data.len());
                                self.out.extend_from_slice(&data);
                                self.out.extend_from_slice(b"\r\n");
                            }
                        }
                        if self.remaining == Some(0) && self.body.is_end_stream() {
                            self.last = true;
                            return Poll::Ready(Ok(()));
                        }
                    }
                    // Trailers end a chunked body, as its trailer section.
                    // A body sent with a Content-Length has none: they are
                    // dropped, and its end is still to come.
                    Err(frame) => {
                        if let (None, Ok(trailers)) = (self.remaining, frame.into_trailers()) {
                            self.out.extend_from_slice(b"0\r\n");
                            for (name, value) in &trailers {
                                if may_trail(name) {
                                    self.out.extend_from_slice(name.as_str().as_bytes());
                                    self.out.extend_from_slice(b": ");
                                    self.out.extend_from_slice(value.as_bytes());
                                    self.out.extend_from_slice(b"\r\n");
                                }
                            }
                            self.out.extend_from_slice(b"\r\n");
                            self.last = true;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
            }
            if self.out.len() >= WRITE_GATHER {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// Whether a field can be sent as a trailer: not one of those that frame,
/// route, authenticate or describe the message, which a recipient must
/// have before the content (RFC 9110 §6.5.1; hyper's client leaves out the
/// same ones).
fn may_trail(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::AUTHORIZATION
            | header::CACHE_CONTROL
            | header::CONTENT_ENCODING
            | header::CONTENT_LENGTH
            | header::CONTENT_RANGE
            | header::CONTENT_TYPE
            | header::HOST
            | header::MAX_FORWARDS
            | header::SET_COOKIE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::TE
    )
}

/// A response head.
struct Head {
    status: StatusCode,
    /// The reason phrase, when it is not the status code's usual one (as
    /// hyper keeps it, for its server to write the same).
    reason: Option<hyper::ext::ReasonPhrase>,
    version: Version,
    headers: HeaderMap,
    framing: Decoder,
    /// The framing was ambiguous (`Transfer-Encoding` beside
    /// `Content-Length`): the connection is closed after this response.
    ambiguous: bool,
}

/// Reads into `buf` until it holds a final response head, which it takes
/// off the front of `buf`; interim (1xx) responses are taken and skipped.
/// `received` is set once any byte has been read.
fn poll_head(
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
        let n = ready!(tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, buf))?;
        if n == 0 {
            return Poll::Ready(Err(Error::ClosedBeforeHead));
        }
        *received = true;
    }
}

/// What the front of the read buffer holds.
enum Parsed {
    /// Part of a response head: more to read.
    Partial,
    /// An interim (1xx) response, taken off the buffer.
    Interim,
    /// The final response head, taken off the buffer.
    Final(Head),
}

/// Parses the response head at the front of `buf`.
fn parse_head(buf: &mut BytesMut) -> Result<Parsed, Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut slots);
    let len = match parsed.parse(buf) {
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
    let mut chunked = None;
    for h in parsed.headers.iter() {
        let (name, value) = field(h).ok_or(Error::Head("invalid header"))?;
        if name == header::TRANSFER_ENCODING {
            // The last coding says whether the body is chunked.
            let last = value
                .as_bytes()
                .rsplit(|&b| b == b',')
                .next()
                .unwrap_or(b"");
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
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
    // Transfer-Encoding overrides Content-Length, which is dropped so that
    // the client is not told a length the body does not have, and the
    // connection, whose framing a third party may read differently, is not
    // kept (RFC 9112 §6.3).
    let ambiguous = chunked.is_some() && length.is_some();
    if ambiguous {
        headers.remove(header::CONTENT_LENGTH);
    }
    let framing = match (chunked, length) {
        (Some(true), _) => Decoder::CHUNKED,
        // A body in another coding runs to the end of the connection.
        (Some(false), _) | (None, None) => Decoder::Close,
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
fn content_length(value: &[u8]) -> Result<u64, Error> {
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
fn connection_close(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|o| o.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

/// Where the chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chunk {
    /// In a chunk's size line: the size so far and its number of digits.
    Size {
        size: u64,
        digits: u8,
    },
    /// In the whitespace after the size.
    SizeSpace {
        size: u64,
    },
    /// In a chunk extension (ignored): how many bytes of it were read.
    Extension {
        size: u64,
        len: usize,
    },
    /// After the CR of the size line.
    SizeLf {
        size: u64,
    },
    /// In a chunk's data: how many bytes remain.
    Data(u64),
    DataCr,
    DataLf,
    /// After the last chunk: the trailer section.
    Trailers,
}

impl Chunk {
    const START: Chunk = Chunk::Size { size: 0, digits: 0 };

    /// The state after the framing byte `b` (never called in `Data` or
    /// `Trailers`, which take their bytes whole).
    fn step(self, b: u8) -> Result<Chunk, Error> {
        let hex = |b: u8| (b as char).to_digit(16).map(u64::from);
        Ok(match self {
            Chunk::Size { size, digits } => match (b, hex(b)) {
                (_, Some(d)) if digits < 16 => Chunk::Size {
                    size: size << 4 | d,
                    digits: digits + 1,
                },
                (_, Some(_)) => return Err(Error::Chunked("chunk size over 16 hex digits")),
                (b'\r', None) if digits > 0 => Chunk::SizeLf { size },
                (b' ' | b'\t', None) if digits > 0 => Chunk::SizeSpace { size },
                (b';', None) if digits > 0 => Chunk::Extension { size, len: 0 },
                _ => return Err(Error::Chunked("invalid chunk size")),
            },
            Chunk::SizeSpace { size } => match b {
                b' ' | b'\t' => self,
                b';' => Chunk::Extension { size, len: 0 },
                b'\r' => Chunk::SizeLf { size },
                _ => return Err(Error::Chunked("invalid chunk size")),
            },
            Chunk::Extension { size, len } => match b {
                b'\r' => Chunk::SizeLf { size },
                b'\n' => return Err(Error::Chunked("bare LF in a chunk extension")),
                _ if len >= MAX_SIZE_LINE => {
                    return Err(Error::Chunked("chunk extension over 4 KiB"));
                }
                _ => Chunk::Extension { size, len: len + 1 },
            },
            Chunk::SizeLf { size } => match (b, size) {
                (b'\n', 0) => Chunk::Trailers,
                (b'\n', _) => Chunk::Data(size),
                _ => return Err(Error::Chunked("no LF after a chunk size")),
            },
            Chunk::DataCr => match b {
                b'\r' => Chunk::DataLf,
                _ => return Err(Error::Chunked("chunk data longer than its size")),
            },
            Chunk::DataLf => match b {
                b'\n' => Chunk::START,
                _ => return Err(Error::Chunked("no LF after chunk data")),
            },
            Chunk::Data(_) | Chunk::Trailers => self,
        })
    }
}

/// How a response body is delimited, and how far it has been decoded out
/// of the read buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Decoder {
    /// This many bytes remain.
    Length(u64),
    Chunked(Chunk),
    /// Until the upstream closes the connection.
    Close,
    /// Ended (or empty from the start).
    Done,
}

impl Decoder {
    const CHUNKED: Decoder = Decoder::Chunked(Chunk::START);

    fn is_done(&self) -> bool {
        *self == Decoder::Done
    }

    /// The upstream closed the connection: whether that ends the body.
    fn closed(&mut self) -> bool {
        let ends = *self == Decoder::Close;
        if ends {
            *self = Decoder::Done;
        }
        ends
    }

    /// The next frame that `buf` holds (taken off its front), or `None`
    /// when it needs more bytes or the body has ended (`is_done`). After a
    /// data frame, the framing that follows it in `buf` is taken too, up to
    /// the next chunk's data, so that the last frame of a body whose end
    /// was read with it already says the body has ended.
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame<Bytes>>, Error> {
        let frame = match *self {
            Decoder::Done => None,
            Decoder::Close if buf.is_empty() => None,
            Decoder::Close => Some(Frame::data(take(buf, 0, buf.len()))),
            Decoder::Length(_) if buf.is_empty() => None,
            Decoder::Length(rest) => {
                let n = usize::try_from(rest).unwrap_or(usize::MAX).min(buf.len());
                let rest = rest - n as u64;
                *self = if rest == 0 {
                    Decoder::Done
                } else {
                    Decoder::Length(rest)
                };
                Some(Frame::data(take(buf, 0, n)))
            }
            Decoder::Chunked(_) => {
                let frame = self.chunked(buf, true)?;
                if frame.as_ref().is_some_and(Frame::is_data) {
                    // An error there leaves the state and `buf` as they
                    // were: the next call meets it, after this frame.
                    let _ = self.chunked(buf, false);
                }
                frame
            }
        };
        Ok(frame)
    }

    /// Runs the chunked decoder over `buf`: the next data frame (only when
    /// `data`) or trailers frame, or `None` when `buf` has no more for it
    /// (or, without `data`, at the next data or non-empty trailers). An
    /// error leaves the state and `buf` unchanged.
    fn chunked(&mut self, buf: &mut BytesMut, data: bool) -> Result<Option<Frame<Bytes>>, Error> {
        let Decoder::Chunked(mut at) = *self else {
            return Ok(None);
        };
        // Framing bytes read, taken off `buf` at the end.
        let mut i = 0;
        let frame = loop {
            match at {
                Chunk::Data(rest) => {
                    if !data || i == buf.len() {
                        break None;
                    }
                    let n = usize::try_from(rest)
                        .unwrap_or(usize::MAX)
                        .min(buf.len() - i);
                    at = match rest - n as u64 {
                        0 => Chunk::DataCr,
                        rest => Chunk::Data(rest),
                    };
                    let data = take(buf, i, n);
                    i = 0;
                    break Some(Frame::data(data));
                }
                // The usual framing, whole in `buf`, read at once: the CRLF
                // after a chunk's data, and a size line without extensions.
                Chunk::DataCr if buf[i..].starts_with(b"\r\n") => {
                    i += 2;
                    at = Chunk::START;
                    continue;
                }
                Chunk::START => {
                    if let Some((size, len)) = size_line(&buf[i..]) {
                        i += len;
                        at = match size {
                            0 => Chunk::Trailers,
                            size => Chunk::Data(size),
                        };
                        continue;
                    }
                }
                Chunk::Trailers => {
                    let section = &buf[i..];
                    if section.starts_with(b"\r\n") {
                        buf.advance(i + 2);
                        *self = Decoder::Done;
                        return Ok(None);
                    }
                    if !data {
                        break None;
                    }
                    let Some(end) = memchr::memmem::find(section, b"\r\n\r\n") else {
                        if section.len() > MAX_HEAD {
                            return Err(Error::Chunked("trailers longer than 64 KiB"));
                        }
                        break None;
                    };
                    let trailers = trailers(&section[..end + 4])?;
                    buf.advance(i + end + 4);
                    *self = Decoder::Done;
                    return Ok(Some(Frame::trailers(trailers)));
                }
                _ => {}
            }
            let Some(&b) = buf.get(i) else { break None };
            at = at.step(b)?;
            i += 1;
        };
        buf.advance(i);
        *self = Decoder::Chunked(at);
        Ok(frame)
    }
}

/// A whole chunk size line of hex digits and CRLF at the start of `bytes`:
/// the size and the line's length. `None` for anything else (more to read,
/// an extension, whitespace, an error), which the byte-by-byte path takes.
fn size_line(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut size = 0u64;
    let mut digits = 0;
    for &b in bytes.iter().take(16) {
        match (b as char).to_digit(16) {
            Some(d) => size = size << 4 | u64::from(d),
            None => break,
        }
        digits += 1;
    }
    (digits > 0 && bytes[digits..].starts_with(b"\r\n")).then_some((size, digits + 2))
}

/// A trailer section (its fields and the empty line after them).
fn trailers(section: &[u8]) -> Result<HeaderMap, Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let Ok(httparse::Status::Complete((_, fields))) = httparse::parse_headers(section, &mut slots)
    else {
        return Err(Error::Chunked("invalid trailers"));
    };
    let mut map = HeaderMap::with_capacity(fields.len());
    for f in fields {
        let (name, value) = field(f).ok_or(Error::Chunked("invalid trailers"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// A header field as parsed, as `http` holds it (`None` if it cannot be).
fn field(h: &httparse::Header<'_>) -> Option<(HeaderName, HeaderValue)> {
    let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
    Some((name, HeaderValue::from_bytes(h.value).ok()?))
}

/// The `n` bytes of `buf` after its first `skip`, taken off it with those:
/// copied when small, so that `buf` stays unshared and is reused in place;
/// split off when large.
fn take(buf: &mut BytesMut, skip: usize, n: usize) -> Bytes {
    if n <= OWN_BUFFER_MAX {
        let out = Bytes::copy_from_slice(&buf[skip..skip + n]);
        buf.advance(skip + n);
        out
    } else {
        buf.advance(skip);
        buf.split_to(n).freeze()
    }
}

/// A response body, read from its connection as it is polled (which also
/// sends the rest of the request, if the response came first).
pub struct Body<T = TcpStream> {
    /// `None` once the body has ended (or failed).
    conn: Option<Conn<T>>,
    decoder: Decoder,
    /// Whether the connection can be kept once the body has ended (and the
    /// request has been sent whole).
    keep: bool,
    /// The rest of the request, while it is being sent.
    sending: Option<Box<Sending>>,
    pool: Weak<H1Pool>,
    /// Room reserved for the next read (adaptive, `READ_MIN..=READ_MAX`).
    read_size: usize,
}

impl<T: Transport> Body<T> {
    /// Once the body has ended: its connection back to the pool, if it can
    /// be kept, else closed (and a request not all sent is not sent
    /// further).
    fn ended(&mut self) {
        if !self.decoder.is_done() {
            return;
        }
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let request_sent = self.sending.take().is_none();
        if self.keep && request_sent && conn.buf.is_empty() {
            // An idle connection holds no buffer (up to `max_idle` of
            // them wait in the pool); the next exchange takes a new one.
            conn.buf = BytesMut::new();
            T::give_back(conn, &self.pool);
        }
    }

    /// Sends more of the request, as far as its body and the upstream
    /// allow now. Once the response has begun, a failure to send is not
    /// the response's: the rest is not sent, and the connection is not
    /// kept.
    fn send_rest(&mut self, cx: &mut Context<'_>) {
        let (Some(sending), Some(conn)) = (self.sending.as_mut(), self.conn.as_mut()) else {
            return;
        };
        let Poll::Ready(result) = sending.poll(&mut conn.io, cx) else {
            return;
        };
        if let Err(e) = result {
            tracing::debug!(error = ?e, "the rest of the request was not sent to the upstream");
            self.keep = false;
        }
        self.sending = None;
    }
}

impl<T: Transport> http_body::Body for Body<T> {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        this.send_rest(cx);
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut conn.buf) {
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(Some(frame)) => {
                    this.ended();
                    return Poll::Ready(Some(Ok(frame)));
                }
                Ok(None) if this.decoder.is_done() => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Ok(None) => {}
            }
            conn.buf.reserve(this.read_size);
            let room = conn.buf.capacity() - conn.buf.len();
            let read = tokio_util::io::poll_read_buf(Pin::new(&mut conn.io), cx, &mut conn.buf);
            match ready!(read) {
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
                // (A body delimited by the close never keeps its connection.)
                Ok(0) if this.decoder.closed() => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::ClosedInBody)));
                }
                Ok(n) if n == room => this.read_size = (this.read_size * 2).min(READ_MAX),
                Ok(n) if n < room / 2 => this.read_size = (this.read_size / 2).max(READ_MIN),
                Ok(_) => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder {
            Decoder::Done => SizeHint::with_exact(0),
            Decoder::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

/// Fuzzing entry point (`fuzz/fuzz_targets/h1_response.rs`, built only
/// with `--cfg fuzzing`): `data` read as an upstream's answer, head then
/// body, as [`poll_head`] and [`Body`] read it, handed over in the reads
/// its first two bytes choose (0: one byte per read; else cuts at those
/// fractions of the rest). Whatever the bytes, nothing panics, and the
/// reads change nothing: head, data, trailers and end are those of the
/// whole answer read at once.
#[cfg(fuzzing)]
pub fn fuzz_response(data: &[u8]) {
    /// How the body ended.
    #[derive(Debug, PartialEq)]
    enum End {
        /// At its framing's end.
        Done,
        /// Delimited by the close, which came.
        Closed,
        /// The bytes ran out before the head or the body's end.
        Short,
        Error(String),
    }
    /// What was made of a final response head.
    #[derive(Debug, PartialEq)]
    struct Seen {
        status: StatusCode,
        reason: Option<Vec<u8>>,
        version: Version,
        headers: HeaderMap,
        framing: Decoder,
        ambiguous: bool,
        hint: KeepAliveHint,
        idle_limit: Option<std::time::Duration>,
        allows_another: bool,
        close: bool,
    }
    /// What an answer came to.
    #[derive(Debug, PartialEq)]
    struct Read {
        head: Option<Seen>,
        data: Vec<u8>,
        trailers: Vec<HeaderMap>,
        end: End,
    }
    fn read<'a>(mut pieces: impl Iterator<Item = &'a [u8]>) -> Read {
        let mut out = Read {
            head: None,
            data: Vec::new(),
            trailers: Vec::new(),
            end: End::Short,
        };
        let mut buf = BytesMut::new();
        let head = loop {
            if !buf.is_empty() {
                match parse_head(&mut buf) {
                    Err(e) => {
                        out.end = End::Error(e.to_string());
                        return out;
                    }
                    Ok(Parsed::Final(head)) => break head,
                    Ok(Parsed::Interim) => continue,
                    Ok(Parsed::Partial) if buf.len() >= MAX_HEAD => {
                        out.end = End::Error("head longer than 64 KiB".into());
                        return out;
                    }
                    Ok(Parsed::Partial) => {}
                }
            }
            match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => return out,
            }
        };
        let mut decoder =
            if head.status == StatusCode::NO_CONTENT || head.status == StatusCode::NOT_MODIFIED {
                Decoder::Done
            } else {
                head.framing
            };
        let hint = KeepAliveHint::of(&head.headers);
        out.head = Some(Seen {
            status: head.status,
            reason: head.reason.map(|r| r.as_bytes().to_vec()),
            version: head.version,
            close: connection_close(&head.headers),
            headers: head.headers,
            framing: head.framing,
            ambiguous: head.ambiguous,
            hint,
            idle_limit: hint.idle_limit(),
            allows_another: hint.allows_another(),
        });
        loop {
            match decoder.decode(&mut buf) {
                Err(e) => {
                    out.end = End::Error(e.to_string());
                    return out;
                }
                Ok(Some(frame)) => match frame.into_data() {
                    Ok(data) => {
                        assert!(!data.is_empty(), "an empty data frame");
                        out.data.extend_from_slice(&data);
                    }
                    Err(frame) => {
                        let trailers = frame.into_trailers().ok();
                        assert!(decoder.is_done(), "trailers before the end");
                        out.trailers.extend(trailers);
                    }
                },
                Ok(None) if decoder.is_done() => {
                    out.end = End::Done;
                    return out;
                }
                Ok(None) => match pieces.next() {
                    Some(piece) => buf.extend_from_slice(piece),
                    None => {
                        if decoder.closed() {
                            out.end = End::Closed;
                        }
                        return out;
                    }
                },
            }
        }
    }
    let [first, second, wire @ ..] = data else {
        return;
    };
    let whole = read(std::iter::once(wire));
    let pieces = if *first == 0 {
        read(wire.chunks(1))
    } else {
        let mut cuts = [
            wire.len() * usize::from(*first) / 256,
            wire.len() * usize::from(*second) / 256,
        ];
        cuts.sort_unstable();
        let [a, b] = cuts;
        read([&wire[..a], &wire[a..b], &wire[b..]].into_iter())
    };
    assert_eq!(whole, pieces, "the reads changed what was read");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames, each with whether the body had ended right after it.
    type Frames = Vec<(Frame<Bytes>, bool)>;

    /// The frames `decoder` makes of `wire` handed over in the pieces cut
    /// at `cuts` (as reads would), each with whether the body had ended
    /// right after it; the decoder's last word is the result's second part.
    fn frames(
        framing: Decoder,
        wire: &[u8],
        cuts: &[usize],
    ) -> (Frames, Result<(BytesMut, bool), Error>) {
        let mut decoder = framing;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&wire.len()]) {
            buf.extend_from_slice(&wire[from..to]);
            from = to;
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => out.push((frame, decoder.is_done())),
                    Ok(None) => break,
                    Err(e) => return (out, Err(e)),
                }
            }
        }
        let done = decoder.is_done();
        (out, Ok((buf, done)))
    }

    fn data(frames: &Frames) -> Vec<Vec<u8>> {
        frames
            .iter()
            .filter_map(|(f, _)| f.data_ref().map(|d| d.to_vec()))
            .collect()
    }

    const CHUNKED: &[u8] = b"7\r\ndata: a\r\n\
        19;name=value\r\ndata: {\"x\":1}\n\ndata: bc\n\n\r\n\
        3 \r\nxyz\r\n0\r\n\r\n";

    /// Read whole, every chunk is one frame with its bytes, and the last one
    /// ends the body (the terminator came with it).
    #[test]
    fn a_chunk_is_one_frame() {
        let (out, rest) = frames(Decoder::CHUNKED, CHUNKED, &[]);
        assert_eq!(
            data(&out),
            [&b"data: a"[..], b"data: {\"x\":1}\n\ndata: bc\n\n", b"xyz"]
        );
        assert_eq!(
            out.iter().map(|(_, end)| *end).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert!(rest.unwrap().0.is_empty());
    }

    /// Cut anywhere, in one or two places: the same bytes, no frame
    /// crosses a chunk's boundary (a chunk cut in its data is two frames),
    /// and the body ends exactly at its terminator.
    #[test]
    fn chunked_bodies_cut_anywhere_decode_the_same() {
        let chunks: [&[u8]; 3] = [b"data: a", b"data: {\"x\":1}\n\ndata: bc\n\n", b"xyz"];
        let n = CHUNKED.len();
        for a in 0..=n {
            for b in a..=n {
                let (out, rest) = frames(Decoder::CHUNKED, CHUNKED, &[a, b]);
                let (rest, done) = rest.unwrap_or_else(|e| panic!("cut at {a}, {b}: {e}"));
                assert!(rest.is_empty() && done, "cut at {a}, {b}");
                // Each frame lies inside one chunk: regrouped, the chunks.
                let mut regrouped: Vec<Vec<u8>> = vec![Vec::new()];
                let mut i = 0;
                for d in data(&out) {
                    assert!(!d.is_empty(), "cut at {a}, {b}: empty frame");
                    regrouped[i].extend_from_slice(&d);
                    assert!(regrouped[i].len() <= chunks[i].len());
                    if regrouped[i].len() == chunks[i].len() {
                        regrouped.push(Vec::new());
                        i += 1;
                    }
                }
                assert_eq!(&regrouped[..3], chunks, "cut at {a}, {b}");
                // Only the last frame can say the body ended (it does when
                // the terminator came in the same piece).
                assert!(out[..out.len() - 1].iter().all(|(_, end)| !end));
                // The last data byte is 8 before the end.
                let last_piece = [a, b].into_iter().filter(|&c| c < n).max().unwrap_or(0);
                if last_piece <= n - 8 {
                    assert!(out.last().unwrap().1, "cut at {a}, {b}: ended");
                }
            }
        }
    }

    #[test]
    fn trailers_come_as_a_last_frame() {
        let wire = b"3\r\nabc\r\n0\r\nx-usage: 12\r\nx-b: 2\r\n\r\n";
        for cut in 0..=wire.len() {
            let (out, rest) = frames(Decoder::CHUNKED, wire, &[cut]);
            assert_eq!(rest.unwrap(), (BytesMut::new(), true), "cut at {cut}");
            assert_eq!(data(&out).concat(), b"abc", "cut at {cut}");
            let (last, end) = out.last().unwrap();
            let trailers = last.trailers_ref().expect("trailers");
            assert_eq!(trailers["x-usage"], "12");
            assert_eq!(trailers["x-b"], "2");
            assert!(end);
        }
    }

    #[test]
    fn bad_chunked_framing_is_an_error_after_the_good_frames() {
        for (wire, good) in [
            (&b"3\r\nabcd\r\n"[..], 1),
            (b"3\r\nabc\nx", 1),
            (b"g\r\n", 0),
            (b"\r\n", 0),
            (b"3 4\r\nabc\r\n", 0),
            (b"3\n", 0),
            (b"11111111111111111\r\n", 0),
            (b"3;\n", 0),
            (b"3\r\nabc\r\n0\r\nno colon\r\n\r\n", 1),
        ] {
            let (out, rest) = frames(Decoder::CHUNKED, wire, &[]);
            assert!(
                matches!(rest, Err(Error::Chunked(_))),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
            assert_eq!(out.len(), good, "{:?}", String::from_utf8_lossy(wire));
        }
    }

    #[test]
    fn a_chunk_extension_is_bounded() {
        let mut wire = b"3;".to_vec();
        wire.extend(std::iter::repeat_n(b'x', MAX_SIZE_LINE + 1));
        wire.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
        assert!(frames(Decoder::CHUNKED, &wire, &[]).1.is_err());
        let mut wire = b"3;".to_vec();
        wire.extend(std::iter::repeat_n(b'x', MAX_SIZE_LINE));
        wire.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
        assert_eq!(data(&frames(Decoder::CHUNKED, &wire, &[]).0), [b"abc"]);
    }

    #[test]
    fn a_length_body_ends_at_its_length() {
        let wire = b"hello, world";
        for cut in 0..=wire.len() {
            let (out, rest) = frames(Decoder::Length(5), wire, &[cut]);
            assert_eq!(data(&out).concat(), b"hello", "cut at {cut}");
            assert!(out.last().unwrap().1);
            // What follows the body is left for the connection to refuse.
            let (rest, done) = rest.unwrap();
            assert!(done);
            assert_eq!(&rest[..], &wire[5..]);
        }
    }

    #[test]
    fn small_frames_are_copied_and_large_ones_split_off() {
        let mut buf = BytesMut::from(&vec![b'x'; 3 * OWN_BUFFER_MAX][..]);
        let start = buf.as_ptr();
        let small = take(&mut buf, 1, OWN_BUFFER_MAX);
        assert_eq!(small.len(), OWN_BUFFER_MAX);
        // Copied: not a view of the read buffer, which moved past it.
        let in_buffer = |p: *const u8| {
            (start as usize..start as usize + 3 * OWN_BUFFER_MAX).contains(&(p as usize))
        };
        assert!(!in_buffer(small.as_ptr()));
        assert_eq!(buf.as_ptr(), start.wrapping_add(1 + OWN_BUFFER_MAX));
        let at = buf.as_ptr();
        let large = take(&mut buf, 0, OWN_BUFFER_MAX + 1);
        assert_eq!(large.len(), OWN_BUFFER_MAX + 1);
        // Split off: the same bytes of the read buffer.
        assert_eq!(large.as_ptr(), at);
        assert_eq!(buf.len(), OWN_BUFFER_MAX - 2);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 500, ..Default::default() })]

        /// Any chunking of any data, with or without extensions, cut into
        /// reads anywhere: the data comes out whole, every frame within one
        /// chunk, and the body ends at the terminator.
        #[test]
        fn any_chunked_body_decodes_to_its_chunks(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..300), 0..8),
            extension in proptest::prelude::any::<bool>(),
            cuts in proptest::collection::vec(0usize..4000, 0..6),
        ) {
            let mut wire = Vec::new();
            for c in &chunks {
                wire.extend_from_slice(format!("{:X}", c.len()).as_bytes());
                if extension {
                    wire.extend_from_slice(b" ;a=b");
                }
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(c);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            let (out, rest) = frames(Decoder::CHUNKED, &wire, &cuts);
            let (rest, done) = rest.unwrap();
            proptest::prop_assert!(rest.is_empty() && done);
            // Regrouped by chunk, the frames are the chunks.
            let mut got: Vec<Vec<u8>> = Vec::new();
            let mut open = 0;
            for d in data(&out) {
                if open == 0 {
                    got.push(Vec::new());
                    open = chunks[got.len() - 1].len();
                }
                proptest::prop_assert!(d.len() <= open, "a frame across chunks");
                got.last_mut().unwrap().extend_from_slice(&d);
                open -= d.len();
            }
            proptest::prop_assert_eq!(got, chunks);
        }

        /// Whatever the upstream sends, the decoders and the head parser
        /// answer (a frame, more to read, or an error) without panicking.
        #[test]
        fn any_bytes_are_answered(
            wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            cut in 0usize..200,
        ) {
            let cut = cut.min(wire.len());
            for framing in [Decoder::CHUNKED, Decoder::Length(50), Decoder::Close] {
                let _ = frames(framing, &wire, &[cut]);
            }
            let mut buf = BytesMut::from(&wire[..]);
            let _ = parse_head(&mut buf);
        }
    }

    fn head(wire: &[u8]) -> Result<Parsed, Error> {
        parse_head(&mut BytesMut::from(wire))
    }

    /// The final head `wire` is (any other answer fails the test).
    fn final_head(wire: &[u8]) -> Head {
        match head(wire) {
            Ok(Parsed::Final(head)) => head,
            _ => panic!("not a final head: {:?}", String::from_utf8_lossy(wire)),
        }
    }

    fn framing(wire: &str) -> Decoder {
        final_head(wire.as_bytes()).framing
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
            framing(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 5\r\n\r\n"
            ),
            Decoder::CHUNKED
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
            Decoder::Close
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
        let e = Error::from(std::io::Error::new(
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
    fn the_request_head_carries_its_framing() {
        let head = |method: Method, headers: &[(&str, &str)], body: RequestBody| {
            let mut req = Request::new(body);
            *req.method_mut() = method;
            *req.uri_mut() = "/v1/chat?x=1".parse().unwrap();
            for (n, v) in headers {
                req.headers_mut().append(
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            let (parts, body) = req.into_parts();
            let (out, framing) = request_head(&parts, &body);
            (String::from_utf8(out).unwrap(), framing)
        };
        let buffered =
            |s: &str| RequestBody::buffered([Frame::data(Bytes::from(s.to_owned()))].into(), None);
        let empty = || RequestBody::buffered(Default::default(), None);

        let (out, framing) = head(Method::POST, &[("host", "up:8000")], buffered("{}"));
        assert_eq!(
            out,
            "POST /v1/chat?x=1 HTTP/1.1\r\nhost: up:8000\r\ncontent-length: 2\r\n\r\n"
        );
        assert_eq!(framing, RequestFraming::Length(2));
        let (out, framing) = head(Method::POST, &[("content-length", "2")], buffered("{}"));
        assert_eq!(
            out,
            "POST /v1/chat?x=1 HTTP/1.1\r\ncontent-length: 2\r\n\r\n"
        );
        assert_eq!(framing, RequestFraming::Length(2));
        let (out, framing) = head(Method::GET, &[], empty());
        assert_eq!(out, "GET /v1/chat?x=1 HTTP/1.1\r\n\r\n");
        assert_eq!(framing, RequestFraming::Length(0));
        let (out, _) = head(Method::POST, &[], empty());
        assert_eq!(
            out,
            "POST /v1/chat?x=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
        );
    }

    /// Socket-level: a scripted upstream on 127.0.0.1 that answers each
    /// request it reads (head, and a body of its `content-length`) with the
    /// next of `answers`, and counts its connections; an answer of `None`
    /// closes the connection instead.
    mod wire {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        use http_body_util::BodyExt as _;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio::net::TcpListener;

        use super::super::*;
        use crate::proxy::body::ClientBody;
        use crate::proxy::upstream::SendError;

        struct Upstream {
            pool: Arc<H1Pool>,
            connections: Arc<AtomicUsize>,
            requests: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
            /// The pool's retries, in order.
            retries: Arc<std::sync::Mutex<Vec<Race>>>,
        }

        fn pool_for(addr: std::net::SocketAddr) -> (Arc<H1Pool>, Arc<std::sync::Mutex<Vec<Race>>>) {
            let target: http::Uri = format!("http://{addr}/").parse().unwrap();
            let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
            connector.set_nodelay(true);
            let retries = Arc::new(std::sync::Mutex::new(Vec::new()));
            let seen = retries.clone();
            let pool = H1Pool::new(
                connector,
                target,
                8,
                Duration::from_secs(30),
                Box::new(move |race| seen.lock().unwrap().push(race)),
            );
            (pool, retries)
        }

        async fn upstream(answers: Vec<Option<&'static str>>) -> Upstream {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let connections = Arc::new(AtomicUsize::new(0));
            let (tx, requests) = tokio::sync::mpsc::unbounded_channel();
            let counted = connections.clone();
            let answers = Arc::new(std::sync::Mutex::new(answers.into_iter()));
            tokio::spawn(async move {
                loop {
                    let Ok((mut sock, _)) = listener.accept().await else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let (answers, tx) = (answers.clone(), tx.clone());
                    tokio::spawn(async move {
                        let mut got = Vec::new();
                        loop {
                            let mut buf = [0u8; 4096];
                            // One request: its head, then its body.
                            let end = loop {
                                if let Some(end) = memchr::memmem::find(&got, b"\r\n\r\n") {
                                    break end + 4;
                                }
                                match sock.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => got.extend_from_slice(&buf[..n]),
                                }
                            };
                            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length: "))
                                .map_or(0, |v| v.trim().parse().unwrap());
                            while got.len() < end + len {
                                match sock.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => got.extend_from_slice(&buf[..n]),
                                }
                            }
                            let request: Vec<u8> = got.drain(..end + len).collect();
                            let _ = tx.send(request);
                            let answer = answers.lock().unwrap().next().flatten();
                            let Some(answer) = answer else { return };
                            if sock.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                            if answer.contains("connection: close")
                                || answer.contains("x-then-close")
                            {
                                return;
                            }
                        }
                    });
                }
            });
            let (pool, retries) = pool_for(addr);
            Upstream {
                pool,
                connections,
                requests,
                retries,
            }
        }

        fn post(body: &'static str) -> Request<RequestBody> {
            let mut req = Request::new(RequestBody::buffered(
                [Frame::data(Bytes::from_static(body.as_bytes()))].into(),
                None,
            ));
            *req.method_mut() = Method::POST;
            *req.uri_mut() = "/v1/completions".parse().unwrap();
            req.headers_mut()
                .insert(header::HOST, HeaderValue::from_static("up"));
            req
        }

        /// The response's status, and its body's data frames (or error).
        async fn exchange(
            pool: &Arc<H1Pool>,
            req: Request<RequestBody>,
        ) -> (StatusCode, Result<Vec<Bytes>, Error>) {
            let resp = pool.send(req).await.expect("a response head");
            let status = resp.status();
            let mut body = resp.into_body();
            let mut frames = Vec::new();
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => frames.extend(f.into_data().ok()),
                    Err(e) => return (status, Err(e)),
                }
            }
            (status, Ok(frames))
        }

        const CHUNKED: &str =
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";

        #[tokio::test]
        async fn a_connection_is_kept_between_clean_exchanges() {
            let mut up = upstream(vec![
                Some(CHUNKED),
                Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
                Some("HTTP/1.1 204 No Content\r\n\r\n"),
            ])
            .await;
            let (status, frames) = exchange(&up.pool, post("{\"a\":1}")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(frames.unwrap(), [&b"abc"[..], b"de"]);
            let request = up.requests.recv().await.unwrap();
            assert_eq!(
                String::from_utf8(request).unwrap(),
                "POST /v1/completions HTTP/1.1\r\nhost: up\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
            );
            let (_, frames) = exchange(&up.pool, post("x")).await;
            assert_eq!(frames.unwrap(), [&b"ok"[..]]);
            let (status, frames) = exchange(&up.pool, post("y")).await;
            assert_eq!(status, StatusCode::NO_CONTENT);
            assert!(frames.unwrap().is_empty());
            assert_eq!(up.connections.load(Ordering::SeqCst), 1);
        }

        #[tokio::test]
        async fn a_connection_is_not_kept_after_close_a_close_delimited_body_or_ambiguous_framing()
        {
            let up = upstream(vec![
                Some("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"),
                Some("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"),
                Some("HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
                Some(CHUNKED),
            ])
            .await;
            assert_eq!(exchange(&up.pool, post("1")).await.1.unwrap(), [&b"ok"[..]]);
            let body = exchange(&up.pool, post("2")).await.1.unwrap();
            assert_eq!(body.concat(), b"until the end");
            let body = exchange(&up.pool, post("3")).await.1.unwrap();
            assert_eq!(body.concat(), b"abc");
            let body = exchange(&up.pool, post("4")).await.1.unwrap();
            assert_eq!(body.concat(), b"abcde");
            assert_eq!(up.connections.load(Ordering::SeqCst), 4);
        }

        #[tokio::test]
        async fn bytes_past_the_body_close_the_connection() {
            let up = upstream(vec![
                Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"),
                Some(CHUNKED),
            ])
            .await;
            assert_eq!(exchange(&up.pool, post("1")).await.1.unwrap(), [&b"ok"[..]]);
            assert_eq!(
                exchange(&up.pool, post("2")).await.1.unwrap().concat(),
                b"abcde"
            );
            assert_eq!(up.connections.load(Ordering::SeqCst), 2);
        }

        /// The upstream closes a kept connection after a while (as servers
        /// do after their keep-alive timeout): the pool finds it closed and
        /// sends the next request on a new one.
        #[tokio::test]
        async fn a_connection_the_upstream_closed_while_idle_is_not_used() {
            let then_close = "HTTP/1.1 200 OK\r\nx-then-close: 1\r\ncontent-length: 2\r\n\r\nok";
            let up = upstream(vec![Some(then_close), Some(CHUNKED)]).await;
            assert!(exchange(&up.pool, post("1")).await.1.is_ok());
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(
                exchange(&up.pool, post("2")).await.1.unwrap().concat(),
                b"abcde"
            );
            assert_eq!(up.connections.load(Ordering::SeqCst), 2);
        }

        /// An upstream that closes a new connection instead of answering:
        /// an error before the head, not sent again, and the connection is
        /// not kept.
        #[tokio::test]
        async fn no_answer_on_a_new_connection_is_an_error_before_the_head() {
            let up = upstream(vec![None, Some(CHUNKED)]).await;
            let resp = up.pool.send(post("1")).await;
            assert!(
                matches!(resp, Err(SendError::Http(Error::ClosedBeforeHead))),
                "{:?}",
                resp.map(|_| ())
            );
            assert!(up.retries.lock().unwrap().is_empty());
            assert!(exchange(&up.pool, post("2")).await.1.is_ok());
            assert_eq!(up.connections.load(Ordering::SeqCst), 2);
        }

        /// The keep-alive race: the upstream closes a reused connection as
        /// the request arrives, without a byte of an answer. The request,
        /// held whole, is sent once more on a new connection.
        #[tokio::test]
        async fn a_request_closed_on_a_reused_connection_is_sent_again_on_a_new_one() {
            let mut up = upstream(vec![Some(CHUNKED), None, Some(CHUNKED)]).await;
            assert!(exchange(&up.pool, post("1")).await.1.is_ok());
            let (status, frames) = exchange(&up.pool, post("2")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(frames.unwrap().concat(), b"abcde");
            assert_eq!(*up.retries.lock().unwrap(), [Race::Closed]);
            assert_eq!(up.connections.load(Ordering::SeqCst), 2);
            // The same bytes both times.
            let _first = up.requests.recv().await.unwrap();
            let second = up.requests.recv().await.unwrap();
            assert_eq!(second, up.requests.recv().await.unwrap());
        }

        /// Once a byte of the response has arrived, the upstream has the
        /// request: never sent twice.
        #[tokio::test]
        async fn a_response_that_had_begun_is_not_sent_again() {
            let up = upstream(vec![
                Some(CHUNKED),
                Some("HTTP/1.1 200 OK\r\nx-then-close: 1\r\n"),
                Some(CHUNKED),
            ])
            .await;
            assert!(exchange(&up.pool, post("1")).await.1.is_ok());
            let resp = up.pool.send(post("2")).await;
            assert!(
                matches!(resp, Err(SendError::Http(Error::ClosedBeforeHead))),
                "{:?}",
                resp.map(|_| ())
            );
            assert!(up.retries.lock().unwrap().is_empty());
            assert_eq!(up.connections.load(Ordering::SeqCst), 1);
        }

        /// A request whose body is still coming from the client cannot be
        /// sent again: the race is the client's error to see.
        #[tokio::test]
        async fn a_streamed_request_body_is_not_sent_again() {
            let up = upstream(vec![Some(CHUNKED), None, Some(CHUNKED)]).await;
            assert!(exchange(&up.pool, post("1")).await.1.is_ok());
            let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
            let mut req = Request::new(RequestBody::streaming(ClientBody::new(
                incoming,
                Duration::from_secs(30),
            )));
            *req.method_mut() = Method::POST;
            *req.uri_mut() = "/up".parse().unwrap();
            let resp = up.pool.send(req).await;
            assert!(resp.is_err(), "{:?}", resp.map(|_| ()));
            assert!(up.retries.lock().unwrap().is_empty());
            assert_eq!(up.connections.load(Ordering::SeqCst), 1);
        }

        /// `Keep-Alive: max=0`: the upstream takes no more requests on the
        /// connection, so it is not kept.
        #[tokio::test]
        async fn keep_alive_max_0_is_not_kept() {
            let up = upstream(vec![
                Some("HTTP/1.1 200 OK\r\nkeep-alive: timeout=5, max=0\r\ncontent-length: 2\r\n\r\nok"),
                Some(CHUNKED),
            ])
            .await;
            assert!(exchange(&up.pool, post("1")).await.1.is_ok());
            assert!(exchange(&up.pool, post("2")).await.1.is_ok());
            assert_eq!(up.connections.load(Ordering::SeqCst), 2);
            assert!(up.retries.lock().unwrap().is_empty());
        }

        #[tokio::test]
        async fn a_body_cut_short_is_an_error() {
            let up = upstream(vec![Some(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n5\r\nde",
            )])
            .await;
            let (_, frames) = exchange(&up.pool, post("1")).await;
            assert!(matches!(frames, Err(Error::ClosedInBody)), "{frames:?}");
        }

        /// A request body streaming in from a client connection (a hyper
        /// server's), which has sent `first` of its chunked body so far;
        /// the socket writes the rest.
        async fn client_body(first: &[u8]) -> (tokio::net::TcpStream, hyper::body::Incoming) {
            let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let caddr = client.local_addr().unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let (sock, _) = client.accept().await.unwrap();
                let tx = std::sync::Mutex::new(Some(tx));
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send(req.into_body());
                    }
                    // Never answers: the test only takes the body.
                    std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>(
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
            let mut csock = tokio::net::TcpStream::connect(caddr).await.unwrap();
            csock
                .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            csock.write_all(first).await.unwrap();
            (csock, rx.await.unwrap())
        }

        /// An upstream that answers before the request body is all there,
        /// and whose answer ends while the client's body goes on: the
        /// answer is forwarded without waiting for the request body, the
        /// rest of the request is not sent, and the connection is not kept.
        #[tokio::test]
        async fn an_early_answer_ends_the_request() {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let connections = Arc::new(AtomicUsize::new(0));
            let counted = connections.clone();
            tokio::spawn(async move {
                loop {
                    let (mut sock, _) = listener.accept().await.unwrap();
                    counted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        let mut buf = [0u8; 4096];
                        let _ = sock.read(&mut buf).await;
                        let _ = sock
                            .write_all(
                                b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!",
                            )
                            .await;
                        // Reads on (as a server draining the upload would).
                        while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                    });
                }
            });
            let (pool, _) = pool_for(addr);
            // The client's body never ends.
            let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
            let mut req = Request::new(RequestBody::streaming(ClientBody::new(
                incoming,
                Duration::from_secs(30),
            )));
            *req.method_mut() = Method::POST;
            *req.uri_mut() = "/up".parse().unwrap();
            let resp = tokio::time::timeout(Duration::from_secs(5), exchange(&pool, req))
                .await
                .expect("the early answer, not a wait for the request body");
            assert_eq!(resp.0, StatusCode::PAYLOAD_TOO_LARGE);
            assert_eq!(resp.1.unwrap().concat(), b"big!");
            // Not kept: the next request opens a new connection.
            let next = tokio::time::timeout(Duration::from_secs(5), exchange(&pool, post("x")));
            assert_eq!(
                next.await.expect("an answer on a new connection").0,
                StatusCode::PAYLOAD_TOO_LARGE
            );
            assert_eq!(connections.load(Ordering::SeqCst), 2);
        }

        /// A chunked request body, streamed: sent chunked, frame by frame.
        #[tokio::test]
        async fn a_streamed_request_body_goes_out_chunked() {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.ends_with(b"0\r\n\r\n") {
                    let n = sock.read(&mut buf).await.unwrap();
                    assert!(n > 0);
                    got.extend_from_slice(&buf[..n]);
                }
                sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await
                    .unwrap();
                got
            });
            // A client connection whose body streams in two frames.
            let (mut csock, incoming) = client_body(b"5\r\nhello\r\n").await;
            let mut req = Request::new(RequestBody::streaming(ClientBody::new(
                incoming,
                Duration::from_secs(30),
            )));
            *req.method_mut() = Method::POST;
            *req.uri_mut() = "/up".parse().unwrap();
            let conn = Conn::new(tokio::net::TcpStream::connect(addr).await.unwrap());
            let send = tokio::spawn(conn.send(Prepared::new(req), Weak::new()));
            tokio::time::sleep(Duration::from_millis(50)).await;
            csock.write_all(b"6\r\n world\r\n0\r\n\r\n").await.unwrap();
            let resp = send.await.unwrap().unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let got = String::from_utf8(server.await.unwrap()).unwrap();
            assert_eq!(
                got,
                "POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            );
        }
    }

    /// In memory, no sockets: the client connection over a scripted
    /// upstream (each read gets the next piece of its answer) or over a
    /// duplex pipe that the test reads and writes as the upstream, with
    /// client bodies from a hyper server over another pipe.
    mod mock {
        use std::collections::VecDeque;
        use std::sync::{Arc, Mutex};
        use std::time::Duration;

        use http_body_util::BodyExt as _;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream, ReadBuf};

        use super::super::*;
        use super::{framing, head};
        use crate::proxy::body::ClientBody;

        /// Where a connection goes when its exchange ended cleanly.
        type Kept<S> = Arc<Mutex<Option<Conn<Mock<S>>>>>;

        /// A connection to an in-memory upstream over `S`.
        struct Mock<S> {
            io: S,
            kept: Kept<S>,
        }

        impl<S: AsyncRead + Unpin> AsyncRead for Mock<S> {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
            }
        }

        impl<S: AsyncWrite + Unpin> AsyncWrite for Mock<S> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<std::io::Result<usize>> {
                Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
                Pin::new(&mut self.get_mut().io).poll_flush(cx)
            }

            fn poll_shutdown(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<std::io::Result<()>> {
                Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
            }
        }

        impl<S: AsyncRead + AsyncWrite + Unpin> Transport for Mock<S> {
            fn give_back(conn: Conn<Self>, _: &Weak<H1Pool>) {
                let kept = conn.io.kept.clone();
                *kept.lock().unwrap() = Some(conn);
            }
        }

        fn over<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> (Conn<Mock<S>>, Kept<S>) {
            let kept = Kept::default();
            let conn = Conn::new(Mock {
                io,
                kept: kept.clone(),
            });
            (conn, kept)
        }

        /// What was written to a scripted upstream.
        type Written = Arc<Mutex<Vec<u8>>>;

        /// An upstream that answers read by read: a read gets the next of
        /// `reads` (the end of the connection after the last); what is
        /// written to it is kept in `written`.
        struct Script {
            reads: VecDeque<Vec<u8>>,
            written: Written,
        }

        impl AsyncRead for Script {
            fn poll_read(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                let this = self.get_mut();
                if let Some(mut piece) = this.reads.pop_front() {
                    let n = piece.len().min(buf.remaining());
                    buf.put_slice(&piece[..n]);
                    if n < piece.len() {
                        this.reads.push_front(piece.split_off(n));
                    }
                }
                Poll::Ready(Ok(()))
            }
        }

        impl AsyncWrite for Script {
            fn poll_write(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<std::io::Result<usize>> {
                self.written.lock().unwrap().extend_from_slice(buf);
                Poll::Ready(Ok(buf.len()))
            }

            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<std::io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }

        /// A connection whose upstream answers with `reads`, one per read
        /// (empty pieces left out: an empty read is the end), and what was
        /// written to it.
        fn scripted<'a>(
            reads: impl IntoIterator<Item = &'a [u8]>,
        ) -> (Conn<Mock<Script>>, Kept<Script>, Written) {
            let written = Written::default();
            let (conn, kept) = over(Script {
                reads: reads
                    .into_iter()
                    .filter(|r| !r.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect(),
                written: written.clone(),
            });
            (conn, kept, written)
        }

        /// More answers for a scripted connection's next reads.
        fn answer(conn: &mut Conn<Mock<Script>>, read: &[u8]) {
            conn.io.io.reads.push_back(read.to_vec());
        }

        fn request(method: Method, headers: &[(&str, &str)], body: RequestBody) -> Prepared {
            let mut req = Request::new(body);
            *req.method_mut() = method;
            *req.uri_mut() = "/up".parse().unwrap();
            for (n, v) in headers {
                req.headers_mut().append(
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            Prepared::new(req)
        }

        fn empty() -> RequestBody {
            RequestBody::buffered(Default::default(), None)
        }

        fn trailers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
            fields
                .iter()
                .map(|&(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v)))
                .collect()
        }

        /// A body's data, and its trailers.
        async fn read_all<T: Transport>(
            mut body: Body<T>,
        ) -> Result<(Vec<u8>, Option<HeaderMap>), Error> {
            let mut data = Vec::new();
            let mut trailers = None;
            while let Some(frame) = body.frame().await {
                match frame?.into_data() {
                    Ok(d) => data.extend_from_slice(&d),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                }
            }
            Ok((data, trailers))
        }

        /// A client's request body as hyper's server hands it over, from
        /// an in-memory client connection that has sent the head of a
        /// chunked request and `first` of its body; the client's end of
        /// that connection writes the rest.
        async fn client_body(first: &[u8]) -> (DuplexStream, hyper::body::Incoming) {
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let tx = Mutex::new(Some(tx));
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send(req.into_body());
                    }
                    // Never answers: the test only takes the body.
                    std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>(
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(server), svc)
                    .await;
            });
            client
                .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            client.write_all(first).await.unwrap();
            (client, rx.await.unwrap())
        }

        fn streaming(incoming: hyper::body::Incoming, idle: Duration) -> RequestBody {
            RequestBody::streaming(ClientBody::new(incoming, idle))
        }

        /// Reads from the upstream's end of a pipe until what it got
        /// (`got`, which it extends) holds `until`.
        async fn read_until(up: &mut DuplexStream, got: &mut Vec<u8>, until: &[u8]) {
            let mut buf = [0u8; 1024];
            while memchr::memmem::find(got, until).is_none() {
                let n = up.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended before {until:?}");
                got.extend_from_slice(&buf[..n]);
            }
        }

        /// The data and trailers of a whole chunked body.
        fn dechunk(wire: &[u8]) -> (Vec<u8>, Option<HeaderMap>) {
            let mut decoder = Decoder::CHUNKED;
            let mut buf = BytesMut::from(wire);
            let mut data = Vec::new();
            let mut trailers = None;
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                match frame.into_data() {
                    Ok(d) => data.extend_from_slice(&d),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                }
            }
            assert!(
                decoder.is_done() && buf.is_empty(),
                "not one whole chunked body"
            );
            (data, trailers)
        }

        /// RFC 9110 §9.3.2, §15.3.5, §15.4.5 and RFC 9112 §6.3: the answer
        /// to a HEAD, a 204 and a 304 have no body, whatever their
        /// Content-Length or Transfer-Encoding say (both forwarded as they
        /// are), and the connection is kept: the next answer on it is read
        /// from its first byte.
        #[tokio::test]
        async fn heads_204s_and_304s_have_no_body_and_keep_their_connection() {
            let (mut conn, kept, written) = scripted([]);
            for (method, answer_head, status, header) in [
                (
                    Method::HEAD,
                    "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n",
                    StatusCode::OK,
                    ("content-length", "10"),
                ),
                (
                    Method::HEAD,
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                    StatusCode::OK,
                    ("transfer-encoding", "chunked"),
                ),
                (
                    Method::GET,
                    "HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n",
                    StatusCode::NO_CONTENT,
                    ("content-length", "5"),
                ),
                (
                    Method::GET,
                    "HTTP/1.1 304 Not Modified\r\ncontent-length: 7\r\n\r\n",
                    StatusCode::NOT_MODIFIED,
                    ("content-length", "7"),
                ),
                (
                    Method::GET,
                    "HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
                    StatusCode::NOT_MODIFIED,
                    ("transfer-encoding", "chunked"),
                ),
            ] {
                answer(&mut conn, answer_head.as_bytes());
                let resp = conn.send(request(method, &[], empty()), Weak::new()).await;
                let resp = resp.unwrap_or_else(|e| panic!("{answer_head:?}: {:?}", e.error));
                assert_eq!(resp.status(), status, "{answer_head:?}");
                assert_eq!(resp.headers()[header.0], header.1, "{answer_head:?}");
                let body = resp.into_body();
                assert!(body.is_end_stream(), "{answer_head:?}");
                assert_eq!(body.size_hint().exact(), Some(0));
                assert_eq!(read_all(body).await.unwrap(), (Vec::new(), None));
                conn = kept
                    .lock()
                    .unwrap()
                    .take()
                    .unwrap_or_else(|| panic!("{answer_head:?}: not kept"));
            }
            // The next answer on the same connection, read whole.
            answer(&mut conn, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
            let resp = conn
                .send(request(Method::GET, &[], empty()), Weak::new())
                .await
                .map_err(|e| e.error)
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(read_all(resp.into_body()).await.unwrap().0, b"ok");
            assert!(kept.lock().unwrap().is_some());
            let written = String::from_utf8(written.lock().unwrap().clone()).unwrap();
            assert_eq!(written.matches(" /up HTTP/1.1\r\n\r\n").count(), 6);
        }

        /// Bytes that follow a bodiless answer are not its body: they are
        /// not forwarded, and the connection, whose framing they break, is
        /// not kept.
        #[tokio::test]
        async fn bytes_after_a_bodiless_answer_are_not_its_body() {
            for (method, wire) in [
                (
                    Method::HEAD,
                    &b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"[..],
                ),
                (
                    Method::GET,
                    b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\nhello",
                ),
                (
                    Method::GET,
                    b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                ),
            ] {
                let (conn, kept, _) = scripted([wire]);
                let resp = conn.send(request(method, &[], empty()), Weak::new()).await;
                let body = resp.map_err(|e| e.error).unwrap().into_body();
                assert_eq!(read_all(body).await.unwrap(), (Vec::new(), None));
                assert!(kept.lock().unwrap().is_none());
            }
        }

        const INTERIM_THEN_FINAL: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n\
            HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n\
            HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-final: 1\r\n\r\nok";

        /// Interim responses (skipped: not forwarded) and the final head
        /// that follows them, read at once or cut into reads anywhere, in
        /// one or two places: the final head is always found whole, its
        /// body read, and the connection kept.
        #[tokio::test]
        async fn interim_responses_and_the_final_head_in_one_read_or_cut_anywhere() {
            let wire = INTERIM_THEN_FINAL;
            let n = wire.len();
            for a in 0..=n {
                for b in a..=n {
                    let (conn, kept, _) = scripted([&wire[..a], &wire[a..b], &wire[b..]]);
                    let resp = conn
                        .send(request(Method::GET, &[], empty()), Weak::new())
                        .await
                        .unwrap_or_else(|e| panic!("cut at {a}, {b}: {:?}", e.error));
                    assert_eq!(resp.status(), StatusCode::OK, "cut at {a}, {b}");
                    assert_eq!(resp.headers()["x-final"], "1", "cut at {a}, {b}");
                    assert!(!resp.headers().contains_key("link"), "cut at {a}, {b}");
                    let (body, _) = read_all(resp.into_body()).await.unwrap();
                    assert_eq!(body, b"ok", "cut at {a}, {b}");
                    assert!(kept.lock().unwrap().is_some(), "cut at {a}, {b}");
                }
            }
        }

        /// RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 response is
        /// faulty framing. The head is refused (the upstream's error, not
        /// the keep-alive race: bytes came), so nothing is forwarded and
        /// the connection goes with the failed exchange.
        #[tokio::test]
        async fn an_http_1_0_response_with_transfer_encoding_is_refused() {
            for wire in [
                &b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"[..],
                b"HTTP/1.0 200 OK\r\ntransfer-encoding: gzip\r\n\r\nabc",
                b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
            ] {
                let what = String::from_utf8_lossy(wire);
                assert!(
                    matches!(head(wire), Err(Error::Head(m)) if m.contains("HTTP/1.0")),
                    "{what:?}"
                );
                let (conn, kept, _) = scripted([wire]);
                let resp = conn
                    .send(request(Method::GET, &[], empty()), Weak::new())
                    .await;
                let Err(failed) = resp else {
                    panic!("{what:?}: accepted");
                };
                assert!(matches!(failed.error, Error::Head(_)), "{what:?}");
                assert!(!failed.silent && failed.keepalive_race().is_none());
                assert!(kept.lock().unwrap().is_none());
            }
            // Without it, an HTTP/1.0 answer is read as before (and its
            // connection is not kept).
            assert_eq!(
                framing("HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n"),
                Decoder::Length(3)
            );
            let (conn, kept, _) =
                scripted([&b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\nabc"[..]]);
            let resp = conn
                .send(request(Method::GET, &[], empty()), Weak::new())
                .await;
            let body = resp.map_err(|e| e.error).unwrap().into_body();
            assert_eq!(read_all(body).await.unwrap().0, b"abc");
            assert!(kept.lock().unwrap().is_none());
        }

        /// A malformed head is refused with what is wrong with it: obsolete
        /// line folding (RFC 9112 §5.2: a proxy may answer 502 to it),
        /// whitespace before a colon (§5.1), a version that is not 1.x.
        #[test]
        fn a_malformed_head_says_what_is_wrong() {
            for (wire, why) in [
                (
                    &b"HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\ncontent-length: 0\r\n\r\n"[..],
                    "obsolete line folding",
                ),
                (
                    b"HTTP/1.1 200 OK\r\nx-a: 1\r\n\tfolded\r\n\r\n",
                    "obsolete line folding",
                ),
                (
                    b"HTTP/1.1 200 OK\r\ncontent-length : 0\r\n\r\n",
                    "invalid header name",
                ),
                (b"HTTP/2 200 OK\r\n\r\n", "not HTTP/1.x"),
                (b"HTTP/1.1 20 OK\r\n\r\n", "invalid status code"),
                (
                    b"HTTP/1.1 200 OK\r\nx-a: \x01\r\n\r\n",
                    "invalid header value",
                ),
            ] {
                let what = String::from_utf8_lossy(wire);
                match head(wire) {
                    Err(Error::Head(m)) => assert_eq!(m, why, "{what:?}"),
                    Err(e) => panic!("{what:?}: {e}"),
                    Ok(_) => panic!("{what:?}: accepted"),
                }
            }
        }

        /// Full duplex (as hyper's client is): the upstream answers once it
        /// has the request's first chunk and goes on reading; the client
        /// sends the rest of its body only after the response head has
        /// arrived, more than the pipe to the upstream holds. All of it
        /// reaches the upstream while the response is read, the response
        /// (which the upstream ends once it has the whole request)
        /// completes, and the connection is kept.
        #[tokio::test]
        async fn the_request_body_goes_on_while_the_response_is_read() {
            let (mut client, incoming) = client_body(b"5\r\nhello\r\n").await;
            let (ours, mut up) = tokio::io::duplex(4096);
            let (conn, kept) = over(ours);
            let req = request(
                Method::POST,
                &[],
                streaming(incoming, Duration::from_secs(30)),
            );
            let chunk: Vec<u8> = (0..1024u32).map(|i| b'a' + (i % 26) as u8).collect();
            let upstream = async {
                let mut got = Vec::new();
                read_until(&mut up, &mut got, b"hello\r\n").await;
                up.write_all(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7\r\nstarted\r\n",
                )
                .await
                .unwrap();
                read_until(&mut up, &mut got, b"\r\n0\r\n\r\n").await;
                up.write_all(b"8\r\nreceived\r\n0\r\n\r\n").await.unwrap();
                got
            };
            let exchange = async {
                let resp = conn
                    .send(req, Weak::new())
                    .await
                    .map_err(|e| e.error)
                    .unwrap();
                assert_eq!(resp.status(), StatusCode::OK);
                let mut body = resp.into_body();
                // The response's first chunk, before the request's rest.
                let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
                assert_eq!(first, "started");
                let client_sends = async {
                    for _ in 0..64 {
                        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                        framed.extend_from_slice(&chunk);
                        framed.extend_from_slice(b"\r\n");
                        client.write_all(&framed).await.unwrap();
                    }
                    client.write_all(b"0\r\n\r\n").await.unwrap();
                };
                let ((), rest) = tokio::join!(client_sends, read_all(body));
                rest
            };
            let guard = tokio::time::timeout(Duration::from_secs(10), async {
                tokio::join!(upstream, exchange)
            });
            let (got, rest) = guard.await.expect("no hang");
            assert_eq!(rest.unwrap(), (b"received".to_vec(), None));
            let head = b"POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
            assert!(got.starts_with(head), "{:?}", String::from_utf8_lossy(&got));
            let (data, trailers) = dechunk(&got[head.len()..]);
            let mut expected = b"hello".to_vec();
            for _ in 0..64 {
                expected.extend_from_slice(&chunk);
            }
            assert_eq!(data.len(), expected.len());
            assert!(data == expected && trailers.is_none());
            assert!(kept.lock().unwrap().is_some(), "a clean exchange is kept");
        }

        /// The upstream answers early and closes, or answers early and
        /// stops reading: the answer is forwarded whole, without waiting
        /// for a request body that never ends (nor hanging on a write the
        /// upstream never takes), and the connection is not kept.
        #[tokio::test]
        async fn an_early_final_answer_is_forwarded_without_a_hang() {
            for (answer, close) in [
                (
                    &b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!"[..],
                    true,
                ),
                (
                    b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\n\r\nbig!",
                    true,
                ),
                (
                    b"HTTP/1.1 413 Payload Too Large\r\ntransfer-encoding: chunked\r\n\r\n4\r\nbig!\r\n0\r\n\r\n",
                    false,
                ),
            ] {
                // More of the body than the pipe to the upstream holds is
                // there at once, and the client's body never ends.
                let mut first = Vec::new();
                for _ in 0..8 {
                    first.extend_from_slice(b"400\r\n");
                    first.extend_from_slice(&[b'x'; 1024]);
                    first.extend_from_slice(b"\r\n");
                }
                let (_client, incoming) = client_body(&first).await;
                let (ours, mut up) = tokio::io::duplex(1024);
                let (conn, kept) = over(ours);
                let req = request(
                    Method::POST,
                    &[],
                    streaming(incoming, Duration::from_secs(30)),
                );
                let upstream = async {
                    let mut got = Vec::new();
                    read_until(&mut up, &mut got, b"\r\n\r\n").await;
                    up.write_all(answer).await.unwrap();
                    if close {
                        drop(up);
                        None
                    } else {
                        // Open, and reads no more.
                        Some(up)
                    }
                };
                let exchange = async {
                    let resp = conn.send(req, Weak::new()).await.map_err(|e| e.error)?;
                    let status = resp.status();
                    read_all(resp.into_body()).await.map(|b| (status, b))
                };
                let guard = tokio::time::timeout(Duration::from_secs(10), async {
                    tokio::join!(upstream, exchange)
                });
                let (_up, resp) = guard.await.expect("no hang");
                let what = String::from_utf8_lossy(answer);
                let (status, (body, _)) = resp.unwrap_or_else(|e| panic!("{what:?}: {e}"));
                assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{what:?}");
                assert_eq!(body, b"big!", "{what:?}");
                assert!(kept.lock().unwrap().is_none(), "{what:?}");
            }
        }

        /// The client's body fails (here: silent past its timeout) after
        /// the response head: that is not the upstream's error, so the
        /// response is not failed with it (the response body's errors are
        /// charged to the upstream). The rest of the request is not sent,
        /// the response goes on to its end, and the connection is not
        /// kept.
        #[tokio::test(start_paused = true)]
        async fn a_client_body_failing_after_the_head_stops_the_request_not_the_response() {
            let (_client, incoming) = client_body(b"5\r\nhello\r\n").await;
            let (ours, mut up) = tokio::io::duplex(4096);
            let (conn, kept) = over(ours);
            let req = request(
                Method::POST,
                &[],
                streaming(incoming, Duration::from_secs(5)),
            );
            let upstream = async {
                let mut got = Vec::new();
                read_until(&mut up, &mut got, b"hello\r\n").await;
                up.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nfirst")
                    .await
                    .unwrap();
                // Past the client's timeout, the rest of the answer.
                tokio::time::sleep(Duration::from_secs(60)).await;
                up.write_all(b"-last").await.unwrap();
                up
            };
            let exchange = async {
                let resp = conn.send(req, Weak::new()).await.map_err(|e| e.error)?;
                read_all(resp.into_body()).await
            };
            let (_up, body) = tokio::join!(upstream, exchange);
            assert_eq!(body.unwrap(), (b"first-last".to_vec(), None));
            assert!(kept.lock().unwrap().is_none());
        }

        /// A chunked request body's trailers end it as its trailer section
        /// (less the fields that cannot be trailers); the framing stays
        /// whole, and the connection is kept. A body whose length is known
        /// goes out chunked when the request declares `Trailer`.
        #[tokio::test]
        async fn a_chunked_request_body_ends_with_its_trailers() {
            let body = RequestBody::buffered(
                [
                    Frame::data(Bytes::from_static(b"hello")),
                    Frame::trailers(trailers(&[
                        ("x-checksum", "abc"),
                        ("content-length", "5"),
                        ("x-usage", "1"),
                        ("x-usage", "2"),
                    ])),
                ]
                .into(),
                None,
            );
            let (conn, kept, written) =
                scripted([&b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..]]);
            let req = request(Method::POST, &[("trailer", "x-checksum, x-usage")], body);
            let resp = conn
                .send(req, Weak::new())
                .await
                .map_err(|e| e.error)
                .unwrap();
            assert_eq!(read_all(resp.into_body()).await.unwrap().0, b"");
            let written = written.lock().unwrap().clone();
            assert_eq!(
                String::from_utf8_lossy(&written),
                "POST /up HTTP/1.1\r\ntrailer: x-checksum, x-usage\r\n\
                 transfer-encoding: chunked\r\n\r\n\
                 5\r\nhello\r\n0\r\nx-checksum: abc\r\nx-usage: 1\r\nx-usage: 2\r\n\r\n"
            );
            assert!(kept.lock().unwrap().is_some());

            // Streamed from a client (hyper's server decodes its trailers),
            // to an upstream that answers once it has the whole request.
            let (_client, incoming) =
                client_body(b"5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n").await;
            let (ours, mut up) = tokio::io::duplex(4096);
            let (conn, kept) = over(ours);
            let req = request(
                Method::POST,
                &[],
                streaming(incoming, Duration::from_secs(30)),
            );
            let upstream = async {
                let mut got = Vec::new();
                read_until(&mut up, &mut got, b"abc\r\n\r\n").await;
                up.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await
                    .unwrap();
                got
            };
            let exchange = async {
                let resp = conn.send(req, Weak::new()).await.map_err(|e| e.error)?;
                read_all(resp.into_body()).await
            };
            let (got, body) = tokio::join!(upstream, exchange);
            assert_eq!(body.unwrap(), (Vec::new(), None));
            let head = b"POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
            assert!(got.starts_with(head));
            let (data, trailers) = dechunk(&got[head.len()..]);
            assert_eq!(data, b"hello");
            assert_eq!(trailers.expect("trailers")["x-checksum"], "abc");
            assert!(kept.lock().unwrap().is_some());
        }

        /// A request body sent with a Content-Length (its own, or the
        /// length of a body read ahead) has no room for trailers: they are
        /// dropped, and the body is exactly its length.
        #[tokio::test]
        async fn a_request_sent_with_a_content_length_drops_its_trailers() {
            for headers in [&[][..], &[("content-length", "5")]] {
                let body = RequestBody::buffered(
                    [
                        Frame::data(Bytes::from_static(b"hel")),
                        Frame::data(Bytes::from_static(b"lo")),
                        Frame::trailers(trailers(&[("x-checksum", "abc")])),
                    ]
                    .into(),
                    None,
                );
                let (conn, kept, written) =
                    scripted([&b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"[..]]);
                let req = request(Method::POST, headers, body);
                let resp = conn
                    .send(req, Weak::new())
                    .await
                    .map_err(|e| e.error)
                    .unwrap();
                assert_eq!(read_all(resp.into_body()).await.unwrap().0, b"ok");
                assert_eq!(
                    String::from_utf8_lossy(&written.lock().unwrap()),
                    "POST /up HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello"
                );
                assert!(kept.lock().unwrap().is_some(), "{headers:?}");
            }
        }
    }
}
