//! Wiring: sockets, signals and graceful shutdown.
//!
//! [`start`] binds the proxy and admin listeners (port 0 is fine: tests use
//! it) and returns a [`Running`] handle with the bound addresses; the
//! listeners' limits and accept loops are `listener.rs`'s, and the task of
//! each proxy connection `connection.rs`'s. Shutdown
//! stops accepting, marks the instance not ready, lets in-flight requests
//! finish for up to the configured grace period, then stops the admin
//! listener last so the final state can still be scraped while draining.
//!
//! What is in force ([`InForce`]: the configuration, the forwarding
//! service built from it and its scrapes) lives in an [`ArcSwap`] that
//! each request reads once; [`Running::reload`], SIGHUP and the file
//! watcher replace it whole (`reload.rs`). The commands register their
//! signal handlers before they bind anything (`signals.rs`), so a signal
//! is never met by its default action.
//!
//! Nothing here holds logic worth testing on its own; the integration tests
//! drive it through real sockets.

pub mod cli;
mod connection;
mod demo;
mod listener;
mod reload;
mod scrapes;
mod signals;
mod woken;

pub use reload::{ConfigSource, DEBOUNCE, ReloadError, Reloaded};
pub use signals::{Received, SignalError, Signals};

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, AdminState};
use crate::config::Config;
use crate::in_force::{BuildError, InForce};
use crate::observe::Observers;
use crate::observe::access::AccessLog;
use crate::observe::metrics::Metrics;
use crate::observe::otlp::Otlp;
use crate::proxy::Proxy;
use listener::{Connections, serve_admin, serve_proxy};

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
    #[error("starting the engine and GPU scrapes")]
    Scrape(#[source] crate::scrape::Error),
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
    // The scrapes run until shutdown begins, or until a reload replaces
    // them.
    let shutdown = CancellationToken::new();
    let observers = Observers::new(metrics.clone(), access, otlp.clone());
    let connections = Connections::new(&config, &observers);
    let config = Arc::new(config);
    let first = InForce::build(
        config.clone(),
        &observers,
        None,
        |charges| scrapes::scraper(&config, charges, None, &shutdown),
        |plan, observers| Proxy::new(plan, observers, connections.overload.clone()),
    )
    .map_err(|e| match e {
        BuildError::Scrape(e) => StartError::Scrape(e),
        BuildError::Tls(e) => StartError::Tls(e),
    })?;
    let in_force = Arc::new(ArcSwap::from_pointee(first));

    let proxy_listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartError::Bind {
                listener: "proxy",
                addr: config.listen,
                source,
            })?;
    let admin_listener = TcpListener::bind(config.admin.listen)
        .await
        .map_err(|source| StartError::Bind {
            listener: "admin",
            addr: config.admin.listen,
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
    let admin_addr = bound("admin", config.admin.listen, &admin_listener)?;

    let admin_state = Arc::new(AdminState {
        metrics: metrics.clone(),
        in_force: in_force.clone(),
        ready: true.into(),
    });
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(serve_admin(
        admin_listener,
        admin::router(admin_state.clone()),
        connections.admin,
        in_force.clone(),
        admin_stop.clone(),
    ));
    tracing::info!(%proxy_addr, %admin_addr, routes = config.routes.len(), "tokenmeter started");
    if let Some(warning) = config.admin_exposure() {
        tracing::warn!("{warning}");
    }
    for r in &config.routes {
        tracing::info!(route = %r.name, prefix = %r.matcher.path_prefix, upstream = %r.upstream.url(), "route");
    }
    spawn_session_sweeper(in_force.clone(), metrics.clone(), shutdown.clone());
    let watch = source.as_ref().is_some_and(|s| s.watch);
    let sources = config.sources.clone();
    let reloader = Arc::new(reload::Reloader::new(
        source,
        in_force.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    // Started before `start` returns, so no change after it is missed.
    let watcher =
        watch.then(|| reload::spawn_watcher(reloader.clone(), &sources, shutdown.clone()));
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            serve_proxy(
                proxy_listener,
                in_force,
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

/// How often the sessions idle past their timeout are ended: the
/// `llm_sessions_active` gauge and the session lines follow within it.
/// The chargeback's windows are sampled on the same tick.
const SESSION_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// Ends, every [`SESSION_SWEEP`] until shutdown, the sessions idle past
/// their timeout, observed by the observers of the configuration in force,
/// and samples the chargeback's windows (`Metrics::tick_chargeback`).
fn spawn_session_sweeper(
    in_force: Arc<ArcSwap<InForce>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SESSION_SWEEP);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let now = tokio::time::Instant::now();
            let snapshot = in_force.load();
            let observers = snapshot.proxy().observers().clone();
            observers.sweep_sessions(now);
            metrics.tick_chargeback(snapshot.engines(), now);
        }
    });
}

/// Serves until SIGINT or SIGTERM, reloading the config on each SIGHUP.
pub async fn run_until_shutdown(running: &Running, mut signals: Signals) {
    while signals.recv().await == Received::Reload {
        // The outcome is logged and counted by the reload itself.
        let _ = running.reloader.reload("sighup", false).await;
    }
}
