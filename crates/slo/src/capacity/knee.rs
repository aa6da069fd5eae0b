//! The load buckets, what makes a bucket hold, the knee and the headroom:
//! pure functions of counts, by the rules of docs/metrics.md ("The
//! latency–load curve and its knee").
//!
//! The knee is decided from counts alone (judged, good, and violations per
//! objective in each bucket), never from a percentile estimate: "TTFT p95 ≤
//! 500 ms holds in a bucket" is "at least 95 % of the bucket's judged
//! requests had TTFT ≤ 500 ms". Counts add up across time slots and across
//! replicas, so the same rule gives one replica's knee here and the fleet's
//! in the recording rules (`rules/fleet.rs`), from the same counters.

use serde::Serialize;

use crate::class::{ObjectiveKind, SloClass};

/// Upper bounds of the finite load buckets: every load up to 4, then two
/// buckets per doubling (×1.5, ×1.33), up to 2048; above is one overflow
/// bucket. A knee of 4 is told from 5–6 and 7–8; a bucket's upper bound
/// is less than 1.5 times its lowest load, so the knee read from a bucket
/// is within that of every load in it; and a batch size (a power of two)
/// is always a bucket's upper bound, so a knee at a batch limit is read
/// exactly.
pub const BOUNDS: [u64; 22] = [
    1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
];

/// Load buckets: the finite ones and the overflow bucket.
pub const BUCKETS: usize = BOUNDS.len() + 1;

/// Each bucket's `load_le` label value: its upper bound, `+Inf` for the
/// overflow bucket.
pub const LABELS: [&str; BUCKETS] = [
    "1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "48", "64", "96", "128", "192", "256",
    "384", "512", "768", "1024", "1536", "2048", "+Inf",
];

/// Fewest judged requests a bucket needs before it is believed, whatever
/// the targets (see [`min_judged`]).
pub const MIN_JUDGED: u64 = 20;

/// The bucket of a load at arrival. A load of 0 (an engine scrape that saw
/// nothing running or waiting) is counted as 1: the request itself was
/// there.
pub fn bucket_index(load: u64) -> usize {
    BOUNDS.partition_point(|&bound| bound < load)
}

/// The `load_le` label value of the bucket of `load`.
pub fn load_label(load: u64) -> &'static str {
    LABELS[bucket_index(load).min(BUCKETS - 1)]
}

/// The smallest load of bucket `index`.
pub fn lower_bound(index: usize) -> u64 {
    match index {
        0 => 1,
        i => BOUNDS.get(i - 1).map_or(u64::MAX, |b| b + 1),
    }
}

/// The largest load of bucket `index`; `None` for the overflow bucket.
pub fn upper_bound(index: usize) -> Option<u64> {
    BOUNDS.get(index).copied()
}

/// What a class promises that a bucket can meet or break: each objective's
/// target, and the goodput target when the class sets one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Promise {
    /// The objective, `None` for goodput.
    pub kind: Option<ObjectiveKind>,
    /// Share of the bucket's judged requests that must meet it.
    pub target: f64,
}

impl Promise {
    /// `ttft`, `tpot`, `e2el` or `goodput`.
    pub fn label(self) -> &'static str {
        self.kind.map_or("goodput", ObjectiveKind::as_str)
    }
}

/// The promises of `class` (each objective's target, then goodput's), objectives
/// first in label order.
pub fn promises(class: &SloClass) -> Vec<Promise> {
    class
        .objectives
        .iter()
        .map(|o| Promise {
            kind: Some(o.kind),
            target: o.target,
        })
        .chain(
            class
                .goodput
                .target
                .map(|target| Promise { kind: None, target }),
        )
        .collect()
}

/// Fewest judged requests for a bucket of `class` to be believed: at least
/// [`MIN_JUDGED`], and enough that every target allows one miss (`⌈1 / (1 −
/// target)⌉`: 20 for p95, 100 for p99). With fewer, a single slow request
/// would break the bucket, and a bucket would be judged on one request.
pub fn min_judged(class: &SloClass) -> u64 {
    promises(class)
        .iter()
        .map(|t| one_miss(t.target))
        .fold(MIN_JUDGED, u64::max)
}

/// `⌈1 / (1 − target)⌉`, without the float noise that makes 1 / 0.05 a
/// hair above 20.
fn one_miss(target: f64) -> u64 {
    if !(0.0..1.0).contains(&target) {
        return MIN_JUDGED;
    }
    (1.0 / (1.0 - target) - 1e-9).ceil() as u64
}

/// Judged requests of one load bucket: how many, how many were good, and
/// how many exceeded each objective's threshold. They add up (across time
/// slots, across replicas), which is what makes the knee of several
/// replicas computable from their counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BucketCounts {
    pub judged: u64,
    pub good: u64,
    /// By [`ObjectiveKind`] in [`ObjectiveKind::ALL`] order.
    pub violations: [u64; 3],
}

impl BucketCounts {
    /// Adds `other` into these counts.
    pub fn add(&mut self, other: &BucketCounts) {
        self.judged += other.judged;
        self.good += other.good;
        for (mine, theirs) in self.violations.iter_mut().zip(other.violations) {
            *mine += theirs;
        }
    }

    /// Judged requests that met `target` (good ones, for goodput).
    pub fn met(&self, target: Promise) -> u64 {
        match target.kind {
            Some(kind) => self
                .judged
                .saturating_sub(self.violations[kind_index(kind)]),
            None => self.good,
        }
    }

    /// Share of judged requests that met `target`; `None` when none was
    /// judged.
    pub fn ratio(&self, target: Promise) -> Option<f64> {
        (self.judged > 0).then(|| self.met(target) as f64 / self.judged as f64)
    }
}

pub(crate) fn kind_index(kind: ObjectiveKind) -> usize {
    match kind {
        ObjectiveKind::Ttft => 0,
        ObjectiveKind::Tpot => 1,
        ObjectiveKind::E2el => 2,
    }
}

/// Where one bucket stands against its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketState {
    /// Fewer judged requests than [`min_judged`]: not believed either way.
    TooFew,
    /// Enough requests, and every target met: `met / judged ≥ target` (a
    /// share exactly at the target holds, as a value at a threshold does).
    Holds,
    /// Enough requests, and at least one target missed.
    Breaks,
}

impl BucketState {
    /// `too_few`, `holds` or `breaks`.
    pub fn as_str(self) -> &'static str {
        match self {
            BucketState::TooFew => "too_few",
            BucketState::Holds => "holds",
            BucketState::Breaks => "breaks",
        }
    }
}

/// Where `counts` stand against `targets` with `min` judged requests
/// needed.
pub fn bucket_state(targets: &[Promise], min: u64, counts: &BucketCounts) -> BucketState {
    if counts.judged < min.max(1) {
        return BucketState::TooFew;
    }
    let missed = targets
        .iter()
        .any(|t| counts.ratio(*t).is_some_and(|r| r < t.target));
    if missed {
        BucketState::Breaks
    } else {
        BucketState::Holds
    }
}

/// Whether a knee value is the knee or only a bound on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// A bucket above it breaks: the knee is this value, at the buckets'
    /// resolution (and below the first breaking bucket).
    Measured,
    /// No bucket above it breaks (traffic never went past it, or too few
    /// requests did): the knee is at least this value.
    Lower,
}

impl Bound {
    /// The `bound` label value: `measured` or `lower`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Measured => "measured",
            Bound::Lower => "lower",
        }
    }
}

/// The largest load at arrival at which every target of a class still
/// holds, as far as the buckets tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knee {
    /// No bucket with enough requests holds below the first one that
    /// breaks (or no bucket has enough requests, or the class has no
    /// targets): nothing is claimed.
    Unknown,
    /// Every bucket up to `concurrency` that has enough requests holds, the
    /// one ending at `concurrency` among them, and the bucket starting at
    /// `first_break` breaks (buckets between them have too few requests).
    Measured { concurrency: u64, first_break: u64 },
    /// The same, but no bucket above `concurrency` breaks: the knee is at
    /// least `concurrency`.
    LowerBound { concurrency: u64 },
    /// Even a load of 1 breaks a target: the knee is 0.
    BreaksAtOne,
}

impl Knee {
    /// The knee's value and whether it is measured or a lower bound;
    /// `None` when unknown. Breaking at 1 is the measured value 0.
    pub fn value(self) -> Option<(u64, Bound)> {
        match self {
            Knee::Unknown => None,
            Knee::Measured { concurrency, .. } => Some((concurrency, Bound::Measured)),
            Knee::LowerBound { concurrency } => Some((concurrency, Bound::Lower)),
            Knee::BreaksAtOne => Some((0, Bound::Measured)),
        }
    }

    /// `measured`, `lower_bound`, `breaks_at_one` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Knee::Unknown => "unknown",
            Knee::Measured { .. } => "measured",
            Knee::LowerBound { .. } => "lower_bound",
            Knee::BreaksAtOne => "breaks_at_one",
        }
    }
}

/// The knee of `class` from the counts of each load bucket (in bucket
/// order, [`BUCKETS`] of them; missing ones count as empty).
///
/// The first bucket that breaks ends the search: the knee is the upper
/// bound of the highest bucket below it that holds (the overflow bucket,
/// which has none, gives its lower bound, always as a lower bound).
/// Buckets above the first break are not read, even if they hold: load
/// that breaks a class lower down says more about capacity than a noisy
/// bucket above it.
pub fn knee(class: &SloClass, buckets: &[BucketCounts]) -> Knee {
    let targets = promises(class);
    if targets.is_empty() {
        return Knee::Unknown;
    }
    let min = min_judged(class);
    let states: Vec<BucketState> = buckets
        .iter()
        .take(BUCKETS)
        .map(|c| bucket_state(&targets, min, c))
        .collect();
    let first_break = states.iter().position(|s| *s == BucketState::Breaks);
    let below = &states[..first_break.unwrap_or(states.len())];
    let held = below.iter().rposition(|s| *s == BucketState::Holds);
    match (held, first_break) {
        (Some(h), Some(f)) => Knee::Measured {
            concurrency: upper_bound(h).unwrap_or_else(|| lower_bound(h)),
            first_break: lower_bound(f),
        },
        (Some(h), None) => Knee::LowerBound {
            concurrency: upper_bound(h).unwrap_or_else(|| lower_bound(h)),
        },
        (None, Some(0)) => Knee::BreaksAtOne,
        (None, _) => Knee::Unknown,
    }
}

/// How much more concurrency the class takes before passing its knee:
/// the knee minus the load now (requests in flight now, or the engine's
/// running and waiting requests at its latest scrape). 0 at the knee,
/// negative past it; a lower bound when the knee is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    pub concurrency: i64,
    pub bound: Bound,
}

/// The headroom left by `knee` at `load_now`; `None` when the knee is
/// unknown.
pub fn headroom(knee: Knee, load_now: u64) -> Option<Headroom> {
    let (value, bound) = knee.value()?;
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Some(Headroom {
        concurrency: signed(value).saturating_sub(signed(load_now)),
        bound,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::class::{Goodput, Objective};

    /// Class `chat`, TTFT p95 ≤ 500 ms, no goodput target: the class the
    /// tests of the curves judge by (`curve.rs`'s too).
    pub(crate) fn class() -> SloClass {
        SloClass {
            name: "chat".into(),
            description: String::new(),
            window: crate::class::DEFAULT_WINDOW,
            objectives: vec![Objective {
                kind: ObjectiveKind::Ttft,
                threshold: Duration::from_millis(500),
                target: 0.95,
            }],
            goodput: Goodput {
                require: vec![ObjectiveKind::Ttft],
                target: None,
            },
            per_tenant_alerts: false,
            exclude_slow_readers: false,
        }
    }

    /// `judged` requests of which `late` exceeded TTFT (and were bad).
    fn counts(judged: u64, late: u64) -> BucketCounts {
        BucketCounts {
            judged,
            good: judged - late,
            violations: [late, 0, 0],
        }
    }

    /// Buckets from `(load, judged, late)` rows.
    fn curve(rows: &[(u64, u64, u64)]) -> Vec<BucketCounts> {
        let mut buckets = vec![BucketCounts::default(); BUCKETS];
        for &(load, judged, late) in rows {
            buckets[bucket_index(load)].add(&counts(judged, late));
        }
        buckets
    }

    #[test]
    fn buckets_are_log_spaced_and_fine_at_the_bottom() {
        let cases = [
            (0, "1"),
            (1, "1"),
            (2, "2"),
            (3, "3"),
            (4, "4"),
            (5, "6"),
            (6, "6"),
            (7, "8"),
            (8, "8"),
            (9, "12"),
            (13, "16"),
            (2048, "2048"),
            (2049, "+Inf"),
            (u64::MAX, "+Inf"),
        ];
        for (load, label) in cases {
            assert_eq!(load_label(load), label, "{load}");
        }
        for (i, label) in LABELS.iter().enumerate() {
            let shown = upper_bound(i).map_or("+Inf".to_owned(), |b| b.to_string());
            assert_eq!(*label, shown);
            assert_eq!(bucket_index(lower_bound(i)), i);
            if let Some(upper) = upper_bound(i) {
                assert_eq!(bucket_index(upper), i);
                // A bucket's upper bound is under 1.5 times its lowest load.
                assert!(2 * upper < 3 * lower_bound(i), "{label}");
            }
        }
        assert_eq!(lower_bound(BUCKETS - 1), 2049);
    }

    #[test]
    fn enough_requests_for_one_miss_under_every_target() {
        assert_eq!(min_judged(&class()), 20);
        let mut c = class();
        c.objectives[0].target = 0.99;
        assert_eq!(min_judged(&c), 100);
        c.objectives[0].target = 0.5;
        assert_eq!(min_judged(&c), MIN_JUDGED);
        c.goodput.target = Some(0.999);
        assert_eq!(min_judged(&c), 1000);
    }

    #[test]
    fn a_share_at_the_target_holds_and_one_below_breaks() {
        let targets = promises(&class());
        assert_eq!(
            bucket_state(&targets, 20, &counts(20, 1)),
            BucketState::Holds
        );
        assert_eq!(
            bucket_state(&targets, 20, &counts(20, 2)),
            BucketState::Breaks
        );
        assert_eq!(
            bucket_state(&targets, 20, &counts(19, 0)),
            BucketState::TooFew
        );
        assert_eq!(
            bucket_state(&targets, 20, &counts(0, 0)),
            BucketState::TooFew
        );
    }

    /// The shape of a 4-slot batch-limited upstream under closed-loop load
    /// at concurrency 1, 2, 3, 4, 5, 6, 8: TTFT holds while every request
    /// gets a slot, and from 5 on, requests wait a whole batch.
    #[test]
    fn four_slots_put_the_knee_at_4() {
        let c = curve(&[
            (1, 40, 0),
            (2, 40, 0),
            (3, 40, 1),
            (4, 40, 2),
            (5, 40, 10),
            (6, 40, 16),
            (8, 40, 20),
        ]);
        let knee = knee(&class(), &c);
        assert_eq!(
            knee,
            Knee::Measured {
                concurrency: 4,
                first_break: 5
            }
        );
        assert_eq!(knee.value(), Some((4, Bound::Measured)));
        let at = |load| headroom(knee, load).unwrap().concurrency;
        assert_eq!([at(1), at(4), at(6), at(8)], [3, 0, -2, -4]);
    }

    #[test]
    fn too_few_requests_is_unknown() {
        // Below 20 per bucket nothing is believed, holding or breaking.
        assert_eq!(
            knee(&class(), &curve(&[(1, 19, 0), (2, 10, 0), (8, 19, 19)])),
            Knee::Unknown
        );
        assert_eq!(knee(&class(), &curve(&[])), Knee::Unknown);
        assert_eq!(headroom(Knee::Unknown, 3), None);
        // A break with nothing believed below it: no guess either.
        assert_eq!(
            knee(&class(), &curve(&[(1, 5, 0), (6, 40, 30)])),
            Knee::Unknown
        );
    }

    #[test]
    fn traffic_that_never_reached_the_knee_gives_a_lower_bound() {
        let c = curve(&[(1, 40, 0), (2, 40, 0), (3, 40, 0), (5, 5, 5)]);
        let knee = knee(&class(), &c);
        assert_eq!(knee, Knee::LowerBound { concurrency: 3 });
        assert_eq!(
            headroom(knee, 2),
            Some(Headroom {
                concurrency: 1,
                bound: Bound::Lower
            })
        );
        // The overflow bucket has no upper bound: its lower one, as a
        // lower bound.
        let high = curve(&[(5000, 40, 0)]);
        assert_eq!(
            super::knee(&class(), &high),
            Knee::LowerBound { concurrency: 2049 }
        );
    }

    #[test]
    fn breaking_at_1_is_a_measured_0() {
        let knee = knee(&class(), &curve(&[(1, 40, 10), (2, 40, 0)]));
        assert_eq!(knee, Knee::BreaksAtOne);
        assert_eq!(knee.value(), Some((0, Bound::Measured)));
        assert_eq!(headroom(knee, 2).unwrap().concurrency, -2);
    }

    #[test]
    fn the_first_break_ends_the_search_and_gaps_keep_the_knee_low() {
        // 3 breaks: 4 holding above it is noise, not capacity.
        let c = curve(&[(1, 40, 0), (2, 40, 0), (3, 40, 10), (4, 40, 0)]);
        assert_eq!(
            knee(&class(), &c),
            Knee::Measured {
                concurrency: 2,
                first_break: 3
            }
        );
        // 5–6 has too few requests: the knee is the 4 that was seen to
        // hold, and the first break starts at 7.
        let c = curve(&[(4, 40, 0), (5, 3, 3), (7, 40, 20)]);
        assert_eq!(
            knee(&class(), &c),
            Knee::Measured {
                concurrency: 4,
                first_break: 7
            }
        );
        // A wide bucket's knee is its upper bound.
        let c = curve(&[(10, 40, 0), (14, 40, 20)]);
        assert_eq!(knee(&class(), &c).value(), Some((12, Bound::Measured)));
    }

    /// The recording rules (`rules/fleet.rs`) put the knee another way: the
    /// largest bound of a holding bucket with no breaking bucket below it,
    /// or 0 when the first bucket breaks; `measured` when any bucket
    /// breaks. Both agree on every mix of states of the first six buckets.
    #[test]
    fn the_rules_formulation_agrees_with_the_rule() {
        let (too_few, holds, breaks) = (counts(0, 0), counts(40, 0), counts(40, 40));
        for code in 0..3usize.pow(6) {
            let mut buckets = vec![BucketCounts::default(); BUCKETS];
            let mut states = Vec::new();
            for (i, bucket) in buckets.iter_mut().take(6).enumerate() {
                let state = code / 3usize.pow(i as u32) % 3;
                *bucket = [too_few, holds, breaks][state];
                states.push(state);
            }
            let broken_below = |i: usize| states[..i].contains(&2);
            let terms = (0..6)
                .filter(|&i| states[i] == 1 && !broken_below(i))
                .map(|i| upper_bound(i).unwrap())
                .chain((states[0] == 2).then_some(0));
            let bound = if states.contains(&2) {
                Bound::Measured
            } else {
                Bound::Lower
            };
            let rules = terms.max().map(|v| (v, bound));
            assert_eq!(knee(&class(), &buckets).value(), rules, "{states:?}");
        }
    }

    #[test]
    fn the_goodput_target_is_a_target_too() {
        let mut c = class();
        c.goodput.target = Some(0.9);
        // TTFT always met, but failures make a tenth of load 2 bad... and
        // a fifth of load 3.
        let b = |judged, good| BucketCounts {
            judged,
            good,
            violations: [0; 3],
        };
        let mut buckets = vec![BucketCounts::default(); BUCKETS];
        buckets[0] = b(40, 40);
        buckets[1] = b(40, 36);
        buckets[2] = b(40, 32);
        assert_eq!(
            knee(&c, &buckets),
            Knee::Measured {
                concurrency: 2,
                first_break: 3
            }
        );
        // A class with no target has no knee.
        let mut none = class();
        none.objectives.clear();
        assert_eq!(knee(&none, &buckets), Knee::Unknown);
    }
}
