//! Live SLO windows: what `/slo` shows a person who was just paged.
//!
//! Per (route, `slo` label) a [`Series`] keeps three rings of time slots:
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
//! `proxy::observe::Observed`), so the per-token path touches no shared
//! state; the price is that a long stream's gaps land in the slot of its
//! end, not of each gap. Requests are placed by their finish time.
//!
//! This module does no I/O and reads no clock: the caller passes `now`
//! (tests use tokio's paused clock).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::aggregate::{Aggregate, Quantiles, kind_index};
use super::history::{History, POINT, PointReport};
use crate::class::SloClass;
use crate::found::Found;

/// Slots per ring.
const SLOTS: u64 = 60;

/// One sliding window: its name in reports and the width of its slots.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub name: &'static str,
    /// Width of one slot; the window spans [`SLOTS`] of them.
    pub slot: Duration,
}

impl Window {
    /// The longest span the window covers.
    pub fn span(self) -> Duration {
        self.slot * SLOTS as u32
    }
}

/// The windows every series keeps, shortest first.
pub const WINDOWS: [Window; 3] = [
    Window {
        name: "1m",
        slot: Duration::from_secs(1),
    },
    Window {
        name: "5m",
        slot: Duration::from_secs(5),
    },
    Window {
        name: "1h",
        slot: Duration::from_secs(60),
    },
];

/// What a ring's slots hold: counts (and sketches) that add up.
pub(crate) trait Merge: Clone + Default {
    fn merge_from(&mut self, other: &Self);
}

impl Merge for Aggregate {
    fn merge_from(&mut self, other: &Self) {
        self.merge(other);
    }
}

/// One ring of slots. A slot is tagged with the index (+1, so 0 is empty)
/// of the time slot it holds, and reused when a later index maps onto it.
#[derive(Debug)]
pub(crate) struct Ring<T = Aggregate> {
    slots: Vec<(u64, T)>,
}

impl<T> Default for Ring<T> {
    fn default() -> Self {
        Self { slots: Vec::new() }
    }
}

impl<T: Merge> Ring<T> {
    pub(crate) fn add(&mut self, index: u64, item: &T) {
        if self.slots.is_empty() {
            self.slots = vec![(0, T::default()); SLOTS as usize];
        }
        let (tag, slot) = &mut self.slots[(index % SLOTS) as usize];
        let want = index + 1;
        if *tag > want {
            // Later than a whole ring behind the slot's time: outside the
            // window anyway.
            return;
        }
        if *tag < want {
            *tag = want;
            *slot = T::default();
        }
        slot.merge_from(item);
    }

    /// Merges the slots with indexes in `(now - SLOTS, now]`.
    pub(crate) fn collect(&self, now: u64, into: &mut T) {
        self.visit(now, &mut |slot| into.merge_from(slot));
    }

    /// Calls `f` on each slot with an index in `(now - SLOTS, now]`, for a
    /// reader that needs less than the whole merge.
    pub(crate) fn visit(&self, now: u64, f: &mut dyn FnMut(&T)) {
        self.visit_between((now + 1).saturating_sub(SLOTS), now + 1, f);
    }

    /// Calls `f` on each slot with an index in `[from, to)`.
    fn visit_between(&self, from: u64, to: u64, f: &mut dyn FnMut(&T)) {
        for (tag, slot) in &self.slots {
            let Some(index) = tag.checked_sub(1) else {
                continue;
            };
            if (from..to).contains(&index) {
                f(slot);
            }
        }
    }
}

/// The windows of one (route, `slo`) pair, or of one tenant's requests
/// of it.
#[derive(Debug)]
pub struct Series {
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

/// The index of the slot of `width` holding `now`, counted from `origin`.
pub(crate) fn slot_index(origin: Instant, now: Instant, width: Duration) -> u64 {
    let elapsed = now.saturating_duration_since(origin);
    (elapsed.as_nanos() / width.as_nanos()) as u64
}

fn point_index(origin: Instant, now: Instant) -> u64 {
    slot_index(origin, now, POINT)
}

impl Series {
    fn state(&self) -> std::sync::MutexGuard<'_, SeriesState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of the series started at `now` (it is in flight until
    /// [`Series::record`]).
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

/// How much of a ring of [`SLOTS`] slots of `slot` ending at slot `index`
/// lies between the origin and `now`.
pub(crate) fn covered(origin: Instant, now: Instant, slot: Duration, index: u64) -> Duration {
    let elapsed = now.saturating_duration_since(origin);
    let oldest = slot.saturating_mul((index + 1).saturating_sub(SLOTS) as u32);
    elapsed.saturating_sub(oldest)
}

/// Verdict counts over a class's compliance window (its error budget
/// period), as far back as the process has seen: [`SLOTS`] slots of a
/// sixtieth of the window each (counts only, no sketches).
#[derive(Debug, Default)]
struct Budget {
    /// Width of a slot; zero until the first judged request.
    slot: Duration,
    ring: Ring<BudgetCounts>,
}

#[derive(Debug, Clone, Copy, Default)]
struct BudgetCounts {
    good: u64,
    bad: u64,
    violations: [u64; 3],
}

impl Merge for BudgetCounts {
    fn merge_from(&mut self, other: &Self) {
        self.good += other.good;
        self.bad += other.bad;
        for (mine, theirs) in self.violations.iter_mut().zip(other.violations) {
            *mine += theirs;
        }
    }
}

impl Budget {
    fn slot_for(window: Duration) -> Duration {
        (window / SLOTS as u32).max(Duration::from_secs(1))
    }

    fn add(&mut self, origin: Instant, now: Instant, window: Duration, a: &Aggregate) {
        let slot = Self::slot_for(window);
        if slot != self.slot {
            // First use, or the class's window changed on reload: counts
            // over another span cannot be mixed in.
            self.slot = slot;
            self.ring = Ring::default();
        }
        let counts = BudgetCounts {
            good: a.good,
            bad: a.bad,
            violations: a.violations,
        };
        self.ring.add(slot_index(origin, now, slot), &counts);
    }

    /// The counts over `window` at `now`, and how long they cover.
    fn total(&self, origin: Instant, now: Instant, window: Duration) -> (BudgetCounts, Duration) {
        let slot = Self::slot_for(window);
        let index = slot_index(origin, now, slot);
        let mut total = BudgetCounts::default();
        if slot == self.slot {
            self.ring.collect(index, &mut total);
        }
        (total, covered(origin, now, slot, index))
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
    series: Found<Series, 3>,
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
    pub fn series(&self, route: &str, slo: &str, tenant: &str) -> Arc<Series> {
        self.series.get([route, slo, tenant], || Series {
            route: route.to_owned(),
            slo: slo.to_owned(),
            tenant: tenant.to_owned(),
            origin: self.origin,
            state: Mutex::default(),
        })
    }

    /// The series of `tenant`'s requests of the pair `of` is the series of.
    pub fn tenant_series(&self, of: &Series, tenant: &str) -> Arc<Series> {
        self.series(&of.route, &of.slo, tenant)
    }

    /// Every series, by (route, `slo`, tenant).
    fn all_series(&self) -> Vec<Arc<Series>> {
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

/// One series' entry in `/slo/history`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HistoryReport {
    pub route: String,
    pub slo: String,
    /// Empty for the series of all the pair's requests.
    pub tenant: String,
    /// The class's objectives and goodput target, as in `/slo`.
    pub objectives: Vec<ObjectiveInfo>,
    pub goodput_target: Option<f64>,
    /// Width of a point.
    pub point_seconds: f64,
    /// One point per `point_seconds`, oldest first, up to the one being
    /// filled now; points where nothing happened are included.
    pub points: Vec<PointReport>,
    /// `[finished at (seconds since the Unix epoch), input tokens, TTFT
    /// (seconds)]` of the latest requests that had both, oldest first
    /// (at most [`super::history::SCATTER`]).
    pub scatter: Vec<[f64; 3]>,
}

/// The `/slo` document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Window names, shortest first.
    pub windows: Vec<&'static str>,
    /// One entry per (route, slo), sorted.
    pub series: Vec<SeriesReport>,
}

/// One (route, slo) pair over every window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SeriesReport {
    pub route: String,
    /// The `slo` label (empty when the route has none).
    pub slo: String,
    /// The tenant whose requests these are; empty for all of them.
    pub tenant: String,
    /// The class's objectives; empty when the `slo` names no defined class.
    pub objectives: Vec<ObjectiveInfo>,
    /// The class's goodput target, when set.
    pub goodput_target: Option<f64>,
    /// Requests of the series in flight now.
    pub in_flight: u64,
    /// One entry per window, in [`Report::windows`] order.
    pub windows: Vec<WindowReport>,
    /// Per objective, then goodput (when the class sets a target): where it
    /// stands now, and its error budget over the class's window.
    pub status: Vec<ObjectiveStatus>,
}

/// Where an objective (or goodput) stands: `state` is `breach` when its
/// compliance over the last 5 minutes is below target or its error budget
/// is spent, `warning` when its compliance over the last hour is below
/// target or less than a quarter of its budget is left, `no_data` when
/// nothing was judged in the hour or the budget's span, else `ok`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectiveStatus {
    /// `ttft`, `tpot`, `e2el`, or `goodput`.
    pub objective: &'static str,
    /// `None` for goodput.
    pub threshold_seconds: Option<f64>,
    pub target: f64,
    pub state: &'static str,
    /// Compliance and burn rate over 5 minutes and an hour.
    pub ratio_5m: Option<f64>,
    pub burn_rate_5m: Option<f64>,
    pub ratio_1h: Option<f64>,
    pub burn_rate_1h: Option<f64>,
    pub budget: BudgetReport,
}

/// An objective's error budget over its class's compliance window, as far
/// back as this process has seen it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BudgetReport {
    /// The class's window, and how much of it the counts cover (less while
    /// the process is younger than the window).
    pub window_seconds: f64,
    pub seconds: f64,
    /// Judged requests, and those that met the objective (good ones, for
    /// goodput).
    pub judged: u64,
    pub met: u64,
    /// Share of the budget (`(1 − target) × judged` misses) not spent:
    /// 1 with no misses, 0 or less once spent; `None` when nothing was
    /// judged or the target allows no miss.
    pub left: Option<f64>,
}

/// An objective of the class.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectiveInfo {
    pub objective: &'static str,
    pub threshold_seconds: f64,
    pub target: f64,
}

/// One window of one series.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WindowReport {
    pub window: &'static str,
    /// Seconds the window covers now (less than its span while the process
    /// is younger than it).
    pub seconds: f64,
    /// Finished requests, any outcome, and per second.
    pub requests: u64,
    pub request_rate: f64,
    /// Requests that ended `ok`.
    pub ok: u64,
    /// Output tokens, and per second.
    pub output_tokens: u64,
    pub output_token_rate: f64,
    /// Latency quantiles in seconds (1 % relative error).
    pub ttft: Quantiles,
    pub tpot: Quantiles,
    pub itl: Quantiles,
    pub e2el: Quantiles,
    /// The server's own phases and the time outside the engine, of the
    /// requests that reported them (docs/metrics.md, "Where the time goes").
    pub queue: Quantiles,
    pub prefill: Quantiles,
    pub decode: Quantiles,
    pub outside: Quantiles,
    /// Per objective: share of judged requests within its threshold.
    pub compliance: Vec<Compliance>,
    /// Goodput, when the series has a class.
    pub goodput: Option<GoodputReport>,
}

/// One objective in one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Compliance {
    pub objective: &'static str,
    pub threshold_seconds: f64,
    pub target: f64,
    /// Judged requests (good + bad) and those within the threshold.
    pub judged: u64,
    pub met: u64,
    /// `met / judged`; `None` when nothing was judged.
    pub ratio: Option<f64>,
    /// `(1 − ratio) / (1 − target)`: 1 spends the error budget exactly over
    /// the class's window, above 1 faster.
    pub burn_rate: Option<f64>,
}

/// Goodput in one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GoodputReport {
    pub good: u64,
    pub bad: u64,
    /// `good / (good + bad)`; `None` when nothing was judged.
    pub ratio: Option<f64>,
    /// Good requests per second.
    pub rate: f64,
    /// Output tokens of good requests per second.
    pub token_rate: f64,
    pub target: Option<f64>,
    /// `(1 − ratio) / (1 − target)`, when both are known.
    pub burn_rate: Option<f64>,
}

fn burn(ratio: Option<f64>, target: Option<f64>) -> Option<f64> {
    let (ratio, target) = (ratio?, target?);
    (target < 1.0).then(|| (1.0 - ratio) / (1.0 - target))
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn objectives(class: Option<&Arc<SloClass>>) -> Vec<ObjectiveInfo> {
    class.map_or_else(Vec::new, |c| {
        c.objectives
            .iter()
            .map(|o| ObjectiveInfo {
                objective: o.kind.as_str(),
                threshold_seconds: o.threshold.as_secs_f64(),
                target: o.target,
            })
            .collect()
    })
}

fn series_report(series: &Series, class: Option<&Arc<SloClass>>, now: Instant) -> SeriesReport {
    let windows: Vec<WindowReport> = WINDOWS
        .iter()
        .enumerate()
        .map(|(which, window)| {
            let (a, covered) = series.window(now, which);
            // At least a second, so a window that just started does not
            // divide by almost nothing.
            let seconds = covered.as_secs_f64().max(1.0);
            let per_second = |n: u64| n as f64 / seconds;
            let judged = a.good + a.bad;
            let compliance = class.map_or_else(Vec::new, |c| {
                c.objectives
                    .iter()
                    .map(|o| {
                        let met = judged.saturating_sub(a.violations[kind_index(o.kind)]);
                        let r = ratio(met, judged);
                        Compliance {
                            objective: o.kind.as_str(),
                            threshold_seconds: o.threshold.as_secs_f64(),
                            target: o.target,
                            judged,
                            met,
                            ratio: r,
                            burn_rate: burn(r, Some(o.target)),
                        }
                    })
                    .collect()
            });
            let goodput = class.map(|c| {
                let r = ratio(a.good, judged);
                GoodputReport {
                    good: a.good,
                    bad: a.bad,
                    ratio: r,
                    rate: per_second(a.good),
                    token_rate: per_second(a.good_output_tokens),
                    target: c.goodput.target,
                    burn_rate: burn(r, c.goodput.target),
                }
            });
            WindowReport {
                window: window.name,
                seconds: covered.as_secs_f64(),
                requests: a.requests,
                request_rate: per_second(a.requests),
                ok: a.ok(),
                output_tokens: a.output_tokens,
                output_token_rate: per_second(a.output_tokens),
                ttft: Quantiles::of(&a.ttft),
                tpot: Quantiles::of(&a.tpot),
                itl: Quantiles::of(&a.itl),
                e2el: Quantiles::of(&a.e2el),
                queue: Quantiles::of(&a.queue),
                prefill: Quantiles::of(&a.prefill),
                decode: Quantiles::of(&a.decode),
                outside: Quantiles::of(&a.outside),
                compliance,
                goodput,
            }
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

/// The status of each objective of `class`, then of its goodput target:
/// see [`ObjectiveStatus`]. `windows` are the series' (5m and 1h are read).
fn status(
    class: &SloClass,
    windows: &[WindowReport],
    budget: BudgetCounts,
    covered: Duration,
) -> Vec<ObjectiveStatus> {
    let judged = budget.good + budget.bad;
    let window = |name: &str| windows.iter().find(|w| w.window == name);
    let (five, hour) = (window("5m"), window("1h"));
    let judged_in = |w: Option<&WindowReport>| {
        w.and_then(|w| w.goodput.as_ref())
            .map_or(0, |g| g.good + g.bad)
    };
    let entry = |objective: &'static str,
                 threshold_seconds: Option<f64>,
                 target: f64,
                 met: u64,
                 read: &dyn Fn(&WindowReport) -> Option<f64>| {
        let ratio_5m = five.and_then(read);
        let ratio_1h = hour.and_then(read);
        let left = (judged > 0 && target < 1.0).then(|| {
            let allowed = (1.0 - target) * judged as f64;
            1.0 - judged.saturating_sub(met) as f64 / allowed
        });
        let below = |r: Option<f64>| r.is_some_and(|r| r < target);
        let state = if judged_in(hour) == 0 && judged == 0 {
            "no_data"
        } else if below(ratio_5m) || left.is_some_and(|l| l <= 0.0) {
            "breach"
        } else if below(ratio_1h) || left.is_some_and(|l| l < 0.25) {
            "warning"
        } else {
            "ok"
        };
        ObjectiveStatus {
            objective,
            threshold_seconds,
            target,
            state,
            ratio_5m,
            burn_rate_5m: burn(ratio_5m, Some(target)),
            ratio_1h,
            burn_rate_1h: burn(ratio_1h, Some(target)),
            budget: BudgetReport {
                window_seconds: class.window.as_secs_f64(),
                seconds: covered.as_secs_f64(),
                judged,
                met,
                left,
            },
        }
    };
    let mut out: Vec<ObjectiveStatus> = class
        .objectives
        .iter()
        .map(|o| {
            let name = o.kind.as_str();
            let met = judged.saturating_sub(budget.violations[kind_index(o.kind)]);
            let read = move |w: &WindowReport| {
                w.compliance
                    .iter()
                    .find(|c| c.objective == name)
                    .and_then(|c| c.ratio)
            };
            entry(name, Some(o.threshold.as_secs_f64()), o.target, met, &read)
        })
        .collect();
    if let Some(target) = class.goodput.target {
        let read = |w: &WindowReport| w.goodput.as_ref().and_then(|g| g.ratio);
        out.push(entry("goodput", None, target, budget.good, &read));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::class::{Goodput, Objective, ObjectiveKind};
    use crate::sketch::Sketch;
    use meter::{Outcome, Summary};
    use meter::{TokenSource, Usage};

    const HOUR: Duration = Duration::from_secs(3600);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn class() -> Arc<SloClass> {
        Arc::new(SloClass {
            name: "chat".into(),
            description: String::new(),
            window: HOUR,
            objectives: vec![Objective {
                kind: ObjectiveKind::Ttft,
                threshold: ms(500),
                target: 0.9,
            }],
            goodput: Goodput {
                require: vec![ObjectiveKind::Ttft],
                target: Some(0.8),
            },
            per_tenant_alerts: false,
            exclude_slow_readers: false,
        })
    }

    /// An ok stream of 10 tokens with the given TTFT, judged against
    /// [`class`].
    fn request(ttft: Duration) -> Aggregate {
        let s = Summary {
            outcome: Outcome::Ok,
            status: Some(200),
            streamed: true,
            ttft: Some(ttft),
            ttft_visible: Some(ttft),
            e2el: Some(ttft + ms(90)),
            elapsed: ttft + ms(90),
            tpot: Some(ms(10)),
            output_tokens: Some((10, TokenSource::Usage)),
            usage: Usage::default(),
            server: meter::ServerTimings::default(),
            client_wait: std::time::Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 12,
            token_events: 10,
            first_token_event: Some(1),
            first_visible_event: Some(1),
            terminal_event: None,
            parse_errors: 0,
        };
        let mut itl = Sketch::new();
        for _ in 0..9 {
            itl.add(ms(10));
        }
        Aggregate::request(
            &s,
            Some(super::super::judge(&class(), &s, false)),
            itl,
            Some(ms(5)),
        )
    }

    fn window<'a>(r: &'a Report, name: &str) -> &'a WindowReport {
        r.series[0]
            .windows
            .iter()
            .find(|w| w.window == name)
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn windows_slide_and_old_slots_are_evicted() {
        let live = Live::new(Instant::now(), 0.0);
        live.set_classes(&[(*class()).clone()]);
        let series = live.series("r", "chat", "");
        // t = 0: 3 good, 1 bad (TTFT 800 ms > 500 ms).
        for ttft in [100, 200, 300, 800] {
            series.record(Instant::now(), &request(ms(ttft)), Some(HOUR), None);
        }
        tokio::time::advance(Duration::from_secs(30)).await;
        let r = live.report(Instant::now(), "");
        for name in ["1m", "5m", "1h"] {
            let w = window(&r, name);
            assert_eq!(w.requests, 4, "{name}");
            assert_eq!(w.seconds, 30.0, "{name}");
            let g = w.goodput.as_ref().unwrap();
            assert_eq!((g.good, g.bad, g.ratio), (3, 1, Some(0.75)));
            // (1 − 0.75) / (1 − 0.8) = 1.25.
            assert!((g.burn_rate.unwrap() - 1.25).abs() < 1e-9);
            assert_eq!(w.output_tokens, 40);
            assert!((w.request_rate - 4.0 / 30.0).abs() < 1e-9);
            assert_eq!(w.compliance[0].met, 3);
            assert_eq!(w.ttft.count, 4);
            assert_eq!(w.itl.count, 36);
            assert_eq!(w.itl.p99, Some(0.01));
        }

        // t = 60 s: 2 more. The 1m window holds slots (0, 60]: the first 4
        // have left it, but not the longer windows.
        tokio::time::advance(Duration::from_secs(30)).await;
        for ttft in [100, 100] {
            series.record(Instant::now(), &request(ms(ttft)), Some(HOUR), None);
        }
        let r = live.report(Instant::now(), "");
        assert_eq!(window(&r, "1m").requests, 2);
        assert_eq!(window(&r, "1m").seconds, 59.0);
        assert_eq!(window(&r, "1m").goodput.as_ref().unwrap().ratio, Some(1.0));
        assert_eq!(window(&r, "5m").requests, 6);
        assert_eq!(window(&r, "1h").requests, 6);

        // t = 5 min + 1 s: the 5m window (60 × 5 s slots) has let the first
        // 4 go; the hour keeps all 6.
        tokio::time::advance(Duration::from_secs(241)).await;
        let r = live.report(Instant::now(), "");
        assert_eq!(window(&r, "1m").requests, 0);
        assert_eq!(window(&r, "1m").ttft.p50, None);
        assert_eq!(window(&r, "1m").goodput.as_ref().unwrap().ratio, None);
        assert_eq!(window(&r, "5m").requests, 2);
        assert_eq!(window(&r, "1h").requests, 6);

        // After an hour and a minute everything is gone, and a slot reused
        // by a new request holds only the new one.
        tokio::time::advance(Duration::from_secs(3360)).await;
        let r = live.report(Instant::now(), "");
        assert_eq!(window(&r, "1h").requests, 0);
        series.record(Instant::now(), &request(ms(100)), Some(HOUR), None);
        let r = live.report(Instant::now(), "");
        for name in ["1m", "5m", "1h"] {
            assert_eq!(window(&r, name).requests, 1, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn quantiles_follow_the_requests_of_the_window() {
        let live = Live::new(Instant::now(), 0.0);
        live.set_classes(&[(*class()).clone()]);
        let series = live.series("r", "chat", "");
        // TTFT 1..=100 ms, one request each.
        for i in 1..=100 {
            series.record(Instant::now(), &request(ms(i)), Some(HOUR), None);
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let r = live.report(Instant::now(), "");
        let ttft = &window(&r, "1m").ttft;
        let near = |got: Option<f64>, want: f64| {
            let got = got.unwrap();
            assert!((got - want).abs() <= want * 0.01, "{got} vs {want}");
        };
        // Rank ⌊q (n − 1)⌋ of 1..=100 ms.
        near(ttft.p50, 0.050);
        near(ttft.p95, 0.095);
        near(ttft.p99, 0.099);
        // A stale slot another thread moved on is not reset backwards.
        let mut ring = Ring::default();
        ring.add(SLOTS + 3, &request(ms(1)));
        ring.add(3, &request(ms(1)));
        let mut total = Aggregate::default();
        ring.collect(SLOTS + 3, &mut total);
        assert_eq!(total.requests, 1);
    }

    fn states(r: &Report) -> Vec<(&'static str, &'static str)> {
        r.series[0]
            .status
            .iter()
            .map(|s| (s.objective, s.state))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn status_follows_compliance_and_the_error_budget() {
        let live = Live::new(Instant::now(), 0.0);
        live.set_classes(&[(*class()).clone()]);
        let series = live.series("r", "chat", "");
        let r = live.report(Instant::now(), "");
        assert!(r.series[0].status.iter().all(|s| s.state == "no_data"));
        // 20 good: TTFT 90 % target, goodput 80 % target.
        for _ in 0..20 {
            series.record(Instant::now(), &request(ms(100)), Some(HOUR), None);
        }
        let r = live.report(Instant::now(), "");
        assert_eq!(states(&r), [("ttft", "ok"), ("goodput", "ok")]);
        let ttft = &r.series[0].status[0];
        assert_eq!(
            (ttft.budget.judged, ttft.budget.met, ttft.budget.left),
            (20, 20, Some(1.0))
        );
        assert_eq!(ttft.budget.window_seconds, 3600.0);
        // 4 bad: 20/24 within the threshold in 5 minutes, below 90 %, and
        // 4 misses of the 2.4 the budget allows.
        for _ in 0..4 {
            series.record(Instant::now(), &request(ms(900)), Some(HOUR), None);
        }
        let r = live.report(Instant::now(), "");
        // Goodput is within its target (20 of 24 good, 80 %) but has a
        // sixth of its budget left (4 bad of the 4.8 allowed).
        assert_eq!(states(&r), [("ttft", "breach"), ("goodput", "warning")]);
        let ttft = &r.series[0].status[0];
        assert!((ttft.ratio_5m.unwrap() - 20.0 / 24.0).abs() < 1e-9);
        assert!((ttft.burn_rate_5m.unwrap() - (4.0 / 24.0) / 0.1).abs() < 1e-9);
        assert!((ttft.budget.left.unwrap() - (1.0 - 4.0 / 2.4)).abs() < 1e-9);
        // The goodput budget: 20 of 24 good against 80 %.
        let goodput = &r.series[0].status[1];
        assert_eq!((goodput.budget.met, goodput.threshold_seconds), (20, None));
        // Six minutes later, 20 more good: the last 5 minutes comply, the
        // hour does (40 of 44), but less than a quarter of the budget is
        // left (4 misses of 4.4).
        tokio::time::advance(Duration::from_secs(360)).await;
        for _ in 0..20 {
            series.record(Instant::now(), &request(ms(100)), Some(HOUR), None);
        }
        let r = live.report(Instant::now(), "");
        assert_eq!(r.series[0].status[0].state, "warning");
        assert_eq!(r.series[0].status[0].ratio_5m, Some(1.0));
        // Past the class's window (an hour) nothing is left to judge by.
        tokio::time::advance(Duration::from_secs(3700)).await;
        let r = live.report(Instant::now(), "");
        assert_eq!(states(&r), [("ttft", "no_data"), ("goodput", "no_data")]);
    }

    #[tokio::test(start_paused = true)]
    async fn history_points_agree_with_the_windows() {
        let live = Live::new(Instant::now(), 1_000_000.0);
        live.set_classes(&[(*class()).clone()]);
        let series = live.series("r", "chat", "");
        tokio::time::advance(Duration::from_secs(20)).await;
        for _ in 1..=100 {
            series.start(Instant::now());
        }
        let r = live.report(Instant::now(), "");
        assert_eq!(r.series[0].in_flight, 100);
        for i in 1..=100 {
            series.record(
                Instant::now(),
                &request(ms(i)),
                Some(HOUR),
                Some((i * 10, 0.001 * i as f64)),
            );
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        let r = live.report(Instant::now(), "");
        let h = live.history(Instant::now(), Some("r"), Some("chat"), "", None);
        assert_eq!(h.len(), 1);
        let h = &h[0];
        assert_eq!(h.objectives, r.series[0].objectives);
        // Points 2 (20 s) only: the series was created at 20 s.
        assert_eq!(h.points.len(), 1);
        let p = &h.points[0];
        assert_eq!((p.t, p.seconds), (1_000_020.0, 5.0));
        let w = window(&r, "1m");
        assert_eq!(p.requests, w.requests);
        assert_eq!(p.outcomes.ok, w.ok);
        assert_eq!(p.output_tokens, w.output_tokens);
        assert_eq!(
            (p.ttft.clone(), p.itl.clone(), p.e2el.clone()),
            (w.ttft.clone(), w.itl.clone(), w.e2el.clone())
        );
        let g = w.goodput.as_ref().unwrap();
        assert_eq!((p.good, p.bad), (g.good, g.bad));
        assert_eq!((p.in_flight_peak, p.in_flight_end), (100, 0));
        assert_eq!(p.headers.p50, Some(0.005));
        // Streams of TTFT i ms and E2EL i + 90 ms, headers at 5 ms.
        assert_eq!(p.phases.requests, 100);
        assert!((p.phases.headers_seconds - 0.5).abs() < 1e-9);
        assert!((p.phases.decode_seconds - 9.0).abs() < 1e-9);
        assert_eq!(h.scatter.len(), 100);
        assert_eq!(h.scatter[0], [1_000_020.0, 10.0, 0.001]);
        // Asked from a later time: nothing before it.
        let later = live.history(Instant::now(), None, None, "", Some(1_000_030.0));
        assert!(later[0].points.is_empty() && later[0].scatter.is_empty());
        assert!(
            live.history(Instant::now(), Some("x"), None, "", None)
                .is_empty()
        );
    }

    #[test]
    fn series_without_a_class_report_no_goodput() {
        let live = Live::new(Instant::now(), 0.0);
        let s = Summary {
            outcome: Outcome::UpstreamError,
            status: Some(502),
            streamed: false,
            ttft: None,
            ttft_visible: None,
            e2el: None,
            elapsed: ms(5),
            tpot: None,
            output_tokens: None,
            usage: Usage::default(),
            server: meter::ServerTimings::default(),
            client_wait: std::time::Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 0,
            token_events: 0,
            first_token_event: None,
            first_visible_event: None,
            terminal_event: None,
            parse_errors: 0,
        };
        live.series("r", "", "").record(
            Instant::now(),
            &Aggregate::request(&s, None, Sketch::new(), None),
            None,
            None,
        );
        let r = live.report(Instant::now(), "");
        let w = window(&r, "1m");
        assert_eq!((w.requests, w.ok), (1, 0));
        assert!(w.goodput.is_none() && w.compliance.is_empty());
        assert!(r.series[0].objectives.is_empty());
    }

    /// The server's phases reach `/slo` as percentiles and the history as
    /// sums of the streams that reported all of them; a server that
    /// reports prefill and decode only (llama.cpp) has its percentiles but
    /// no split, and an outside time below zero is not taken.
    #[tokio::test(start_paused = true)]
    async fn the_servers_phases_are_reported_where_known() {
        let live = Live::new(Instant::now(), 1_000_000.0);
        live.set_classes(&[]);
        let series = live.series("r", "", "");
        let streamed = |ttft: u64, server: meter::ServerTimings| {
            let s = Summary {
                outcome: Outcome::Ok,
                status: Some(200),
                streamed: true,
                ttft: Some(ms(ttft)),
                ttft_visible: Some(ms(ttft)),
                e2el: Some(ms(ttft + 500)),
                elapsed: ms(ttft + 500),
                tpot: Some(ms(10)),
                output_tokens: Some((51, TokenSource::Usage)),
                usage: Usage::default(),
                server,
                client_wait: std::time::Duration::ZERO,
                proxy_time: None,
                response_model: None,
                events: 53,
                token_events: 51,
                first_token_event: Some(1),
                first_visible_event: Some(1),
                terminal_event: None,
                parse_errors: 0,
            };
            Aggregate::request(&s, None, Sketch::new(), Some(ms(5)))
        };
        let all = |queue, prefill| meter::ServerTimings {
            queue: Some(queue),
            prefill: Some(prefill),
            decode: Some(0.5),
        };
        // vLLM-like: 100 ms queued, 200 ms prefill, 100 ms outside.
        series.record(Instant::now(), &streamed(400, all(0.1, 0.2)), None, None);
        // llama.cpp-like: no queue.
        let llama = meter::ServerTimings {
            queue: None,
            ..all(0.0, 0.3)
        };
        series.record(Instant::now(), &streamed(400, llama), None, None);
        // Clocks that disagree: the server counts 500 ms of a 400 ms TTFT.
        series.record(Instant::now(), &streamed(400, all(0.2, 0.3)), None, None);
        tokio::time::advance(Duration::from_secs(5)).await;
        let r = live.report(Instant::now(), "");
        let w = window(&r, "1m");
        assert_eq!(w.queue.count, 2);
        assert_eq!(w.prefill.count, 3);
        assert_eq!(w.decode.count, 3);
        assert_eq!(w.outside.count, 1);
        let near = |got: Option<f64>, want: f64| {
            assert!(
                (got.unwrap() - want).abs() <= want * 0.011,
                "{got:?} for {want}"
            );
        };
        near(w.outside.p50, 0.1);
        near(w.decode.p99, 0.5);
        let h = live.history(Instant::now(), Some("r"), None, "", None);
        let p = &h[0].points[0];
        assert_eq!((p.prefill.count, p.outside.count), (3, 1));
        let e = &p.engine_phases;
        assert_eq!(e.requests, 1);
        for (got, want) in [
            (e.queue_seconds, 0.1),
            (e.prefill_seconds, 0.2),
            (e.decode_seconds, 0.5),
            (e.outside_seconds, 0.1),
        ] {
            assert!((got - want).abs() < 1e-9, "{e:?}");
        }
        assert_eq!(p.phases.requests, 3, "the split at the head stays");
    }
}
