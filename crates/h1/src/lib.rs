//! An HTTP/1.1 client connection of our own, for every HTTP/1.1 upstream
//! (over TCP, or over TLS when ALPN chose `http/1.1`): writes one request,
//! reads its response head, and hands the response body to the client's
//! connection frame by frame, from the task that writes to the client.
//!
//! hyper's client connection decodes a chunked body one byte at a time
//! through its buffered reader, and hands every frame to the response's
//! body through a channel, with a wake-up for each end: 26 % of the
//! proxy's instructions per streamed chunk (callgrind, docs/benchmarks.md).
//! Here the response body *is* the connection: a poll of it decodes what is
//! in the read buffer ([`body`]) and reads the transport only when that is
//! empty, so a frame costs a scan of its size line and a copy.
//!
//! The parts: [`write`] writes the request (head, body, trailers), [`head`]
//! parses the response head (interim responses skipped), [`body`] decodes
//! the response body by its framing, [`pool`] keeps idle connections and
//! holds the one retry rule. This crate knows nothing of the proxy: the
//! transport (`T: Transport`) and the request body (`B: SendBody`) are
//! type parameters, and a request body's errors travel boxed.
//!
//! What it forwards is what hyper's client does: each chunk's data as it
//! arrived (one frame per chunk, or per part of a chunk that arrived in one
//! read: never two chunks in one frame), trailers as a trailers frame, and
//! the body framed as RFC 9112 §6.3 says (`HEAD`, 1xx, 204 and 304 have
//! none, whatever their `Content-Length` or `Transfer-Encoding`;
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
//! The exchange is full duplex, as hyper's is: if the response head
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

mod body;
mod decode;
#[cfg(fuzzing)]
mod fuzz;
mod head;
mod pool;
#[cfg(test)]
mod tests;
mod write;

use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::{Method, Response, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub use body::Body;
use decode::Decoder;
#[cfg(fuzzing)]
pub use fuzz::fuzz_response;
use head::{Head, connection_close, poll_head};
pub use pool::{KeepAliveHint, OnRetry, Pool, Race, Reused};
pub use write::Prepared;
use write::Sending;

/// Errors a request body can fail with, and a connection's errors carry.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Data frames up to this size leave in a buffer of their own, so that the
/// connection's read buffer stays unshared and is reused in place; larger
/// ones are passed on in the read buffer they came in (see [`body`]).
pub const OWN_BUFFER_MAX: usize = 4096;

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
    /// The request body failed (its own error, as the source).
    #[error("request body")]
    RequestBody(#[source] BoxError),
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

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed {
            error,
            silent: false,
        }
    }
}

/// A request body to send: its frames (data, then maybe trailers), and a
/// copy of it when it can be sent again.
pub trait SendBody: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Unpin + Sized {
    /// The same body again, if it can be sent again whole: all of it is
    /// held here, none still to come from elsewhere.
    fn replay(&self) -> Option<Self>;
}

/// What a connection runs over: a TCP stream to the upstream, a TLS stream
/// over one, or, in tests, an in-memory one; and where one that can be
/// kept goes.
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Sized {
    /// Keeps `conn`, whose exchange ended cleanly, for the next request.
    fn give_back(conn: Conn<Self>, pool: &Weak<Pool<Self>>) {
        if let Some(pool) = pool.upgrade() {
            pool.give_back(conn);
        }
    }
}

impl Transport for TcpStream {}

/// An open connection to the upstream, between exchanges.
pub struct Conn<T = TcpStream> {
    io: T,
    /// Bytes read and not yet decoded; empty between exchanges.
    buf: BytesMut,
    /// What the upstream's last `Keep-Alive` header said, if anything.
    hint: KeepAliveHint,
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

    /// Whether an idle connection can take a request: the upstream has not
    /// closed it (nor sent anything unasked). A read that would wait means
    /// it is open; what an idle connection has to read is its end (a TLS
    /// stream takes its protocol's own post-handshake messages, such as
    /// resumption tickets, on the way, and still waits). The read is polled with a waker that
    /// does nothing: nobody waits on an idle connection, and the next
    /// exchange's poll registers its own.
    pub fn is_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// Sends `req` and reads the response head; the response's body reads
    /// the rest from this connection (and sends the rest of the request,
    /// if the head came first), and gives it back to `pool` at its end if
    /// it can be kept.
    pub async fn send<B: SendBody>(
        mut self,
        req: Prepared<B>,
        pool: Weak<Pool<T>>,
    ) -> Result<Response<Body<T, B>>, Failed> {
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
        let mut written = None;
        let head = std::future::poll_fn(|cx| {
            if sent.is_none()
                && let Poll::Ready(result) = sending.poll(&mut self.io, cx)
            {
                if result.is_ok() {
                    written = Some(tokio::time::Instant::now());
                }
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
            written,
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
