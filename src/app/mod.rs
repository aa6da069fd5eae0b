//! Wiring: sockets, the accept loop, signals and graceful shutdown.
//!
//! [`start`] binds the proxy and admin listeners (port 0 is fine: tests use
//! it) and returns a [`Running`] handle with the bound addresses. Shutdown
//! stops accepting, marks the instance not ready, lets in-flight requests
//! finish for up to the configured grace period, then stops the admin
//! listener last so the final state can still be scraped while draining.
//!
//! The config in force lives in an [`ArcSwap`] that each request reads
//! once; [`Running::reload`], SIGHUP and the file watcher replace it
//! (`reload.rs`). The commands register their signal handlers before they
//! bind anything (`signals.rs`), so a signal is never met by its default
//! action.
//!
//! Nothing here holds logic worth testing on its own; the integration tests
//! drive it through real sockets.

pub mod cli;
mod demo;
mod reload;
mod signals;

pub use reload::{ConfigSource, DEBOUNCE, ReloadError, Reloaded};
pub use signals::{Received, SignalError, Signals};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, AdminState};
use crate::config::Config;
use crate::observe::Observers;
use crate::observe::access::AccessLog;
use crate::observe::metrics::Metrics;
use crate::observe::otlp::Otlp;
use crate::proxy::overload::{self, Overload, Shed, Signal};
use crate::proxy::{Proxy, ResponseBody, arrival};

/// A started proxy and admin listener.
pub struct Running {
    /// Where the proxy accepts client traffic.
    pub proxy_addr: SocketAddr,
    /// Where the admin endpoints are served.
    pub admin_addr: SocketAddr,
    /// The metrics this instance records into.
    pub metrics: Arc<Metrics>,
    reloader: Arc<reload::Reloader>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Reads the config files again and, if they are valid, serves new
    /// requests with them (as a file change or SIGHUP does). In-flight
    /// requests finish with the config they started with. On error the
    /// running config stays and the error is returned (and logged).
    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        self.reloader
            .reload("api", false)
            .await
            .unwrap_or_else(|| Ok(Reloaded::default()))
    }

    /// Starts a graceful shutdown (as SIGTERM does).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until the instance has stopped.
    pub async fn wait(self) {
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "server task failed");
        }
    }

    /// Shuts down and waits.
    pub async fn stop(self) {
        self.shutdown();
        self.wait().await;
    }
}

/// Why an instance could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("registering metrics")]
    Metrics(#[source] prometheus::Error),
    #[error("setting up the OTLP export")]
    Otlp(#[source] crate::observe::otlp::StartError),
    #[error("setting up upstream TLS")]
    Tls(#[source] rustls::Error),
    #[error("binding the {listener} listener on {addr}")]
    Bind {
        listener: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Signals(#[from] SignalError),
    #[error("{0}")]
    Config(crate::config::ConfigErrors),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the rules as YAML: {0}")]
    Rules(String),
    #[error("writing the dashboard as JSON")]
    Json(#[from] serde_json::Error),
}

impl CommandError {
    /// An I/O failure while doing `what`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| CommandError::Io { what, source }
    }

    /// The error and its causes on one line.
    pub(crate) fn chain(&self) -> String {
        crate::proxy::error::chain(self)
    }
}

/// Binds both listeners and starts serving a config that has no file to
/// reload.
pub async fn start(config: Config) -> Result<Running, StartError> {
    start_with(config, None, None).await
}

/// Binds both listeners and starts serving `config`, which was loaded from
/// `source`: it can be reloaded, and is watched if `source.watch`. Access
/// lines go to `access`, when given (the command line's log writer).
pub async fn start_with(
    config: Config,
    source: Option<ConfigSource>,
    access: Option<AccessLog>,
) -> Result<Running, StartError> {
    let registry = prometheus::Registry::new();
    // The standard process_* metrics: CPU, resident memory, open and
    // maximum file descriptors (a proxy holds two per stream).
    #[cfg(target_os = "linux")]
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .map_err(StartError::Metrics)?;
    let metrics = Arc::new(
        Metrics::new(&config.metrics, &config.slo_classes, registry)
            .map_err(StartError::Metrics)?,
    );
    if let Some(access) = &access {
        metrics.count_log_drops(access.lines_dropped());
    }
    let otlp = match &config.otlp {
        Some(settings) => Some(Arc::new(
            Otlp::start(settings, metrics.otlp_counters()).map_err(StartError::Otlp)?,
        )),
        None => None,
    };
    let observers = Observers::new(metrics.clone(), access, otlp.clone());
    let connections = Connections::new(&config, &observers);
    let proxy =
        Proxy::new(&config, observers, connections.overload.clone()).map_err(StartError::Tls)?;
    let live = Arc::new(ArcSwap::from_pointee(proxy));

    let proxy_listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartError::Bind {
                listener: "proxy",
                addr: config.listen,
                source,
            })?;
    let admin_listener = TcpListener::bind(config.admin_listen)
        .await
        .map_err(|source| StartError::Bind {
            listener: "admin",
            addr: config.admin_listen,
            source,
        })?;
    let bound = |listener, addr, l: &TcpListener| {
        l.local_addr().map_err(|source| StartError::Bind {
            listener,
            addr,
            source,
        })
    };
    let proxy_addr = bound("proxy", config.listen, &proxy_listener)?;
    let admin_addr = bound("admin", config.admin_listen, &admin_listener)?;

    let admin_state = Arc::new(AdminState {
        metrics: metrics.clone(),
        live: live.clone(),
        ready: true.into(),
    });
    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(serve_admin(
        admin_listener,
        admin::router(admin_state.clone()),
        connections.admin,
        admin_stop.clone(),
    ));
    tracing::info!(%proxy_addr, %admin_addr, routes = config.routes.len(), "tokenmeter started");
    for r in &config.routes {
        tracing::info!(route = %r.name, prefix = %r.matcher.path_prefix, upstream = %r.upstream.url(), "route");
    }
    let watch = source.as_ref().is_some_and(|s| s.watch);
    let sources = config.sources.clone();
    let reloader = Arc::new(reload::Reloader::new(
        config,
        source,
        live.clone(),
        metrics.clone(),
    ));
    // Started before `start` returns, so no change after it is missed.
    let watcher =
        watch.then(|| reload::spawn_watcher(reloader.clone(), &sources, shutdown.clone()));
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            serve_proxy(
                proxy_listener,
                live,
                shutdown,
                admin_state,
                connections.proxy,
                connections.overload,
            )
            .await;
            // The requests that finished while draining are exported
            // before the admin listener stops.
            if let Some(otlp) = otlp {
                otlp.shutdown().await;
            }
            admin_stop.cancel();
            let _ = admin_task.await;
            if let Some(watcher) = watcher {
                let _ = watcher.await;
            }
        }
    });
    Ok(Running {
        proxy_addr,
        admin_addr,
        metrics,
        reloader,
        shutdown,
        task,
    })
}

/// The connection limits of both listeners, and the proxy listener's
/// overload state.
struct Connections {
    proxy: Limit,
    admin: Limit,
    overload: Arc<Overload>,
}

/// How many connections one listener keeps open at once, and how long a
/// connection may take to send a request head (from when it opens or its
/// last response ended: this is also the idle keep-alive timeout).
#[derive(Clone)]
struct Limit {
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
    fn new(config: &Config, observers: &Observers) -> Self {
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
struct Slot {
    _permit: OwnedSemaphorePermit,
    open: prometheus::IntGauge,
    overload: Option<Arc<Overload>>,
}

impl Drop for Slot {
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
) -> Option<(TcpStream, SocketAddr, Slot)> {
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
                    let slot = Slot {
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
/// `timeout` is closed (hyper's own head timeout starts only once it has
/// told HTTP/1.1 from HTTP/2 by the first bytes), and so is one still
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

/// Serves the admin endpoints until `stop`.
async fn serve_admin(
    listener: TcpListener,
    router: axum::Router,
    limit: Limit,
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
        tokio::spawn(async move {
            let _slot = slot;
            if !first_byte(&stream, head_timeout, client_addr, &stop).await {
                return;
            }
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

/// Accepts connections until `shutdown`, then drains for up to `grace`.
async fn serve_proxy(
    listener: TcpListener,
    live: Arc<ArcSwap<Proxy>>,
    shutdown: CancellationToken,
    admin: Arc<AdminState>,
    limit: Limit,
    overload: Arc<Overload>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A timer enables hyper's header read timeout (slow-loris protection),
    // which also closes a connection idle between requests.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limit.head_timeout);
    // The request head must fit in the read buffer, and the buffer stays this
    // size (hyper doubles a buffer that may grow when it reads ahead).
    builder
        .http1()
        .max_buf_size(live.load().config().proxy.max_request_head_bytes);
    builder.http2().timer(TokioTimer::new());
    if let Err(e) = arrival::enable(&listener) {
        tracing::warn!(error = %e, "no kernel receive timestamps: t0 is read when a request head is parsed, so the time a request waits for the proxy is not in its latencies");
    }
    // Shared by the connections' tasks, which hold it until they start.
    let builder = Arc::new(builder);
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
        let builder = builder.clone();
        let (head_timeout, stop) = (limit.head_timeout, shutdown.clone());
        let live = live.clone();
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
            if first {
                serve_client(stream, client, &builder, live).await;
            }
        });
    }
    drop(listener);
    let grace = live.load().shutdown_grace();
    admin.ready.store(false, Ordering::Relaxed);
    tracing::info!(grace = ?grace, "shutting down: draining in-flight requests");
    overload.stop();
    tokio::select! {
        () = overload.drained() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!("grace period over; cutting remaining connections"),
    }
}

/// One client connection of the proxy listener, as its task knows it.
struct Client {
    addr: SocketAddr,
    accepted: tokio::time::Instant,
    /// The listener's overload and shutdown signal; the listener has
    /// drained when every connection has dropped its receiver.
    signal: watch::Receiver<Signal>,
    overload: Arc<Overload>,
}

impl Client {
    fn shed(&self, reason: Shed) {
        self.overload.shed(reason);
        tracing::debug!(client_addr = %self.addr, reason = reason.as_str(), "connection shed: the proxy listener is overloaded");
    }
}

/// A client connection's requests in progress (from when hyper hands a
/// request over to when its response body is dropped), and whether it has
/// served one: what its task needs to know to shed it.
#[derive(Default)]
struct Activity {
    in_progress: std::sync::atomic::AtomicUsize,
    served: std::sync::atomic::AtomicBool,
}

impl Activity {
    fn started(self: &Arc<Self>) -> Busy {
        self.in_progress.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    fn idle(&self) -> bool {
        self.in_progress.load(Ordering::Relaxed) == 0
    }
}

/// A request in progress on its connection, until dropped.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.served.store(true, Ordering::Relaxed);
        self.0.in_progress.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted in progress on its
/// connection until hyper drops it.
struct Tracked {
    body: ResponseBody,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = crate::proxy::BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves one client connection of the proxy listener: hyper's connection,
/// boxed apart from the task ([`connection_task`]).
fn serve_client(
    stream: TcpStream,
    client: Client,
    builder: &auto::Builder<TokioExecutor>,
    live: Arc<ArcSwap<Proxy>>,
) -> impl Future<Output = ()> {
    let (stream, arrival) = arrival::stamped(stream);
    let activity = Arc::new(Activity::default());
    let client_addr = client.addr;
    let service = service_fn({
        let activity = activity.clone();
        move |req| {
            // t0, as hyper hands the request over (HTTP/2 runs the future
            // below in a task of its own, later).
            let t0 = arrival.t0();
            let busy = activity.started();
            // Read once per request: a reload affects the next request, even
            // on this connection, never this one.
            let proxy = live.load_full();
            // hyper keeps this future's allocation for the connection's whole
            // life; the request's own state (the upstream exchange, the
            // meter before the response head) is boxed apart so it is freed
            // as soon as the response head is out.
            async move {
                let resp = Box::pin(proxy.handle(req, t0, client_addr)).await;
                Ok::<_, Infallible>(resp.map(|body| Tracked { body, _busy: busy }))
            }
        }
    });
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .into_owned();
    connection_task(conn, client, activity)
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
    client: Client,
    activity: Arc<Activity>,
) -> impl Future<Output = ()>
where
    C: Future<Output = Result<(), E>> + Shutdown,
    E: std::fmt::Display,
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
        loop {
            // Biased: the connection first, and no random draw per poll.
            tokio::select! {
                biased;
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(client_addr = %client.addr, error = %e, "client connection ended with an error");
                    }
                    return;
                }
                changed = client.signal.changed(), if watching => {
                    if changed.is_err() {
                        watching = false;
                        continue;
                    }
                    let signal = *client.signal.borrow_and_update();
                    if signal.stopping {
                        conn.as_mut().shut_down();
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
                    if activity.idle() {
                        if activity.served.load(Ordering::Relaxed) {
                            // Closed gracefully: the end of the last
                            // response may still be in hyper's write buffer
                            // (its body is dropped as its last frame is
                            // queued), and is written first, for up to the
                            // overload timeout.
                            client.shed(Shed::Idle);
                            conn.as_mut().shut_down();
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
                    let again = if activity.idle() && !activity.served.load(Ordering::Relaxed) {
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

/// A connection that can be asked to finish its requests and close.
trait Shutdown {
    fn shut_down(self: std::pin::Pin<&mut Self>);
}

impl<I, S, E> Shutdown for auto::Connection<'_, I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: http_body::Body + Send + 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn shut_down(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Serves until SIGINT or SIGTERM, reloading the config on each SIGHUP.
pub async fn run_until_shutdown(running: &Running, mut signals: Signals) {
    while signals.recv().await == Received::Reload {
        // The outcome is logged and counted by the reload itself.
        let _ = running.reloader.reload("sighup", false).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that never shuts down early, for the size test.
    struct Held<F>(std::pin::Pin<Box<F>>);

    impl<F: Future> Future for Held<F> {
        type Output = F::Output;
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<F::Output> {
            self.0.as_mut().poll(cx)
        }
    }

    impl<F> Shutdown for Held<F> {
        fn shut_down(self: std::pin::Pin<&mut Self>) {}
    }

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
        let task = connection_task(Held(Box::pin(conn)), client, Arc::default());
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
