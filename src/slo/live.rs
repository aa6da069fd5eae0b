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
//! `metrics::RequestRecorder`), so the per-token path touches no shared
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

use super::Verdict;
use super::sketch::Sketch;
use crate::config::{ObjectiveKind, SloClass};
use crate::meter::{Outcome, Summary};

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

/// Quantiles reported for each latency.
const QUANTILES: [f64; 3] = [0.5, 0.95, 0.99];

/// Counts and latency sketches of some requests (one request, one slot, or
/// a whole window).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregate {
    /// Finished metered requests, any outcome.
    pub requests: u64,
    /// Those that ended `ok`.
    pub ok: u64,
    /// Output tokens of all of them (where known).
    pub output_tokens: u64,
    /// Judged good against their class.
    pub good: u64,
    /// Judged bad against their class.
    pub bad: u64,
    /// Output tokens of the good ones.
    pub good_output_tokens: u64,
    /// Judged requests that exceeded each objective, by [`ObjectiveKind`]
    /// in [`ObjectiveKind::ALL`] order.
    pub violations: [u64; 3],
    pub ttft: Sketch,
    pub tpot: Sketch,
    pub itl: Sketch,
    pub e2el: Sketch,
}

fn kind_index(kind: ObjectiveKind) -> usize {
    match kind {
        ObjectiveKind::Ttft => 0,
        ObjectiveKind::Tpot => 1,
        ObjectiveKind::E2el => 2,
    }
}

impl Aggregate {
    /// One finished request: its summary, its verdict (when it has a
    /// class) and the sketch of its ITL gaps. Latencies are taken exactly
    /// when docs/metrics.md observes them (the summary's `Some` fields).
    pub fn request(summary: &Summary, verdict: Option<Verdict>, itl: Sketch) -> Self {
        let mut a = Aggregate {
            requests: 1,
            ok: u64::from(summary.outcome == Outcome::Ok),
            output_tokens: summary.output_tokens.map_or(0, |(n, _)| n),
            itl,
            ..Aggregate::default()
        };
        for (value, sketch) in [
            (summary.ttft, &mut a.ttft),
            (summary.tpot, &mut a.tpot),
            (summary.e2el, &mut a.e2el),
        ] {
            if let Some(v) = value {
                sketch.add(v);
            }
        }
        if let Some(verdict) = verdict {
            match verdict {
                Verdict::Good { .. } => {
                    a.good = 1;
                    a.good_output_tokens = a.output_tokens;
                }
                Verdict::Bad { .. } => a.bad = 1,
                Verdict::NotCounted => {}
            }
            for kind in verdict.violations().iter() {
                a.violations[kind_index(kind)] = 1;
            }
        }
        a
    }

    /// Adds `other` into this aggregate.
    pub fn merge(&mut self, other: &Aggregate) {
        self.requests += other.requests;
        self.ok += other.ok;
        self.output_tokens += other.output_tokens;
        self.good += other.good;
        self.bad += other.bad;
        self.good_output_tokens += other.good_output_tokens;
        for (mine, theirs) in self.violations.iter_mut().zip(other.violations) {
            *mine += theirs;
        }
        self.ttft.merge(&other.ttft);
        self.tpot.merge(&other.tpot);
        self.itl.merge(&other.itl);
        self.e2el.merge(&other.e2el);
    }
}

/// One ring of slots. A slot is tagged with the index (+1, so 0 is empty)
/// of the time slot it holds, and reused when a later index maps onto it.
#[derive(Debug, Default)]
struct Ring {
    slots: Vec<(u64, Aggregate)>,
}

impl Ring {
    fn add(&mut self, index: u64, request: &Aggregate) {
        if self.slots.is_empty() {
            self.slots = vec![(0, Aggregate::default()); SLOTS as usize];
        }
        let (tag, slot) = &mut self.slots[(index % SLOTS) as usize];
        let want = index + 1;
        if *tag > want {
            // A request finishing while another thread already moved this
            // slot a whole ring ahead: it is outside the window anyway.
            return;
        }
        if *tag < want {
            *tag = want;
            *slot = Aggregate::default();
        }
        slot.merge(request);
    }

    /// Merges the slots with indexes in `(now - SLOTS, now]`.
    fn collect(&self, now: u64, into: &mut Aggregate) {
        for (tag, slot) in &self.slots {
            if *tag == 0 {
                continue;
            }
            let index = tag - 1;
            if index <= now && index + SLOTS > now {
                into.merge(slot);
            }
        }
    }
}

/// The windows of one (route, `slo`) pair.
#[derive(Debug)]
pub struct Series {
    route: String,
    slo: String,
    origin: Instant,
    state: Mutex<SeriesState>,
}

#[derive(Debug, Default)]
struct SeriesState {
    rings: [Ring; 3],
}

fn slot_index(origin: Instant, now: Instant, window: Window) -> u64 {
    let elapsed = now.saturating_duration_since(origin);
    (elapsed.as_nanos() / window.slot.as_nanos()) as u64
}

impl Series {
    /// Folds one finished request (see [`Aggregate::request`]) into every
    /// window at `now`.
    pub fn record(&self, now: Instant, request: &Aggregate) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (ring, window) in state.rings.iter_mut().zip(WINDOWS) {
            ring.add(slot_index(self.origin, now, window), request);
        }
    }

    /// The merged aggregate of window `which` (an index into [`WINDOWS`])
    /// at `now`, and how long it covers: from the start of its oldest slot
    /// (or of the series' clock) to `now`.
    pub fn window(&self, now: Instant, which: usize) -> (Aggregate, Duration) {
        let window = WINDOWS[which.min(WINDOWS.len() - 1)];
        let index = slot_index(self.origin, now, window);
        let mut total = Aggregate::default();
        {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.rings[which.min(WINDOWS.len() - 1)].collect(index, &mut total);
        }
        let elapsed = now.saturating_duration_since(self.origin);
        let oldest = window.slot * (index + 1).saturating_sub(SLOTS) as u32;
        (total, elapsed.saturating_sub(oldest))
    }
}

/// Every series, by (route, `slo`). Both come from config, so the set is
/// bounded (the `slo` label is bounded by the proxy before it gets here).
#[derive(Debug)]
pub struct Live {
    origin: Instant,
    series: Mutex<BTreeMap<(String, String), Arc<Series>>>,
    /// The classes in force, by name, for the report's thresholds and
    /// targets. After a reload that changes a class, its windows mix
    /// verdicts against the old and the new class until the old age out.
    classes: Mutex<BTreeMap<String, Arc<SloClass>>>,
}

impl Live {
    /// Windows whose clock starts at `origin`.
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            series: Mutex::new(BTreeMap::new()),
            classes: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sets the classes in force (at start and on every reload).
    pub fn set_classes(&self, classes: &[SloClass]) {
        let map = classes
            .iter()
            .map(|c| (c.name.clone(), Arc::new(c.clone())))
            .collect();
        *self.classes.lock().unwrap_or_else(|e| e.into_inner()) = map;
    }

    /// The series of (route, slo), created on first use. Called once per
    /// request, when its labels are resolved.
    pub fn series(&self, route: &str, slo: &str) -> Arc<Series> {
        let mut map = self.series.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(&(route.to_owned(), slo.to_owned())) {
            return s.clone();
        }
        let s = Arc::new(Series {
            route: route.to_owned(),
            slo: slo.to_owned(),
            origin: self.origin,
            state: Mutex::default(),
        });
        map.insert((route.to_owned(), slo.to_owned()), s.clone());
        s
    }

    /// Everything `/slo` shows, at `now`.
    pub fn report(&self, now: Instant) -> Report {
        let all: Vec<Arc<Series>> = {
            let map = self.series.lock().unwrap_or_else(|e| e.into_inner());
            map.values().cloned().collect()
        };
        let classes = self
            .classes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Report {
            windows: WINDOWS.iter().map(|w| w.name).collect(),
            series: all
                .iter()
                .map(|s| series_report(s, classes.get(&s.slo), now))
                .collect(),
        }
    }
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
    /// The class's objectives; empty when the `slo` names no defined class.
    pub objectives: Vec<ObjectiveInfo>,
    /// The class's goodput target, when set.
    pub goodput_target: Option<f64>,
    /// One entry per window, in [`Report::windows`] order.
    pub windows: Vec<WindowReport>,
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
    /// Per objective: share of judged requests within its threshold.
    pub compliance: Vec<Compliance>,
    /// Goodput, when the series has a class.
    pub goodput: Option<GoodputReport>,
}

/// Latency quantiles of one metric in one window; `None` without samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Quantiles {
    pub count: u64,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Quantiles {
    fn of(sketch: &Sketch) -> Self {
        let [p50, p95, p99] = QUANTILES.map(|q| sketch.quantile(q));
        Self {
            count: sketch.count(),
            p50,
            p95,
            p99,
        }
    }
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

fn series_report(series: &Series, class: Option<&Arc<SloClass>>, now: Instant) -> SeriesReport {
    let objectives = class.as_ref().map_or_else(Vec::new, |c| {
        c.objectives
            .iter()
            .map(|o| ObjectiveInfo {
                objective: o.kind.as_str(),
                threshold_seconds: o.threshold.as_secs_f64(),
                target: o.target,
            })
            .collect()
    });
    let goodput_target = class.as_ref().and_then(|c| c.goodput.target);
    let windows = WINDOWS
        .iter()
        .enumerate()
        .map(|(which, window)| {
            let (a, covered) = series.window(now, which);
            // At least a second, so a window that just started does not
            // divide by almost nothing.
            let seconds = covered.as_secs_f64().max(1.0);
            let per_second = |n: u64| n as f64 / seconds;
            let judged = a.good + a.bad;
            let compliance = class.as_ref().map_or_else(Vec::new, |c| {
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
            let goodput = class.as_ref().map(|c| {
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
                ok: a.ok,
                output_tokens: a.output_tokens,
                output_token_rate: per_second(a.output_tokens),
                ttft: Quantiles::of(&a.ttft),
                tpot: Quantiles::of(&a.tpot),
                itl: Quantiles::of(&a.itl),
                e2el: Quantiles::of(&a.e2el),
                compliance,
                goodput,
            }
        })
        .collect();
    SeriesReport {
        route: series.route.clone(),
        slo: series.slo.clone(),
        objectives,
        goodput_target,
        windows,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::{Goodput, Objective};
    use crate::meter::{TokenSource, Usage};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn class() -> Arc<SloClass> {
        Arc::new(SloClass {
            name: "chat".into(),
            description: String::new(),
            window: crate::config::DEFAULT_WINDOW,
            objectives: vec![Objective {
                kind: ObjectiveKind::Ttft,
                threshold: ms(500),
                target: 0.9,
            }],
            goodput: Goodput {
                require: vec![ObjectiveKind::Ttft],
                target: Some(0.8),
            },
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
        Aggregate::request(&s, Some(super::super::judge(&class(), &s)), itl)
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
        let live = Live::new(Instant::now());
        live.set_classes(&[(*class()).clone()]);
        let series = live.series("r", "chat");
        // t = 0: 3 good, 1 bad (TTFT 800 ms > 500 ms).
        for ttft in [100, 200, 300, 800] {
            series.record(Instant::now(), &request(ms(ttft)));
        }
        tokio::time::advance(Duration::from_secs(30)).await;
        let r = live.report(Instant::now());
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
            series.record(Instant::now(), &request(ms(ttft)));
        }
        let r = live.report(Instant::now());
        assert_eq!(window(&r, "1m").requests, 2);
        assert_eq!(window(&r, "1m").seconds, 59.0);
        assert_eq!(window(&r, "1m").goodput.as_ref().unwrap().ratio, Some(1.0));
        assert_eq!(window(&r, "5m").requests, 6);
        assert_eq!(window(&r, "1h").requests, 6);

        // t = 5 min + 1 s: the 5m window (60 × 5 s slots) has let the first
        // 4 go; the hour keeps all 6.
        tokio::time::advance(Duration::from_secs(241)).await;
        let r = live.report(Instant::now());
        assert_eq!(window(&r, "1m").requests, 0);
        assert_eq!(window(&r, "1m").ttft.p50, None);
        assert_eq!(window(&r, "1m").goodput.as_ref().unwrap().ratio, None);
        assert_eq!(window(&r, "5m").requests, 2);
        assert_eq!(window(&r, "1h").requests, 6);

        // After an hour and a minute everything is gone, and a slot reused
        // by a new request holds only the new one.
        tokio::time::advance(Duration::from_secs(3360)).await;
        let r = live.report(Instant::now());
        assert_eq!(window(&r, "1h").requests, 0);
        series.record(Instant::now(), &request(ms(100)));
        let r = live.report(Instant::now());
        for name in ["1m", "5m", "1h"] {
            assert_eq!(window(&r, name).requests, 1, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn quantiles_follow_the_requests_of_the_window() {
        let live = Live::new(Instant::now());
        live.set_classes(&[(*class()).clone()]);
        let series = live.series("r", "chat");
        // TTFT 1..=100 ms, one request each.
        for i in 1..=100 {
            series.record(Instant::now(), &request(ms(i)));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let r = live.report(Instant::now());
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

    #[test]
    fn series_without_a_class_report_no_goodput() {
        let live = Live::new(Instant::now());
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
            events: 0,
            token_events: 0,
            first_token_event: None,
            first_visible_event: None,
            terminal_event: None,
            parse_errors: 0,
        };
        live.series("r", "")
            .record(Instant::now(), &Aggregate::request(&s, None, Sketch::new()));
        let r = live.report(Instant::now());
        let w = window(&r, "1m");
        assert_eq!((w.requests, w.ok), (1, 0));
        assert!(w.goodput.is_none() && w.compliance.is_empty());
        assert!(r.series[0].objectives.is_empty());
    }
}
