//! Live SLO windows: what `/slo` shows a person who was just paged.
//!
//! Per (route, `slo` label) a [`LiveSeries`] keeps three rings of time slots:
//! 60 × 1 s (the 1m window), 60 × 5 s (5m) and 60 × 60 s (1h). A slot holds
//! an [`Aggregate`]: counts (requests, outcomes, tokens, verdicts,
//! violations per objective) and one [`Sketch`] per latency (TTFT, TPOT,
//! ITL, E2EL). A finished request is folded into the current slot of each
//! ring; a window is the merge of its ring's slots that are younger than 60
//! slots, so it slides by one slot width and old slots are overwritten, not
//! swept.
//!
//! A request is recorded once, when it finishes, under its series' one lock.
//! Its ITL gaps were gathered in a sketch of its own while it streamed (see
//! `observe::RequestObserver` of the root crate), so the per-token path touches no shared
//! state; the price is that a long stream's gaps land in the slot of its
//! end, not of each gap. Requests are placed by their finish time.
//!
//! This module does no I/O and reads no clock: the caller passes `now`
//! (tests use tokio's paused clock).
//!
//! The ring of slots is `ring.rs`, the error budget `budget.rs`, and what
//! `/slo` and `/slo/history` show of a series `report.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use self::budget::Budget;
use self::report::{objectives, status, window_report};
use crate::aggregate::Aggregate;
use crate::class::SloClass;
use crate::found::Found;
use crate::history::{History, POINT};

mod budget;
mod report;
mod ring;
pub mod sessions;
#[cfg(test)]
mod tests;

pub use report::{
    BudgetReport, Compliance, GoodputReport, HistoryReport, ObjectiveInfo, ObjectiveStatus, Report,
    SeriesReport, WindowReport,
};
pub(crate) use ring::{Merge, Ring, covered, slot_index};
pub use ring::{WINDOWS, Window};

/// The windows of one (route, `slo`) pair, or of one tenant's requests
/// of it.
#[derive(Debug)]
pub struct LiveSeries {
    route: String,
    slo: String,
    /// Empty for the series of all the pair's requests.
    tenant: String,
    origin: Instant,
    state: Mutex<SeriesState>,
}

#[derive(Debug, Default)]
struct SeriesState {
    rings: [Ring; 3],
    budget: Budget,
    history: History,
    /// The latest time a request was placed at: one that reaches the lock
    /// after a later one (their clocks were read on two threads) is placed
    /// at that later time, so the history never sees its open point go
    /// back. A difference of microseconds.
    latest: Option<Instant>,
}

impl SeriesState {
    fn placed(&mut self, now: Instant) -> Instant {
        let now = self.latest.map_or(now, |latest| latest.max(now));
        self.latest = Some(now);
        now
    }
}

/// Slots of the 1m window in one history point.
const SLOTS_PER_POINT: u64 = POINT.as_secs() / WINDOWS[0].slot.as_secs();

/// The requests that finished in history point `point`: those of its
/// seconds in the 1m window's ring.
fn point_requests(one_second: &Ring, point: u64) -> Aggregate {
    let mut a = Aggregate::default();
    let (from, to) = (point * SLOTS_PER_POINT, (point + 1) * SLOTS_PER_POINT);
    one_second.visit_between(from, to, &mut |slot| a.merge(slot));
    a
}

fn point_index(origin: Instant, now: Instant) -> u64 {
    slot_index(origin, now, POINT)
}

impl LiveSeries {
    fn state(&self) -> std::sync::MutexGuard<'_, SeriesState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of the series started at `now` (it is in flight until
    /// [`LiveSeries::record`]).
    pub fn start(&self, now: Instant) {
        let mut guard = self.state();
        let state = &mut *guard;
        let now = state.placed(now);
        let ring = &state.rings[0];
        state
            .history
            .start(point_index(self.origin, now), &|p| point_requests(ring, p));
    }

    /// Folds one finished request (see [`Aggregate::request`]) into every
    /// window, its error budget and its history at `now`. `class_window` is
    /// the compliance window of the class it was judged against, and
    /// `input_ttft` its input tokens and TTFT in seconds, when it had both.
    pub fn record(
        &self,
        now: Instant,
        request: &Aggregate,
        class_window: Option<Duration>,
        input_ttft: Option<(u64, f64)>,
    ) {
        let mut guard = self.state();
        let state = &mut *guard;
        let now = state.placed(now);
        // The history first: it closes its open point, if `now` is past
        // it, before this request joins the slots it reads.
        let at = now.saturating_duration_since(self.origin).as_secs_f64();
        let ring = &state.rings[0];
        state
            .history
            .finish(point_index(self.origin, now), at, input_ttft, &|p| {
                point_requests(ring, p)
            });
        for (ring, window) in state.rings.iter_mut().zip(WINDOWS) {
            ring.add(slot_index(self.origin, now, window.slot), request);
        }
        if let Some(window) = class_window {
            state.budget.add(self.origin, now, window, request);
        }
    }

    /// The merged aggregate of window `which` (an index into [`WINDOWS`])
    /// at `now`, and how long it covers: from the start of its oldest slot
    /// (or of the series' clock) to `now`.
    pub fn window(&self, now: Instant, which: usize) -> (Aggregate, Duration) {
        let window = WINDOWS[which.min(WINDOWS.len() - 1)];
        let index = slot_index(self.origin, now, window.slot);
        let mut total = Aggregate::default();
        self.state().rings[which.min(WINDOWS.len() - 1)].collect(index, &mut total);
        (total, covered(self.origin, now, window.slot, index))
    }
}

/// Every series, by (route, `slo`, tenant). Route and class come from
/// config, and the `slo` label and the tenant are bounded by the proxy
/// before they get here, so the set is bounded.
#[derive(Debug)]
pub struct Live {
    origin: Instant,
    /// The origin's wall-clock time, seconds since the Unix epoch (for the
    /// history's timestamps).
    unix: f64,
    /// By (route, `slo`, tenant).
    series: Found<LiveSeries, 3>,
    /// The classes in force, by name, for the report's thresholds and
    /// targets. After a reload that changes a class, its windows mix
    /// verdicts against the old and the new class until the old age out.
    classes: Mutex<BTreeMap<String, Arc<SloClass>>>,
}

impl Live {
    /// Windows whose clock starts at `origin`, which is `unix` seconds
    /// after the Unix epoch.
    pub fn new(origin: Instant, unix: f64) -> Self {
        Self {
            origin,
            unix,
            series: Found::default(),
            classes: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sets the classes in force (at start and on every reload), and the
    /// one requests judged against their declared objectives are reported
    /// under ([`declared::report_class`](crate::declared::report_class)).
    pub fn set_classes(&self, classes: &[SloClass]) {
        let declared = crate::declared::report_class();
        let map = classes
            .iter()
            .chain(std::iter::once(&declared))
            .map(|c| (c.name.clone(), Arc::new(c.clone())))
            .collect();
        *self.classes.lock().unwrap_or_else(|e| e.into_inner()) = map;
    }

    /// The series of (route, slo) and `tenant` (empty: all the pair's
    /// requests), created on first use. Called once per request, when its
    /// labels are resolved (for a tenant, once its label is final).
    pub fn series(&self, route: &str, slo: &str, tenant: &str) -> Arc<LiveSeries> {
        self.series.get([route, slo, tenant], || LiveSeries {
            route: route.to_owned(),
            slo: slo.to_owned(),
            tenant: tenant.to_owned(),
            origin: self.origin,
            state: Mutex::default(),
        })
    }

    /// The series of `tenant`'s requests of the pair `of` is the series of.
    pub fn tenant_series(&self, of: &LiveSeries, tenant: &str) -> Arc<LiveSeries> {
        self.series(&of.route, &of.slo, tenant)
    }

    /// Every series, by (route, `slo`, tenant).
    fn all_series(&self) -> Vec<Arc<LiveSeries>> {
        let mut all = self.series.values();
        all.sort_by(|a, b| (&a.route, &a.slo, &a.tenant).cmp(&(&b.route, &b.slo, &b.tenant)));
        all
    }

    /// The class in force named `name`.
    pub fn class(&self, name: &str) -> Option<Arc<SloClass>> {
        self.classes().get(name).cloned()
    }

    fn classes(&self) -> BTreeMap<String, Arc<SloClass>> {
        self.classes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Everything `/slo` shows, at `now`: the series of every pair, or
    /// those of `tenant`'s requests when it is not empty.
    pub fn report(&self, now: Instant, tenant: &str) -> Report {
        let classes = self.classes();
        Report {
            windows: WINDOWS.iter().map(|w| w.name).collect(),
            series: self
                .all_series()
                .iter()
                .filter(|s| s.tenant == tenant)
                .map(|s| series_report(s, classes.get(&s.slo), now))
                .collect(),
        }
    }

    /// The history of each series (of `route` and `slo` only, when given;
    /// of `tenant`'s requests when it is not empty), at `now`, from `since`
    /// (seconds since the Unix epoch) or for the whole hour kept.
    pub fn history(
        &self,
        now: Instant,
        route: Option<&str>,
        slo: Option<&str>,
        tenant: &str,
        since: Option<f64>,
    ) -> Vec<HistoryReport> {
        let elapsed = now.saturating_duration_since(self.origin);
        let since = since.map_or(0, |t| {
            let seconds = (t - self.unix).max(0.0);
            (seconds / POINT.as_secs_f64()).floor() as u64
        });
        let classes = self.classes();
        self.all_series()
            .iter()
            .filter(|s| {
                s.tenant == tenant
                    && route.is_none_or(|r| r == s.route)
                    && slo.is_none_or(|c| c == s.slo)
            })
            .map(|s| {
                let state = s.state();
                let ring = &state.rings[0];
                let (points, scatter) = state
                    .history
                    .report(since, elapsed, self.unix, &|p| point_requests(ring, p));
                HistoryReport {
                    route: s.route.clone(),
                    slo: s.slo.clone(),
                    tenant: s.tenant.clone(),
                    objectives: objectives(classes.get(&s.slo)),
                    goodput_target: classes.get(&s.slo).and_then(|c| c.goodput.target),
                    point_seconds: POINT.as_secs_f64(),
                    points,
                    scatter,
                }
            })
            .collect()
    }
}

fn series_report(series: &LiveSeries, class: Option<&Arc<SloClass>>, now: Instant) -> SeriesReport {
    let windows: Vec<WindowReport> = WINDOWS
        .iter()
        .enumerate()
        .map(|(which, window)| {
            let (a, covered) = series.window(now, which);
            window_report(window.name, &a, covered, class)
        })
        .collect();
    let (in_flight, status) = {
        let state = series.state();
        let status = class.map_or_else(Vec::new, |c| {
            let (counts, covered) = state.budget.total(series.origin, now, c.window);
            status(c, &windows, counts, covered)
        });
        (state.history.in_flight(), status)
    };
    SeriesReport {
        route: series.route.clone(),
        slo: series.slo.clone(),
        tenant: series.tenant.clone(),
        objectives: objectives(class),
        goodput_target: class.and_then(|c| c.goodput.target),
        in_flight,
        windows,
        status,
    }
}
