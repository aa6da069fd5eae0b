//! The scrapes a configuration asks for: each route's `engine_metrics` and
//! `gpu_metrics` as the scraper's targets, started at start-up and on a
//! reload that changes them.
//!
//! A reload that leaves every target as it was keeps the running scraper,
//! so its readings, its failure counts and its GPU-seconds go on; one that
//! changes any target starts a new scraper for all of them (the exporter's
//! counters add the new scraper's counts on top of the old one's), and the
//! old one stops when the last proxy holding it is dropped.

use std::sync::Arc;

use telemetry::{GpuLabel, GpuSelector};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, GpuSelect, MetricsEndpoint};
use crate::scrape::{Kind, Scraper, Target};

/// Whether `new` scrapes exactly what `old` does, the same way: the same
/// targets.
pub(super) fn unchanged(old: &Config, new: &Config) -> bool {
    targets(old) == targets(new)
}

/// The scraper of `config`'s targets, started under `shutdown`; `None`
/// when no route names an endpoint.
pub(super) fn start(
    config: &Config,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<Scraper>>, crate::scrape::Error> {
    let targets = targets(config);
    if targets.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(Scraper::start(targets, shutdown)?)))
}

/// The targets of `config`, routes in order, each route's engine before
/// its GPUs; an `https` one trusts its route's `tls.ca_file` roots (else
/// the web PKI's), as its upstream does.
fn targets(config: &Config) -> Vec<Target> {
    let mut targets = Vec::new();
    for route in &config.routes {
        let interval = route.scrape_interval.unwrap_or(config.scrape.interval);
        let target = |kind: Kind, endpoint: &MetricsEndpoint| Target {
            route: route.name.clone(),
            kind,
            url: endpoint.url.clone(),
            shown_url: endpoint.shown.clone(),
            interval,
            timeout: config.scrape.timeout,
            max_body: config.scrape.max_body,
            tls_roots: route.tls_roots.as_ref().map(|r| r.certificates.clone()),
        };
        if let Some(endpoint) = &route.engine_metrics {
            targets.push(target(Kind::Engine, endpoint));
        }
        if let Some(endpoint) = &route.gpu_metrics {
            targets.push(target(Kind::Gpu(selector(&route.gpu_select)), endpoint));
        }
    }
    targets
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
