//! A class's error budget: verdict counts over its compliance window, as
//! far back as the process has seen, in a ring of [`SLOTS`] slots of a
//! sixtieth of that window each (counts only, no sketches, so a window of
//! 30 days costs what an hour does).

use std::time::Duration;

use tokio::time::Instant;

use super::ring::{Merge, Ring, SLOTS, covered, slot_index};
use crate::aggregate::Aggregate;

/// Verdict counts over a class's compliance window (its error budget
/// period), as far back as the process has seen: [`SLOTS`] slots of a
/// sixtieth of the window each (counts only, no sketches).
#[derive(Debug, Default)]
pub(super) struct Budget {
    /// Width of a slot; zero until the first judged request.
    slot: Duration,
    ring: Ring<BudgetCounts>,
}

/// Judged requests over a span: good, bad, and those that violated each
/// objective (by [`kind_index`](crate::aggregate::kind_index)).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BudgetCounts {
    pub(super) good: u64,
    pub(super) bad: u64,
    pub(super) violations: [u64; 3],
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

    /// Adds the verdicts of `a`, judged against a class whose window is
    /// `window`, at `now`.
    pub(super) fn add(&mut self, origin: Instant, now: Instant, window: Duration, a: &Aggregate) {
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
    pub(super) fn total(
        &self,
        origin: Instant,
        now: Instant,
        window: Duration,
    ) -> (BudgetCounts, Duration) {
        let slot = Self::slot_for(window);
        let index = slot_index(origin, now, slot);
        let mut total = BudgetCounts::default();
        if slot == self.slot {
            self.ring.collect(index, &mut total);
        }
        (total, covered(origin, now, slot, index))
    }
}
