//! What the GPU sets were worth and who was charged them over the live
//! windows (1m, 5m, 1h), for `/slo` and the live page: the increase of
//! each ledger's counts between a point of the past and now.
//!
//! The points are the ledgers' counts by GPU set and tenant (the labels
//! the page shows: a tenant's good and wasted charge), each with the
//! ledger's own point there ([`Ledger::point`]), taken every [`EVERY`] on
//! the process's clock ([`BillHistory::tick`], from the app's tick: never when
//! `/metrics` or `/slo` is read, nor on a request's path), kept every
//! [`EVERY`] for the shortest windows and every minute beyond, up to the
//! longest window: at most about a hundred points, each of sets × tenants
//! × 2 charges. A window's start is the newest point at least its width
//! old (else the oldest point, else the ledgers' start), and it reports
//! the span it covers, so a rate read from it is right even when no point
//! falls exactly on its start.
//!
//! A window holds what accrued inside it (docs/metrics.md, "Chargeback",
//! Over a window): its tenants' charges and in flight leave out what the
//! requests in flight at its start had accrued before it, which the
//! ledger keeps per point ([`Ledger::snapshot_since`]), so its parts add
//! up to its total.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use slo::ledger::{BeforePoint, Charge, Totals};
use slo::live::WINDOWS;

use super::book::{BillShown, Book, ChargeKey};

/// How often a point is taken, at most.
pub(super) const EVERY: Duration = Duration::from_secs(10);
/// Points older than this are kept one a minute.
const FINE_FOR: Duration = Duration::from_secs(5 * 60);

/// One set's counts at a point.
#[derive(Debug, Clone, Default)]
struct SetCounts {
    /// The ledger's point, and the ledger's serial.
    point: Option<(u64, u64)>,
    totals: Totals,
    /// By tenant: its good, then its wasted charge.
    tenants: BTreeMap<Arc<str>, [Charge; 2]>,
}

#[derive(Debug)]
struct BillPoint {
    at: Instant,
    sets: BTreeMap<Arc<str>, SetCounts>,
}

/// The points, oldest first, and when the ledgers started.
#[derive(Debug)]
pub(super) struct BillHistory {
    since: Instant,
    points: VecDeque<BillPoint>,
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
    /// Accrued inside it by the requests that ended in it, by tenant.
    pub tenants: Vec<TenantBill>,
    /// Accrued inside it by the requests in flight now.
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
    fn of(c: Charge, shown: &BillShown) -> Self {
        Self {
            gpu_seconds: c.gpu_seconds.max(0.0),
            joules: shown.energy.then_some(c.joules.max(0.0)),
            cost: shown.currency.as_ref().map(|_| c.cost.max(0.0)),
        }
    }
}

/// Charges by key, summed by tenant: its good, then its wasted charge.
fn by_tenant(by_key: Vec<(ChargeKey, Charge)>) -> BTreeMap<Arc<str>, [Charge; 2]> {
    let mut tenants: BTreeMap<Arc<str>, [Charge; 2]> = BTreeMap::new();
    for (ChargeKey { tenant, good, .. }, charge) in by_key {
        tenants.entry(tenant).or_default()[usize::from(!good)] += charge;
    }
    tenants
}

/// One set's counts now, at a point of its ledger taken now.
fn point(book: &Book, now: Instant) -> SetCounts {
    let (id, totals, by_key) = book.ledger.point(now);
    SetCounts {
        point: Some((id, book.ledger.serial())),
        totals,
        tenants: by_tenant(by_key),
    }
}

impl BillHistory {
    pub(super) fn new(since: Instant) -> Self {
        Self {
            since,
            points: VecDeque::new(),
        }
    }

    /// Takes a point of `books` at `now` if the last is [`EVERY`] old, and
    /// thins and drops the old ones (and each ledger its own).
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
            .map(|b| (b.set.clone(), point(b, now)))
            .collect();
        self.points.push_back(BillPoint { at: now, sets });
        let longest = WINDOWS[WINDOWS.len() - 1].span();
        // One point older than the longest window stays: the start of it.
        while self.points.len() > 1 && now.saturating_duration_since(self.points[1].at) >= longest {
            self.points.pop_front();
        }
        let mut kept: VecDeque<BillPoint> = VecDeque::with_capacity(self.points.len());
        for point in self.points.drain(..) {
            let coarse = now.saturating_duration_since(point.at) > FINE_FOR;
            let close = kept.back().is_some_and(|k: &BillPoint| {
                point.at.saturating_duration_since(k.at) < Duration::from_secs(60)
            });
            if !(coarse && close) {
                kept.push_back(point);
            }
        }
        self.points = kept;
        for book in books {
            let ids: Vec<u64> = self
                .points
                .iter()
                .filter_map(|p| p.sets.get(&book.set)?.point_of(book))
                .collect();
            book.ledger.keep_points(|id| ids.contains(&id));
        }
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
        // A point of another ledger of the same name is no start.
        let of = |p: &'a BillPoint| {
            let c = p.sets.get(set)?;
            c.point_of(book).map(|_| (p.at, c))
        };
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
            let starts: Vec<(Instant, Option<&SetCounts>)> = WINDOWS
                .iter()
                .map(|w| match self.start(book, now, w.span()) {
                    Some((at, counts)) => (at, Some(counts)),
                    None => (self.since, None),
                })
                .collect();
            let ids: Vec<u64> = starts
                .iter()
                .map(|(_, c)| c.and_then(|c| c.point_of(book)).unwrap_or(u64::MAX))
                .collect();
            let (totals, by_key, since) = book.ledger.snapshot_since(now, &ids);
            let current = SetCounts {
                point: None,
                totals,
                tenants: by_tenant(by_key),
            };
            let windows = WINDOWS
                .iter()
                .zip(starts)
                .zip(since)
                .map(|((w, (at, before)), since)| {
                    let start = Start {
                        counts: before.cloned().unwrap_or_default(),
                        before: since,
                    };
                    let span = now.saturating_duration_since(at);
                    window(w.name, span, &start, &current, shown)
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

impl SetCounts {
    /// Its point's id, when it is a point of `book`'s ledger.
    fn point_of(&self, book: &Book) -> Option<u64> {
        let (id, serial) = self.point?;
        (serial == book.ledger.serial()).then_some(id)
    }
}

/// Where a window starts: the counts there, and what the requests in
/// flight there had accrued before it (`None` at the ledgers' start).
struct Start {
    counts: SetCounts,
    before: Option<BeforePoint<ChargeKey>>,
}

/// What accrued from `start` to `now` over `span`: the increase, less what
/// the requests in flight at the start had accrued before it.
fn window(
    name: &'static str,
    span: Duration,
    start: &Start,
    now: &SetCounts,
    shown: &BillShown,
) -> WindowBill {
    let before = &start.counts;
    let (b, n) = (&before.totals, &now.totals);
    let (earlier, still_in_flight) = match &start.before {
        Some(p) => (by_tenant(p.ended.clone()), p.still_in_flight),
        None => (BTreeMap::new(), Charge::default()),
    };
    let tenants = now
        .tenants
        .iter()
        .filter_map(|(tenant, [good, waste])| {
            let [g0, w0] = before.tenants.get(tenant).copied().unwrap_or_default();
            let [g1, w1] = earlier.get(tenant).copied().unwrap_or_default();
            let (good, waste) = (*good - g0 - g1, *waste - w0 - w1);
            let any = |c: Charge| c.gpu_seconds > 0.0 || c.joules > 0.0;
            (any(good) || any(waste)).then(|| TenantBill {
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
        in_flight: Amount::of(n.in_flight - still_in_flight, shown),
        other_replicas: Amount::of(n.other_replicas - b.other_replicas, shown),
        idle: Amount::of(n.idle - b.idle, shown),
    }
}

/// The report as text: per GPU set, a row per window and tenant, each
/// with the span its window covers.
pub fn render_text(report: &ChargebackReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for route in &report.routes {
        let currency = route.currency.as_deref().unwrap_or("-");
        let (set, routes) = (&route.gpu_set, route.routes.join(","));
        let _ = writeln!(out, "gpu set {set}  routes {routes}  currency {currency}");
        let _ = writeln!(
            out,
            "{:<6} {:>7} {:<24} {:>12} {:>12} {:>12} {:>7}",
            "window", "span", "who", "gpu_seconds", "joules", "cost", "waste"
        );
        for w in &route.windows {
            // The span it covers: its width, or less or more (a row says so).
            let span = format!("{:.0}s", w.seconds);
            let mut row = |who: &str, a: Amount, waste: Option<f64>| {
                let num = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
                let share = waste.map_or_else(|| "-".to_owned(), |s| format!("{:.1}%", s * 100.0));
                let _ = writeln!(
                    out,
                    "{:<6} {:>7} {:<24} {:>12.3} {:>12} {:>12} {:>7}",
                    w.window,
                    span,
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
