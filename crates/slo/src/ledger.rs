//! A GPU set's time, energy and money (the GPUs one or more routes
//! share), divided among its requests in flight by their share of the
//! batch (docs/metrics.md, "Chargeback").
//!
//! A [`Ledger`] integrates, over time, three rates that are constant
//! between two readings of the route's GPUs: GPUs, watts and money per
//! second. At each moment the `n` requests in flight on this replica each
//! accrue `rate / D`, `D` the larger of `n` and the engine's load; the
//! rest is left to the engine's other requests, or, with nothing in
//! flight anywhere, idle. The engine's load is its last reading moved by
//! this replica's own requests that started or ended since: `E + n − n₀`,
//! `n₀` the requests in flight when it was read, so a reading late by a
//! scrape interval is late only for the other replicas' changes.
//!
//! It costs O(1) per request: every request in flight accrues at the same
//! rate, so one running integral of `rate / D` (the `share`) serves all of
//! them. A request remembers the integral when it starts ([`Ledger::open`])
//! and is charged the difference when it ends ([`Tab::close`]), under a
//! key of the caller's (its labels), in the same lock as every other
//! count; the requests still in flight hold `n × share − Σ marks`. So one
//! [`Ledger::snapshot`] closes, to rounding:
//! `Σ charged by key + in flight + other replicas + idle = total`.
//!
//! Energy is read from each GPU's own counter (`energy.rs`), and a
//! counter's growth belongs to the whole span since it last moved: it is
//! divided among the parties by the GPU-seconds each accrued over that
//! span (`epoch.rs`), so a page that refreshes its samples less often than
//! it is scraped charges each party for its own time. Until the counters
//! move, the GPU-seconds of the span await their joules
//! ([`Totals::awaiting_energy`]); a request that ended in it gets its last
//! joules then.
//!
//! A window that starts at a [`Ledger::point`] counts only what accrued
//! inside it: each point keeps the integrals there, and a request that ends
//! adds what it had accrued before each point taken while it was in flight
//! to that point's sum under its key (a few points: one per point spacing
//! it lasted), so that the window's requests and in flight leave out what
//! the requests in flight at its start had accrued before
//! ([`Ledger::snapshot_since`]). Its joules are those attributed inside it.
//!
//! Readings end when they go stale (three scrape intervals by the
//! scraper's rule, passed in as `fresh_for`): the integration stops
//! counting a rate at its reading's end without being told, so a page that
//! goes away stops the GPU time, and its shares, at the same moment.
//!
//! No clock and no I/O: it is told `now`. A time before the last one told
//! is taken as the last one, so readings and requests on different threads
//! never integrate backwards.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::ops::{Add, AddAssign, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

mod energy;
mod epoch;

pub use energy::{GpuSample, MAX_WATTS_PER_GPU};
use epoch::{Epoch, Finished};

/// GPU-seconds, joules and money: what a stretch of time is worth, or what
/// a request, idle time or the other replicas were charged.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Charge {
    pub gpu_seconds: f64,
    pub joules: f64,
    pub cost: f64,
}

impl Charge {
    fn scaled(self, by: f64) -> Self {
        Self {
            gpu_seconds: self.gpu_seconds * by,
            joules: self.joules * by,
            cost: self.cost * by,
        }
    }
}

impl Add for Charge {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            gpu_seconds: self.gpu_seconds + o.gpu_seconds,
            joules: self.joules + o.joules,
            cost: self.cost + o.cost,
        }
    }
}

impl AddAssign for Charge {
    fn add_assign(&mut self, o: Self) {
        *self = *self + o;
    }
}

impl Sub for Charge {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            gpu_seconds: self.gpu_seconds - o.gpu_seconds,
            joules: self.joules - o.joules,
            cost: self.cost - o.cost,
        }
    }
}

/// Where a route's GPU count comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gpus {
    /// `gpus: N`: that many, all the time.
    Fixed(u32),
    /// `gpu_metrics`: the count of the latest fresh GPU reading.
    Scraped,
}

/// What the ledger has counted, read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// The route's GPU time, energy and money.
    pub total: Charge,
    /// Charged to requests that ended.
    pub charged: Charge,
    /// Accrued by the requests still in flight.
    pub in_flight: Charge,
    /// Left to the engine's requests that came another way.
    pub other_replicas: Charge,
    /// No request in flight on the engine.
    pub idle: Charge,
    /// GPU-seconds since the energy counters last moved, whose joules come
    /// when they next move (0 without counters).
    pub awaiting_energy: f64,
    /// Energy counters that went back.
    pub energy_resets: u64,
    /// Energy samples skipped as implausible.
    pub implausible_samples: u64,
}

/// A rate in force until its reading goes stale (`None`: for good).
#[derive(Debug, Clone, Copy)]
struct Until {
    value: f64,
    until: Option<Instant>,
}

impl Until {
    fn at(self, t: Instant) -> f64 {
        match self.until {
            Some(until) if t >= until => 0.0,
            _ => self.value,
        }
    }
}

#[derive(Debug)]
struct State<K> {
    /// Integrated up to here.
    at: Instant,
    /// Requests in flight on this replica.
    n: u64,
    gpus: Option<Until>,
    /// The power of the GPUs without an energy counter.
    watts: Option<Until>,
    /// The engine's requests running and waiting, as last read.
    engine: Option<Until>,
    /// This replica's requests in flight when the engine was last read.
    n_read: u64,
    /// Money per GPU-second.
    price: f64,
    /// The GPUs' energy counters.
    counters: energy::Counters,
    /// The integral of `rate / D` while requests are in flight (its
    /// joules those of the power usage alone).
    share: Charge,
    /// The sum of the marks of the requests in flight.
    marks: Charge,
    /// The span since the energy counters last moved.
    epoch: Epoch<K>,
    /// The counters' joules of the requests in flight, over the spans
    /// that ended.
    finished: Finished,
    totals: Totals,
    /// What the requests that ended were charged, by key.
    by_key: HashMap<K, Charge>,
    /// The points a window may start at, oldest first.
    points: VecDeque<LedgerPoint<K>>,
    /// The id of the next point.
    next_point: u64,
}

/// At most this many points are kept, whatever the caller forgets.
const MAX_POINTS: usize = 512;

/// A moment a window may start at (docs/metrics.md, "Chargeback", Over a
/// window): the running integrals there, and what the requests in flight
/// then had accrued before it, of those that ended since.
#[derive(Debug)]
struct LedgerPoint<K> {
    id: u64,
    /// `share` there.
    share: Charge,
    /// `Jr` there: one request in flight's counter joules over the epochs
    /// that had ended.
    jr: f64,
    /// The epoch running there.
    epoch: Arc<epoch::Cell>,
    /// What the requests in flight there held.
    in_flight: Charge,
    /// What those that ended since had accrued before it, by key.
    ended: HashMap<K, Charge>,
    /// Their sum.
    ended_sum: Charge,
}

impl<K> LedgerPoint<K> {
    /// What a request in flight here, opened with `mark` in `cell`, had
    /// accrued before it (its share, and the counter joules of its
    /// epochs that had ended).
    fn held(&self, mark: Charge, cell: &Arc<epoch::Cell>) -> Charge {
        let mut held = self.share - mark;
        if !Arc::ptr_eq(cell, &self.epoch) {
            held.joules += self.jr - cell.mark(mark.gpu_seconds);
        }
        held
    }
}

/// What requests were charged, by key.
pub type ByKey<K> = Vec<(K, Charge)>;

/// A point's part in a window that starts there: what the requests in
/// flight there had accrued before it, of those that ended since (by
/// key) and of those still in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct BeforePoint<K> {
    pub ended: Vec<(K, Charge)>,
    pub still_in_flight: Charge,
}

impl<K: Eq + Hash + Clone> State<K> {
    /// Integrates up to `t`, a piece at a time between the moments a
    /// reading goes stale.
    fn advance(&mut self, t: Instant) {
        while self.at < t {
            let ends = [self.gpus, self.watts, self.engine]
                .into_iter()
                .flatten()
                .filter_map(|u| u.until)
                .filter(|&until| until > self.at);
            let end = ends.fold(t, Instant::min);
            let span = end.duration_since(self.at).as_secs_f64();
            let gpus = self.gpus.map_or(0.0, |u| u.at(self.at));
            let rate = Charge {
                gpu_seconds: gpus,
                joules: self.watts.map_or(0.0, |u| u.at(self.at)),
                cost: gpus * self.price,
            }
            .scaled(span);
            let engine = self.engine_load();
            self.totals.total += rate;
            let (others, idle) = if self.n > 0 {
                let n = self.n as f64;
                let d = n.max(engine);
                self.share += rate.scaled(1.0 / d);
                (1.0 - n / d, 0.0)
            } else if engine > 0.0 {
                (1.0, 0.0)
            } else {
                (0.0, 1.0)
            };
            self.totals.other_replicas += rate.scaled(others);
            self.totals.idle += rate.scaled(idle);
            self.epoch.accrue(
                rate.gpu_seconds,
                others * rate.gpu_seconds,
                idle * rate.gpu_seconds,
            );
            self.at = end;
        }
    }

    /// The engine's load now: its last fresh reading, moved by this
    /// replica's requests that started or ended since (0 when unknown).
    fn engine_load(&self) -> f64 {
        match self.engine {
            Some(u) if u.until.is_none_or(|until| self.at < until) => {
                (u.value + self.n as f64 - self.n_read as f64).max(0.0)
            }
            _ => 0.0,
        }
    }

    fn in_flight(&self) -> Charge {
        let mut held = self.share.scaled(self.n as f64) - self.marks;
        held.joules += self.finished.held();
        held
    }

    /// What has been counted up to where it is integrated, with what the
    /// requests that ended were charged by key.
    fn snapshot(&self) -> (Totals, Vec<(K, Charge)>) {
        let awaiting = if self.counters.counting() {
            self.epoch.gpu_seconds()
        } else {
            0.0
        };
        let totals = Totals {
            in_flight: self.in_flight(),
            awaiting_energy: awaiting,
            ..self.totals
        };
        let by_key = self.by_key.iter().map(|(k, c)| (k.clone(), *c)).collect();
        (totals, by_key)
    }

    /// Ends the span since the counters last moved, `joules` its energy:
    /// divided among the parties by the GPU-seconds each accrued over it.
    fn end_epoch(&mut self, joules: f64) {
        let s = self.share.gpu_seconds;
        let ended = self.epoch.end(s, joules, &mut self.finished);
        for (key, j) in ended.requests {
            self.by_key.entry(key).or_default().joules += j;
            self.totals.charged.joules += j;
        }
        self.totals.other_replicas.joules += ended.other_replicas;
        self.totals.idle.joules += ended.idle;
        self.totals.total.joules += joules;
    }
}

/// One GPU set's ledger, shared by its routes' requests and scrapes; `K`
/// is what the requests that ended are charged under.
#[derive(Debug)]
pub struct Ledger<K> {
    state: Mutex<State<K>>,
    /// Which ledger of the process it is.
    serial: u64,
}

/// The serial of the next ledger.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(0);

impl<K: Eq + Hash + Clone + Default> Ledger<K> {
    /// A ledger that starts counting at `now`, with `gpus` and a price per
    /// GPU-hour (`None`: no cost).
    pub fn new(now: Instant, gpus: Gpus, gpu_hourly_cost: Option<f64>) -> Self {
        let state = State {
            at: now,
            n: 0,
            gpus: None,
            watts: None,
            engine: None,
            n_read: 0,
            price: 0.0,
            counters: energy::Counters::default(),
            share: Charge::default(),
            marks: Charge::default(),
            epoch: Epoch::new(0.0, 0.0),
            finished: Finished::default(),
            totals: Totals::default(),
            by_key: HashMap::new(),
            points: VecDeque::new(),
            next_point: 0,
        };
        let ledger = Self {
            state: Mutex::new(state),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        };
        ledger.configure(now, gpus, gpu_hourly_cost);
        ledger
    }

    fn state(&self) -> MutexGuard<'_, State<K>> {
        // The state is consistent between statements: a panic elsewhere
        // leaves nothing half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Which ledger of the process it is: its points are its own.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Applies a configuration from `now` on: the time before is counted
    /// as the previous one said.
    pub fn configure(&self, now: Instant, gpus: Gpus, gpu_hourly_cost: Option<f64>) {
        let mut s = self.state();
        s.advance(now);
        s.price = gpu_hourly_cost
            .filter(|p| p.is_finite() && *p >= 0.0)
            .unwrap_or(0.0)
            / 3600.0;
        match gpus {
            Gpus::Fixed(count) => {
                s.gpus = Some(Until {
                    value: f64::from(count),
                    until: None,
                });
                s.watts = None;
                if s.counters.counting() {
                    s.counters.clear();
                    s.end_epoch(0.0);
                }
            }
            // A fixed count becomes unknown until the page is read.
            Gpus::Scraped => {
                if s.gpus.is_some_and(|u| u.until.is_none()) {
                    s.gpus = None;
                }
            }
        }
    }

    /// Starts every energy baseline afresh from `now` (the GPUs read are
    /// another set): the span since the counters last moved has no joules.
    pub fn restart_energy(&self, now: Instant) {
        let mut s = self.state();
        s.advance(now);
        s.counters.clear();
        s.end_epoch(0.0);
    }

    /// A reading of the route's GPUs at `at`, in force for `fresh_for`.
    pub fn read_gpus(&self, at: Instant, gpus: &[GpuSample], fresh_for: Duration) {
        let mut s = self.state();
        s.advance(at);
        let until = Some(at + fresh_for);
        s.gpus = Some(Until {
            value: gpus.len() as f64,
            until,
        });
        let was_counting = s.counters.counting();
        let news = s.counters.read(at, gpus, fresh_for);
        s.totals.energy_resets += news.resets;
        s.totals.implausible_samples += news.implausible;
        if news.moved {
            s.end_epoch(news.joules);
        } else if news.rebased || was_counting != s.counters.counting() {
            // The span before has no known energy: it starts again here.
            s.end_epoch(0.0);
        }
        s.watts = news
            .watts
            .filter(|w| w.is_finite() && *w >= 0.0)
            .map(|value| Until { value, until });
    }

    /// The engine's requests running and waiting at `at` (`None`: not
    /// known), in force for `fresh_for`.
    pub fn read_engine(&self, at: Instant, load: Option<f64>, fresh_for: Duration) {
        let mut s = self.state();
        s.advance(at);
        s.n_read = s.n;
        s.engine = load
            .filter(|l| l.is_finite() && *l >= 0.0)
            .map(|value| Until {
                value,
                until: Some(at + fresh_for),
            });
    }

    /// A request in flight from `now`, until its tab is closed or dropped.
    pub fn open(self: &Arc<Self>, now: Instant) -> Tab<K> {
        let mut s = self.state();
        s.advance(now);
        s.n += 1;
        let mark = s.share;
        s.marks += mark;
        let epoch = s.epoch.open(mark.gpu_seconds);
        Tab {
            ledger: Some(self.clone()),
            mark,
            epoch,
            first_point: s.next_point,
        }
    }

    /// What has been counted up to `now`.
    pub fn totals(&self, now: Instant) -> Totals {
        self.snapshot(now).0
    }

    /// What has been counted up to `now`, with what the requests that
    /// ended were charged by key, read in one lock so that they add up.
    pub fn snapshot(&self, now: Instant) -> (Totals, Vec<(K, Charge)>) {
        let mut s = self.state();
        s.advance(now);
        s.snapshot()
    }

    /// Takes a point at `now`, a window's possible start: its id, with
    /// what has been counted up to it (as [`snapshot`](Self::snapshot)).
    pub fn point(&self, now: Instant) -> (u64, Totals, Vec<(K, Charge)>) {
        let mut s = self.state();
        s.advance(now);
        let (totals, by_key) = s.snapshot();
        let id = s.next_point;
        s.next_point += 1;
        let point = LedgerPoint {
            id,
            share: s.share,
            jr: s.finished.per_request(),
            epoch: s.epoch.cell(),
            in_flight: totals.in_flight,
            ended: HashMap::new(),
            ended_sum: Charge::default(),
        };
        s.points.push_back(point);
        while s.points.len() > MAX_POINTS {
            s.points.pop_front();
        }
        (id, totals, by_key)
    }

    /// Forgets the points `keep` refuses (no window starts there again).
    pub fn keep_points(&self, keep: impl Fn(u64) -> bool) {
        self.state().points.retain(|p| keep(p.id));
    }

    /// What has been counted up to `now` (as [`snapshot`](Self::snapshot)),
    /// with, for each of `points`, its part in a window that starts there
    /// (`None` for a point forgotten), read in one lock so that they add
    /// up.
    pub fn snapshot_since(
        &self,
        now: Instant,
        points: &[u64],
    ) -> (Totals, ByKey<K>, Vec<Option<BeforePoint<K>>>) {
        let mut s = self.state();
        s.advance(now);
        let (totals, by_key) = s.snapshot();
        let before = points
            .iter()
            .map(|&id| {
                let p = s.points.iter().find(|p| p.id == id)?;
                Some(BeforePoint {
                    ended: p.ended.iter().map(|(k, c)| (k.clone(), *c)).collect(),
                    still_in_flight: p.in_flight - p.ended_sum,
                })
            })
            .collect();
        (totals, by_key, before)
    }

    fn close(&self, now: Instant, tab: &Tab<K>, key: K) -> Charge {
        let (mark, epoch) = (tab.mark, &tab.epoch);
        let mut s = self.state();
        s.advance(now);
        // What it had accrued before each point taken while it was in
        // flight: at most the history's points, one per 10 s it lasted.
        for p in s.points.iter_mut().rev() {
            if p.id < tab.first_point {
                break;
            }
            let held = p.held(mark, epoch);
            *p.ended.entry(key.clone()).or_default() += held;
            p.ended_sum += held;
        }
        let mut charge = s.share - mark;
        s.n = s.n.saturating_sub(1);
        s.marks = s.marks - mark;
        if s.n == 0 {
            s.marks = Charge::default();
        }
        let share = s.share.gpu_seconds;
        let State {
            epoch: current,
            finished,
            ..
        } = &mut *s;
        charge.joules += current.close(epoch, mark.gpu_seconds, share, finished, &key);
        s.totals.charged += charge;
        *s.by_key.entry(key).or_default() += charge;
        charge
    }
}

/// What a route's scrapes tell its ledger, whatever its requests are
/// charged under: the scraper holds it without knowing the key.
pub trait Reader: Send + Sync + std::fmt::Debug {
    /// A reading of the route's GPUs at `at`, in force for `fresh_for`.
    fn read_gpus(&self, at: Instant, gpus: &[GpuSample], fresh_for: Duration);
    /// The engine's requests running and waiting at `at` (`None`: not
    /// known), in force for `fresh_for`.
    fn read_engine(&self, at: Instant, load: Option<f64>, fresh_for: Duration);
}

impl<K: Eq + Hash + Clone + Default + Send + std::fmt::Debug> Reader for Ledger<K> {
    fn read_gpus(&self, at: Instant, gpus: &[GpuSample], fresh_for: Duration) {
        Ledger::read_gpus(self, at, gpus, fresh_for);
    }

    fn read_engine(&self, at: Instant, load: Option<f64>, fresh_for: Duration) {
        Ledger::read_engine(self, at, load, fresh_for);
    }
}

/// One request's place in its route's ledger.
#[derive(Debug)]
pub struct Tab<K: Eq + Hash + Clone + Default> {
    ledger: Option<Arc<Ledger<K>>>,
    mark: Charge,
    /// The span of the energy counters it opened in.
    epoch: Arc<epoch::Cell>,
    /// The id of the first point taken after it opened.
    first_point: u64,
}

impl<K: Eq + Hash + Clone + Default> Tab<K> {
    /// Ends the request at `now`, charged under `key`: what it is charged
    /// so far (the joules of its time since the counters last moved come
    /// to its key when they next move).
    pub fn close(mut self, now: Instant, key: K) -> Charge {
        match self.ledger.take() {
            Some(ledger) => ledger.close(now, &self, key),
            None => Charge::default(),
        }
    }
}

/// A request dropped without an end is charged under the default key, so
/// that the sum still closes.
impl<K: Eq + Hash + Clone + Default> Drop for Tab<K> {
    fn drop(&mut self) {
        if let Some(ledger) = self.ledger.take() {
            ledger.close(Instant::now(), self, K::default());
        }
    }
}

#[cfg(test)]
#[path = "ledger/tests.rs"]
mod tests;
