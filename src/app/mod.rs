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
pub use signals::{Received, Signals};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, AdminState};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::proxy::{Proxy, arrival};

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

/// Binds both listeners and starts serving a config that has no file to
/// reload.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    start_with(config, None).await
}

/// Binds both listeners and starts serving `config`, which was loaded from
/// `source`: it can be reloaded, and is watched if `source.watch`.
pub async fn start_with(config: Config, source: Option<ConfigSource>) -> anyhow::Result<Running> {
    let registry = prometheus::Registry::new();
    // The standard process_* metrics: CPU, resident memory, open and
    // maximum file descriptors (a proxy holds two per stream).
    #[cfg(target_os = "linux")]
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .context("registering process metrics")?;
    let metrics = Arc::new(
        Metrics::new(&config.metrics, &config.slo_classes, registry)
            .context("registering metrics")?,
    );
    if let Some(dropped) = cli::log_lines_dropped() {
        metrics.count_log_drops(dropped);
    }
    let proxy = Proxy::new(&config, metrics.clone()).context("setting up upstream TLS")?;
    let live = Arc::new(ArcSwap::from_pointee(proxy));

    let proxy_listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the proxy listener on {}", config.listen))?;
    let admin_listener = TcpListener::bind(config.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener on {}", config.admin_listen))?;
    let proxy_addr = proxy_listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;

    let admin_state = Arc::new(AdminState {
        metrics: metrics.clone(),
        live: live.clone(),
        ready: true.into(),
    });
    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn({
        let router = admin::router(admin_state.clone());
        let stop = admin_stop.clone();
        async move {
            let serve =
                axum::serve(admin_listener, router).with_graceful_shutdown(stop.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "admin listener failed");
            }
        }
    });
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
            serve_proxy(proxy_listener, live, shutdown, admin_state).await;
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

/// Accepts connections until `shutdown`, then drains for up to `grace`.
async fn serve_proxy(
    listener: TcpListener,
    live: Arc<ArcSwap<Proxy>>,
    shutdown: CancellationToken,
    admin: Arc<AdminState>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A timer enables hyper's header read timeout (slow-loris protection).
    builder.http1().timer(TokioTimer::new());
    // The request head must fit in the read buffer, and the buffer stays this
    // size (hyper doubles a buffer that may grow when it reads ahead).
    builder
        .http1()
        .max_buf_size(live.load().config().proxy.max_request_head_bytes);
    builder.http2().timer(TokioTimer::new());
    if let Err(e) = arrival::enable(&listener) {
        tracing::warn!(error = %e, "no kernel receive timestamps: t0 is read when a request head is parsed, so the time a request waits for the proxy is not in its latencies");
    }
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, client_addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let (stream, arrival) = arrival::stamped(stream);
        let live = live.clone();
        let service = service_fn(move |req| {
            // t0, as hyper hands the request over (HTTP/2 runs the future
            // below in a task of its own, later).
            let t0 = arrival.t0();
            // Read once per request: a reload affects the next request, even
            // on this connection, never this one.
            let proxy = live.load_full();
            // hyper keeps this future's allocation for the connection's whole
            // life; the request's own state (the upstream exchange, the
            // meter before the response head) is boxed apart so it is freed
            // as soon as the response head is out.
            async move { Ok::<_, Infallible>(Box::pin(proxy.handle(req, t0, client_addr)).await) }
        });
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(connection_task(graceful.watch(conn), client_addr));
    }
    drop(listener);
    let grace = live.load().shutdown_grace();
    admin.ready.store(false, Ordering::Relaxed);
    tracing::info!(grace = ?grace, "shutting down: draining in-flight requests");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!("grace period over; cutting remaining connections"),
    }
}

/// The task serving one client connection, with the connection boxed: an
/// async block stores what it captures apart from the future it awaits, so
/// a connection moved in by value would take its room twice in the task.
fn connection_task<E: std::fmt::Display>(
    conn: impl Future<Output = Result<(), E>>,
    client_addr: SocketAddr,
) -> impl Future<Output = ()> {
    let conn = Box::pin(conn);
    async move {
        if let Err(e) = conn.await {
            tracing::debug!(%client_addr, error = %e, "client connection ended with an error");
        }
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

    #[test]
    fn a_connection_task_holds_its_connection_behind_one_pointer() {
        let conn = async {
            let held = [0u8; 2048];
            std::future::ready(()).await;
            std::hint::black_box(held);
            Ok::<(), std::io::Error>(())
        };
        assert!(std::mem::size_of_val(&conn) >= 2048);
        let task = connection_task(conn, SocketAddr::from(([127, 0, 0, 1], 1)));
        assert!(
            std::mem::size_of_val(&task) <= 64,
            "{}",
            std::mem::size_of_val(&task)
        );
    }
}
