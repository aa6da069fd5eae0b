//! The ring of time slots every window is made of: [`SLOTS`] slots of one
//! width, each tagged with the time slot it holds, so that a window slides
//! by overwriting its oldest slot rather than by sweeping; the windows the
//! live series keep ([`WINDOWS`]), and the arithmetic of slot indexes.
//!
//! A ring knows nothing of series, classes or reports: it adds up what its
//! slots hold ([`Merge`]) and answers for the slots of a span.

use std::time::Duration;

use tokio::time::Instant;

use crate::aggregate::Aggregate;

/// Slots per ring.
pub(super) const SLOTS: u64 = 60;

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
        if let Some(slot) = self.slot(index) {
            slot.merge_from(item);
        }
    }

    /// The slot of time slot `index`, emptied first when it held an
    /// earlier one, to add to in place; `None` when `index` is a whole
    /// ring behind the slot's time (outside the window anyway).
    pub(crate) fn slot(&mut self, index: u64) -> Option<&mut T> {
        if self.slots.is_empty() {
            self.slots = vec![(0, T::default()); SLOTS as usize];
        }
        let (tag, slot) = &mut self.slots[(index % SLOTS) as usize];
        let want = index + 1;
        if *tag > want {
            return None;
        }
        if *tag < want {
            *tag = want;
            *slot = T::default();
        }
        Some(slot)
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
    pub(super) fn visit_between(&self, from: u64, to: u64, f: &mut dyn FnMut(&T)) {
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

/// The index of the slot of `width` holding `now`, counted from `origin`.
pub(crate) fn slot_index(origin: Instant, now: Instant, width: Duration) -> u64 {
    let elapsed = now.saturating_duration_since(origin);
    (elapsed.as_nanos() / width.as_nanos()) as u64
}

/// How much of a ring of [`SLOTS`] slots of `slot` ending at slot `index`
/// lies between the origin and `now`.
pub(crate) fn covered(origin: Instant, now: Instant, slot: Duration, index: u64) -> Duration {
    let elapsed = now.saturating_duration_since(origin);
    let oldest = slot.saturating_mul((index + 1).saturating_sub(SLOTS) as u32);
    elapsed.saturating_sub(oldest)
}
