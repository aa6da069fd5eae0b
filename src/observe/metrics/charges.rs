//! Chargeback: each route's GPU time, energy and money, divided among its
//! requests by their share of the batch (docs/metrics.md, "Chargeback").
//!
//! The owner keeps a ledger (`slo::ledger`) per route that has GPUs, by
//! route name across reloads, so that a reload neither loses nor repeats
//! what was counted. What a configuration says of its routes' GPUs and
//! prices is its [`ChargePlan`], made with the snapshot of that
//! configuration and held by it ([`Charges::plan`]); when the snapshot
//! goes in force, its plan is applied to the ledgers from that moment on
//! ([`Charges::apply`]). A request of a route with GPUs opens a tab in the
//! plan of the snapshot it started under when it is counted in flight,
//! and closes it when it ends, under its labels and verdict ([`Bill`]);
//! the route's scrapes tell its ledger the GPUs, power and engine load
//! ([`Charges::reader`]). Every family is read from one
//! snapshot of each ledger when the exposition asks, so that at every
//! scrape the requests' charges, the in-flight share, the other replicas'
//! and idle add up to the route's total.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, GaugeVec, Opts};

use super::engines::FixedGpus;
use super::register::Register;

mod book;
mod report;

use book::{Book, ChargeKey, Shown};

use crate::config::Config;
use crate::observe::labels::Labels;
use crate::observe::request::Charged;
use names::Family;
pub use report::{ChargebackReport, render_text};
use slo::ledger::{Charge, Gpus, Ledger, Reader, Tab};

/// The ledgers of the routes with GPUs, and their families.
pub(super) struct Charges {
    /// Every route that has had GPUs, by name, kept across reloads.
    books: Mutex<HashMap<Arc<str>, Arc<Book>>>,
    families: Families,
    /// Points of the ledgers' counts, for the windows of `/slo`.
    history: Mutex<report::History>,
}

/// The families, made anew from the ledgers at each exposition.
struct Families {
    namespace: String,
    /// Made once for their descriptions.
    template: Vec<Vec<Desc>>,
}

/// What one configuration says of its routes with GPUs: each one's book,
/// GPUs, price and how its charges are shown.
#[derive(Clone, Default)]
pub struct ChargePlan {
    routes: Arc<HashMap<Arc<str>, Planned>>,
    /// The routes with `gpus: N`, by name: their GPUs, counted.
    fixed: Arc<[FixedGpus]>,
}

/// One route of a [`ChargePlan`].
struct Planned {
    book: Arc<Book>,
    gpus: Gpus,
    price: Option<f64>,
    shown: Arc<Shown>,
}

impl ChargePlan {
    /// A tab for a request of `route` in flight from `now`, when the route
    /// has GPUs.
    pub fn open(&self, route: &str, now: Instant) -> Option<Bill> {
        if self.routes.is_empty() {
            return None;
        }
        let planned = self.routes.get(route)?;
        Some(Bill {
            tab: planned.book.ledger.open(now),
            shown: planned.shown.clone(),
        })
    }

    /// The routes with `gpus: N`, by name: their GPUs, counted.
    pub fn fixed_gpus(&self) -> &[FixedGpus] {
        &self.fixed
    }
}

/// A request's tab in its route's ledger, and how its charge is shown.
pub struct Bill {
    tab: Tab<ChargeKey>,
    shown: Arc<Shown>,
}

impl Bill {
    /// Ends the request at `now`: charged under `labels` and `good`.
    pub fn close(self, now: Instant, labels: &Labels, good: bool) -> Charged {
        let key = ChargeKey {
            model: labels.model().into(),
            tenant: labels.tenant().into(),
            slo: labels.slo().into(),
            good,
        };
        let charge = self.tab.close(now, key);
        Charged {
            gpu_seconds: charge.gpu_seconds,
            joules: self.shown.energy.then_some(charge.joules),
            cost: self.shown.currency.is_some().then_some(charge.cost),
        }
    }
}

impl Charges {
    pub(super) fn register(r: Register<'_>) -> Result<Arc<Self>, prometheus::Error> {
        let families = Families::new(r.namespace)?;
        let charges = Arc::new(Self {
            books: Mutex::default(),
            families,
            history: Mutex::new(report::History::new(Instant::now())),
        });
        r.registry.register(Box::new(Registered(charges.clone())))?;
        Ok(charges)
    }

    /// What `config` says of its routes with GPUs, each with its book
    /// (made now if the route has none yet).
    pub(super) fn plan(&self, config: &Config, now: Instant) -> ChargePlan {
        let currency: Arc<str> = config.cost.currency.as_str().into();
        let mut books = self.books.lock().unwrap_or_else(PoisonError::into_inner);
        let mut routes = HashMap::new();
        for route in &config.routes {
            let gpus = match (route.gpus, &route.gpu_metrics) {
                (Some(n), _) => Gpus::Fixed(n),
                (None, Some(_)) => Gpus::Scraped,
                (None, None) => continue,
            };
            let book = book(&mut books, &route.name, now);
            let shown = Arc::new(Shown {
                energy: route.gpu_metrics.is_some(),
                currency: route.gpu_hourly_cost.map(|_| currency.clone()),
                fixed: route.gpus,
            });
            let planned = Planned {
                book: book.clone(),
                gpus,
                price: route.gpu_hourly_cost,
                shown,
            };
            routes.insert(book.route.clone(), planned);
        }
        let mut fixed: Vec<_> = routes
            .iter()
            .filter_map(|(route, p)| Some((route.clone(), p.shown.fixed?)))
            .collect();
        fixed.sort();
        ChargePlan {
            routes: Arc::new(routes),
            fixed: fixed.into(),
        }
    }

    /// Puts `plan` in force from `now` on: each of its routes' ledgers told
    /// its GPUs and price. A route that no longer has GPUs keeps its
    /// ledger, with no GPUs, so that its counters go on if they come back.
    pub(super) fn apply(&self, plan: &ChargePlan, now: Instant) {
        let books = self.books.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, book) in books.iter() {
            match plan.routes.get(name) {
                Some(p) => {
                    book.ledger.configure(now, p.gpus, p.price);
                    book.shown.store(p.shown.clone());
                }
                // The routes that went: no GPUs from now on; their series
                // stay as they were.
                None => book.ledger.configure(now, Gpus::Fixed(0), None),
            }
        }
    }

    /// Every book, in no order.
    fn books(&self) -> Vec<Arc<Book>> {
        let books = self.books.lock().unwrap_or_else(PoisonError::into_inner);
        books.values().cloned().collect()
    }

    /// Takes a point of the ledgers for the windows, when one is due.
    fn tick(&self, books: &[Arc<Book>], now: Instant) {
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.tick(books, now);
    }

    /// Every route's GPU time, energy and money over the live windows, and
    /// who was charged them.
    pub(super) fn report(&self, now: Instant) -> ChargebackReport {
        let books = self.books();
        self.tick(&books, now);
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.report(&books, now)
    }

    /// What `route`'s scrapes tell its ledger, made now if the route has
    /// none yet (its scrapes may start before its configuration is in
    /// force).
    pub(super) fn reader(&self, route: &str) -> Arc<dyn Reader> {
        let mut books = self.books.lock().unwrap_or_else(PoisonError::into_inner);
        book(&mut books, route, Instant::now()).ledger.clone()
    }
}

/// `route`'s book, made at `now` with GPUs from its page and no price if it
/// has none yet.
fn book(books: &mut HashMap<Arc<str>, Arc<Book>>, route: &str, now: Instant) -> Arc<Book> {
    if let Some(book) = books.get(route) {
        return book.clone();
    }
    let route: Arc<str> = route.into();
    let book = Arc::new(Book {
        route: route.clone(),
        ledger: Arc::new(Ledger::new(now, Gpus::Scraped, None)),
        shown: arc_swap::ArcSwap::default(),
    });
    books.insert(route, book.clone());
    book
}

/// The families' order in [`Families::template`] and at each collection.
const FAMILIES: [Family; 16] = names::CHARGEBACK;

impl Families {
    fn new(namespace: &str) -> Result<Self, prometheus::Error> {
        let made = Made::new(namespace)?;
        let template = made
            .all()
            .iter()
            .map(|c| c.desc().into_iter().cloned().collect())
            .collect();
        Ok(Self {
            namespace: namespace.to_owned(),
            template,
        })
    }
}

/// The families as made for one exposition.
struct Made {
    counters: Vec<CounterVec>,
    gauges: Vec<GaugeVec>,
}

/// Where each family of [`FAMILIES`] is in [`Made`].
enum At {
    Counter(usize),
    Gauge(usize),
}

impl Made {
    fn new(namespace: &str) -> Result<Self, prometheus::Error> {
        let mut made = Self {
            counters: Vec::new(),
            gauges: Vec::new(),
        };
        for f in FAMILIES {
            let opts = Opts::new(f.name(namespace), f.help);
            match f.kind {
                names::Kind::Gauge => made.gauges.push(GaugeVec::new(opts, f.labels)?),
                _ => made.counters.push(CounterVec::new(opts, f.labels)?),
            }
        }
        Ok(made)
    }

    fn at(f: Family) -> At {
        let before = FAMILIES.iter().take_while(|g| **g != f);
        let gauges = before
            .clone()
            .filter(|g| g.kind == names::Kind::Gauge)
            .count();
        match f.kind {
            names::Kind::Gauge => At::Gauge(gauges),
            _ => At::Counter(before.count() - gauges),
        }
    }

    fn all(&self) -> Vec<&dyn Collector> {
        FAMILIES
            .iter()
            .map(|f| match Self::at(*f) {
                At::Counter(i) => &self.counters[i] as &dyn Collector,
                At::Gauge(i) => &self.gauges[i] as &dyn Collector,
            })
            .collect()
    }

    /// Sets `f`'s series of `labels` to `value` (never below 0: a rounding
    /// is not a negative).
    fn set(&self, f: Family, labels: &[&str], value: f64) {
        let value = value.max(0.0);
        match Self::at(f) {
            At::Counter(i) => self.counters[i].with_label_values(labels).inc_by(value),
            At::Gauge(i) => self.gauges[i].with_label_values(labels).set(value),
        }
    }

    /// The three families of a quantity (`seconds`, `joules`, `cost`) of
    /// one part, for a route shown as `shown`.
    fn part(&self, fams: [Family; 3], route: &str, part: Charge, shown: &Shown) {
        self.set(fams[0], &[route], part.gpu_seconds);
        if shown.energy {
            self.set(fams[1], &[route], part.joules);
        }
        if let Some(currency) = &shown.currency {
            self.set(fams[2], &[route, currency], part.cost);
        }
    }

    fn book(&self, book: &Book, now: Instant) {
        use names::*;
        let (totals, by_key) = book.ledger.snapshot(now);
        let shown = book.shown.load();
        let route = &*book.route;
        self.part(
            [GPU_SECONDS, GPU_ENERGY, GPU_COST],
            route,
            totals.total,
            &shown,
        );
        let in_flight = [
            GPU_IN_FLIGHT_SECONDS,
            GPU_IN_FLIGHT_ENERGY,
            GPU_IN_FLIGHT_COST,
        ];
        self.part(in_flight, route, totals.in_flight, &shown);
        let others = [
            GPU_OTHER_REPLICAS_SECONDS,
            GPU_OTHER_REPLICAS_ENERGY,
            GPU_OTHER_REPLICAS_COST,
        ];
        self.part(others, route, totals.other_replicas, &shown);
        let idle = [GPU_IDLE_SECONDS, GPU_IDLE_ENERGY, GPU_IDLE_COST];
        self.part(idle, route, totals.idle, &shown);
        if shown.energy {
            self.set(GPU_ENERGY_RESETS, &[route], totals.energy_resets as f64);
        }
        for (key, charge) in by_key {
            let good = if key.good { "true" } else { "false" };
            let labels = [route, &*key.model, &*key.tenant, &*key.slo, good];
            self.set(REQUEST_GPU_SECONDS, &labels, charge.gpu_seconds);
            if shown.energy {
                self.set(REQUEST_GPU_ENERGY, &labels, charge.joules);
            }
            if let Some(currency) = &shown.currency {
                let [r, m, t, s, g] = labels;
                self.set(REQUEST_GPU_COST, &[r, m, t, s, g, currency], charge.cost);
            }
        }
    }
}

/// The owner as the registry holds it.
struct Registered(Arc<Charges>);

impl Collector for Registered {
    fn desc(&self) -> Vec<&Desc> {
        self.0.families.template.iter().flatten().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let charges = &self.0;
        let Ok(made) = Made::new(&charges.families.namespace) else {
            return Vec::new();
        };
        let now = Instant::now();
        let books = charges.books();
        charges.tick(&books, now);
        for book in &books {
            made.book(book, now);
        }
        made.all()
            .into_iter()
            .flat_map(|c| c.collect())
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}

#[cfg(test)]
#[path = "charges/tests.rs"]
mod tests;
