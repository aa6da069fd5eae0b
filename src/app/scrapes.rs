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

use crate::config::{Config, GpuSelect, GpuSet, MetricsEndpoint, Route, gpu_sets};
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
/// its GPU set's ledger. A page that the routes of a set scrape the same
/// way (the set's GPU page, an engine page they share; on one interval,
/// trusting the same roots) is one target, the first route's, shown under
/// each of them: one reading of the page is one reading for the ledger.
fn targets(config: &Config, charges: &ChargePlan) -> Vec<Target> {
    let sets = gpu_sets(&config.routes);
    let engines = shared(config, &sets, |r| r.engine_metrics.as_ref());
    let gpus = shared(config, &sets, |r| r.gpu_metrics.as_ref());
    let mut targets = Vec::new();
    for ((route, engine), gpu) in config.routes.iter().zip(engines).zip(gpus) {
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
        if let (Some(endpoint), Some(also)) = (&route.engine_metrics, engine) {
            targets.push(target(Kind::Engine, endpoint, also));
        }
        if let (Some(endpoint), Some(also)) = (&route.gpu_metrics, gpu) {
            let kind = Kind::Gpu(selector(&route.gpu_select));
            targets.push(target(kind, endpoint, also));
        }
    }
    targets
}

/// For each route of `config`, the routes its page (`page`) is shown
/// under too, or `None` where an earlier route of its GPU set scrapes the
/// same page the same way (on one interval, trusting the same roots).
fn shared(
    config: &Config,
    sets: &[GpuSet],
    page: impl Fn(&Route) -> Option<&MetricsEndpoint>,
) -> Vec<Option<Vec<String>>> {
    let mut also: Vec<Option<Vec<String>>> = vec![Some(Vec::new()); config.routes.len()];
    let how = |i: usize| {
        let route = &config.routes[i];
        let roots = route.tls_roots.as_ref().map(|r| &r.certificates);
        let url = page(route).map(|p| &p.url);
        (url, route.scrape_interval, roots)
    };
    for set in sets {
        for (at, &i) in set.routes.iter().enumerate() {
            let first = set.routes[..at].iter().find(|&&f| how(f) == how(i));
            let (Some(&first), Some(_)) = (first, page(&config.routes[i])) else {
                continue;
            };
            also[i] = None;
            if let Some(shown) = &mut also[first] {
                shown.push(config.routes[i].name.clone());
            }
        }
    }
    also
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
