//! The connections of plain-HTTP upstreams (HTTP/1.1, `h1.rs`), pooled per
//! route.
//!
//! A connection is owned by the request using it: the request's future
//! writes the request and reads the response head, and the response body
//! reads the rest from the connection as hyper's server polls it, in the
//! client connection's task (`h1.rs`).
//!
//! Connections are kept alive in a per-route pool: a response that ended
//! gives its connection back; a client that goes away drops it, which
//! closes it, so the upstream sees the abort. An idle connection is not
//! polled: one the upstream closed, or that has bytes nobody asked for
//! (an upstream's extra response must never answer the next request), is
//! found so when it is given back or taken (its readiness is kept by the
//! reactor) and dropped. Idle connections expire after the pool's idle
//! timeout, or sooner when the upstream's `Keep-Alive: timeout=N` says it
//! closes them sooner (checked at each checkout and release, and by a
//! reaper task), and at most `max_idle` are kept: past a burst, the
//! connections (and the memory of their buffers) go.
//!
//! Servers close idle connections on their own timers, and some (llama.cpp's
//! server) after every response whatever they announce, so a request can
//! meet a connection the upstream is closing: it fails before one byte of a
//! response arrives. Such a request, on a reused connection, is sent again
//! once on a new connection, if the proxy holds all of it (an empty body, or
//! one read ahead whole); one whose body was streaming from the client, or
//! whose response had begun, never is.
//!
//! HTTPS upstreams (TLS, HTTP/2 by ALPN) keep hyper-util's client.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::RequestBody;
use super::h1::{self, Conn};

/// Why a request could not be sent on a pooled connection.
#[derive(Debug)]
pub enum SendError {
    /// Connecting failed (the connector's error: timeouts are `TimedOut`).
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// The exchange failed before the response head.
    Http(h1::Error),
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
    /// Counts a request sent again after the keep-alive race, by reason.
    on_retry: OnRetry,
}

/// Counts a retry by its reason.
pub type OnRetry = Box<dyn Fn(h1::Race) + Send + Sync>;

struct Idle {
    conn: Conn,
    /// When it stops being usable: the pool's idle timeout, or sooner by
    /// the upstream's `Keep-Alive` hint.
    expires: Instant,
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
        on_retry: OnRetry,
    ) -> Arc<Self> {
        let pool = Arc::new(Self {
            connector,
            host: host_header(&target),
            target,
            idle: Mutex::new(VecDeque::new()),
            max_idle,
            idle_timeout,
            on_retry,
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

    /// Drops idle connections that expired.
    fn prune(&self, now: Instant) {
        let expired: VecDeque<Idle> = {
            let Ok(mut idle) = self.idle.lock() else {
                return;
            };
            if idle.iter().all(|c| c.expires > now) {
                return;
            }
            let (live, expired) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|c| c.expires > now);
            *idle = live;
            expired
        };
        // Closed outside the lock.
        drop(expired);
    }

    /// An idle connection that is still open.
    fn checkout_idle(&self) -> Option<Conn> {
        self.prune(Instant::now());
        loop {
            let c = self.idle.lock().ok()?.pop_back()?;
            // A connection the upstream closed while idle is dropped here.
            if c.conn.is_open() {
                return Some(c.conn);
            }
        }
    }

    /// The `Host` header for requests that have none.
    pub fn host(&self) -> Option<&http::HeaderValue> {
        self.host.as_ref()
    }

    /// A new connection.
    async fn connect(&self) -> Result<Conn, SendError> {
        let io = self
            .connector
            .clone()
            .oneshot(self.target.clone())
            .await
            .map_err(|e| SendError::Connect(Box::new(e)))?;
        Ok(Conn::new(io.into_inner()))
    }

    /// Keeps `conn`, whose last response ended cleanly, for the next
    /// request (or closes it: past `max_idle`, or if the upstream has
    /// closed it or sent more already).
    pub(super) fn give_back(&self, conn: Conn) {
        if !conn.is_open() {
            return;
        }
        let now = Instant::now();
        let keep_for = match conn.hint().idle_limit() {
            Some(limit) => limit.min(self.idle_timeout),
            None => self.idle_timeout,
        };
        if keep_for.is_zero() {
            return;
        }
        let surplus = {
            let Ok(mut idle) = self.idle.lock() else {
                return;
            };
            if idle.len() < self.max_idle {
                idle.push_back(Idle {
                    conn,
                    expires: now + keep_for,
                });
                None
            } else {
                Some(conn)
            }
        };
        // A connection beyond `max_idle` is closed, outside the lock.
        drop(surplus);
        self.prune(now);
    }

    /// Sends `req` (origin-form URI, `Host` set) on a pooled or new
    /// connection, and reads the response head; the response's body reads
    /// the rest, and gives the connection back at its end.
    ///
    /// A kept-alive connection can be closed by the upstream just as it is
    /// taken (servers close idle connections after their own keep-alive
    /// timeout, uvicorn's is 5 s): one found closed at checkout is dropped
    /// and the next one (or a new one) taken. One that the upstream closes
    /// as the request goes out fails without a byte of a response: the
    /// request is sent once more, on a new connection, if the proxy holds
    /// all of it (see the module's documentation).
    pub async fn send(
        self: &Arc<Self>,
        req: http::Request<RequestBody>,
    ) -> Result<http::Response<h1::Body>, SendError> {
        let req = h1::Prepared::new(req);
        let reused = self.checkout_idle();
        let Some(conn) = reused else {
            return self.send_on_new(req).await;
        };
        let replay = req.replay();
        match conn.send(req, Arc::downgrade(self)).await {
            Ok(resp) => Ok(resp),
            Err(failed) => match (failed.keepalive_race(), replay) {
                (Some(reason), Some(again)) => {
                    (self.on_retry)(reason);
                    tracing::debug!(
                        upstream = %self.target,
                        reason = reason.as_str(),
                        error = %failed.error,
                        "a reused upstream connection was closed under the request; sending it again on a new one"
                    );
                    self.send_on_new(again).await
                }
                _ => Err(SendError::Http(failed.error)),
            },
        }
    }

    /// Sends `req` on a new connection. (`connect` is boxed: its future
    /// would otherwise be part of this one, which is moved whole into the
    /// timeout and the request's.)
    async fn send_on_new(
        self: &Arc<Self>,
        req: h1::Prepared,
    ) -> Result<http::Response<h1::Body>, SendError> {
        let conn = Box::pin(self.connect()).await?;
        conn.send(req, Arc::downgrade(self))
            .await
            .map_err(|failed| SendError::Http(failed.error))
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
