//! Plain-HTTP upstreams over HTTP/1.1, driven by the task that forwards the
//! response.
//!
//! hyper-util's pooled client runs each upstream connection in a task of its
//! own, which hands the response body to the client connection's task one
//! frame at a time through hyper's body channel (it holds one frame). Every
//! frame then costs two task wake-ups, and frames that arrived together in
//! one socket read still leave in one `writev` each, since the server task
//! flushes before the upstream task has decoded the next frame.
//!
//! Here the upstream connection ([`Upstream`]) is owned by the request: the
//! request's future polls it while it waits for the response head, and the
//! response body ([`super::body::UpstreamBody`]) polls it before each frame.
//! So the frames of one read are handed to hyper's server in one poll, each
//! as it came (no frame is merged, split or held back: hyper writes them
//! with one `writev` because they are all there when it flushes), and no
//! frame crosses tasks.
//!
//! Connections are kept alive in a per-route pool: a response that ended
//! gives its connection back; a client that goes away drops it, which
//! closes it, so the upstream sees the abort. An idle connection is not
//! polled: one the upstream closed meanwhile is found closed at checkout
//! (its readiness is kept by the reactor) and dropped. Idle connections
//! expire after the pool's idle timeout (checked at each checkout and
//! release, and by a reaper task), and at most `max_idle` are kept: past a
//! burst, the connections (and the memory of their buffers) go.
//!
//! hyper still signals between the connection and the channels it feeds
//! with wakers, which here would wake the very task that is polling both;
//! `selfwake.rs` turns those wakes into another round of the same poll.
//! It also tells the poll whether anything woke the connection since it
//! was last driven: if not, only the channel is polled (hyper's server
//! polls the body again after each frame it writes and after each flush,
//! and those polls would otherwise drive the connection each time for
//! nothing).
//!
//! HTTPS upstreams (TLS, HTTP/2 by ALPN) keep hyper-util's client.

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::Uri;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::RequestBody;
use super::selfwake::SelfWakes;

/// Boxed: hyper's connection is about 700 bytes, and it changes hands at
/// every checkout, request and release (a pointer moves instead).
type Conn = Box<Connection<TokioIo<TcpStream>, RequestBody>>;

/// Why a request could not be sent on a pooled connection.
#[derive(Debug)]
pub enum SendError {
    /// Connecting failed (the connector's error: timeouts are `TimedOut`).
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// The connection failed before the response head.
    Http(hyper::Error),
}

/// The idle connections of one upstream.
pub struct H1Pool {
    connector: HttpConnector,
    /// `scheme://authority/`, what the connector connects to.
    target: Uri,
    /// The `Host` header of a request that has none: `target`'s host, and
    /// its port unless it is the scheme's default (as hyper-util's client
    /// sets it). Made once, not per request.
    host: Option<http::HeaderValue>,
    idle: Mutex<VecDeque<Idle>>,
    /// At most this many idle connections are kept.
    max_idle: usize,
    idle_timeout: Duration,
}

struct Idle {
    sender: SendRequest<RequestBody>,
    conn: Conn,
    wakes: SelfWakes,
    since: Instant,
}

impl H1Pool {
    /// A pool for `target` (`http://host:port/`) that keeps at most
    /// `max_idle` idle connections, each for `idle_timeout`. Within a tokio
    /// runtime, a reaper task closes expired idle connections until the pool
    /// is dropped.
    pub fn new(
        connector: HttpConnector,
        target: Uri,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Arc<Self> {
        let pool = Arc::new(Self {
            connector,
            host: host_header(&target),
            target,
            idle: Mutex::new(VecDeque::new()),
            max_idle,
            idle_timeout,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&pool);
            let every = (idle_timeout / 2).max(Duration::from_secs(1));
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(pool) = weak.upgrade() else { return };
                    pool.prune(Instant::now());
                }
            });
        }
        pool
    }

    /// Drops idle connections that expired (the oldest are at the front).
    fn prune(&self, now: Instant) {
        let expired: Vec<Idle> = {
            let Ok(mut idle) = self.idle.lock() else {
                return;
            };
            let mut out = Vec::new();
            while idle
                .front()
                .is_some_and(|c| now.duration_since(c.since) >= self.idle_timeout)
            {
                out.extend(idle.pop_front());
            }
            out
        };
        // Closed outside the lock.
        drop(expired);
    }

    /// An idle connection that is still open and ready for a request.
    fn checkout_idle(self: &Arc<Self>) -> Option<Upstream> {
        self.prune(Instant::now());
        loop {
            let mut c = self.idle.lock().ok()?.pop_back()?;
            // A connection the upstream closed while idle finishes here.
            let mut cx = Context::from_waker(Waker::noop());
            if Pin::new(&mut c.conn).poll(&mut cx).is_ready() || !c.sender.is_ready() {
                continue;
            }
            // Last polled with the no-op waker: drive it in the first round.
            c.wakes.woken();
            return Some(Upstream {
                sender: c.sender,
                conn: Some(c.conn),
                pool: Arc::downgrade(self),
                wakes: c.wakes,
            });
        }
    }

    /// The `Host` header for requests that have none.
    pub fn host(&self) -> Option<&http::HeaderValue> {
        self.host.as_ref()
    }

    /// A new connection.
    async fn connect(self: &Arc<Self>) -> Result<Upstream, SendError> {
        let io = self
            .connector
            .clone()
            .oneshot(self.target.clone())
            .await
            .map_err(|e| SendError::Connect(Box::new(e)))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(SendError::Http)?;
        Ok(Upstream {
            sender,
            conn: Some(Box::new(conn)),
            pool: Arc::downgrade(self),
            wakes: SelfWakes::new(),
        })
    }

    fn give_back(&self, sender: SendRequest<RequestBody>, conn: Conn, wakes: SelfWakes) {
        let now = Instant::now();
        let surplus = {
            let Ok(mut idle) = self.idle.lock() else {
                return;
            };
            if idle.len() < self.max_idle {
                idle.push_back(Idle {
                    sender,
                    conn,
                    wakes,
                    since: now,
                });
                None
            } else {
                Some((sender, conn, wakes))
            }
        };
        // A connection beyond `max_idle` is closed, outside the lock.
        drop(surplus);
        self.prune(now);
    }

    /// Sends `req` (origin-form URI, `Host` set) on a pooled or new
    /// connection, driving the connection until the response head is in.
    ///
    /// A kept-alive connection can be closed by the upstream just as it is
    /// taken (servers close idle connections after their own keep-alive
    /// timeout, uvicorn's is 5 s). When that happens before any of the
    /// request was written, hyper hands the request back and it is sent once
    /// more on a new connection, as hyper-util's client does; a request that
    /// was (even partly) sent is never sent twice.
    pub async fn send(
        self: &Arc<Self>,
        mut req: http::Request<RequestBody>,
    ) -> Result<(http::Response<hyper::body::Incoming>, Upstream), SendError> {
        // `connect` is boxed: its future (the handshake's, with a whole
        // connection in it) would otherwise be part of this one, which is
        // moved whole into the timeout and the request's future.
        let (mut up, mut reused) = match self.checkout_idle() {
            Some(up) => (up, true),
            None => (Box::pin(self.connect()).await?, false),
        };
        loop {
            let sent = {
                let response = up.sender.try_send_request(req);
                let mut response = std::pin::pin!(response);
                // The connection writes the request and reads the head; if
                // it ends first, the response future says why.
                std::future::poll_fn(|cx| up.poll_with(cx, |cx| response.as_mut().poll(cx))).await
            };
            match sent {
                Ok(resp) => return Ok((resp, up)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => {
                        tracing::debug!(error = %e.error(), "kept-alive upstream connection closed before the request was sent; sending on a new one");
                        req = unsent;
                        up = Box::pin(self.connect()).await?;
                        reused = false;
                    }
                    _ => return Err(SendError::Http(e.into_error())),
                },
            }
        }
    }
}

/// One upstream connection, owned by the request using it.
pub struct Upstream {
    sender: SendRequest<RequestBody>,
    /// `None` once the connection has finished.
    conn: Option<Conn>,
    pool: Weak<H1Pool>,
    /// The connection and the channels it feeds are polled by one task,
    /// without waking it for each other (`selfwake.rs`).
    wakes: SelfWakes,
}

impl Upstream {
    /// Drives the connection (if anything woke it since it was last
    /// driven), then polls `then` (the response head or body it feeds), as
    /// one poll of the task. `then` must poll all it waits on with the
    /// context it is given: a poll that nothing woke since the last pending
    /// one returns pending at once (`selfwake.rs`).
    pub fn poll_with<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut then: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let conn = &mut self.conn;
        self.wakes.poll(cx, |cx, woken| {
            // Polled with the one waker of `wakes` every time, the
            // connection has nothing new to do unless it was woken since.
            if woken {
                let _ = drive(conn, cx);
            }
            then(cx)
        })
    }

    /// The response has been read to its end: keeps the connection for the
    /// next request if it is still open.
    pub fn release(mut self) {
        // Lets the connection take in the end of the message.
        if drive(&mut self.conn, &mut Context::from_waker(Waker::noop())).is_ready() {
            return;
        }
        if let (Some(pool), Some(conn)) = (self.pool.upgrade(), self.conn.take()) {
            self.wakes.forget_task();
            pool.give_back(self.sender, conn, self.wakes);
        }
    }
}

/// The `Host` header for `uri`: its host, with the port only when it is not
/// the scheme's default.
fn host_header(uri: &Uri) -> Option<http::HeaderValue> {
    let host = uri.host()?;
    let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
        443
    } else {
        80
    };
    let value = match uri.port_u16() {
        Some(port) if port != default_port => {
            http::HeaderValue::from_str(&format!("{host}:{port}"))
        }
        _ => http::HeaderValue::from_str(host),
    };
    value.ok()
}

/// Drives a connection: writes what it has to, reads and decodes what the
/// upstream sent into the response channels. Ready once it has finished
/// (and then `None`).
fn drive(conn: &mut Option<Conn>, cx: &mut Context<'_>) -> Poll<()> {
    let Some(c) = conn.as_mut() else {
        return Poll::Ready(());
    };
    match Pin::new(c).poll(cx) {
        Poll::Ready(result) => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
            *conn = None;
            Poll::Ready(())
        }
        Poll::Pending => Poll::Pending,
    }
}
