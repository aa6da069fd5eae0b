//! What is in force: one configuration and everything built from it, as
//! one value that `app` makes at start-up and swaps whole on a reload.
//!
//! [`InForce`] holds the configuration (the process's only copy of it in
//! force), the forwarding service built from it, the scrapes of its
//! routes' engines and GPUs, and what it says of their GPUs and prices
//! with their ledgers (its charge plan, which its requests open their
//! tabs in and its scrapes feed, applied to the ledgers it carries over
//! as the last step of its build). Whoever needs
//! any of them reads the snapshot in force: the proxy listener (a request
//! takes its forwarding service, a connection its TLS), the admin listener
//! (its TLS and credentials, `/config`, the exposition and `/slo`, which
//! read the engines and GPUs through [`InForce::engines`], the one way to
//! them). Nothing built from a configuration reaches back up to the
//! snapshot that holds it: the snapshot is handed down.
//!
//! A request holds the forwarding service it started with ([`Proxy`], an
//! `Arc`), never the snapshot, so a reload that replaces the scrapes stops
//! the old ones at once, while the request ends under its own
//! configuration's routes, classes and limits.

use std::sync::Arc;

use crate::config::Config;
use crate::observe::Observers;
use crate::observe::metrics::{ChargePlan, EngineSources};
use crate::proxy::{Plan, Proxy};
use crate::scrape::{Readings, Scraper};

/// Why a configuration could not be put in force (it was valid).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("starting the scrapes: {0}")]
    Scrape(#[source] crate::scrape::Error),
    #[error("TLS: {0}")]
    Tls(#[source] rustls::Error),
}

/// One configuration in force and what was built from it.
pub struct InForce {
    /// The configuration: `/config`, the listeners' TLS and limits, the
    /// admin credentials, and the base a reload is compared against.
    config: Arc<Config>,
    /// The forwarding service of `config`.
    proxy: Arc<Proxy>,
    /// The scrapes of `config`'s engines and GPUs, when a route names one;
    /// shared with the next snapshot when a reload leaves them as they
    /// were, and stopped when the last snapshot holding them is dropped.
    scraper: Option<Arc<Scraper>>,
    /// What `config` says of its routes' GPUs and prices.
    charges: ChargePlan,
}

impl InForce {
    /// The snapshot of `config`, replacing `previous` (none at start):
    /// its charge plan, carrying over `previous`'s ledgers of the routes
    /// that keep their GPUs; its scrapes, which `scrapes` starts (or
    /// takes over from `previous`) feeding that plan's ledgers; and the
    /// forwarding service that `build` makes of the configuration's plan
    /// (a new one, or one reloaded from the previous), reporting to
    /// `observers` configured for `config` and reading its scrapes. The
    /// charge plan is applied to the ledgers it carries over last, once
    /// nothing can fail: a build that fails changes no ledger.
    pub fn build(
        config: Arc<Config>,
        observers: &Observers,
        previous: Option<&InForce>,
        scrapes: impl FnOnce(&ChargePlan) -> Result<Option<Arc<Scraper>>, crate::scrape::Error>,
        build: impl FnOnce(Plan<'_>, Observers) -> Result<Proxy, rustls::Error>,
    ) -> Result<Self, BuildError> {
        let now = tokio::time::Instant::now();
        let before = previous.map(|p| &p.charges);
        let charges = ChargePlan::new(&config, before, now);
        let scraper = scrapes(&charges).map_err(BuildError::Scrape)?;
        let readings = scraper.as_deref().map(Scraper::readings);
        let sessions = observers.metrics().sessions().clone();
        let observers = observers.configured(&config, readings, charges.clone());
        let plan = Plan {
            routes: &config.routes,
            settings: &config.proxy,
            max_usage_tokens: config.metrics.max_usage_tokens,
        };
        let proxy = Arc::new(build(plan, observers).map_err(BuildError::Tls)?);
        charges.apply(before, now);
        sessions.configure(&config.sessions);
        Ok(Self {
            config,
            proxy,
            scraper,
            charges,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// The forwarding service: a request holds a clone of it to its end.
    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    /// The running scrapes, for a reload that keeps them.
    pub fn scraper(&self) -> Option<&Arc<Scraper>> {
        self.scraper.as_ref()
    }

    /// The latest readings of the engines and GPUs in force, when any
    /// route names one.
    pub fn readings(&self) -> Option<&Readings> {
        self.scraper.as_deref().map(Scraper::readings)
    }

    /// The engines and GPUs in force: the readings of its scrapes and the
    /// GPUs its routes count.
    pub fn engines(&self) -> EngineSources<'_> {
        EngineSources {
            readings: self.readings(),
            fixed: self.charges.fixed_gpus(),
            charges: Some(&self.charges),
        }
    }

    /// What the configuration says of its routes' GPUs and prices, with
    /// their ledgers.
    pub fn charges(&self) -> &ChargePlan {
        &self.charges
    }
}
