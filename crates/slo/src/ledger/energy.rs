//! The energy counters of a GPU set, one per GPU, by what identifies the
//! GPU on its page (docs/metrics.md, "Chargeback", Power).
//!
//! Each GPU's counter is compared with its own previous value, never a sum
//! over the set, so a GPU that joins the set brings no lifetime energy and
//! one that leaves is no reset. A counter is news only when it moves: a
//! page that serves cached samples (dcgm-exporter refreshes its fields on
//! its own interval) repeats the value between refreshes, and the growth a
//! refresh shows belongs to the whole span since the counter last moved.
//!
//! A growth whose power over that span is above [`MAX_WATTS_PER_GPU`] is
//! an implausible sample: counted, skipped, never charged. The baseline
//! stays where it was, so a single bad sample followed by good ones loses
//! nothing; a second implausible one in a row takes the counter's new
//! value as the baseline (the counter really jumped). A counter that goes
//! back is a reset (a driver reload): counted, and the baseline starts
//! again from its new value.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// One selected GPU of a reading of the set's page, as the ledger needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    /// What identifies the GPU on its page (its `UUID`, else its host and
    /// index).
    pub id: Arc<str>,
    /// Its energy counter, millijoules since its driver loaded.
    pub energy_millijoules: Option<f64>,
    /// Its power usage, watts.
    pub power_watts: Option<f64>,
}

/// No GPU draws more: a counter's growth above this many watts over the
/// span since it last moved is an implausible sample.
pub const MAX_WATTS_PER_GPU: f64 = 5_000.0;

/// One GPU's counter.
#[derive(Debug, Clone, Copy)]
struct Counter {
    /// Millijoules, as last taken for the baseline.
    millijoules: f64,
    /// When it last moved (or was first read).
    moved: Instant,
    /// When it was last read.
    read: Instant,
    /// An implausible value seen at the last reading.
    suspect: bool,
}

impl Counter {
    fn new(millijoules: f64, at: Instant) -> Self {
        Self {
            millijoules,
            moved: at,
            read: at,
            suspect: false,
        }
    }
}

/// What one reading of the set's page told.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct News {
    /// The growth of the counters that moved, joules.
    pub(super) joules: f64,
    /// Whether some counter moved plausibly.
    pub(super) moved: bool,
    /// Whether some counter started again (after its previous reading
    /// went stale, a reset or a jump): the span since the counters last
    /// moved has no known energy.
    pub(super) rebased: bool,
    /// The power usage of the GPUs without a counter, watts, when each
    /// of them reports it; `None` when there are none or one does not.
    pub(super) watts: Option<f64>,
    pub(super) implausible: u64,
    pub(super) resets: u64,
}

/// The counters of the set's GPUs, by identity.
#[derive(Debug, Default)]
pub(super) struct Counters {
    gpus: HashMap<Arc<str>, Counter>,
}

impl Counters {
    /// Whether some GPU of the set has a counter baseline.
    pub(super) fn counting(&self) -> bool {
        !self.gpus.is_empty()
    }

    /// Forgets every baseline: the next reading starts them again.
    pub(super) fn clear(&mut self) {
        self.gpus.clear();
    }

    /// Takes the reading of `gpus` at `at`; a baseline older than
    /// `fresh_for` starts again.
    pub(super) fn read(&mut self, at: Instant, gpus: &[GpuSample], fresh_for: Duration) -> News {
        let mut news = News::default();
        let mut watts = Some(0.0);
        let mut without_counter = 0;
        let mut seen: HashMap<Arc<str>, Counter> = HashMap::with_capacity(gpus.len());
        for gpu in gpus {
            let Some(mj) = gpu
                .energy_millijoules
                .filter(|v| v.is_finite() && *v >= 0.0)
            else {
                without_counter += 1;
                let power = gpu.power_watts.filter(|w| w.is_finite() && *w >= 0.0);
                watts = watts.zip(power).map(|(sum, w)| sum + w);
                continue;
            };
            let counter = match self.gpus.get(&gpu.id) {
                None => Counter::new(mj, at),
                Some(c) if at.saturating_duration_since(c.read) > fresh_for => {
                    news.rebased = true;
                    Counter::new(mj, at)
                }
                Some(c) => step(*c, mj, at, &mut news),
            };
            seen.insert(gpu.id.clone(), counter);
        }
        // The GPUs not on this reading are gone from the set: no reset.
        self.gpus = seen;
        news.watts = watts.filter(|_| without_counter > 0);
        news
    }
}

/// A known counter read again as `mj` at `at`.
fn step(c: Counter, mj: f64, at: Instant, news: &mut News) -> Counter {
    if mj == c.millijoules {
        return Counter {
            read: at,
            suspect: false,
            ..c
        };
    }
    if mj < c.millijoules {
        news.resets += 1;
        news.rebased = true;
        return Counter::new(mj, at);
    }
    let joules = (mj - c.millijoules) / 1000.0;
    let span = at.saturating_duration_since(c.moved).as_secs_f64();
    if span > 0.0 && joules / span <= MAX_WATTS_PER_GPU {
        news.joules += joules;
        news.moved = true;
        return Counter::new(mj, at);
    }
    news.implausible += 1;
    if c.suspect {
        // Twice in a row: the counter jumped; its new value is the
        // baseline, and the jump is not charged.
        news.rebased = true;
        return Counter::new(mj, at);
    }
    Counter {
        read: at,
        suspect: true,
        ..c
    }
}
