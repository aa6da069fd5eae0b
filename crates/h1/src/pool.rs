//! The idle connections of one upstream, the upstream's `Keep-Alive`
//! hints, and the one retry rule.
//!
//! A connection is owned by the request using it: the request's future
//! writes the request and reads the response head, and the response body
//! reads the rest from the connection as the proxy's client connection
//! polls it. A response that ended cleanly gives its connection back here;
//! a client that goes away drops it, which closes it, so the upstream sees
//! the abort. An idle connection is not polled: one the upstream closed, or
//! that has bytes nobody asked for (an upstream's extra response must never
//! answer the next request), is found so when it is given back or taken
//! ([`Conn::is_open`]) and dropped. Idle connections expire after the
//! pool's idle timeout, or sooner when the upstream's `Keep-Alive:
//! timeout=N` says it closes them sooner (checked at each checkout and
//! release, and by a reaper task), and at most `max_idle` are kept: past a
//! burst, the connections (and the memory of their buffers) go.
//!
//! Servers close idle connections on their own timers, and some (llama.cpp's
//! server) after every response whatever they announce, so a request can
//! meet a connection the upstream is closing: it fails before one byte of a
//! response arrives. Such a request, on a reused connection, is to be sent
//! again once on a new connection, if the proxy holds all of it (an empty
//! body, or one read ahead whole); one whose body was streaming from the
//! client, or whose response had begun, never is ([`Pool::send_reused`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::Response;
use tokio::time::Instant;

use super::body::Body;
use super::conn::{Conn, Keep, Transport};
use super::error::{Error, Failed};
use super::write::{Prepared, SendBody};

/// Counts a retry by its reason.
pub type OnRetry = Box<dyn Fn(Race) + Send + Sync>;

/// The idle connections of one upstream.
pub struct Pool<T> {
    idle: Mutex<VecDeque<Idle<T>>>,
    /// At most this many idle connections are kept.
    max_idle: usize,
    idle_timeout: Duration,
    /// Counts a request sent again after the keep-alive race, by reason.
    on_retry: OnRetry,
}

struct Idle<T> {
    conn: Conn<T>,
    /// When it stops being usable: the pool's idle timeout, or sooner by
    /// the upstream's `Keep-Alive` hint.
    expires: Instant,
}

/// What became of a request sent on a reused connection.
pub enum Reused<T, B: SendBody> {
    /// Answered, or failed for good.
    Sent(Result<Response<Body<T, B>>, Error<B::Error>>),
    /// The connection was closed under it in the keep-alive race, and the
    /// proxy holds all of it: to be sent once more, on a new connection.
    Again(Prepared<B>),
}

impl<T: Transport + Send + 'static> Pool<T> {
    /// A pool that keeps at most `max_idle` idle connections, each for
    /// `idle_timeout`. Within a tokio runtime, a reaper task closes expired
    /// idle connections until the pool is dropped.
    pub fn new(max_idle: usize, idle_timeout: Duration, on_retry: OnRetry) -> Arc<Self> {
        let pool = Arc::new(Self {
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
}

impl<T: Transport> Pool<T> {
    /// Drops every idle connection that expired: the reaper's sweep, off
    /// the request path (a scan of the whole pool).
    fn prune(&self, now: Instant) {
        let expired: VecDeque<Idle<T>> = {
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

    /// An idle connection that is still open and has not expired, the one
    /// given back last (its buffers are warm, and the older ones expire
    /// first). A kept-alive connection can be closed by the upstream just
    /// as it is taken (servers close idle connections after their own
    /// keep-alive timeout, uvicorn's is 5 s): one found closed or expired
    /// is dropped and the next one taken. Each connection is looked at
    /// once, so a checkout costs the same whatever the pool's size.
    pub fn checkout(&self) -> Option<Conn<T>> {
        let now = Instant::now();
        loop {
            // The lock is held for the pop only; a connection dropped here
            // is closed outside it.
            let mut c = self.idle.lock().ok()?.pop_back()?;
            if c.expires > now && c.conn.is_open() {
                return Some(c.conn);
            }
        }
    }

    /// Keeps `conn`, whose last response ended cleanly, for the next
    /// request (or closes it: past `max_idle`, or if the upstream has
    /// closed it or sent more already).
    pub fn give_back(&self, mut conn: Conn<T>) {
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
        let mut closing = Vec::new();
        {
            let Ok(mut idle) = self.idle.lock() else {
                return;
            };
            if idle.len() < self.max_idle {
                idle.push_back(Idle {
                    conn,
                    expires: now + keep_for,
                });
            } else {
                closing.push(conn);
            }
            // The oldest expire first (a shorter `Keep-Alive` hint behind
            // them is found by the checkout that takes it, or the reaper):
            // a look at the front, once per connection dropped.
            while idle.front().is_some_and(|c| c.expires <= now) {
                closing.extend(idle.pop_front().map(|c| c.conn));
            }
        }
        // A connection beyond `max_idle`, or expired, is closed outside the
        // lock.
        drop(closing);
    }

    /// Sends `req` on `conn`, a new connection to this pool's upstream,
    /// and reads the response head; the response's body gives the
    /// connection to this pool at its end, if it can be kept.
    pub async fn send_new<B: SendBody>(
        self: &Arc<Self>,
        conn: Conn<T>,
        req: Prepared<B>,
    ) -> Result<Response<Body<T, B>>, Failed<B::Error>>
    where
        T: Send + 'static,
    {
        let home: Weak<Self> = Arc::downgrade(self);
        conn.send(req, home).await
    }

    /// Sends `req` on `conn`, a connection taken from this pool, and reads
    /// the response head; the response's body gives the connection back
    /// at its end. The one retry rule: a reused connection that the
    /// upstream closes as the request goes out fails without a byte of a
    /// response; the request is then to be sent once more, on a new
    /// connection, if the proxy holds all of it (counted here, by reason).
    pub async fn send_reused<B: SendBody>(
        self: &Arc<Self>,
        conn: Conn<T>,
        req: Prepared<B>,
    ) -> Reused<T, B>
    where
        T: Send + 'static,
    {
        let replay = req.replay();
        let home: Weak<Self> = Arc::downgrade(self);
        match conn.send(req, home).await {
            Ok(resp) => Reused::Sent(Ok(resp)),
            Err(failed) => match (failed.keepalive_race(), replay) {
                (Some(reason), Some(again)) => {
                    (self.on_retry)(reason);
                    tracing::debug!(
                        reason = reason.as_str(),
                        error = %failed.error,
                        "a reused upstream connection was closed under the request; sending it again on a new one"
                    );
                    Reused::Again(again)
                }
                _ => Reused::Sent(Err(failed.error)),
            },
        }
    }
}

impl<T: Transport + Send> Keep<T> for Pool<T> {
    fn keep(&self, conn: Conn<T>) {
        self.give_back(conn);
    }
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

impl<E> Failed<E> {
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
