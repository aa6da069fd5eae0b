//! Scraping each route's inference server and GPUs: their own Prometheus
//! pages, fetched on an interval by a task per target, read with
//! `telemetry`, and kept as each target's latest reading for the exporter
//! and the request path to read.
//!
//! The scraper is off the forwarding path: no request ever waits on a
//! scrape, and a read of the latest reading is an atomic load
//! ([`Readings`]). An endpoint that is down, refuses, hangs, answers an
//! error, garbage, a body over its bound or a page of names it does not
//! know changes nothing but its own figures: each failure is counted by
//! route, page and [`Reason`], logged once per episode (a warning when
//! the target starts failing, an information when it recovers), and its
//! last reading is served for [`STALE_AFTER_INTERVALS`] intervals, then
//! removed rather than frozen.
//!
//! Its input is its own [`Target`], so that it knows nothing of the
//! configuration's shape, and it registers no metric family: the exporter
//! reads [`Readings::snapshot`] and [`Readings::failures`].
//!
//! The parts, lowest first: what is scraped and how it fails
//! (`target.rs`), one GET bounded in bytes (`fetch.rs`), the store of
//! readings and failure counts (`store.rs`), and the task of one target
//! (`task.rs`).

mod fetch;
mod store;
mod target;
mod task;

use std::collections::HashSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use store::{FailureCount, Latest, Reading, Readings, Snapshot};
pub use target::{
    DEFAULT_MAX_BODY, Error, Failure, Kind, LedgerLink, Page, Reason, STALE_AFTER_INTERVALS, Target,
};

use fetch::Endpoint;
use store::TargetState;
use task::Job;

/// The running scrapes of a set of targets. Dropping it stops them, as
/// does the cancellation token it was started under; its [`Readings`]
/// outlive it, and go stale.
pub struct Scraper {
    readings: Readings,
    /// Fires on drop: the tasks watch it.
    stop: CancellationToken,
}

impl Scraper {
    /// Checks every target, then spawns the task of each on the current
    /// tokio runtime; they stop when `shutdown` fires or the scraper is
    /// dropped. A reading is served for its target once its first scrape
    /// succeeds.
    pub fn start(targets: Vec<Target>, shutdown: &CancellationToken) -> Result<Self, Error> {
        let mut seen = HashSet::new();
        let mut jobs = Vec::with_capacity(targets.len());
        for target in targets {
            let page = target.kind.page();
            for route in std::iter::once(&target.route).chain(&target.also) {
                if !seen.insert((route.clone(), page)) {
                    return Err(Error::Duplicate {
                        route: route.clone(),
                        page: page.as_str(),
                    });
                }
            }
            if target.timeout.is_zero() || target.timeout >= target.interval {
                return Err(Error::Timing {
                    route: target.route,
                    page: page.as_str(),
                });
            }
            let endpoint = Endpoint::new(&target)?;
            jobs.push((target, endpoint));
        }
        let slots: Arc<[TargetState]> = jobs
            .iter()
            .map(|(target, _)| {
                TargetState::new(&target.route, target.kind.page(), target.interval)
                    .feeding(target.ledger.as_ref().map(|l| l.0.clone()))
                    .shown_also(&target.also)
            })
            .collect();
        let stop = shutdown.child_token();
        for (slot, (target, endpoint)) in jobs.into_iter().enumerate() {
            let job = Job {
                target,
                endpoint,
                slots: slots.clone(),
                slot,
            };
            tokio::spawn(job.run(stop.clone()));
        }
        Ok(Self {
            readings: Readings::new(slots),
            stop,
        })
    }

    /// The read side: cheap to clone, never waits.
    pub fn readings(&self) -> &Readings {
        &self.readings
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests;
