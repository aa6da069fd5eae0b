//! The scrapes a configuration asks for: each route's `engine_metrics` and
//! `gpu_metrics` as the scraper's targets, started at start-up and on a
//! reload that changes them.
//!
//! A reload that leaves every target as it was keeps the running scraper,
//! so its readings and its failure counts go on; one that
//! changes any target starts a new scraper for all of them (the exporter's
//! counters add the new scraper's counts on top of the old one's), and the
//! old one stops when the last proxy holding it is dropped.

use std::sync::Arc;
use std::time::Duration;

use telemetry::{GpuLabel, GpuSelector};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, GpuSelect, MetricsEndpoint, Route, TlsRoots};
use crate::observe::metrics::Metrics;
use crate::scrape::{Kind, Scraper, Target};

/// Why the scrapes of a configuration cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("the TLS client of route {route}'s scrapes cannot be made")]
    Tls {
        route: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the scrapes cannot start")]
    Start(#[source] crate::scrape::Error),
}

/// What decides a route's targets: equal plans scrape the same pages the
/// same way.
#[derive(Debug, Clone, PartialEq)]
struct RoutePlan {
    route: String,
    engine: Option<MetricsEndpoint>,
    gpu: Option<MetricsEndpoint>,
    select: GpuSelect,
    interval: Duration,
    timeout: Duration,
    max_body: usize,
    tls_roots: Option<TlsRoots>,
    /// The route has GPUs, whose ledger its readings feed.
    charged: bool,
}

/// Every route's plan, of the routes that name an endpoint.
fn plan(config: &Config) -> Vec<RoutePlan> {
    config
        .routes
        .iter()
        .filter(|r| r.engine_metrics.is_some() || r.gpu_metrics.is_some())
        .map(|r| RoutePlan {
            route: r.name.clone(),
            engine: r.engine_metrics.clone(),
            gpu: r.gpu_metrics.clone(),
            select: r.gpu_select.clone(),
            interval: r.scrape_interval.unwrap_or(config.scrape.interval),
            timeout: config.scrape.timeout,
            max_body: config.scrape.max_body,
            tls_roots: r.tls_roots.clone(),
            charged: has_gpus(r),
        })
        .collect()
}

/// Whether `new` scrapes exactly what `old` does, the same way.
pub(super) fn unchanged(old: &Config, new: &Config) -> bool {
    plan(old) == plan(new)
}

/// Whether `route` has GPUs, whose time is divided among its requests.
fn has_gpus(route: &Route) -> bool {
    route.gpus.is_some() || route.gpu_metrics.is_some()
}

/// The scraper of `config`'s targets, started under `shutdown`, each
/// reading of a route with GPUs told to its ledger in `metrics`; `None`
/// when no route names an endpoint.
pub(super) fn start(
    config: &Config,
    shutdown: &CancellationToken,
    metrics: &Metrics,
) -> Result<Option<Arc<Scraper>>, ScrapeError> {
    let targets = targets(config, metrics)?;
    if targets.is_empty() {
        return Ok(None);
    }
    let scraper = Scraper::start(targets, shutdown).map_err(ScrapeError::Start)?;
    Ok(Some(Arc::new(scraper)))
}

/// The targets of `config`, routes in order, each route's engine before
/// its GPUs.
fn targets(config: &Config, metrics: &Metrics) -> Result<Vec<Target>, ScrapeError> {
    let mut targets = Vec::new();
    for route in &config.routes {
        let interval = route.scrape_interval.unwrap_or(config.scrape.interval);
        let ledger = has_gpus(route).then(|| metrics.ledger_reader(&route.name));
        let target = |kind: Kind, endpoint: &MetricsEndpoint| -> Result<Target, ScrapeError> {
            Ok(Target {
                route: route.name.clone(),
                kind,
                url: endpoint.url.clone(),
                shown_url: endpoint.shown.clone(),
                interval,
                timeout: config.scrape.timeout,
                max_body: config.scrape.max_body,
                tls: tls(route, endpoint)?,
                ledger: ledger.clone(),
            })
        };
        if let Some(endpoint) = &route.engine_metrics {
            targets.push(target(Kind::Engine, endpoint)?);
        }
        if let Some(endpoint) = &route.gpu_metrics {
            targets.push(target(Kind::Gpu(selector(&route.gpu_select)), endpoint)?);
        }
    }
    Ok(targets)
}

/// The TLS client of an `https` endpoint: the route's own, trusting its
/// `tls.ca_file` roots (else the web PKI's), as its upstream's is.
fn tls(
    route: &Route,
    endpoint: &MetricsEndpoint,
) -> Result<Option<Arc<rustls::ClientConfig>>, ScrapeError> {
    if endpoint.url.scheme_str() != Some("https") {
        return Ok(None);
    }
    crate::proxy::upstream::tls_config(route)
        .map(Some)
        .map_err(|source| ScrapeError::Tls {
            route: route.name.clone(),
            source,
        })
}

/// The selector of `select`: a list left empty selects by nothing.
fn selector(select: &GpuSelect) -> GpuSelector {
    let mut selector = GpuSelector::all();
    for (label, values) in [
        (GpuLabel::Gpu, &select.gpu),
        (GpuLabel::Uuid, &select.uuid),
        (GpuLabel::Hostname, &select.hostname),
    ] {
        if !values.is_empty() {
            selector = selector.with(label, values.iter().cloned());
        }
    }
    selector
}
