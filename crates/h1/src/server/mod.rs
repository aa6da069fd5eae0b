//! An HTTP/1.x server connection of our own, for the proxy's clients: reads
//! each request head, hands the request to the service, and writes the
//! response the service returns, its body frame by frame as it is polled,
//! in the connection's own task.
//!
//! A streamed response costs a relay a write per chunk, and little else
//! should. Here a response body's frame is queued as it is (no copy), with
//! its chunk's size line formatted into a few bytes beside it, and written
//! with the frames that were ready with it in one vectored write, straight
//! to the transport: no write buffer in between, no flush machinery, no
//! channel. The head and the first frames go out together.
//!
//! What a client sees is what RFC 9112 and hyper's server give it:
//!
//! - **Heads.** A head longer than the limit, or of more than 100 fields,
//!   is answered `431`; a malformed one, a `Transfer-Encoding` whose last
//!   coding is not `chunked` or in an HTTP/1.0 request, or conflicting
//!   `Content-Length`s, `400`; a target over 64 KiB, `414`. The connection
//!   is then closed. A connection that sends no complete head within the
//!   head timeout (of opening, or of its last response's end) is closed
//!   without a response.
//! - **Bodies.** A request body framed by `Content-Length` or chunked;
//!   `Expect: 100-continue` answered when the service first asks for the
//!   body. A body that was all read with its head is handed over whole.
//! - **Responses.** The response's `Content-Length` if it has one, or its
//!   body's exact length, else chunked (HTTP/1.1), else until the close
//!   (HTTP/1.0); none for `HEAD`, 204 and 304. Trailers end a chunked body
//!   when the client asked for them (`TE: trailers`) and the response
//!   declared them (`Trailer`). A `Date` is added when the response has
//!   none, `Connection: close` when the connection will not be kept.
//! - **Keep-alive and pipelining.** HTTP/1.1 keeps the connection unless
//!   either side says `close`; HTTP/1.0 keeps it on `Connection:
//!   keep-alive`. Requests sent ahead are answered in order.
//! - **The client's end.** While a request is in progress, the connection
//!   is watched for the client's close: the request is then dropped (its
//!   service future or response body), as it is when a write fails. A
//!   client that closed its side after sending requests ahead is answered
//!   them all first. A body
//!   that fails mid-stream ends the connection there: a chunked response
//!   is left without its last chunk, so the client can tell.
//! - **Closing.** [`Closing::close`] finishes the request in progress and
//!   closes; an idle connection closes at once. A close is the transport's
//!   shutdown (the proxy's lingers there).

mod date;
mod inbound;
mod request;
mod response;
#[cfg(test)]
mod tests;

use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};

pub use inbound::{BodyError, RequestBody};
pub use request::Refused;

use inbound::{Inbound, Want};
use response::{Asked, Framing, Out};

use crate::limits::{READ_MIN, WRITE_GATHER};

/// Errors a response body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connection's limits.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a connection may take to send a complete request head, from
    /// when it opened or its last response ended.
    pub head_timeout: Duration,
    /// The longest request head taken (`431` past it).
    pub max_head: usize,
}

/// Asks a connection to close once its request in progress is answered
/// (at once if it has none).
#[derive(Debug, Default)]
pub struct Closing(AtomicBool);

impl Closing {
    /// The connection's task must be polled for it to see this (it is, when
    /// the same task calls it between polls of the connection).
    pub fn close(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a connection ended badly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("client connection")]
    Io(#[source] std::io::Error),
    #[error("request head refused: {}", .0.reason())]
    Refused(Refused),
    #[error("no complete request head within {0:?}")]
    HeadTimeout(Duration),
    #[error("client closed the connection in the middle of a request head")]
    PartialHead,
    #[error("client closed the connection while its request was in progress")]
    ClientGone,
    #[error("response body")]
    Body(#[source] BoxError),
    #[error("response body longer than its Content-Length")]
    BodyTooLong,
    #[error("response body shorter than its Content-Length")]
    BodyTooShort,
}

/// How long a connection's close (its transport's shutdown) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the connection `io` until it closes: each request is handed to
/// `service`, and its response written.
pub async fn serve<T, S, F, B>(
    io: T,
    settings: Settings,
    closing: Arc<Closing>,
    mut service: S,
) -> Result<(), ServeError>
where
    T: AsyncRead + AsyncWrite + Unpin,
    S: FnMut(Request<RequestBody>) -> F,
    F: Future<Output = Response<B>>,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut conn = Conn {
        io,
        buf: BytesMut::new(),
        out: Out::new(),
        eof: false,
        sent_ahead: false,
        timer: None,
        settings,
    };
    loop {
        let head = match conn.next_head(&closing).await {
            Ok(Some(head)) => head,
            Ok(None) => {
                conn.close().await;
                return Ok(());
            }
            Err(ServeError::Refused(refused)) => {
                conn.refuse(refused).await;
                return Err(ServeError::Refused(refused));
            }
            Err(e) => return Err(e),
        };
        let asked = Asked::of(&head.parts, head.keep_alive);
        let (body, mut inbound) = Inbound::new(head.framing, &mut conn.buf, head.expect_continue);
        let response = conn
            .drive(service(Request::from_parts(head.parts, body)), &mut inbound)
            .await?;
        let keep = conn
            .respond(response, &asked, &mut inbound, !closing.is_set())
            .await?;
        // A client that has closed its side is answered the requests it
        // sent ahead, then the connection closes.
        if !keep || !inbound.is_read() || (conn.eof && conn.buf.is_empty()) || closing.is_set() {
            conn.close().await;
            return Ok(());
        }
    }
}

struct Conn<T> {
    io: T,
    /// Bytes read and not yet taken: a head, a body's, a pipelined request.
    buf: BytesMut,
    out: Out,
    /// The client has closed its side.
    eof: bool,
    /// ... after sending requests ahead: it waits for their answers, and
    /// its close is not taken for a client gone.
    sent_ahead: bool,
    /// The head timeout, made at the first wait for a head that was not
    /// all there, and reset for each.
    timer: Option<Pin<Box<Sleep>>>,
    settings: Settings,
}

/// What the connection did for the request in progress while the service
/// or its response body was busy.
enum Pumped {
    /// Something moved: look again.
    Progress,
    /// Nothing can move until a wake-up.
    Idle,
    /// The client has gone (its body's failure, if it had one unread,
    /// handed over first): the request is dropped.
    Gone,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    /// Reads into `buf`, with room for at least `READ_MIN` more.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_MIN / 2 {
            self.buf.reserve(READ_MIN);
        }
        match ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.buf
        )) {
            Ok(0) => {
                self.eof = true;
                Poll::Ready(Ok(0))
            }
            Ok(n) => Poll::Ready(Ok(n)),
            // A TLS client that closed without its close_notify.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.eof = true;
                Poll::Ready(Ok(0))
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// The next request head: `None` when the client closed between
    /// requests, or the connection is closing while idle.
    async fn next_head(&mut self, closing: &Closing) -> Result<Option<request::Head>, ServeError> {
        let timeout = self.settings.head_timeout;
        let mut deadline = None;
        poll_fn(|cx| {
            loop {
                if !self.buf.is_empty() {
                    match request::parse(&mut self.buf, self.settings.max_head) {
                        Ok(Some(head)) => return Poll::Ready(Ok(Some(head))),
                        Ok(None) => {}
                        Err(refused) => return Poll::Ready(Err(ServeError::Refused(refused))),
                    }
                }
                if self.eof {
                    return Poll::Ready(if self.buf.is_empty() {
                        Ok(None)
                    } else {
                        Err(ServeError::PartialHead)
                    });
                }
                if closing.is_set() && self.buf.is_empty() {
                    return Poll::Ready(Ok(None));
                }
                match self.poll_fill(cx) {
                    Poll::Ready(Ok(_)) => continue,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(ServeError::Io(e))),
                    Poll::Pending => {}
                }
                let at = *deadline.get_or_insert_with(|| Instant::now() + timeout);
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                if timer.deadline() != at {
                    timer.as_mut().reset(at);
                }
                ready!(timer.as_mut().poll(cx));
                return Poll::Ready(Err(ServeError::HeadTimeout(timeout)));
            }
        })
        .await
    }

    /// Polls the service's future to its response, serving the request
    /// body meanwhile.
    async fn drive<F: Future>(
        &mut self,
        future: F,
        inbound: &mut Inbound,
    ) -> Result<F::Output, ServeError> {
        let mut future = pin!(future);
        poll_fn(|cx| {
            loop {
                if let Poll::Ready(response) = future.as_mut().poll(cx) {
                    return Poll::Ready(Ok(response));
                }
                match self.pump(inbound, true, cx) {
                    Pumped::Progress => {}
                    Pumped::Idle => return Poll::Pending,
                    Pumped::Gone => return Poll::Ready(Err(ServeError::ClientGone)),
                }
            }
        })
        .await
    }

    /// While the service or its response body waits: serves the request
    /// body, writes what is owed before a response (`100 Continue`; when
    /// `before_response`: `respond` writes its own queue), and watches for
    /// the client's close.
    fn pump(
        &mut self,
        inbound: &mut Inbound,
        before_response: bool,
        cx: &mut Context<'_>,
    ) -> Pumped {
        if before_response && !self.out.is_empty() {
            match self.out.poll_write(&mut self.io, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Pumped::Gone,
                Poll::Pending => return Pumped::Idle,
            }
        }
        match inbound.serve(&mut self.buf, cx) {
            // Owed only before the response (`respond` clears it).
            Want::Read if inbound.continue_owed => {
                inbound.continue_owed = false;
                self.out.fixed(b"HTTP/1.1 100 Continue\r\n\r\n");
                return Pumped::Progress;
            }
            Want::Read => {
                return match self.poll_fill(cx) {
                    Poll::Ready(Ok(0)) => {
                        inbound.fail(BodyError::Closed);
                        Pumped::Progress
                    }
                    Poll::Ready(Ok(_)) => Pumped::Progress,
                    Poll::Ready(Err(e)) => {
                        inbound.fail(BodyError::Io(e));
                        Pumped::Progress
                    }
                    Poll::Pending => Pumped::Idle,
                };
            }
            Want::Delivered => return Pumped::Progress,
            Want::Nothing => {}
        }
        // The client's close, watched for with a read: what it reads is the
        // rest of the body, or the next request sent ahead, and waits in
        // the buffer (up to a head's length: past it, the client waits).
        if self.eof {
            // The body's failure has been handed over, if it had one: a
            // service still busy without the client is dropped, unless the
            // client sent requests ahead before it closed its side: those
            // it waits to be answered.
            return if self.sent_ahead {
                Pumped::Idle
            } else {
                Pumped::Gone
            };
        }
        if self.buf.len() >= self.settings.max_head {
            return Pumped::Idle;
        }
        match self.poll_fill(cx) {
            Poll::Ready(Ok(0)) if inbound.is_read() && self.buf.is_empty() => Pumped::Gone,
            Poll::Ready(Ok(0)) if inbound.is_read() => {
                self.sent_ahead = true;
                Pumped::Idle
            }
            Poll::Ready(Ok(0)) => {
                inbound.fail(BodyError::Closed);
                Pumped::Progress
            }
            Poll::Ready(Ok(_)) => Pumped::Progress,
            Poll::Ready(Err(e)) if inbound.is_read() => {
                tracing::debug!(error = %e, "client connection failed while its request was in progress");
                Pumped::Gone
            }
            Poll::Ready(Err(e)) => {
                inbound.fail(BodyError::Io(e));
                Pumped::Progress
            }
            Poll::Pending => Pumped::Idle,
        }
    }

    /// Writes `response`; whether the connection can be kept after it.
    async fn respond<B>(
        &mut self,
        response: Response<B>,
        asked: &Asked,
        inbound: &mut Inbound,
        keep: bool,
    ) -> Result<bool, ServeError>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = response.into_parts();
        // A request body abandoned unread closes the connection: say so.
        let keep = keep && !inbound.abandoned();
        let mut head = self.out.head_buffer();
        let (framing, keep) = response::head(&mut parts, body.size_hint(), asked, keep, &mut head);
        // The head's map and extensions are not kept while the body streams.
        drop(parts);
        self.out.owned(head);
        // The head is out before the body: an interim `100` can no longer
        // go (the client sends the body when it has waited long enough).
        inbound.continue_owed = false;
        let chunked = matches!(framing, Framing::Chunked { .. });
        let mut left = match framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        // Dropped as soon as its last frame is queued (or at once, when it
        // is not written): its request is then no longer in progress.
        let mut body = pin!(Some(body));
        let mut done = framing == Framing::None;
        if !done
            && body
                .as_ref()
                .as_pin_ref()
                .is_some_and(|b| b.is_end_stream())
        {
            done = true;
            self.end(&framing, left, None)?;
        }
        if done {
            body.set(None);
        }
        // A body that failed: what was queued before it is written first.
        let mut failed = None;
        poll_fn(|cx| {
            // The body said it had nothing yet in this poll: it has asked
            // to be woken, and is not asked again until it has been.
            let mut waiting = false;
            loop {
                if let Some(mut polled) = body.as_mut().as_pin_mut()
                    && !waiting
                    && self.out.len() < WRITE_GATHER
                {
                    let end = match polled.as_mut().poll_frame(cx) {
                        Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                            Ok(data) => {
                                if let Some(rest) = left.as_mut() {
                                    *rest = rest
                                        .checked_sub(data.len() as u64)
                                        .ok_or(ServeError::BodyTooLong)?;
                                }
                                self.out.data(data, chunked);
                                polled.is_end_stream().then_some(None)
                            }
                            Err(frame) => Some(frame.into_trailers().ok()),
                        },
                        Poll::Ready(None) => Some(None),
                        Poll::Ready(Some(Err(e))) => {
                            failed = Some(ServeError::Body(e.into()));
                            body.set(None);
                            continue;
                        }
                        Poll::Pending => {
                            waiting = true;
                            None
                        }
                    };
                    if let Some(trailers) = end {
                        done = true;
                        body.set(None);
                        self.end(&framing, left, trailers)?;
                    }
                    continue;
                }
                if !self.out.is_empty() {
                    match self.out.poll_write(&mut self.io, cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(ServeError::Io(e))),
                        Poll::Pending => {
                            if let Pumped::Gone = self.pump(inbound, false, cx) {
                                return Poll::Ready(Err(ServeError::ClientGone));
                            }
                            return Poll::Pending;
                        }
                    }
                }
                if let Some(e) = failed.take() {
                    return Poll::Ready(Err(e));
                }
                if done {
                    ready!(Pin::new(&mut self.io).poll_flush(cx)).map_err(ServeError::Io)?;
                    return Poll::Ready(Ok(keep));
                }
                if waiting {
                    match self.pump(inbound, false, cx) {
                        Pumped::Progress => waiting = false,
                        Pumped::Idle => return Poll::Pending,
                        Pumped::Gone => return Poll::Ready(Err(ServeError::ClientGone)),
                    }
                }
            }
        })
        .await
    }

    /// Queues the end of a response body framed by `framing`, `left` bytes
    /// short of its length, with its trailers.
    fn end(
        &mut self,
        framing: &Framing,
        left: Option<u64>,
        trailers: Option<http::HeaderMap>,
    ) -> Result<(), ServeError> {
        match framing {
            Framing::Chunked { trailers: declared } => {
                match trailers.and_then(|t| response::trailers(&t, declared.as_deref())) {
                    Some(fields) => {
                        let mut section = Vec::with_capacity(fields.len() + 5);
                        section.extend_from_slice(b"0\r\n");
                        section.extend_from_slice(&fields);
                        section.extend_from_slice(b"\r\n");
                        self.out.owned(section);
                    }
                    None => self.out.fixed(b"0\r\n\r\n"),
                }
                Ok(())
            }
            Framing::Length(_) if left.is_some_and(|n| n > 0) => Err(ServeError::BodyTooShort),
            _ => Ok(()),
        }
    }

    /// Answers a refused head and closes.
    async fn refuse(&mut self, refused: Refused) {
        let mut head = Vec::with_capacity(128);
        head.extend_from_slice(refused.status_line());
        head.extend_from_slice(b"content-length: 0\r\nconnection: close\r\ndate: ");
        date::write(&mut head);
        head.extend_from_slice(b"\r\n\r\n");
        self.out.owned(head);
        let written = tokio::time::timeout(
            self.settings.head_timeout,
            poll_fn(|cx| self.out.poll_write(&mut self.io, cx)),
        )
        .await;
        if matches!(written, Ok(Ok(()))) {
            self.close().await;
        }
    }

    /// Closes the connection: its write side shut down (a transport may
    /// linger there, reading what its client still sends for a while, so
    /// that the close does not reset the connection before the client has
    /// read its response).
    async fn close(&mut self) {
        let shut = poll_fn(|cx| Pin::new(&mut self.io).poll_shutdown(cx));
        if let Err(e) = tokio::time::timeout(CLOSE_TIMEOUT, shut)
            .await
            .unwrap_or(Ok(()))
        {
            tracing::debug!(error = %e, "client connection failed as it closed");
        }
    }
}
