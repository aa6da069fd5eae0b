//! The scrapes a configuration asks for: each route's `engine_metrics` and
//! each GPU set's `gpu_metrics` as the scraper's targets, started at
//! start-up and on a reload that changes them.
//!
//! A reload that leaves every target as it was keeps the running scraper,
//! so its readings, its failure counts and its GPU-seconds go on; one that
//! changes any target starts a new scraper for all of them (the exporter's
//! counters add the new scraper's counts on top of the old one's), and the
//! old one stops when the last proxy holding it is dropped.

use std::sync::Arc;

use telemetry::{GpuLabel, GpuSelector};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, GpuSelect, MetricsEndpoint, gpu_sets};
use crate::in_force::InForce;
use crate::observe::metrics::ChargePlan;
use crate::scrape::{Kind, LedgerLink, Scraper, Target};

/// The scraper of `config` whose readings feed `charges`' ledgers: the
/// running one of `previous` when it scrapes exactly those targets, the
/// same way, feeding the same ledgers; else a new one, started under
/// `shutdown`.
pub(super) fn scraper(
    config: &Config,
    charges: &ChargePlan,
    previous: Option<&InForce>,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<Scraper>>, crate::scrape::Error> {
    if let Some(previous) = previous
        && targets(previous.config(), previous.charges()) == targets(config, charges)
    {
        return Ok(previous.scraper().cloned());
    }
    start(config, charges, shutdown)
}

/// The scraper of `config`'s targets, started under `shutdown`, each
/// reading of a route with GPUs told to its ledger in `charges`; `None`
/// when no route names an endpoint.
fn start(
    config: &Config,
    charges: &ChargePlan,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<Scraper>>, crate::scrape::Error> {
    let targets = targets(config, charges);
    if targets.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(Scraper::start(targets, shutdown)?)))
}

/// The targets of `config`, routes in order, each route's engine before
/// its GPUs; an `https` one trusts its route's `tls.ca_file` roots (else
/// the web PKI's), as its upstream does; those of a route with GPUs feed
/// its GPU set's ledger. The GPU page of the routes of a set that scrape it
/// the same way (interval and roots) is one target, the first one's, shown
/// under each of them: one reading of the page is one reading of the
/// ledger.
fn targets(config: &Config, charges: &ChargePlan) -> Vec<Target> {
    // The routes each route's GPU page is shown under too, or `None`
    // where an earlier route of its set scrapes it the same way.
    let mut also: Vec<Option<Vec<String>>> = vec![Some(Vec::new()); config.routes.len()];
    let how = |i: usize| {
        let route = &config.routes[i];
        let roots = route.tls_roots.as_ref().map(|r| &r.certificates);
        (route.scrape_interval, roots)
    };
    for set in gpu_sets(&config.routes) {
        for (at, &i) in set.routes.iter().enumerate() {
            let Some(&first) = set.routes[..at].iter().find(|&&f| how(f) == how(i)) else {
                continue;
            };
            also[i] = None;
            if let Some(shown) = &mut also[first] {
                shown.push(config.routes[i].name.clone());
            }
        }
    }
    let mut targets = Vec::new();
    for (route, also) in config.routes.iter().zip(also) {
        let interval = route.scrape_interval.unwrap_or(config.scrape.interval);
        let ledger = charges.reader(&route.name).map(LedgerLink);
        let target = |kind: Kind, endpoint: &MetricsEndpoint, also: Vec<String>| Target {
            route: route.name.clone(),
            also,
            kind,
            url: endpoint.url.clone(),
            shown_url: endpoint.shown.clone(),
            interval,
            timeout: config.scrape.timeout,
            max_body: config.scrape.max_body,
            tls_roots: route.tls_roots.as_ref().map(|r| r.certificates.clone()),
            ledger: ledger.clone(),
        };
        if let Some(endpoint) = &route.engine_metrics {
            targets.push(target(Kind::Engine, endpoint, Vec::new()));
        }
        if let (Some(endpoint), Some(also)) = (&route.gpu_metrics, also) {
            let kind = Kind::Gpu(selector(&route.gpu_select));
            targets.push(target(kind, endpoint, also));
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
