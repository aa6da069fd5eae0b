//! What the GPU sets were worth and who was charged them over the live
//! windows (1m, 5m, 1h), for `/slo` and the live page: the increase of
//! each ledger's counts between a point of the past and now.
//!
//! The points are the ledgers' counts by GPU set and tenant (the labels
//! the page shows: a tenant's good and wasted charge), taken at most every
//! [`EVERY`] whenever the owner is read (an exposition, a report: never
//! on a request's path), kept every [`EVERY`] for the shortest windows
//! and every minute beyond, up to the longest window: at most about a
//! hundred points, each of sets × tenants × 2 charges. A window's start
//! is the newest point at least its width old (else the oldest point, else
//! the ledgers' start), and it reports the span it covers, so a rate read
//! from it is right even when no point falls exactly on its start.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use slo::ledger::{Charge, Totals};
use slo::live::WINDOWS;

use super::book::{Book, ChargeKey, Shown};

/// How often a point is taken, at most.
pub(super) const EVERY: Duration = Duration::from_secs(10);
/// Points older than this are kept one a minute.
const FINE_FOR: Duration = Duration::from_secs(5 * 60);

/// One set's counts at a point.
#[derive(Debug, Clone, Default)]
struct SetCounts {
    totals: Totals,
    /// By tenant: its good, then its wasted charge.
    tenants: BTreeMap<Arc<str>, [Charge; 2]>,
}

#[derive(Debug)]
struct Point {
    at: Instant,
    sets: BTreeMap<Arc<str>, SetCounts>,
}

/// The points, oldest first, and when the ledgers started.
#[derive(Debug)]
pub(super) struct History {
    since: Instant,
    points: VecDeque<Point>,
}

/// Every GPU set's figures over each window (under `routes`, the name
/// its list had when each route had its own GPUs).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChargebackReport {
    pub routes: Vec<SetBill>,
}

/// One GPU set's figures over each window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SetBill {
    /// Its `gpu_set` label value.
    pub gpu_set: String,
    /// The routes in front of its GPUs, whose requests share them.
    pub routes: Vec<String>,
    /// The cost's currency, when the set is priced.
    pub currency: Option<String>,
    pub windows: Vec<WindowBill>,
}

/// What one window holds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WindowBill {
    pub window: &'static str,
    /// The span it covers: its width, or less when the counts are younger.
    pub seconds: f64,
    /// The set's GPU time, energy and money over it.
    pub total: Amount,
    /// Charged to requests that ended in it, by tenant.
    pub tenants: Vec<TenantBill>,
    /// Accrued by the requests in flight now.
    pub in_flight: Amount,
    pub other_replicas: Amount,
    pub idle: Amount,
}

/// A tenant's charge over a window: for requests judged good, and for the
/// rest (waste).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TenantBill {
    pub tenant: String,
    pub good: Amount,
    pub waste: Amount,
}

/// GPU-seconds, and joules and money where the set has them.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Amount {
    pub gpu_seconds: f64,
    pub joules: Option<f64>,
    pub cost: Option<f64>,
}

impl Amount {
    fn of(c: Charge, shown: &Shown) -> Self {
        Self {
            gpu_seconds: c.gpu_seconds.max(0.0),
            joules: shown.energy.then_some(c.joules.max(0.0)),
            cost: shown.currency.as_ref().map(|_| c.cost.max(0.0)),
        }
    }
}

/// One set's counts now.
fn counts(book: &Book, now: Instant) -> SetCounts {
    let (totals, by_key) = book.ledger.snapshot(now);
    let mut tenants: BTreeMap<Arc<str>, [Charge; 2]> = BTreeMap::new();
    for (ChargeKey { tenant, good, .. }, charge) in by_key {
        tenants.entry(tenant).or_default()[usize::from(!good)] += charge;
    }
    SetCounts { totals, tenants }
}

impl History {
    pub(super) fn new(since: Instant) -> Self {
        Self {
            since,
            points: VecDeque::new(),
        }
    }

    /// Takes a point of `books` at `now` if the last is [`EVERY`] old, and
    /// thins and drops the old ones.
    pub(super) fn tick(&mut self, books: &[Arc<Book>], now: Instant) {
        if self
            .points
            .back()
            .is_some_and(|p| now.saturating_duration_since(p.at) < EVERY)
        {
            return;
        }
        let sets = books
            .iter()
            .map(|b| (b.set.clone(), counts(b, now)))
            .collect();
        self.points.push_back(Point { at: now, sets });
        let longest = WINDOWS[WINDOWS.len() - 1].span();
        // One point older than the longest window stays: the start of it.
        while self.points.len() > 1 && now.saturating_duration_since(self.points[1].at) >= longest {
            self.points.pop_front();
        }
        let mut kept: VecDeque<Point> = VecDeque::with_capacity(self.points.len());
        for point in self.points.drain(..) {
            let coarse = now.saturating_duration_since(point.at) > FINE_FOR;
            let close = kept.back().is_some_and(|k: &Point| {
                point.at.saturating_duration_since(k.at) < Duration::from_secs(60)
            });
            if !(coarse && close) {
                kept.push_back(point);
            }
        }
        self.points = kept;
    }

    /// Where a window of `width` ending at `now` starts for `book`: the
    /// newest point at least `width` old; else, when the counts began
    /// within the window, their start (`None`); else the oldest point
    /// before `now` (a window that reports the shorter span it has).
    fn start<'a>(
        &'a self,
        book: &Book,
        now: Instant,
        width: Duration,
    ) -> Option<(Instant, &'a SetCounts)> {
        let set = &book.set;
        let of = |p: &'a Point| p.sets.get(set).map(|c| (p.at, c));
        let start = now.checked_sub(width)?;
        if let Some(p) = self.points.iter().rev().find(|p| p.at <= start) {
            return of(p);
        }
        if self.since >= start {
            return None;
        }
        self.points.iter().find(|p| p.at < now).and_then(of)
    }

    /// Every set's figures over each window, at `now`.
    pub(super) fn report(&self, books: &[Arc<Book>], now: Instant) -> ChargebackReport {
        let mut routes = Vec::new();
        for book in books {
            let shown = &book.shown;
            let current = counts(book, now);
            let windows = WINDOWS
                .iter()
                .map(|w| {
                    let (at, before) = match self.start(book, now, w.span()) {
                        Some((at, counts)) => (at, counts.clone()),
                        None => (self.since, SetCounts::default()),
                    };
                    window(
                        w.name,
                        now.saturating_duration_since(at),
                        &before,
                        &current,
                        shown,
                    )
                })
                .collect();
            routes.push(SetBill {
                gpu_set: book.set.to_string(),
                routes: book.routes.iter().map(|r| r.to_string()).collect(),
                currency: shown.currency.as_deref().map(str::to_owned),
                windows,
            });
        }
        routes.sort_by(|a, b| a.gpu_set.cmp(&b.gpu_set));
        ChargebackReport { routes }
    }
}

/// The increase from `before` to `now` over `span`.
fn window(
    name: &'static str,
    span: Duration,
    before: &SetCounts,
    now: &SetCounts,
    shown: &Shown,
) -> WindowBill {
    let (b, n) = (&before.totals, &now.totals);
    let tenants = now
        .tenants
        .iter()
        .filter_map(|(tenant, [good, waste])| {
            let [g0, w0] = before.tenants.get(tenant).copied().unwrap_or_default();
            let (good, waste) = (*good - g0, *waste - w0);
            (good.gpu_seconds > 0.0 || waste.gpu_seconds > 0.0).then(|| TenantBill {
                tenant: tenant.to_string(),
                good: Amount::of(good, shown),
                waste: Amount::of(waste, shown),
            })
        })
        .collect();
    WindowBill {
        window: name,
        seconds: span.as_secs_f64(),
        total: Amount::of(n.total - b.total, shown),
        tenants,
        in_flight: Amount::of(n.in_flight, shown),
        other_replicas: Amount::of(n.other_replicas - b.other_replicas, shown),
        idle: Amount::of(n.idle - b.idle, shown),
    }
}

/// The report as text: per GPU set, a row per window and tenant.
pub fn render_text(report: &ChargebackReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for route in &report.routes {
        let currency = route.currency.as_deref().unwrap_or("-");
        let (set, routes) = (&route.gpu_set, route.routes.join(","));
        let _ = writeln!(out, "gpu set {set}  routes {routes}  currency {currency}");
        let _ = writeln!(
            out,
            "{:<6} {:<24} {:>12} {:>12} {:>12} {:>7}",
            "window", "who", "gpu_seconds", "joules", "cost", "waste"
        );
        for w in &route.windows {
            let mut row = |who: &str, a: Amount, waste: Option<f64>| {
                let num = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
                let share = waste.map_or_else(|| "-".to_owned(), |s| format!("{:.1}%", s * 100.0));
                let _ = writeln!(
                    out,
                    "{:<6} {:<24} {:>12.3} {:>12} {:>12} {:>7}",
                    w.window,
                    who,
                    a.gpu_seconds,
                    num(a.joules),
                    num(a.cost),
                    share
                );
            };
            row("(all)", w.total, None);
            for t in &w.tenants {
                let all = t.good.gpu_seconds + t.waste.gpu_seconds;
                let sum = Amount {
                    gpu_seconds: all,
                    joules: t.good.joules.zip(t.waste.joules).map(|(g, w)| g + w),
                    cost: t.good.cost.zip(t.waste.cost).map(|(g, w)| g + w),
                };
                let waste = (all > 0.0).then(|| t.waste.gpu_seconds / all);
                row(&t.tenant, sum, waste);
            }
            row("(in flight)", w.in_flight, None);
            row("(other replicas)", w.other_replicas, None);
            row("(idle)", w.idle, None);
        }
    }
    out
}
