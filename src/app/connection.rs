//! The task of one client connection of the proxy listener: the
//! connection (`h1::server` for HTTP/1.x, hyper's for HTTP/2) and its
//! service, which takes `t0` and reads the `Proxy` in force for each
//! request, and counts the connection's requests in progress; the task
//! watches the listener's signal, to close the connection at shutdown or
//! shed it under overload.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;
use tokio_util::either::Either;

use crate::in_force::InForce;
use crate::proxy::arrival::Arrival;
use crate::proxy::delegate::delegate_body;
use crate::proxy::overload::{Overload, Shed, Signal};
use crate::proxy::{BoxError, Inbound, ResponseBody};

use super::woken::Woken;

/// One client connection of the proxy listener, as its task knows it.
pub(super) struct Client {
    pub(super) addr: SocketAddr,
    pub(super) accepted: tokio::time::Instant,
    /// The listener's overload and shutdown signal; the listener has
    /// drained when every connection has dropped its receiver.
    pub(super) signal: watch::Receiver<Signal>,
    pub(super) overload: Arc<Overload>,
}

impl Client {
    pub(super) fn shed(&self, reason: Shed) {
        self.overload.shed(reason);
        tracing::debug!(client_addr = %self.addr, reason = reason.as_str(), "connection shed: the proxy listener is overloaded");
    }
}

/// A client connection's requests in progress (from when the connection
/// hands a request over to when its response body is dropped), and whether it has
/// served one: what its task needs to know to shed it.
#[derive(Default)]
struct Requests {
    in_progress: std::sync::atomic::AtomicUsize,
    served: std::sync::atomic::AtomicBool,
}

impl Requests {
    fn started(self: &Arc<Self>) -> Busy {
        self.in_progress.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    fn idle(&self) -> bool {
        self.in_progress.load(Ordering::Relaxed) == 0
    }
}

/// A request in progress on its connection, until dropped.
struct Busy(Arc<Requests>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.served.store(true, Ordering::Relaxed);
        self.0.in_progress.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted in progress on its
/// connection until the connection drops it.
struct Tracked {
    body: ResponseBody,
    _busy: Busy,
}

delegate_body!(Tracked: struct body, Error = BoxError);

/// Which HTTP a client connection speaks: told by ALPN over TLS, or by
/// HTTP/2's connection preface over plain TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Http {
    H1,
    H2,
}

/// How the proxy listener serves its connections: HTTP/1.x with our own
/// server connection (`h1::server`), HTTP/2 with hyper's.
pub(super) struct Serving {
    pub(super) h1: h1::server::Settings,
    pub(super) h2: hyper::server::conn::http2::Builder<TokioExecutor>,
}

/// Serves one client connection of the proxy listener, read through
/// `arrival`'s stamps (plain, or TLS over them), in `http`: the connection
/// boxed apart from its task ([`connection_task`]).
pub(super) fn serve_client<I>(
    stream: I,
    http: Http,
    arrival: Arrival,
    client: Client,
    serving: &Serving,
    in_force: Arc<ArcSwap<InForce>>,
) -> impl Future<Output = ()>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let requests = Arc::new(Requests::default());
    let client_addr = client.addr;
    // Each request, as the connection hands it over.
    let handle = {
        let requests = requests.clone();
        move |req: Request<Inbound>| {
            // t0, as the head has been read (HTTP/2 runs the future below in
            // a task of its own, later).
            let t0 = arrival.t0();
            let busy = requests.started();
            // Read once per request: a reload affects the next request, even
            // on this connection, never this one.
            let proxy = in_force.load().proxy().clone();
            // The connection keeps this future's room for as long as it is
            // polled; the request's own state (the upstream exchange, the
            // meter before the response head) is boxed apart so it is freed
            // as soon as the response head is out.
            async move {
                let resp = Box::pin(proxy.handle(req, t0, client_addr)).await;
                resp.map(|body| Tracked { body, _busy: busy })
            }
        }
    };
    match http {
        Http::H1 => {
            let closing = Arc::new(h1::server::Closing::default());
            let conn = h1::server::serve(stream, serving.h1, closing.clone(), move |req| {
                handle(req.map(Inbound::from))
            });
            Either::Left(connection_task(
                conn,
                move |_| closing.close(),
                client,
                requests,
            ))
        }
        Http::H2 => {
            let service = service_fn(move |req: Request<Incoming>| {
                let resp = handle(req.map(Inbound::from));
                async move { Ok::<_, Infallible>(resp.await) }
            });
            let conn = serving.h2.serve_connection(TokioIo::new(stream), service);
            Either::Right(connection_task(
                conn,
                |conn| conn.graceful_shutdown(),
                client,
                requests,
            ))
        }
    }
}

/// The task serving one client connection, with the connection boxed: an
/// async block stores what it captures apart from the future it awaits, so
/// a connection moved in by value would take its room twice in the task.
///
/// It watches the listener's signal: at shutdown the connection finishes
/// its requests and closes; while the listener is overloaded, the
/// connection is closed if it is idle between requests (gracefully, so that
/// the rest of its last response is written first, within the overload
/// timeout), or dropped if it has sent no complete request head within the
/// overload timeout of opening (a request in progress is never cut here:
/// one whose body is still being read ahead is shed by the proxy with a
/// `408`).
fn connection_task<C, E>(
    conn: C,
    mut shut_down: impl FnMut(std::pin::Pin<&mut C>),
    client: Client,
    requests: Arc<Requests>,
) -> impl Future<Output = ()>
where
    C: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conn = Box::pin(conn);
    async move {
        let mut client = client;
        let timeout = client.overload.timeout();
        let mut watching = true;
        // When to look again whether an overloaded connection can be shed.
        let mut check: Option<tokio::time::Instant> = None;
        // When a connection shed while idle is dropped if it has not
        // finished writing.
        let mut closing: Option<tokio::time::Instant> = None;
        // The signal's future is polled only when it woke the task, not at
        // each of the connection's wake-ups (its poll takes a lock shared
        // by every connection).
        let mut woken = Woken::new();
        loop {
            // Biased: the connection first, and no random draw per poll.
            tokio::select! {
                biased;
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        // With its causes: hyper's own words for a failed
                        // response body (HTTP/2) are only "error from
                        // user's Body stream".
                        let e: Box<dyn std::error::Error + Send + Sync> = e.into();
                        tracing::debug!(client_addr = %client.addr, error = %crate::proxy::error::chain(&*e), "client connection ended with an error");
                    }
                    return;
                }
                changed = woken.wrap(Box::pin(client.signal.changed())), if watching => {
                    if changed.is_err() {
                        watching = false;
                        continue;
                    }
                    let signal = *client.signal.borrow_and_update();
                    if signal.stopping {
                        shut_down(conn.as_mut());
                        watching = false;
                        check = None;
                    } else {
                        check = signal.overloaded.then(tokio::time::Instant::now);
                    }
                }
                () = tokio::time::sleep_until(closing.unwrap_or_else(tokio::time::Instant::now)), if closing.is_some() => {
                    tracing::debug!(client_addr = %client.addr, "shed connection dropped: its client did not take the rest of its last response in time");
                    return;
                }
                () = tokio::time::sleep_until(check.unwrap_or_else(tokio::time::Instant::now)), if check.is_some() => {
                    let now = tokio::time::Instant::now();
                    if !client.signal.borrow().overloaded {
                        check = None;
                        continue;
                    }
                    if requests.idle() {
                        if requests.served.load(Ordering::Relaxed) {
                            // Closed gracefully: the end of the last
                            // response may still be queued on the
                            // connection (its body is dropped as its last
                            // frame is queued), and is written first, for
                            // up to the overload timeout.
                            client.shed(Shed::Idle);
                            shut_down(conn.as_mut());
                            closing = Some(now + timeout);
                            watching = false;
                            check = None;
                            continue;
                        }
                        if now >= client.accepted + timeout {
                            client.shed(Shed::Head);
                            return;
                        }
                    }
                    // Busy, or a new connection within its time: look
                    // again soon (a busy one becomes idle when its response
                    // ends, which nothing signals here).
                    let again = if requests.idle() && !requests.served.load(Ordering::Relaxed) {
                        client.accepted + timeout
                    } else {
                        now + timeout.min(Duration::from_secs(1))
                    };
                    check = Some(again);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Observers;
    use crate::observe::metrics::Metrics;

    #[tokio::test]
    async fn a_connection_task_holds_its_connection_behind_one_pointer() {
        let conn = async {
            let held = [0u8; 4096];
            std::future::ready(()).await;
            std::hint::black_box(held);
            Ok::<(), std::io::Error>(())
        };
        assert!(std::mem::size_of_val(&conn) >= 4096);
        let metrics = Metrics::new(
            &crate::config::MetricsSettings::default(),
            &[],
            prometheus::Registry::new(),
        )
        .unwrap();
        let observers = Observers::new(Arc::new(metrics), None, None);
        let overload = Arc::new(Overload::new(1, 1.0, Duration::from_secs(1), &observers));
        let client = Client {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            accepted: tokio::time::Instant::now(),
            signal: overload.subscribe(),
            overload,
        };
        let task = connection_task(conn, |_| {}, client, Arc::default());
        // The select over the connection, the signal and the timer, but
        // not the connection itself.
        assert!(
            std::mem::size_of_val(&task) <= 1024,
            "{}",
            std::mem::size_of_val(&task)
        );
        task.await;
    }
}
