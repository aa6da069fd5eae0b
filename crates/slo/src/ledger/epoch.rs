//! The energy counters' growth divided by the GPU-seconds each party
//! accrued over the span it belongs to, in O(1) a request.
//!
//! An *epoch* is the span since the set's counters last moved. Over it the
//! ledger adds up the GPU-seconds of every party: the requests in flight
//! (through the running integral `S` of one request's GPU-seconds), the
//! requests that ended in it (by key), the other replicas and idle. When
//! the counters move by `J` joules, each GPU-second of the epoch is worth
//! `f = J / G`, `G` all of the epoch's GPU-seconds, and each party gets
//! `f` times its own.
//!
//! The requests in flight get theirs through a second running integral,
//! `Jr`, the counters' joules of one request in flight over the epochs that
//! ended: at an epoch's end it grows by `f × (S − S₀)`, `S₀` the value of
//! `S` at the epoch's start. A request holds the cell of the epoch it
//! opened in; once that epoch has ended, its mark in `Jr` is
//! `Jr₀ + f × (mark − S₀)` of that cell, so what it gets is the difference,
//! whenever it ends. The marks of the requests in flight are summed per
//! epoch while it runs and moved into [`Finished`] when it ends, so the
//! in-flight total is `n × Jr − Σ marks` at any time.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};

/// Where an epoch started, and its worth once it ended.
#[derive(Debug)]
pub struct Cell {
    /// `S` at the epoch's start.
    s0: f64,
    /// `Jr` at the epoch's start (and throughout: it moves only at ends).
    j0: f64,
    /// Joules per GPU-second, set when the epoch ends.
    factor: OnceLock<f64>,
}

impl Cell {
    /// A mark of `S` taken in this epoch, in `Jr`: known once it ended.
    pub(super) fn mark(&self, s: f64) -> f64 {
        let f = self.factor.get().copied().unwrap_or(0.0);
        self.j0 + f * (s - self.s0)
    }
}

/// The requests in flight that opened in epochs that ended.
#[derive(Debug, Default)]
pub(super) struct Finished {
    /// `Jr`: one request in flight's counter joules over the ended epochs.
    per_request: f64,
    /// How many.
    n: u64,
    /// The sum of their marks in `Jr`.
    marks: f64,
}

impl Finished {
    /// `Jr` now.
    pub(super) fn per_request(&self) -> f64 {
        self.per_request
    }

    /// The counter joules the requests in flight hold.
    pub(super) fn held(&self) -> f64 {
        self.n as f64 * self.per_request - self.marks
    }
}

/// What an epoch's end gave each party.
pub(super) struct Ended<K> {
    /// The requests that ended in it, by key.
    pub(super) requests: Vec<(K, f64)>,
    pub(super) other_replicas: f64,
    pub(super) idle: f64,
}

/// The running epoch.
#[derive(Debug)]
pub(super) struct Epoch<K> {
    cell: Arc<Cell>,
    /// Every party's GPU-seconds over it.
    gpu_seconds: f64,
    other_replicas: f64,
    idle: f64,
    /// The GPU-seconds over it of the requests that ended in it, by key.
    ended: HashMap<K, f64>,
    /// The requests in flight that opened in it: how many, and the sum of
    /// their marks of `S`.
    opened: u64,
    opened_marks: f64,
}

impl<K: Eq + Hash + Clone> Epoch<K> {
    /// An epoch from `S = s0`, `Jr = j0`.
    pub(super) fn new(s0: f64, j0: f64) -> Self {
        Self {
            cell: Arc::new(Cell {
                s0,
                j0,
                factor: OnceLock::new(),
            }),
            gpu_seconds: 0.0,
            other_replicas: 0.0,
            idle: 0.0,
            ended: HashMap::new(),
            opened: 0,
            opened_marks: 0.0,
        }
    }

    /// Where it started.
    pub(super) fn cell(&self) -> Arc<Cell> {
        self.cell.clone()
    }

    /// Every party's GPU-seconds over it so far.
    pub(super) fn gpu_seconds(&self) -> f64 {
        self.gpu_seconds
    }

    /// `all` GPU-seconds more, of which `other_replicas` and `idle`; the
    /// rest is the requests in flight's.
    pub(super) fn accrue(&mut self, all: f64, other_replicas: f64, idle: f64) {
        self.gpu_seconds += all;
        self.other_replicas += other_replicas;
        self.idle += idle;
    }

    /// A request opens with its mark `s` of `S`: the cell it keeps.
    pub(super) fn open(&mut self, s: f64) -> Arc<Cell> {
        self.opened += 1;
        self.opened_marks += s;
        self.cell.clone()
    }

    /// A request that opened in `cell` with its mark `mark` of `S` ends,
    /// with `S` at `s`, under `key`: the counter joules it gets now. Its
    /// GPU-seconds in this epoch wait under its key for the epoch's end.
    pub(super) fn close(
        &mut self,
        cell: &Arc<Cell>,
        mark: f64,
        s: f64,
        finished: &mut Finished,
        key: &K,
    ) -> f64 {
        let (joules, here) = if Arc::ptr_eq(cell, &self.cell) {
            self.opened = self.opened.saturating_sub(1);
            self.opened_marks -= mark;
            if self.opened == 0 {
                self.opened_marks = 0.0;
            }
            (0.0, s - mark)
        } else {
            let jmark = cell.mark(mark);
            finished.n = finished.n.saturating_sub(1);
            finished.marks -= jmark;
            if finished.n == 0 {
                finished.marks = 0.0;
            }
            (finished.per_request - jmark, s - self.cell.s0)
        };
        if here > 0.0 {
            *self.ended.entry(key.clone()).or_insert(0.0) += here;
        }
        joules
    }

    /// Ends the epoch at `S = s` with `joules` of energy, starting the
    /// next: what the parties that are not in flight get. Over an epoch
    /// with no GPU-seconds, the energy is idle's.
    pub(super) fn end(&mut self, s: f64, joules: f64, finished: &mut Finished) -> Ended<K> {
        let f = if self.gpu_seconds > 0.0 {
            joules / self.gpu_seconds
        } else {
            0.0
        };
        let cell = &self.cell;
        let jr = cell.j0 + f * (s - cell.s0);
        // The requests that opened in it hold marks it can now place.
        let opened = self.opened as f64;
        finished.marks += opened * cell.j0 + f * (self.opened_marks - opened * cell.s0);
        finished.n += self.opened;
        finished.per_request = jr;
        let _ = cell.factor.set(f);
        let ended = Ended {
            requests: self.ended.drain().map(|(k, gs)| (k, f * gs)).collect(),
            other_replicas: f * self.other_replicas,
            idle: if self.gpu_seconds > 0.0 {
                f * self.idle
            } else {
                joules
            },
        };
        *self = Self::new(s, jr);
        ended
    }
}
