//! A mergeable quantile sketch with a relative error bound (DDSketch,
//! Masson et al., VLDB 2019), for the live latency percentiles of `/slo`.
//!
//! Values are durations in seconds. Each value `x` goes into the bin
//! `ceil(log_γ x)` with `γ = (1 + α) / (1 − α)`; a quantile is read as the
//! bin's midpoint `2γ^i / (γ + 1)`, which is within `α` (1 %) of every value
//! in the bin. Merging adds bin counts, so sketches of per-second buckets
//! and of single requests merge into windows without losing the bound.
//!
//! Why not a crate: `sketches-ddsketch` is the one maintained Rust DDSketch,
//! but it stores bins in a `Vec<f64>` from a fixed key offset and has no
//! way to bound the range we keep; this file is short, dense (bins are
//! `u32` counts over the range actually seen, usually a few dozen, the
//! first four without an allocation) and tested
//! below against exact quantiles.
//!
//! Values below [`MIN_VALUE`] (including the zero gaps of two token events
//! read from one frame) are counted in a zero bin and read as 0; values
//! above [`MAX_VALUE`] are clamped to it. That bounds a sketch to about
//! 1,300 bins whatever it is fed. This module does no I/O and reads no clock.

use std::time::Duration;

use smallvec::SmallVec;

/// Relative accuracy of every quantile read from a sketch.
pub const RELATIVE_ACCURACY: f64 = 0.01;
/// Smallest value kept apart from zero: 1 µs.
pub const MIN_VALUE: f64 = 1e-6;
/// Largest value kept as it is: a little over a day.
pub const MAX_VALUE: f64 = 1e5;

/// Bins a sketch holds without an allocation: one request's TTFT, TPOT or
/// E2EL is one.
const INLINE_BINS: usize = 4;
/// Bins a sketch makes room for when it outgrows those: the spread of a
/// stream's gaps, mostly, so that it grows once rather than bin by bin.
const SPREAD_BINS: usize = 32;

/// `ln γ`, with `γ = (1 + α) / (1 − α)`.
fn ln_gamma() -> f64 {
    ((1.0 + RELATIVE_ACCURACY) / (1.0 - RELATIVE_ACCURACY)).ln()
}

/// A DDSketch over durations in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sketch {
    /// Bin index of `bins[0]`.
    offset: i32,
    /// Counts of consecutive bins from `offset`; empty when nothing but
    /// zeros was added.
    bins: SmallVec<[u32; INLINE_BINS]>,
    /// Values below [`MIN_VALUE`].
    zeros: u64,
    count: u64,
    /// Exact extremes, so quantile estimates never leave the seen range.
    min: f64,
    max: f64,
}

impl Sketch {
    /// An empty sketch (allocates nothing until values arrive).
    pub fn new() -> Self {
        Self::default()
    }

    /// Values added so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds one duration.
    pub fn add(&mut self, value: Duration) {
        self.add_secs(value.as_secs_f64());
    }

    /// Adds one value in seconds (negative or NaN values count as zero).
    pub fn add_secs(&mut self, value: f64) {
        let value = if value.is_nan() {
            0.0
        } else {
            value.clamp(0.0, MAX_VALUE)
        };
        if self.count == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += 1;
        if value < MIN_VALUE {
            self.zeros += 1;
            return;
        }
        let index = (value.ln() / ln_gamma()).ceil() as i32;
        self.add_to_bin(index, 1);
    }

    fn add_to_bin(&mut self, index: i32, n: u32) {
        if self.bins.is_empty() {
            self.offset = index;
            self.bins.push(n);
            return;
        }
        let last = self.offset + self.bins.len() as i32 - 1;
        let width = (last.max(index) - self.offset.min(index)) as usize + 1;
        if width > self.bins.capacity() {
            self.bins.reserve(width.max(SPREAD_BINS) - self.bins.len());
        }
        if index < self.offset {
            let grow = (self.offset - index) as usize;
            self.bins.insert_many(0, std::iter::repeat_n(0, grow));
            self.offset = index;
        }
        let at = (index - self.offset) as usize;
        if at >= self.bins.len() {
            self.bins.resize(at + 1, 0);
        }
        self.bins[at] = self.bins[at].saturating_add(n);
    }

    /// Adds every value of `other` to this sketch.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            self.clone_from(other);
            return;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.zeros += other.zeros;
        if other.bins.is_empty() {
            return;
        }
        // Widen once to cover both ranges, then add slice to slice.
        let last = other.offset + other.bins.len() as i32 - 1;
        self.add_to_bin(other.offset, 0);
        self.add_to_bin(last, 0);
        let start = (other.offset - self.offset) as usize;
        for (mine, theirs) in self.bins[start..].iter_mut().zip(other.bins.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Every value added, as the sketch holds it: each bin's midpoint
    /// (within 1 % of each value in it, and within the range seen) with
    /// how many values it holds, the values below [`MIN_VALUE`] as 0.
    pub fn values(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        let gamma = ln_gamma().exp();
        let zeros = (self.zeros > 0).then_some((0.0, self.zeros));
        let bins = self.bins.iter().enumerate().filter(|(_, n)| **n > 0);
        zeros.into_iter().chain(bins.map(move |(i, n)| {
            let index = self.offset + i as i32;
            let midpoint = 2.0 * gamma.powi(index) / (gamma + 1.0);
            (midpoint.clamp(self.min, self.max), u64::from(*n))
        }))
    }

    /// The `q`-quantile (0 ≤ q ≤ 1) in seconds, `None` when empty: the value
    /// of rank `⌊q (n − 1)⌋` among the sorted values, within 1 % of it.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = (q * (self.count - 1) as f64).floor() as u64;
        // The extremes are known exactly.
        if rank == 0 {
            return Some(self.min);
        }
        if rank == self.count - 1 {
            return Some(self.max);
        }
        if rank < self.zeros {
            // Below 1 µs: the smallest value seen is as good as any.
            return Some(self.min);
        }
        let mut seen = self.zeros;
        let gamma = ln_gamma().exp();
        for (i, n) in self.bins.iter().enumerate() {
            seen += u64::from(*n);
            if seen > rank {
                let index = self.offset + i as i32;
                let estimate = 2.0 * gamma.powi(index) / (gamma + 1.0);
                return Some(estimate.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn values_are_each_value_within_the_bound() {
        let mut sketch = Sketch::new();
        let added = [0.0, 0.0, 0.0101, 0.02, 0.02, 1.5];
        for v in added {
            sketch.add_secs(v);
        }
        let values: Vec<(f64, u64)> = sketch.values().collect();
        assert_eq!(values.iter().map(|(_, n)| n).sum::<u64>(), 6);
        assert_eq!(values[0], (0.0, 2));
        let mut expanded = Vec::new();
        for (v, n) in values {
            expanded.extend(std::iter::repeat_n(v, n as usize));
        }
        for (got, want) in expanded.iter().zip(added) {
            assert!(
                (got - want).abs() <= RELATIVE_ACCURACY * want,
                "{got} {want}"
            );
        }
    }

    /// The exact value of rank `⌊q (n − 1)⌋`.
    fn exact(sorted: &[f64], q: f64) -> f64 {
        sorted[(q * (sorted.len() - 1) as f64).floor() as usize]
    }

    fn check(values: &[f64], sketch: &Sketch) {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sketch.count(), values.len() as u64);
        for q in [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0] {
            let want = exact(&sorted, q);
            let got = sketch.quantile(q).unwrap();
            let err = (got - want).abs();
            assert!(
                err <= RELATIVE_ACCURACY * want + 1e-12,
                "q={q}: got {got}, want {want} (relative error {})",
                err / want
            );
        }
    }

    /// A small deterministic generator (xorshift), so the distributions
    /// are the same on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn distributions() -> Vec<(&'static str, Vec<f64>)> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let uniform: Vec<f64> = (0..10_000).map(|_| 0.01 + rng.next() * 0.09).collect();
        // Exponential, mean 200 ms: a long tail.
        let exponential: Vec<f64> = (0..10_000)
            .map(|_| -0.2 * (1.0 - rng.next()).ln())
            .collect();
        // Log-normal over four decades (1 ms .. 10 s).
        let spread: Vec<f64> = (0..10_000)
            .map(|_| 10f64.powf(-3.0 + 4.0 * rng.next()))
            .collect();
        // Two modes: cache hits at 20 ms and misses at 1.5 s.
        let bimodal: Vec<f64> = (0..10_000)
            .map(|i| if i % 10 < 7 { 0.02 } else { 1.5 } * (1.0 + 0.05 * rng.next()))
            .collect();
        vec![
            ("uniform", uniform),
            ("exponential", exponential),
            ("spread", spread),
            ("bimodal", bimodal),
        ]
    }

    #[test]
    fn quantiles_are_within_the_relative_error_bound() {
        for (name, values) in distributions() {
            let mut sketch = Sketch::new();
            for v in &values {
                sketch.add_secs(*v);
            }
            eprintln!("{name}: {} bins", sketch.bins.len());
            check(&values, &sketch);
        }
    }

    #[test]
    fn merged_sketches_equal_one_sketch_of_all_values() {
        for (_, values) in distributions() {
            let mut whole = Sketch::new();
            let mut parts = vec![Sketch::new(); 7];
            for (i, v) in values.iter().enumerate() {
                whole.add_secs(*v);
                // Uneven parts with different ranges, merged in an order
                // that widens the target both downwards and upwards.
                parts[(i * i) % 7].add_secs(*v);
            }
            let mut merged = Sketch::new();
            for part in parts.iter().rev() {
                merged.merge(part);
            }
            assert_eq!(merged, whole);
            check(&values, &merged);
        }
    }

    #[test]
    fn zeros_small_and_huge_values_are_bounded() {
        let mut s = Sketch::new();
        assert_eq!(s.quantile(0.5), None);
        for _ in 0..3 {
            s.add(Duration::ZERO);
        }
        s.add_secs(1e-9);
        s.add_secs(f64::NAN);
        s.add_secs(-1.0);
        s.add_secs(0.5);
        s.add_secs(1e9);
        assert_eq!(s.count(), 8);
        assert_eq!(s.quantile(0.0), Some(0.0));
        assert_eq!(s.quantile(0.5), Some(0.0));
        assert_eq!(s.quantile(1.0), Some(MAX_VALUE));
        let p = s.quantile(6.0 / 7.0).unwrap();
        assert!((p - 0.5).abs() <= 0.005, "{p}");
        // The whole range fits in a bounded number of bins.
        let mut wide = Sketch::new();
        wide.add_secs(MIN_VALUE);
        wide.add_secs(MAX_VALUE * 10.0);
        assert!(wide.bins.len() < 1300, "{}", wide.bins.len());
    }

    #[test]
    fn a_single_value_reads_back_exactly() {
        // Clamping to the exact min and max makes a one-value sketch exact,
        // which the integration tests rely on for steady schedules.
        let mut s = Sketch::new();
        s.add(Duration::from_millis(37));
        for q in [0.0, 0.5, 0.99, 1.0] {
            assert_eq!(s.quantile(q), Some(0.037));
        }
    }

    #[test]
    fn a_value_takes_no_allocation_and_a_streams_spread_one() {
        let mut one = Sketch::new();
        one.add_secs(0.2);
        assert!(!one.bins.spilled());
        // Gaps from 10 to 14 ms: about 17 bins, room made once.
        let mut gaps = Sketch::new();
        let mut grown = 0;
        let mut capacity = gaps.bins.capacity();
        for k in 0..200 {
            gaps.add_secs(
                0.012
                    + 0.002 * f64::from((k * 37) % 100) / 100.0
                        * if k % 2 == 0 { 1.0 } else { -1.0 },
            );
            if gaps.bins.capacity() != capacity {
                grown += 1;
                capacity = gaps.bins.capacity();
            }
        }
        assert!(gaps.bins.len() > INLINE_BINS && gaps.bins.len() <= SPREAD_BINS);
        assert_eq!(grown, 1, "{} bins", gaps.bins.len());
    }
}
