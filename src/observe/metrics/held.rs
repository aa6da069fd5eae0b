//! The ITL gaps a request holds before its series see them.
//!
//! A stream's inter-token gaps are counted in the request's own state, not
//! on its shared series, so that a token event takes no lock and writes no
//! memory that another core writes: per bucket of the ITL histogram a
//! count, a sum and the largest gap, and, when native histograms are on,
//! the request's own native buckets. They are published on the request's
//! series when it ends and, while it streams, at the first token event
//! after the gaps held span [`PUBLISH_EVERY`]: a gap reaches `/metrics` at
//! most that long after it came, or, when the stream pauses before that,
//! with the next token event or the end (docs/metrics.md). A request whose
//! series wait for the model its response names (`deferred.rs`) holds its
//! gaps until they are known.
//!
//! The classic buckets are held in a local histogram of the prometheus
//! crate, which publishes with one atomic add per bucket touched. While
//! the series are not known, each bucket's gaps are kept as a count, a sum
//! and the largest, and observed on the local histogram once they are, as
//! their mean (or their largest, when rounding would carry the mean out of
//! the bucket): the histogram's buckets, count and sum come out as if each
//! gap had been observed when it came.

use prometheus::local::LocalHistogram;

use super::families::HistogramSeries;
use super::native::{Held, Shape};

/// How many seconds of gaps a streaming request holds before it publishes
/// them.
pub(super) const PUBLISH_EVERY: f64 = 1.0;

/// The ITL gaps of one request not yet on its series.
pub(super) struct HeldItl {
    classic: Classic,
    native: Option<Held>,
    /// How many gaps it holds, and the seconds they add up to.
    count: u64,
    span: f64,
}

/// Where a request holds its gaps' classic buckets.
enum Classic {
    /// Per bucket of the ITL histogram (its bounds, then `+Inf`): while its
    /// series are not known. Empty until the first gap.
    Tallies(Vec<Tally>),
    /// Its series' local histogram, once they are known: published by
    /// flushing it, and kept for the next time.
    Local(LocalHistogram),
}

#[derive(Clone, Copy, Default)]
struct Tally {
    count: u64,
    sum: f64,
    max: f64,
}

impl HeldItl {
    /// Nothing held, with native buckets of `native`'s shape when the
    /// series keep them.
    pub(super) fn new(native: Option<Shape>) -> Self {
        HeldItl {
            classic: Classic::Tallies(Vec::new()),
            native: native.map(Held::new),
            count: 0,
            span: 0.0,
        }
    }

    /// Holds a gap of `gap` seconds, in the local histogram of `series`
    /// when they are known, else in the bucket of `bounds` (the ITL
    /// histogram's upper bounds, ascending) it falls in; whether the gaps
    /// held now span [`PUBLISH_EVERY`].
    pub(super) fn hold(
        &mut self,
        bounds: &[f64],
        series: Option<&HistogramSeries>,
        gap: f64,
    ) -> bool {
        match (&mut self.classic, series) {
            (Classic::Local(local), _) => local.observe(gap),
            (Classic::Tallies(tallies), Some(series)) if tallies.is_empty() => {
                let local = series.classic.local();
                local.observe(gap);
                self.classic = Classic::Local(local);
            }
            (Classic::Tallies(tallies), _) => {
                if tallies.is_empty() {
                    *tallies = vec![Tally::default(); bounds.len() + 1];
                }
                let bucket = bounds.partition_point(|&le| le < gap);
                if let Some(t) = tallies.get_mut(bucket) {
                    t.count += 1;
                    t.sum += gap;
                    t.max = t.max.max(gap);
                }
            }
        }
        if let Some(native) = &mut self.native {
            native.observe(gap);
        }
        self.count += 1;
        self.span += gap;
        self.span >= PUBLISH_EVERY
    }

    /// Observes what it holds on `series` (whose classic buckets are
    /// `bounds`), and holds nothing after.
    pub(super) fn publish(&mut self, bounds: &[f64], series: &HistogramSeries) {
        if self.count == 0 {
            return;
        }
        // The native buckets first, as `HistogramSeries::observe` does.
        if let (Some(held), Some(native)) = (&mut self.native, &series.native) {
            native.publish(held);
        }
        if let Classic::Tallies(tallies) = &self.classic {
            let local = series.classic.local();
            for (value, n) in observations(tallies, bounds) {
                for _ in 0..n {
                    local.observe(value);
                }
            }
            self.classic = Classic::Local(local);
        }
        if let Classic::Local(local) = &self.classic {
            local.flush();
        }
        self.count = 0;
        self.span = 0.0;
    }
}

/// The observations that stand for `tallies`: per bucket, a value in it
/// (the mean of its gaps, so the sum is theirs) and how many times.
fn observations<'a>(
    tallies: &'a [Tally],
    bounds: &'a [f64],
) -> impl Iterator<Item = (f64, u64)> + 'a {
    tallies
        .iter()
        .enumerate()
        .filter(|(_, t)| t.count > 0)
        .map(|(i, t)| {
            let mean = t.sum / t.count as f64;
            let upper = bounds.get(i).copied().unwrap_or(f64::INFINITY);
            let lower = i.checked_sub(1).map_or(f64::NEG_INFINITY, |j| bounds[j]);
            // Rounding must not carry the mean out of its bucket.
            let value = if mean > lower && mean <= upper {
                mean
            } else {
                t.max
            };
            (value, t.count)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [f64; 3] = [0.01, 0.1, 1.0];

    #[test]
    fn gaps_are_observed_in_their_buckets_with_their_sum() {
        let mut held = HeldItl::new(None);
        for gap in [0.005, 0.02, 0.03, 0.1, 5.0] {
            held.hold(&BOUNDS, None, gap);
        }
        let Classic::Tallies(tallies) = &held.classic else {
            panic!("no series: tallies");
        };
        let observed: Vec<(f64, u64)> = observations(tallies, &BOUNDS).collect();
        assert_eq!(observed.len(), 3);
        assert_eq!(observed[0], (0.005, 1));
        assert_eq!(observed[2], (5.0, 1));
        let (mean, n) = observed[1];
        assert_eq!(n, 3);
        assert!((mean * 3.0 - 0.15).abs() < 1e-12 && mean > 0.01 && mean <= 0.1);
    }

    #[test]
    fn a_second_of_gaps_is_due() {
        let mut held = HeldItl::new(None);
        let due: Vec<bool> = [0.3, 0.3, 0.3, 0.2, 0.05]
            .iter()
            .map(|&gap| held.hold(&BOUNDS, None, gap))
            .collect();
        assert_eq!(due, [false, false, false, true, true]);
    }
}
