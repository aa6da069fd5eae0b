//! The latest reading of each target and its failure counts, where the
//! scraping tasks write and everyone else reads.
//!
//! A task replaces a target's reading whole (`ArcSwapOption::store`), so a
//! reader never waits: a read is an atomic load and a comparison of
//! instants, short enough for the request path. A reading older than
//! [`STALE_AFTER_INTERVALS`] intervals is not served, whether or not its
//! task has removed it yet. Failures are atomics that only grow.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use slo::ledger::{GpuSample, Reader};
use telemetry::{EngineReading, GpuAggregate};
use tokio::sync::watch;
use tokio::time::Instant;

use super::target::{Page, Reason, STALE_AFTER_INTERVALS};

/// What one scrape read.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// The server and its figures per model.
    Engine(EngineReading),
    /// The target's selected GPUs, aggregated.
    Gpu(GpuAggregate),
}

/// A target's latest reading, with when it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    /// When the scrape that read it ended.
    pub at: Instant,
    pub reading: Reading,
}

/// A fresh reading of one target, as [`Readings::snapshot`] lists it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub route: Arc<str>,
    pub page: Page,
    pub latest: Arc<Latest>,
}

/// The failures of one target for one reason, since the scraper started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureCount {
    pub route: Arc<str>,
    pub page: Page,
    pub reason: Reason,
    pub count: u64,
}

/// One target's state in the store: its latest reading, failure counts,
/// GPU-seconds and scrapes ended.
pub(super) struct TargetState {
    pub(super) route: Arc<str>,
    /// The other routes its readings are shown under.
    also: Box<[Arc<str>]>,
    pub(super) page: Page,
    /// The reading is served for this long after it was read.
    fresh_for: Duration,
    latest: ArcSwapOption<Latest>,
    /// Indexed by [`Reason::index`].
    failures: [AtomicU64; Reason::ALL.len()],
    /// The ledger each reading is told to, when the route has GPUs.
    ledger: Option<Arc<dyn Reader>>,
    /// Scrapes ended, successful or not: what the tests await instead of
    /// sleeping.
    attempts: watch::Sender<u64>,
}

impl TargetState {
    pub(super) fn new(route: &str, page: Page, interval: Duration) -> Self {
        Self {
            route: Arc::from(route),
            also: Box::default(),
            page,
            fresh_for: interval.saturating_mul(STALE_AFTER_INTERVALS),
            latest: ArcSwapOption::empty(),
            failures: Default::default(),
            ledger: None,
            attempts: watch::Sender::new(0),
        }
    }

    /// The latest reading, if it is fresh at `now`.
    pub(super) fn fresh(&self, now: Instant) -> Option<Arc<Latest>> {
        self.latest
            .load_full()
            .filter(|latest| now.saturating_duration_since(latest.at) <= self.fresh_for)
    }

    /// The same place, whose readings `ledger` is told.
    pub(super) fn feeding(self, ledger: Option<Arc<dyn Reader>>) -> Self {
        Self { ledger, ..self }
    }

    /// The same place, whose readings are shown under the routes `also`
    /// too.
    pub(super) fn shown_also(self, also: &[String]) -> Self {
        let also = also.iter().map(|r| Arc::from(r.as_str())).collect();
        Self { also, ..self }
    }

    /// The routes its readings are shown under: its own first.
    fn routes(&self) -> impl Iterator<Item = &Arc<str>> {
        std::iter::once(&self.route).chain(self.also.iter())
    }

    /// Replaces the reading, and tells the route's ledger, which counts the
    /// GPUs and each one's energy, or the engine's load, from the reading's time
    /// for as long as it is fresh.
    pub(super) fn store(&self, latest: Latest) {
        if let Some(ledger) = &self.ledger {
            let at = latest.at;
            match &latest.reading {
                Reading::Gpu(gpus) => {
                    let samples: Vec<GpuSample> = gpus
                        .energy
                        .iter()
                        .map(|gpu| GpuSample {
                            id: gpu.id.as_str().into(),
                            energy_millijoules: gpu.energy_millijoules,
                            power_watts: gpu.power_watts,
                        })
                        .collect();
                    ledger.read_gpus(at, &samples, self.fresh_for);
                }
                Reading::Engine(engine) => {
                    ledger.read_engine(at, engine_requests(engine), self.fresh_for);
                }
            }
        }
        self.latest.store(Some(Arc::new(latest)));
    }

    /// Counts a failure, and removes the reading once it is stale so that
    /// its memory goes too.
    pub(super) fn fail(&self, reason: Reason, now: Instant) {
        self.failures[reason.index()].fetch_add(1, Ordering::Relaxed);
        if self.latest.load().is_some() && self.fresh(now).is_none() {
            self.latest.store(None);
        }
    }

    pub(super) fn attempted(&self) {
        self.attempts.send_modify(|n| *n += 1);
    }

    /// The latest reading, fresh or not.
    #[cfg(test)]
    pub(super) fn held(&self) -> Option<Arc<Latest>> {
        self.latest.load_full()
    }

    #[cfg(test)]
    pub(super) fn attempts(&self) -> watch::Receiver<u64> {
        self.attempts.subscribe()
    }
}

/// The read side of a scraper: cheap to clone, never waits.
#[derive(Clone)]
pub struct Readings {
    pub(super) slots: Arc<[TargetState]>,
    /// Tells this scraper's counts from another's: each scraper's start
    /// from 0.
    pub(super) id: u64,
}

impl Readings {
    /// Readings of `slots`, under an id no other scraper of the process
    /// has.
    pub(super) fn new(slots: Arc<[TargetState]>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            slots,
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Which scraper these are the readings of: its failure counts and
    /// GPU-seconds start from 0, so a reader that sums them across
    /// scrapers adds a new scraper's counts whole.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The requests running and waiting on `route`'s engine at its latest
    /// fresh scrape, for `model`: the figures of the model the page names
    /// so, else those of a page that names no model (a server of one
    /// model). `None` when the route's engine is not scraped, its reading
    /// is stale, the model is not on the page, or either figure is
    /// unknown.
    pub fn engine_load(&self, route: &str, model: &str) -> Option<f64> {
        self.engine_load_at(route, model, Instant::now())
    }

    pub(super) fn engine_load_at(&self, route: &str, model: &str, now: Instant) -> Option<f64> {
        let latest = self.slot(route, Page::Engine)?.fresh(now)?;
        let Reading::Engine(engine) = &latest.reading else {
            return None;
        };
        let figures = &engine.of_model(model)?.figures;
        Some(figures.running? + figures.waiting?)
    }

    /// The latest fresh reading of `route`'s target of `page`.
    pub fn latest(&self, route: &str, page: Page) -> Option<Arc<Latest>> {
        self.slot(route, page)?.fresh(Instant::now())
    }

    /// Every target's latest fresh reading, in the order the targets were
    /// given, once under each route it is shown under; a target without
    /// one is left out (its figures have no sample).
    pub fn snapshot(&self) -> Vec<Snapshot> {
        self.snapshot_at(Instant::now())
    }

    /// [`snapshot`](Self::snapshot) at `now`.
    pub fn snapshot_at(&self, now: Instant) -> Vec<Snapshot> {
        self.slots
            .iter()
            .filter_map(|slot| Some((slot, slot.fresh(now)?)))
            .flat_map(|(slot, latest)| {
                slot.routes().map(move |route| Snapshot {
                    route: route.clone(),
                    page: slot.page,
                    latest: latest.clone(),
                })
            })
            .collect()
    }

    /// Every target's failure count for every reason, zeros included, in
    /// the order the targets were given, each route it is shown under and
    /// then of [`Reason::ALL`].
    pub fn failures(&self) -> Vec<FailureCount> {
        self.slots
            .iter()
            .flat_map(|slot| slot.routes().map(move |route| (slot, route)))
            .flat_map(|(slot, route)| {
                Reason::ALL.into_iter().map(|reason| FailureCount {
                    route: route.clone(),
                    page: slot.page,
                    reason,
                    count: slot.failures[reason.index()].load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    /// The targets are few (one or two per route): a scan is shorter than
    /// hashing the route.
    fn slot(&self, route: &str, page: Page) -> Option<&TargetState> {
        self.slots
            .iter()
            .find(|slot| slot.page == page && slot.routes().any(|r| &**r == route))
    }
}

#[cfg(test)]
impl Readings {
    /// Readings of targets (route, page, interval) that no task scrapes,
    /// for the tests of their readers.
    pub(crate) fn by_hand(targets: &[(&str, Page, Duration)]) -> Self {
        Self::new(
            targets
                .iter()
                .map(|(route, page, interval)| TargetState::new(route, *page, *interval))
                .collect(),
        )
    }

    /// Stores a reading of the `index`th target, as its task would.
    pub(crate) fn store_by_hand(&self, index: usize, latest: Latest) {
        self.slots[index].store(latest);
    }

    /// Counts a failure of the `index`th target at `now`, as its task
    /// would.
    pub(crate) fn fail_by_hand(&self, index: usize, reason: Reason, now: Instant) {
        self.slots[index].fail(reason, now);
    }
}

/// The engine's requests as the ledger divides by them: running plus
/// waiting, summed over its models; the running ones alone where the page
/// gives no waiting count; `None` where it gives neither.
fn engine_requests(engine: &EngineReading) -> Option<f64> {
    let sum = |get: fn(&telemetry::EngineFigures) -> Option<f64>| {
        engine
            .models
            .iter()
            .filter_map(|m| get(&m.figures))
            .fold(None, |sum: Option<f64>, n| Some(sum.unwrap_or(0.0) + n))
    };
    let (running, waiting) = (sum(|f| f.running), sum(|f| f.waiting));
    match (running, waiting) {
        (None, None) => None,
        (r, w) => Some(r.unwrap_or(0.0) + w.unwrap_or(0.0)),
    }
}
