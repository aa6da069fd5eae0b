//! What a request observes before the labels of its histograms are final.
//!
//! A request that named no model takes its `model` label from the model its
//! response names, which llama.cpp's stream names only in its terminal
//! event: until then its time to headers, TTFT and ITL gaps are kept here,
//! and observed on its series once they are known. The gaps are kept as a
//! count and a sum per bucket of the ITL histogram, so a long stream holds
//! no more than a short one, and the histogram's buckets, count and sum come
//! out as if each gap had been observed when it came.

use std::sync::Arc;

/// The observations of a request whose series are not known yet.
pub(super) struct Deferred {
    pub(super) headers: Option<f64>,
    pub(super) ttft: Option<f64>,
    pub(super) ttft_visible: Option<f64>,
    /// The ITL buckets' upper bounds (`le`), ascending.
    bounds: Arc<[f64]>,
    /// Per bucket, and one past the last bound (`+Inf`): how many gaps,
    /// their sum and the largest.
    gaps: Vec<Tally>,
}

#[derive(Clone, Copy, Default)]
struct Tally {
    count: u64,
    sum: f64,
    max: f64,
}

impl Deferred {
    /// Nothing observed yet, with the ITL histogram's `bounds`.
    pub(super) fn new(bounds: Arc<[f64]>) -> Self {
        let gaps = vec![Tally::default(); bounds.len() + 1];
        Self {
            headers: None,
            ttft: None,
            ttft_visible: None,
            bounds,
            gaps,
        }
    }

    /// Keeps an ITL gap of `gap` seconds.
    pub(super) fn itl(&mut self, gap: f64) {
        let bucket = self.bounds.partition_point(|&le| le < gap);
        if let Some(t) = self.gaps.get_mut(bucket) {
            t.count += 1;
            t.sum += gap;
            t.max = t.max.max(gap);
        }
    }

    /// The ITL observations to make: per bucket, a value in it (the mean of
    /// its gaps, so the sum is theirs) and how many times.
    pub(super) fn itl_observations(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.gaps
            .iter()
            .enumerate()
            .filter(|(_, t)| t.count > 0)
            .map(|(i, t)| {
                let mean = t.sum / t.count as f64;
                let upper = self.bounds.get(i).copied().unwrap_or(f64::INFINITY);
                let lower = i
                    .checked_sub(1)
                    .map_or(f64::NEG_INFINITY, |j| self.bounds[j]);
                // Rounding must not carry the mean out of its bucket.
                let value = if mean > lower && mean <= upper {
                    mean
                } else {
                    t.max
                };
                (value, t.count)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_replay_into_their_buckets_with_their_sum() {
        let mut d = Deferred::new(Arc::from([0.01, 0.1, 1.0].as_slice()));
        for gap in [0.005, 0.02, 0.03, 0.1, 5.0] {
            d.itl(gap);
        }
        let replay: Vec<(f64, u64)> = d.itl_observations().collect();
        assert_eq!(replay.len(), 3);
        assert_eq!(replay[0], (0.005, 1));
        assert_eq!(replay[2], (5.0, 1));
        let (mean, n) = replay[1];
        assert_eq!(n, 3);
        assert!((mean * 3.0 - 0.15).abs() < 1e-12 && mean > 0.01 && mean <= 0.1);
    }
}
