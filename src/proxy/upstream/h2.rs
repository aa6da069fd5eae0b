//! HTTP/2 to an upstream, by hyper's client: the handshake, the one
//! connection an upstream shares among its requests, an exchange on it,
//! and the request body that keeps the client's error.
//!
//! One connection per upstream, shared by every request (each takes a clone
//! of its handle), made again once it closes. Idle for the pool's idle
//! timeout, it is given up (its last handle dropped, so hyper closes it once
//! its streams end) by a task that watches it, whether or not another
//! request comes. While it is open, hyper PINGs the upstream every
//! [`PING_INTERVAL`] and closes it when an answer takes longer than
//! [`PING_TIMEOUT`]: a connection that died silently (a peer gone, a NAT
//! entry dropped) fails its streams and is made again, instead of holding
//! requests until their timeouts.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::{Request, Response};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

use super::body::{BoxError, FromUpstream, H2Response, KeptError};
use super::error::Error;
use crate::proxy::client_body::{ClientBodyError, RequestBody};
use crate::proxy::delegate::delegate_body;

/// A handle of an HTTP/2 connection, which sends requests on it.
pub(super) type Sender = http2::SendRequest<H2Body>;

/// How often an open HTTP/2 connection is PINGed, idle or not.
pub(super) const PING_INTERVAL: Duration = Duration::from_secs(10);
/// How long a PING may go unanswered before the connection is closed.
pub(super) const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP/2 handshake over `stream` (TLS that chose `h2`); the
/// connection runs on a task of its own until it closes.
pub(super) async fn handshake(stream: TlsStream<TcpStream>) -> Result<Sender, Error> {
    let (send, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(PING_INTERVAL)
        .keep_alive_timeout(PING_TIMEOUT)
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(Error::H2Handshake)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
        }
    });
    Ok(send)
}

/// The HTTP/2 connection an upstream shares, if it has one.
pub(super) struct Shared {
    kept: Arc<Mutex<Option<Kept>>>,
    idle_timeout: Duration,
}

struct Kept {
    send: Sender,
    /// When a request last took it.
    used: Instant,
    /// Tells this connection from the next one the upstream makes.
    generation: u64,
}

impl Shared {
    /// No connection yet; one is given up after `idle_timeout` unused.
    pub(super) fn new(idle_timeout: Duration) -> Self {
        Self {
            kept: Arc::new(Mutex::new(None)),
            idle_timeout,
        }
    }

    /// Keeps `send`'s connection to be shared (the last one made wins),
    /// and watches it: idle for the idle timeout, it is given up.
    pub(super) fn keep(&self, send: &Sender) {
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let generation = kept.as_ref().map_or(0, |k| k.generation.wrapping_add(1));
        *kept = Some(Kept {
            send: send.clone(),
            used: Instant::now(),
            generation,
        });
        drop(kept);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(give_up_when_idle(
                Arc::downgrade(&self.kept),
                generation,
                self.idle_timeout,
            ));
        }
    }

    /// A handle of the shared connection, if it is open and has not been
    /// idle for longer than the idle timeout.
    pub(super) fn get(&self) -> Option<Sender> {
        let mut kept = self.kept.lock().ok()?;
        let now = Instant::now();
        match &mut *kept {
            Some(s) if !s.send.is_closed() && now - s.used < self.idle_timeout => {
                s.used = now;
                Some(s.send.clone())
            }
            Some(_) => {
                *kept = None;
                None
            }
            None => None,
        }
    }
}

/// Drops the kept handle of connection `generation` once it has been idle
/// for `idle_timeout`; returns early when another connection replaced it
/// or the upstream is gone. Requests running on it keep their streams:
/// hyper closes the connection when the last one ends.
async fn give_up_when_idle(
    kept: Weak<Mutex<Option<Kept>>>,
    generation: u64,
    idle_timeout: Duration,
) {
    let mut deadline = Instant::now() + idle_timeout;
    loop {
        tokio::time::sleep_until(deadline).await;
        let Some(kept) = kept.upgrade() else { return };
        let Ok(mut kept) = kept.lock() else { return };
        match &*kept {
            Some(k) if k.generation == generation => {
                let until = k.used + idle_timeout;
                if Instant::now() >= until || k.send.is_closed() {
                    // The last handle: hyper closes the connection.
                    *kept = None;
                    tracing::debug!("upstream HTTP/2 connection idle: given up");
                    return;
                }
                deadline = until;
            }
            _ => return,
        }
    }
}

/// Why a request got no response on an HTTP/2 connection.
pub(super) enum H2Failed {
    /// The connection did not take it (it was closing): the request, whole.
    /// (Boxed: the rare case, kept out of the common one's size.)
    Unsent(Box<Request<RequestBody>>, hyper::Error),
    Failed(Error),
}

impl H2Failed {
    pub(super) fn into_error(self) -> Error {
        match self {
            H2Failed::Unsent(_, e) => Error::H2(e),
            H2Failed::Failed(e) => e,
        }
    }
}

/// Sends `req` on an HTTP/2 connection.
pub(super) async fn send(
    mut send: Sender,
    req: Request<RequestBody>,
) -> Result<Response<FromUpstream>, H2Failed> {
    let failed = KeptError::default();
    let req = req.map(|body| H2Body {
        inner: body,
        failed: failed.clone(),
    });
    match send.try_send_request(req).await {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let body = H2Response::new(body, failed);
            Ok(Response::from_parts(parts, FromUpstream::Client(body)))
        }
        Err(mut e) => {
            if let Some(back) = e.take_message() {
                return Err(H2Failed::Unsent(
                    Box::new(back.map(|b| b.inner)),
                    e.into_error(),
                ));
            }
            Err(H2Failed::Failed(
                match failed.lock().ok().and_then(|mut f| f.take()) {
                    Some(client) => Error::ClientBody(client),
                    None => Error::H2(e.into_error()),
                },
            ))
        }
    }
}

/// A request body sent by hyper's HTTP/2 client, which keeps the client's
/// error: on a body error hyper resets the stream and reports the reset.
pub struct H2Body {
    inner: RequestBody,
    failed: KeptError,
}

/// The client's request body failed (its error is kept beside).
#[derive(Debug, thiserror::Error)]
#[error("client request body")]
struct ClientBodyFailed;

impl H2Body {
    /// Keeps the client's error `e` beside, for the exchange to report,
    /// and hands hyper a marker of it.
    fn keep_error(&mut self, e: ClientBodyError) -> BoxError {
        if let Ok(mut failed) = self.failed.lock() {
            *failed = Some(e);
        }
        Box::new(ClientBodyFailed)
    }
}

delegate_body!(H2Body: struct inner, on_error = H2Body::keep_error, Error = BoxError);
