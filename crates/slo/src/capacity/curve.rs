//! The latency–load curve of one (route, model, class) over the live
//! windows of `/slo` (1m, 5m, 1h): per load bucket, the judged requests,
//! the good ones, those within each objective's threshold, and a sketch of
//! each objective's latency for display. The knee is read from the counts
//! (`knee.rs`), the sketches only say how far past a threshold a bucket
//! went.
//!
//! The windows are the rings of `live/ring.rs` (60 slots of 1 s, 5 s,
//! 60 s): a request is placed by its finish time and bucketed by its load
//! at arrival. A slot keeps only the buckets it saw a request in.
//!
//! Memory of one curve: each (slot, bucket) that saw a request is an entry
//! of 240 bytes (its index, 40 bytes of counts and three sketches without
//! bins) plus 4 bytes per bin of the sketch of each objective of the class.
//! A sketch's bins span the latencies it saw: 35 over a factor of two, 115
//! over a factor of ten, never more than 1,300. Steady traffic touches one
//! to three buckets a slot: with one objective and latencies within a
//! factor of ten, 180 slots × 3 × 700 bytes ≈ 380 KB over the three rings,
//! half of what a series of `live/` keeps (nine sketches a slot). The
//! bound is 180 slots × 23 buckets of entries, whatever the traffic.
//!
//! This module does no I/O and reads no clock: the caller passes `now`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::knee::{self, BUCKETS, BucketCounts, Knee, LABELS, Promise, bucket_index, kind_index};
use crate::Verdict;
use crate::class::{ObjectiveKind, SloClass};
use crate::found::Found;
use crate::live::{Merge, Ring, WINDOWS, covered, slot_index};
use crate::sketch::Sketch;
use meter::Summary;

/// One judged request as the curve counts it: its verdict and violations,
/// and its value of each objective of its class (for the sketches).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSample {
    counts: BucketCounts,
    /// By kind, where the class has the objective and the request a value.
    values: [Option<Duration>; 3],
}

impl LoadSample {
    /// The sample of a request of `class` with `summary`, judged `verdict`;
    /// `None` when it was not judged (it is not on the curve, as it is not
    /// in the goodput ratio).
    pub fn new(class: &SloClass, summary: &Summary, verdict: Verdict) -> Option<Self> {
        let good = match verdict {
            Verdict::Good { .. } => 1,
            Verdict::Bad { .. } => 0,
            Verdict::NotCounted => return None,
        };
        let mut counts = BucketCounts {
            judged: 1,
            good,
            violations: [0; 3],
        };
        for kind in verdict.violations().iter() {
            counts.violations[kind_index(kind)] = 1;
        }
        let mut values = [None; 3];
        for objective in &class.objectives {
            values[kind_index(objective.kind)] = match objective.kind {
                ObjectiveKind::Ttft => summary.ttft,
                ObjectiveKind::Tpot => summary.tpot,
                ObjectiveKind::E2el => summary.e2el,
            };
        }
        Some(Self { counts, values })
    }
}

/// One load bucket of one slot (or of a window).
#[derive(Debug, Clone, Default, PartialEq)]
struct Bucket {
    counts: BucketCounts,
    /// By kind; empty for objectives the class does not have.
    latency: [Sketch; 3],
}

/// One time slot: the buckets that saw a request in it, by index.
#[derive(Debug, Clone, Default, PartialEq)]
struct SlotBuckets {
    buckets: Vec<(usize, Bucket)>,
}

impl SlotBuckets {
    fn bucket(&mut self, index: usize) -> &mut Bucket {
        let at = match self.buckets.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None => {
                self.buckets.push((index, Bucket::default()));
                self.buckets.len() - 1
            }
        };
        &mut self.buckets[at].1
    }
}

impl Merge for SlotBuckets {
    fn merge_from(&mut self, other: &Self) {
        for (index, theirs) in &other.buckets {
            let mine = self.bucket(*index);
            mine.counts.add(&theirs.counts);
            for (m, t) in mine.latency.iter_mut().zip(&theirs.latency) {
                m.merge(t);
            }
        }
    }
}

/// The curve of one (route, model, `slo` label).
#[derive(Debug)]
pub struct Curve {
    route: String,
    model: String,
    slo: String,
    origin: Instant,
    rings: Mutex<[Ring<SlotBuckets>; 3]>,
}

impl Curve {
    pub fn route(&self) -> &str {
        &self.route
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn slo(&self) -> &str {
        &self.slo
    }

    fn rings(&self) -> std::sync::MutexGuard<'_, [Ring<SlotBuckets>; 3]> {
        self.rings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Folds one judged request that finished at `now`, having met `load`
    /// at arrival, into every window.
    pub fn record(&self, now: Instant, load: u64, sample: &LoadSample) {
        let mut bucket = Bucket {
            counts: sample.counts,
            ..Bucket::default()
        };
        for (sketch, value) in bucket.latency.iter_mut().zip(sample.values) {
            if let Some(v) = value {
                sketch.add(v);
            }
        }
        let slot = SlotBuckets {
            buckets: vec![(bucket_index(load), bucket)],
        };
        for (ring, window) in self.rings().iter_mut().zip(WINDOWS) {
            ring.add(slot_index(self.origin, now, window.slot), &slot);
        }
    }

    /// The counts of each load bucket over window `which` (an index into
    /// [`WINDOWS`]) at `now`, without the sketches.
    pub fn counts(&self, now: Instant, which: usize) -> [BucketCounts; BUCKETS] {
        let which = which.min(WINDOWS.len() - 1);
        let index = slot_index(self.origin, now, WINDOWS[which].slot);
        let mut counts = [BucketCounts::default(); BUCKETS];
        self.rings()[which].visit(index, &mut |slot: &SlotBuckets| {
            for (i, b) in &slot.buckets {
                if let Some(c) = counts.get_mut(*i) {
                    c.add(&b.counts);
                }
            }
        });
        counts
    }

    /// The knee of `class` over window `which` at `now` (what the gauges
    /// export: counts only).
    pub fn knee(&self, now: Instant, which: usize, class: &SloClass) -> Knee {
        knee::knee(class, &self.counts(now, which))
    }

    /// The knee of `class` over each window at `now`, with the window's
    /// name (the gauges' `window` label), shortest first.
    pub fn knees(&self, now: Instant, class: &SloClass) -> [(&'static str, Knee); 3] {
        std::array::from_fn(|which| (WINDOWS[which].name, self.knee(now, which, class)))
    }

    /// The whole curve at `now` against `class` (its targets and the
    /// minimum count), each window's knee, and its headroom at `load_now`
    /// when that is known.
    pub fn report(&self, now: Instant, class: &SloClass, load_now: Option<u64>) -> CurveReport {
        let targets = knee::promises(class);
        let min = knee::min_judged(class);
        let windows = WINDOWS
            .iter()
            .enumerate()
            .map(|(which, window)| {
                let index = slot_index(self.origin, now, window.slot);
                let mut total = SlotBuckets::default();
                self.rings()[which].collect(index, &mut total);
                total.buckets.sort_by_key(|(i, _)| *i);
                let mut counts = [BucketCounts::default(); BUCKETS];
                for (i, b) in &total.buckets {
                    if let Some(c) = counts.get_mut(*i) {
                        *c = b.counts;
                    }
                }
                let knee = knee::knee(class, &counts);
                CurveWindow {
                    window: window.name,
                    seconds: covered(self.origin, now, window.slot, index).as_secs_f64(),
                    knee: KneeReport::of(knee, load_now),
                    buckets: total
                        .buckets
                        .iter()
                        .map(|(i, b)| BucketReport::of(*i, b, &targets, min))
                        .collect(),
                }
            })
            .collect();
        CurveReport {
            route: self.route.clone(),
            model: self.model.clone(),
            slo: self.slo.clone(),
            min_judged: min,
            load_now,
            windows,
        }
    }
}

/// Every curve, by (route, model, `slo` label): all bounded before they
/// get here (routes and classes by config, models by the label bounds).
/// A request finds its curve without a lock ([`Found`]); a curve is
/// created once.
#[derive(Debug)]
pub struct Capacity {
    origin: Instant,
    curves: Found<Curve, 3>,
}

impl Capacity {
    /// Curves whose windows' clock starts at `origin` (that of the live
    /// windows, so both slide together).
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            curves: Found::default(),
        }
    }

    /// The curve of (route, model, slo), created on first use. Called once
    /// per request, when its labels are final.
    pub fn curve(&self, route: &str, model: &str, slo: &str) -> Arc<Curve> {
        self.curves.get([route, model, slo], || Curve {
            route: route.to_owned(),
            model: model.to_owned(),
            slo: slo.to_owned(),
            origin: self.origin,
            rings: Mutex::default(),
        })
    }

    /// Every curve, sorted by (route, model, slo).
    pub fn curves(&self) -> Vec<Arc<Curve>> {
        let mut all = self.curves.values();
        all.sort_by(|a, b| (&a.route, &a.model, &a.slo).cmp(&(&b.route, &b.model, &b.slo)));
        all
    }

    /// How many curves there are.
    pub fn len(&self) -> usize {
        self.curves.len()
    }

    /// Whether there is no curve yet.
    pub fn is_empty(&self) -> bool {
        self.curves.is_empty()
    }
}

/// One curve over every window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CurveReport {
    pub route: String,
    pub model: String,
    pub slo: String,
    /// Judged requests a bucket needs to be believed.
    pub min_judged: u64,
    /// The load now, when known (the headroom is read against it).
    pub load_now: Option<u64>,
    /// One per window, shortest first.
    pub windows: Vec<CurveWindow>,
}

/// The curve over one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CurveWindow {
    pub window: &'static str,
    /// Seconds the window covers now.
    pub seconds: f64,
    pub knee: KneeReport,
    /// The buckets with at least one judged request, lowest load first.
    pub buckets: Vec<BucketReport>,
}

/// The knee of one window, and the headroom it leaves.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KneeReport {
    /// `measured`, `lower_bound`, `breaks_at_one` or `unknown`.
    pub state: &'static str,
    /// The knee (0 when even a load of 1 breaks); `None` when unknown.
    pub concurrency: Option<u64>,
    /// `measured` or `lower` (the gauges' `bound` label).
    pub bound: Option<&'static str>,
    /// The lowest load of the first bucket that breaks, when one does.
    pub first_break: Option<u64>,
    /// Knee minus the load now, when both are known.
    pub headroom: Option<i64>,
}

impl KneeReport {
    fn of(knee: Knee, load_now: Option<u64>) -> Self {
        let value = knee.value();
        Self {
            state: knee.as_str(),
            concurrency: value.map(|(v, _)| v),
            bound: value.map(|(_, b)| b.as_str()),
            first_break: match knee {
                Knee::Measured { first_break, .. } => Some(first_break),
                Knee::BreaksAtOne => Some(1),
                Knee::Unknown | Knee::LowerBound { .. } => None,
            },
            headroom: load_now
                .and_then(|load| knee::headroom(knee, load))
                .map(|h| h.concurrency),
        }
    }
}

/// One load bucket of one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BucketReport {
    /// The `load_le` label value: the upper bound, or `+Inf`.
    pub load_le: &'static str,
    /// The loads it holds: `load_min` to `load_max` (`None` above 2048).
    pub load_min: u64,
    pub load_max: Option<u64>,
    pub judged: u64,
    pub good: u64,
    /// `holds`, `breaks` or `too_few`.
    pub state: &'static str,
    /// Each target of the class, objectives first, then goodput.
    pub targets: Vec<TargetReport>,
}

impl BucketReport {
    fn of(index: usize, bucket: &Bucket, targets: &[Promise], min: u64) -> Self {
        let counts = &bucket.counts;
        Self {
            load_le: LABELS.get(index).copied().unwrap_or("+Inf"),
            load_min: knee::lower_bound(index),
            load_max: knee::upper_bound(index),
            judged: counts.judged,
            good: counts.good,
            state: knee::bucket_state(targets, min, counts).as_str(),
            targets: targets
                .iter()
                .map(|t| TargetReport {
                    objective: t.label(),
                    target: t.target,
                    met: counts.met(*t),
                    ratio: counts.ratio(*t),
                    percentile_seconds: t
                        .kind
                        .and_then(|k| bucket.latency[kind_index(k)].quantile(t.target)),
                })
                .collect(),
        }
    }
}

/// One target in one bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TargetReport {
    /// `ttft`, `tpot`, `e2el` or `goodput`.
    pub objective: &'static str,
    pub target: f64,
    /// Judged requests within the threshold (good ones, for goodput), and
    /// their share.
    pub met: u64,
    pub ratio: Option<f64>,
    /// The objective's latency at its target's percentile (p95 for 0.95),
    /// in seconds, within 1 %; `None` for goodput or without values.
    pub percentile_seconds: Option<f64>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::capacity::knee::tests::class;
    use crate::judge;
    use meter::{Outcome, TokenSource, Usage};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn stream(ttft: Duration) -> Summary {
        Summary {
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
            client_wait: Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 12,
            token_events: 10,
            first_token_event: Some(1),
            first_visible_event: Some(1),
            terminal_event: None,
            parse_errors: 0,
        }
    }

    fn sample(ttft: Duration) -> LoadSample {
        let s = stream(ttft);
        LoadSample::new(&class(), &s, judge(&class(), &s, false)).unwrap()
    }

    /// A 4-slot batch-limited upstream with 300 ms batches under closed
    /// loop load at `c`: four of every `c` requests get a slot at once, the
    /// others wait for a batch to end (TTFT 300 ms, or 600 ms past the
    /// 500 ms threshold).
    fn four_slot_ttft(c: u64, i: u64) -> Duration {
        let batches = if i % c < 4 { 1 } else { 2 };
        ms(300 * batches + i % 7)
    }

    #[tokio::test(start_paused = true)]
    async fn a_four_slot_upstream_has_its_knee_at_4_in_every_window() {
        let capacity = Capacity::new(Instant::now());
        let curve = capacity.curve("r", "m", "chat");
        for c in [1, 2, 3, 4, 5, 6, 8] {
            for i in 0..40 {
                curve.record(Instant::now(), c, &sample(four_slot_ttft(c, i)));
            }
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        let r = curve.report(Instant::now(), &class(), Some(3));
        for w in &r.windows {
            let name = w.window;
            assert_eq!(w.knee.state, "measured", "{name}");
            assert_eq!(w.knee.concurrency, Some(4), "{name}");
            assert_eq!(w.knee.bound, Some("measured"), "{name}");
            assert_eq!(w.knee.first_break, Some(5), "{name}");
            assert_eq!(w.knee.headroom, Some(1), "{name}");
        }
        // The 1m window (35 s of traffic) holds every bucket: 1 to 4, 5–6
        // (5 and 6 together), 7–8.
        let one = &r.windows[0];
        let labels: Vec<&str> = one.buckets.iter().map(|b| b.load_le).collect();
        assert_eq!(labels, ["1", "2", "3", "4", "6", "8"]);
        let six = &one.buckets[4];
        assert_eq!((six.load_min, six.load_max, six.judged), (5, Some(6), 80));
        assert_eq!(six.state, "breaks");
        // A quarter of them waited a batch: TTFT p95 is 600 ms and up.
        assert_eq!(six.targets[0].met, 60);
        let p95 = six.targets[0].percentile_seconds.unwrap();
        assert!((0.59..0.62).contains(&p95), "{p95}");
        let four = &one.buckets[3];
        assert_eq!((four.state, four.targets[0].ratio), ("holds", Some(1.0)));
        let measured = Knee::Measured {
            concurrency: 4,
            first_break: 5,
        };
        assert_eq!(
            curve.knees(Instant::now(), &class()),
            [("1m", measured), ("5m", measured), ("1h", measured)]
        );
        assert_eq!(r.min_judged, 20);
    }

    #[tokio::test(start_paused = true)]
    async fn the_windows_slide_and_what_leaves_them_is_not_counted() {
        let capacity = Capacity::new(Instant::now());
        let curve = capacity.curve("r", "m", "chat");
        // An overload at 8 first, then only light load.
        for _ in 0..40 {
            curve.record(Instant::now(), 8, &sample(ms(900)));
        }
        tokio::time::advance(Duration::from_secs(120)).await;
        for _ in 0..40 {
            curve.record(Instant::now(), 2, &sample(ms(100)));
        }
        let now = Instant::now();
        // The 1m window has only the light load: a lower bound.
        assert_eq!(
            curve.knee(now, 0, &class()),
            Knee::LowerBound { concurrency: 2 }
        );
        // The 5m window still has the overload above it.
        assert_eq!(
            curve.knee(now, 1, &class()),
            Knee::Measured {
                concurrency: 2,
                first_break: 7
            }
        );
        assert_eq!(curve.counts(now, 2)[knee::bucket_index(8)].judged, 40);
        let r = curve.report(now, &class(), None);
        assert_eq!(r.windows[0].knee.bound, Some("lower"));
        assert_eq!(r.windows[0].knee.headroom, None);
        assert_eq!(r.windows[0].buckets.len(), 1);
        // After an hour and a minute nothing is left.
        tokio::time::advance(Duration::from_secs(3660)).await;
        let r = curve.report(Instant::now(), &class(), Some(1));
        for w in &r.windows {
            assert!(w.buckets.is_empty(), "{}", w.window);
            assert_eq!((w.knee.state, w.knee.headroom), ("unknown", None));
        }
    }

    #[test]
    fn only_judged_requests_are_on_the_curve() {
        let c = class();
        let failed = Summary {
            outcome: Outcome::UpstreamError,
            ttft: None,
            e2el: None,
            tpot: None,
            elapsed: ms(100),
            ..stream(ms(100))
        };
        assert_eq!(
            LoadSample::new(&c, &failed, judge(&c, &failed, false)),
            None
        );
        let late = sample(ms(800));
        assert_eq!(
            late.counts,
            BucketCounts {
                judged: 1,
                good: 0,
                violations: [1, 0, 0]
            }
        );
        // Only the class's objectives are sketched.
        assert_eq!(late.values, [Some(ms(800)), None, None]);
    }

    #[tokio::test(start_paused = true)]
    async fn curves_are_kept_per_route_model_and_class() {
        let capacity = Capacity::new(Instant::now());
        capacity.curve("r", "b", "chat");
        capacity.curve("r", "a", "chat");
        let again = capacity.curve("r", "b", "chat");
        again.record(Instant::now(), 1, &sample(ms(1)));
        let curves = capacity.curves();
        let keys: Vec<(&str, &str, &str)> = curves
            .iter()
            .map(|c| (c.route(), c.model(), c.slo()))
            .collect();
        assert_eq!(keys, [("r", "a", "chat"), ("r", "b", "chat")]);
        assert_eq!(curves[1].counts(Instant::now(), 0)[0].judged, 1);
        assert_eq!(curves[0].counts(Instant::now(), 0)[0].judged, 0);
    }
}
