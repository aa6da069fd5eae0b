//! The two listeners: their connection limits (sized by the open-file
//! limit, which is raised first), the accept loop (a slot of the limit
//! taken before each accept, the first byte awaited within the head
//! timeout), the connections' settings, and the drain at shutdown.
//!
//! Each proxy connection is then served by its own task
//! (`super::connection`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

use super::connection::{Client, Http, Serving, serve_client};
use crate::admin::AdminState;
use crate::config::Config;
use crate::in_force::InForce;
use crate::observe::{HandshakeFailure, Listener, Observers, Occurrence};
use crate::proxy::arrival;
use crate::proxy::overload::{self, Overload, Shed};

/// The connection limits of both listeners, and the proxy listener's
/// overload state.
pub(super) struct Connections {
    pub(super) proxy: Limit,
    pub(super) admin: Limit,
    pub(super) overload: Arc<Overload>,
}

/// How many connections one listener keeps open at once, and how long a
/// connection may take to send a request head (from when it opens or its
/// last response ended: this is also the idle keep-alive timeout).
#[derive(Clone)]
pub(super) struct Limit {
    slots: Arc<Semaphore>,
    open: prometheus::IntGauge,
    head_timeout: Duration,
    /// Told of each connection opened and closed (the proxy listener's).
    overload: Option<Arc<Overload>>,
}

/// File descriptors kept out of the connection limits' reach: the
/// listeners, the log, the config watcher, upstream TLS roots, ...
const FD_RESERVE: u64 = 64;

/// How long the admin listener waits for a request head.
const ADMIN_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// An admin connection is closed (gracefully, then at once) after this
/// long: scrapes are quick, and a client that stops reading its response
/// must not keep a slot for ever.
const ADMIN_CONNECTION_MAX_AGE: Duration = Duration::from_secs(60);

impl Connections {
    pub(super) fn new(config: &Config, observers: &Observers) -> Self {
        let metrics = observers.metrics();
        let admin_max = config.admin.max_connections;
        let proxy_max = config.proxy.max_connections.unwrap_or_else(|| {
            let fds = raise_open_file_limit();
            let left = fds.saturating_sub(FD_RESERVE + admin_max as u64);
            // Each client connection may hold an upstream connection too.
            usize::try_from(left / 2)
                .unwrap_or(usize::MAX)
                .clamp(1, Semaphore::MAX_PERMITS)
        });
        tracing::debug!(proxy = proxy_max, admin = admin_max, "connection limits");
        let overload = Arc::new(Overload::new(
            proxy_max,
            config.proxy.overload_threshold,
            config.proxy.overload_timeout,
            observers,
        ));
        let limit = |name: &str, max: usize, head_timeout, overload| Limit {
            slots: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            open: metrics.connections(name, max),
            head_timeout,
            overload,
        };
        Connections {
            proxy: limit(
                "proxy",
                proxy_max,
                config.proxy.request_head_timeout,
                Some(overload.clone()),
            ),
            admin: limit("admin", admin_max, ADMIN_HEAD_TIMEOUT, None),
            overload,
        }
    }
}

/// Raises the soft limit of open files to the hard one (as Go's runtime
/// and most servers do) and returns it (a large number if unlimited).
fn raise_open_file_limit() -> u64 {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    const UNLIMITED: u64 = 1 << 20;
    let finite = |n: u64| {
        if n == RLIM_INFINITY {
            UNLIMITED
        } else {
            n.min(UNLIMITED)
        }
    };
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            // The usual default soft limit, to size connection limits by.
            tracing::debug!(error = %e, "could not read the open-file limit");
            return 1024;
        }
    };
    if finite(soft) >= finite(hard) {
        return finite(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => finite(hard),
        Err(e) => {
            tracing::debug!(error = %e, soft, hard, "could not raise the open-file limit");
            finite(soft)
        }
    }
}

/// A connection's place among its listener's open connections.
struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    open: prometheus::IntGauge,
    overload: Option<Arc<Overload>>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.dec();
        if let Some(overload) = &self.overload {
            overload.closed();
        }
    }
}

/// The next connection, once one of `limit`'s slots is free (the others
/// wait in the kernel's accept queue); `None` at `stop`.
async fn accept(
    listener: &TcpListener,
    limit: &Limit,
    stop: &CancellationToken,
) -> Option<(TcpStream, SocketAddr, ConnectionSlot)> {
    let permit = tokio::select! {
        permit = limit.slots.clone().acquire_owned() => permit.ok()?,
        () = stop.cancelled() => return None,
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    limit.open.inc();
                    if let Some(overload) = &limit.overload {
                        overload.opened();
                    }
                    let slot = ConnectionSlot {
                        _permit: permit,
                        open: limit.open.clone(),
                        overload: limit.overload.clone(),
                    };
                    return Some((stream, addr, slot));
                }
                Err(e) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stop.cancelled() => return None,
        }
    }
}

/// Waits for a new connection's first byte: one that sends nothing within
/// `timeout` is closed (the connection's own head timeout starts once the
/// first bytes have told HTTP/1.x from HTTP/2), and so is one still
/// waiting at `stop`.
async fn first_byte(
    stream: &TcpStream,
    timeout: Duration,
    client_addr: SocketAddr,
    stop: &CancellationToken,
) -> bool {
    // A peek, not `readable()`: a new socket may be marked readable before
    // anything has arrived.
    let mut byte = [0u8; 1];
    let peek = tokio::select! {
        peek = tokio::time::timeout(timeout, stream.peek(&mut byte)) => peek,
        () = stop.cancelled() => return false,
    };
    match peek {
        Ok(Ok(n)) => n > 0,
        Ok(Err(e)) => {
            tracing::debug!(%client_addr, error = %e, "client connection failed");
            false
        }
        Err(_) => {
            tracing::debug!(%client_addr, "client connection sent nothing: closed");
            false
        }
    }
}

/// HTTP/2's connection preface, which a client speaking it with prior
/// knowledge sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Which HTTP a plain connection speaks, by its first bytes (already
/// there: [`first_byte`] has waited for one): HTTP/2 if they begin its
/// preface. A client that has sent only part of the preface's request
/// line is given a moment for the rest.
async fn preface(stream: &TcpStream) -> Http {
    let mut bytes = [0u8; H2_PREFACE.len()];
    for _ in 0..50 {
        let n = match stream.peek(&mut bytes).await {
            Ok(n) => n,
            Err(_) => return Http::H1,
        };
        if n == 0 || !H2_PREFACE.starts_with(&bytes[..n]) {
            return Http::H1;
        }
        if n >= 4 {
            // `PRI ` is no HTTP/1 method a proxy would be sent.
            return Http::H2;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Http::H1
}

/// Serves the admin endpoints until `stop`.
pub(super) async fn serve_admin(
    listener: TcpListener,
    router: axum::Router,
    limit: Limit,
    in_force: Arc<ArcSwap<InForce>>,
    stop: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limit.head_timeout);
    builder.http2().timer(TokioTimer::new());
    let service = hyper_util::service::TowerToHyperService::new(router);
    while let Some((stream, client_addr, slot)) = accept(&listener, &limit, &stop).await {
        let (builder, service) = (builder.clone(), service.clone());
        let (head_timeout, stop) = (limit.head_timeout, stop.clone());
        // The web config in force when the connection opens: a reload
        // that replaces its certificate applies to the next connection.
        let tls = in_force
            .load()
            .config()
            .admin
            .web
            .as_ref()
            .and_then(|web| web.tls.as_ref())
            .map(|tls| tls.config.clone());
        let in_force = in_force.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if !first_byte(&stream, head_timeout, client_addr, &stop).await {
                return;
            }
            let listener = (Listener::Admin, &*in_force);
            let Some(stream) = handshake(stream, tls, head_timeout, client_addr, listener).await
            else {
                return;
            };
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = tokio::time::sleep(ADMIN_CONNECTION_MAX_AGE) => {
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(Duration::from_secs(5), conn)
                        .await
                        .unwrap_or(Ok(()))
                }
            };
            if let Err(e) = result {
                tracing::debug!(%client_addr, error = %e, "admin connection ended with an error");
            }
        });
    }
}

/// A connection as it is served: plain, or TLS over TCP.
pub(super) type Served<S> = Either<S, tokio_rustls::server::TlsStream<S>>;

/// The TLS handshake of a connection when `tls` is set, within
/// `timeout`; the connection as it came when not. `None` when the
/// handshake failed or took too long (counted by reason for `listener`).
pub(super) async fn handshake<S>(
    stream: S,
    tls: Option<Arc<rustls::ServerConfig>>,
    timeout: Duration,
    client_addr: SocketAddr,
    listener: (Listener, &ArcSwap<InForce>),
) -> Option<Served<S>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tls {
        None => Some(Either::Left(stream)),
        Some(tls) => accept_tls(stream, tls, timeout, client_addr, listener)
            .await
            .map(Either::Right),
    }
}

/// The TLS handshake of a connection, within `timeout`. A failure is
/// counted by reason for `listener`, and logged at debug, never per
/// connection at a louder level: a scanner would flood the log.
pub(super) async fn accept_tls<S>(
    stream: S,
    tls: Arc<rustls::ServerConfig>,
    timeout: Duration,
    client_addr: SocketAddr,
    (listener, in_force): (Listener, &ArcSwap<InForce>),
) -> Option<tokio_rustls::server::TlsStream<S>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let accept = tokio_rustls::TlsAcceptor::from(tls).accept(stream);
    let failure = match tokio::time::timeout(timeout, accept).await {
        Ok(Ok(tls)) => return Some(tls),
        Ok(Err(e)) => {
            tracing::debug!(%client_addr, listener = listener.as_str(), error = %e, "TLS handshake failed");
            HandshakeFailure::of(&e)
        }
        Err(_) => {
            tracing::debug!(%client_addr, listener = listener.as_str(), "TLS handshake timed out");
            HandshakeFailure::Timeout
        }
    };
    in_force
        .load()
        .proxy()
        .observers()
        .count(Occurrence::Handshake(listener, failure));
    None
}

/// Accepts connections until `shutdown`, then drains for up to `grace`.
pub(super) async fn serve_proxy(
    listener: TcpListener,
    in_force: Arc<ArcSwap<InForce>>,
    shutdown: CancellationToken,
    admin: Arc<AdminState>,
    limit: Limit,
    overload: Arc<Overload>,
) {
    let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new());
    // The request head must fit in the read buffer.
    let h1 = h1::server::Settings {
        head_timeout: limit.head_timeout,
        max_head: in_force.load().config().proxy.max_request_head_bytes,
    };
    if let Err(e) = arrival::enable(&listener) {
        tracing::warn!(error = %e, "no kernel receive timestamps: t0 is read when a request head is parsed, so the time a request waits for the proxy is not in its latencies");
    }
    // Shared by the connections' tasks, which hold it until they start.
    let serving = Arc::new(Serving { h1, h2 });
    while let Some((stream, client_addr, slot)) = accept(&listener, &limit, &shutdown).await {
        let accepted = tokio::time::Instant::now();
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let client = Client {
            addr: client_addr,
            accepted,
            signal: overload.subscribe(),
            overload: overload.clone(),
        };
        let serving = serving.clone();
        let (head_timeout, stop) = (limit.head_timeout, shutdown.clone());
        let in_force = in_force.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut client = client;
            let timeout = client.overload.timeout();
            // Biased: a connection whose first byte is there is served,
            // even if the proxy was too busy to look before its overload
            // timeout passed.
            let first = tokio::select! {
                biased;
                first = first_byte(&stream, head_timeout, client_addr, &stop) => first,
                () = overload::wait_to_shed(&mut client.signal, accepted, timeout) => {
                    client.shed(Shed::Head);
                    false
                }
            };
            if !first {
                return;
            }
            // The TLS in force when the connection opens; the handshake is
            // before the request's t0, and is counted in no request's time.
            let tls = in_force
                .load()
                .config()
                .tls
                .as_ref()
                .map(|t| t.config.clone());
            // Over TLS, ALPN tells (below); in the clear, the first bytes.
            let plain = match tls {
                None => preface(&stream).await,
                Some(_) => Http::H1,
            };
            let (stream, arrival) = arrival::stamped(stream);
            match tls {
                None => serve_client(stream, plain, arrival, client, &serving, in_force).await,
                Some(tls) => {
                    let addr = client.addr;
                    let listener = (Listener::Proxy, &*in_force);
                    if let Some(stream) =
                        accept_tls(stream, tls, head_timeout, addr, listener).await
                    {
                        let http = match stream.get_ref().1.alpn_protocol() {
                            Some(b"h2") => Http::H2,
                            _ => Http::H1,
                        };
                        serve_client(stream, http, arrival, client, &serving, in_force).await;
                    }
                }
            }
        });
    }
    drop(listener);
    let grace = in_force.load().config().proxy.shutdown_grace;
    admin.ready.store(false, Ordering::Relaxed);
    tracing::info!(grace = ?grace, "shutting down: draining in-flight requests");
    overload.stop();
    tokio::select! {
        () = overload.drained() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!("grace period over; cutting remaining connections"),
    }
}
