//! Chargeback: each GPU set's GPU time, energy and money, divided among
//! the requests of its routes by their share of the batch (docs/metrics.md,
//! "Chargeback").
//!
//! The ledgers (`slo::ledger`) are held by the snapshot in force: what a
//! configuration says of its routes' GPUs and prices is its
//! [`ChargePlan`], made by `InForce::build` with a ledger per GPU set (the
//! routes in front of the same GPUs, `config::gpu_sets`), each carried
//! over from the previous snapshot's plan when the set was there (by its
//! `gpu_set` name, else its GPU page and selection, else its one route
//! with `gpus`; failing that, by its label value: so that a reload neither
//! loses nor repeats what was counted), else new. A plan is applied to the ledgers it carries
//! over ([`ChargePlan::apply`]) as the last step of its snapshot's build,
//! after everything that can fail: a build that fails leaves every ledger
//! as it was, and its new ledgers are never seen. A request of a route
//! with GPUs opens a tab in the plan of the snapshot it started under when
//! it is counted in flight, and closes it when it ends, under its labels
//! and verdict ([`Bill`]); the route's scrapes tell its set's ledger the
//! GPUs, their energy and the engine's load ([`ChargePlan::reader`]).
//!
//! The families are filled, at each exposition, from one snapshot of each
//! ledger of the plan in force ([`Charges::refresh`], as the engines'
//! figures are), so that at every scrape the requests' charges, the
//! in-flight share, the other replicas' and idle add up to the set's
//! total. The cost families carry the currency of the first plan: a
//! change of `cost.currency` applies at the next start.
//!
//! The windows of `/slo` (`charges/report.rs`) start at points of the
//! ledgers taken on the process's own clock ([`Charges::tick`]), so that
//! neither a scrape nor a report changes what they show.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, GaugeVec, Opts};
use tokio::time::Instant;

use super::register::Register;

mod book;
mod report;

use book::{BillShown, Book, ChargeKey};

use crate::config::{Config, GpuSelect, GpuSetId, Route, gpu_sets};
use crate::observe::labels::Labels;
use crate::observe::request::Charged;
use names::Family;
pub use report::{ChargebackReport, render_text};
use slo::ledger::{Charge, Gpus, Ledger, Reader, Tab};

/// A route with `gpus: N` (its name and N): its GPUs are counted, not
/// read from a page.
pub type FixedGpus = (Arc<str>, u32);

/// The chargeback's families and the points of its windows.
pub(super) struct Charges {
    families: ChargeFamilies,
    /// The families as the last exposition filled them.
    filled: Mutex<Vec<MetricFamily>>,
    /// Points of the ledgers' counts, for the windows of `/slo`.
    history: Mutex<report::BillHistory>,
}

/// The families' descriptions, made once.
struct ChargeFamilies {
    namespace: String,
    template: Vec<Vec<Desc>>,
}

/// What one configuration says of its routes with GPUs: each GPU set's
/// book, GPUs, price and how its charges are shown, and the set of each
/// route.
#[derive(Clone, Default)]
pub struct ChargePlan {
    /// The sets, by what a reload carries them by.
    sets: Arc<HashMap<GpuSetId, Planned>>,
    /// The book of each route with GPUs: its set's.
    routes: Arc<HashMap<Arc<str>, Arc<Book>>>,
    /// The routes with `gpus: N`, by name: their GPUs, counted.
    fixed: Arc<[FixedGpus]>,
    /// The currency of every cost family.
    currency: Option<Arc<str>>,
}

/// One GPU set of a [`ChargePlan`].
struct Planned {
    book: Arc<Book>,
    gpus: Gpus,
    price: Option<f64>,
    /// The GPU page and selection its energy is read from.
    page: Option<(String, GpuSelect)>,
    /// The set of the previous plan whose ledger it carries.
    from: Option<GpuSetId>,
}

impl ChargePlan {
    /// What `config` says of its GPU sets, each with a ledger: `previous`'s
    /// of the same set (its `gpu_set` name, else its page and selection,
    /// else its one route with `gpus`), else of a set of the same name
    /// that no set of `config` carries so, else a new one made at `now`.
    /// Nothing is changed: [`apply`](Self::apply) does that.
    pub fn new(config: &Config, previous: Option<&ChargePlan>, now: Instant) -> Self {
        // The cost families keep the currency they started with.
        let currency = previous
            .and_then(|p| p.currency.clone())
            .unwrap_or_else(|| config.cost.currency.as_str().into());
        let sets = gpu_sets(&config.routes);
        let before = previous.map(|p| &*p.sets);
        // Carried by identity first, then by name from the sets left.
        let mut from: Vec<Option<GpuSetId>> = sets
            .iter()
            .map(|set| before?.contains_key(&set.id).then(|| set.id.clone()))
            .collect();
        for (i, set) in sets.iter().enumerate() {
            if from[i].is_some() {
                continue;
            }
            let taken = |id: &GpuSetId| from.contains(&Some(id.clone()));
            from[i] = before.and_then(|b| {
                b.iter()
                    .find(|(id, p)| *p.book.set == *set.name && !taken(id))
                    .map(|(id, _)| id.clone())
            });
        }
        let mut planned = HashMap::new();
        let mut routes = HashMap::new();
        for (set, from) in sets.into_iter().zip(from) {
            let first = &config.routes[set.routes[0]];
            let Some(gpus) = gpus_of(first) else {
                continue;
            };
            let carried = from.as_ref().and_then(|id| before?.get(id));
            let ledger = match carried {
                Some(p) => p.book.ledger.clone(),
                None => Arc::new(Ledger::new(now, gpus, first.gpu_hourly_cost)),
            };
            let names: Arc<[Arc<str>]> = set
                .routes
                .iter()
                .map(|&i| Arc::from(config.routes[i].name.as_str()))
                .collect();
            let book = Arc::new(Book {
                set: set.name.as_str().into(),
                routes: names.clone(),
                ledger,
                shown: BillShown {
                    energy: first.gpu_metrics.is_some(),
                    currency: first.gpu_hourly_cost.map(|_| currency.clone()),
                    price: first.gpu_hourly_cost,
                    fixed: first.gpus,
                },
            });
            for name in names.iter() {
                routes.insert(name.clone(), book.clone());
            }
            let page = first
                .gpu_metrics
                .as_ref()
                .map(|m| (m.url.to_string(), first.gpu_select.clone()));
            let p = Planned {
                book,
                gpus,
                price: first.gpu_hourly_cost,
                page,
                from,
            };
            planned.insert(set.id, p);
        }
        let mut fixed: Vec<_> = routes
            .iter()
            .filter_map(|(route, book)| Some((route.clone(), book.shown.fixed?)))
            .collect();
        fixed.sort();
        ChargePlan {
            sets: Arc::new(planned),
            routes: Arc::new(routes),
            fixed: fixed.into(),
            currency: Some(currency),
        }
    }

    /// Puts the plan in force from `now` on, over `previous`: each ledger
    /// carried over is told its set's GPUs and price, and starts its
    /// energy baselines afresh when its GPU page or selection changed.
    pub fn apply(&self, previous: Option<&ChargePlan>, now: Instant) {
        for p in self.sets.values() {
            let before = p.from.as_ref().zip(previous);
            let Some(before) = before.and_then(|(id, prev)| prev.sets.get(id)) else {
                continue;
            };
            p.book.ledger.configure(now, p.gpus, p.price);
            if before.page != p.page {
                p.book.ledger.restart_energy(now);
            }
        }
    }

    /// A tab for a request of `route` in flight from `now`, in its GPU
    /// set's ledger, when the route has GPUs.
    pub fn open(&self, route: &str, now: Instant) -> Option<Bill> {
        if self.routes.is_empty() {
            return None;
        }
        let (route, book) = self.routes.get_key_value(route)?;
        Some(Bill {
            tab: book.ledger.open(now),
            book: book.clone(),
            route: route.clone(),
        })
    }

    /// What `route`'s scrapes tell its GPU set's ledger, when the route
    /// has GPUs.
    pub fn reader(&self, route: &str) -> Option<Arc<dyn Reader>> {
        let ledger = self.routes.get(route)?.ledger.clone();
        Some(ledger)
    }

    /// The currency of the cost families.
    pub fn currency(&self) -> &str {
        self.currency.as_deref().unwrap_or("USD")
    }

    /// The routes with `gpus: N`, by name: their GPUs, counted.
    pub fn fixed_gpus(&self) -> &[FixedGpus] {
        &self.fixed
    }

    /// Every book, in no order.
    fn books(&self) -> Vec<Arc<Book>> {
        self.sets.values().map(|p| p.book.clone()).collect()
    }
}

/// Where `route`'s GPU count comes from, when it has GPUs.
fn gpus_of(route: &Route) -> Option<Gpus> {
    match (route.gpus, &route.gpu_metrics) {
        (Some(n), _) => Some(Gpus::Fixed(n)),
        (None, Some(_)) => Some(Gpus::Scraped),
        (None, None) => None,
    }
}

/// A request's tab in its GPU set's ledger, and how its charge is shown.
pub struct Bill {
    tab: Tab<ChargeKey>,
    book: Arc<Book>,
    route: Arc<str>,
}

impl Bill {
    /// Ends the request at `now`: charged under `labels` and `good`.
    pub fn close(self, now: Instant, labels: &Labels, good: bool) -> Charged {
        let key = ChargeKey {
            route: self.route,
            model: labels.model().into(),
            tenant: labels.tenant().into(),
            slo: labels.slo().into(),
            good,
        };
        let charge = self.tab.close(now, key);
        let shown = &self.book.shown;
        Charged {
            gpu_seconds: charge.gpu_seconds,
            joules: shown.energy.then_some(charge.joules),
            cost: shown.currency.is_some().then_some(charge.cost),
        }
    }
}

impl Charges {
    pub(super) fn register(r: Register<'_>) -> Result<Arc<Self>, prometheus::Error> {
        let families = ChargeFamilies::new(r.namespace)?;
        let charges = Arc::new(Self {
            families,
            filled: Mutex::default(),
            history: Mutex::new(report::BillHistory::new(Instant::now())),
        });
        r.registry
            .register(Box::new(ChargesCollector(charges.clone())))?;
        Ok(charges)
    }

    /// Fills the families from `plan`'s ledgers (the snapshot in force's)
    /// at `now`, for the exposition that follows.
    pub(super) fn refresh(&self, plan: Option<&ChargePlan>, now: Instant) {
        let filled = match Made::new(&self.families.namespace) {
            Ok(made) => {
                for book in plan.map(ChargePlan::books).unwrap_or_default() {
                    made.book(&book, now);
                }
                made.all()
                    .into_iter()
                    .flat_map(|c| c.collect())
                    .filter(|f| !f.get_metric().is_empty())
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        *self.filled.lock().unwrap_or_else(PoisonError::into_inner) = filled;
    }

    /// Every route of `plan` (the snapshot in force's): its GPU time,
    /// energy and money over the live windows, and who was charged them.
    /// Reading it changes nothing: the windows start at the points
    /// [`tick`](Self::tick) takes.
    pub(super) fn report(&self, plan: Option<&ChargePlan>, now: Instant) -> ChargebackReport {
        let books = plan.map(ChargePlan::books).unwrap_or_default();
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.report(&books, now)
    }

    /// Takes a point of `plan`'s ledgers (the snapshot in force's) for the
    /// windows when the last is `report::EVERY` old: called on the
    /// process's own clock, every second or so.
    pub(super) fn tick(&self, plan: Option<&ChargePlan>, now: Instant) {
        let books = plan.map(ChargePlan::books).unwrap_or_default();
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.tick(&books, now);
    }
}

/// The families' order in [`ChargeFamilies::template`] and at each collection.
const FAMILIES: [Family; 19] = names::CHARGEBACK;

impl ChargeFamilies {
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
    /// one part, for a GPU set shown as `shown`.
    fn part(&self, fams: [Family; 3], set: &str, part: Charge, shown: &BillShown) {
        self.set(fams[0], &[set], part.gpu_seconds);
        if shown.energy {
            self.set(fams[1], &[set], part.joules);
        }
        if let Some(currency) = &shown.currency {
            self.set(fams[2], &[set, currency], part.cost);
        }
    }

    fn book(&self, book: &Book, now: Instant) {
        use names::*;
        let (totals, by_key) = book.ledger.snapshot(now);
        let shown = &book.shown;
        let set = &*book.set;
        self.part(
            [GPU_SECONDS, GPU_ENERGY, GPU_COST],
            set,
            totals.total,
            shown,
        );
        let in_flight = [
            GPU_IN_FLIGHT_SECONDS,
            GPU_IN_FLIGHT_ENERGY,
            GPU_IN_FLIGHT_COST,
        ];
        self.part(in_flight, set, totals.in_flight, shown);
        let others = [
            GPU_OTHER_REPLICAS_SECONDS,
            GPU_OTHER_REPLICAS_ENERGY,
            GPU_OTHER_REPLICAS_COST,
        ];
        self.part(others, set, totals.other_replicas, shown);
        let idle = [GPU_IDLE_SECONDS, GPU_IDLE_ENERGY, GPU_IDLE_COST];
        self.part(idle, set, totals.idle, shown);
        if shown.energy {
            self.set(GPU_ENERGY_RESETS, &[set], totals.energy_resets as f64);
            let implausible = totals.implausible_samples as f64;
            self.set(GPU_ENERGY_IMPLAUSIBLE, &[set], implausible);
            self.set(GPU_ENERGY_AWAITING, &[set], totals.awaiting_energy);
        }
        if let (Some(currency), Some(price)) = (&shown.currency, shown.price) {
            self.set(GPU_HOURLY_COST, &[set, currency], price);
        }
        for (key, charge) in by_key {
            let good = if key.good { "true" } else { "false" };
            let labels = [&*key.route, set, &*key.model, &*key.tenant, &*key.slo, good];
            self.set(REQUEST_GPU_SECONDS, &labels, charge.gpu_seconds);
            if shown.energy {
                self.set(REQUEST_GPU_ENERGY, &labels, charge.joules);
            }
            if let Some(currency) = &shown.currency {
                let [r, g, m, t, s, good] = labels;
                let labels = [r, g, m, t, s, good, currency];
                self.set(REQUEST_GPU_COST, &labels, charge.cost);
            }
        }
    }
}

/// The owner as the registry holds it: the families as last filled.
struct ChargesCollector(Arc<Charges>);

impl Collector for ChargesCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.0.families.template.iter().flatten().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let filled = self.0.filled.lock().unwrap_or_else(PoisonError::into_inner);
        filled.clone()
    }
}

#[cfg(test)]
#[path = "charges/tests.rs"]
mod tests;
