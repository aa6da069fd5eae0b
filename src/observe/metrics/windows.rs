//! The live windows, the latency–load curves and the requests in flight:
//! one owner of what is counted over time rather than per request. It
//! registers the families read from it, each computed when the exposition
//! asks: the requests in flight by route, model and class
//! (`llm_requests_in_flight`), the curves' knees and headroom
//! (`knees.rs`), and the SLO classes' targets and thresholds.
//!
//! The requests in flight are counted once each way they are read, with
//! the one count type ([`InFlight`]) in the one lock-free map ([`Found`]):
//! by route and model, the load a request meets when it is sent
//! (`observe::occupancy`), and by route, model and class, the gauge.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::{GaugeVec, IntGaugeVec};
use tokio::time::Instant;

use super::knees;
use super::register::Register;
use crate::observe::labels::Labels;
use crate::scrape::Readings;
use slo::SloClass;
use slo::capacity::{Capacity, CurveReport};
use slo::found::Found;
use slo::in_flight::{Entered, InFlight};
use slo::live::Live;

/// The live windows, curves and requests in flight, and their families.
pub(super) struct Windows {
    /// The sliding windows behind `/slo`.
    pub(super) live: Arc<Live>,
    /// The latency–load curves, over the same windows.
    pub(super) capacity: Arc<Capacity>,
    concurrency: Arc<Concurrency>,
    /// `llm_requests_in_flight`, set from `concurrency` at each scrape (a
    /// label set has a series from its first request on).
    in_flight: IntGaugeVec,
    /// The knee and headroom gauges, set from the curves at each scrape.
    knees: knees::Gauges,
    targets: Objectives,
}

/// The requests in flight now, by label set.
#[derive(Default)]
pub struct Concurrency {
    /// By route and model label: a request's load at arrival, and the
    /// load now where no engine is scraped.
    pub(super) by_model: Found<InFlight, 2>,
    /// By route, model and class label (`llm_requests_in_flight`), each
    /// within its route and model's count.
    by_class: Found<InFlight, 3>,
}

/// A request's place among the requests in flight (by route, model and
/// class label, and so by route and model), until it is dropped.
pub struct Place {
    _entered: Entered,
}

impl Concurrency {
    /// Counts a request of `labels` in flight until the returned place is
    /// dropped, and tells how many of its route and model are in flight
    /// with it: its load at arrival where no engine is scraped. One lookup
    /// finds its class's count, which holds its route and model's.
    pub fn enter(&self, labels: &Labels) -> (Place, u64) {
        let (route, model, slo) = (labels.route(), labels.model(), labels.slo());
        let seat = self.by_class.get([route, model, slo], || {
            InFlight::within(self.by_model.get([route, model], InFlight::default))
        });
        let (entered, with) = seat.enter();
        (Place { _entered: entered }, with)
    }

    /// The requests in flight now under `[route, model, slo]`, and under
    /// its route and model.
    #[cfg(test)]
    pub(crate) fn now(&self, [route, model, slo]: [&str; 3]) -> (u64, u64) {
        let count = |c: Option<Arc<InFlight>>| c.map_or(0, |c| c.now());
        (
            count(self.by_class.find([route, model, slo])),
            count(self.by_model.find([route, model])),
        )
    }
}

/// `llm_slo_objective_target` and `llm_slo_threshold_seconds`.
struct Objectives {
    target: GaugeVec,
    threshold: GaugeVec,
    /// The (slo, objective) pairs of the gauges, so a reload can remove
    /// those of classes that went away.
    shown: Mutex<Vec<[String; 2]>>,
}

impl Windows {
    pub(super) fn register(
        r: Register<'_>,
        classes: &[SloClass],
    ) -> Result<Self, prometheus::Error> {
        // The curves' windows start with the live windows', so that both
        // slide together.
        let origin = Instant::now();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let concurrency = Arc::new(Concurrency::default());
        let f = names::IN_FLIGHT;
        let in_flight =
            IntGaugeVec::new(prometheus::Opts::new(f.name(r.namespace), f.help), f.labels)?;
        r.registry.register(Box::new(in_flight.clone()))?;
        let windows = Windows {
            live: Arc::new(Live::new(origin, unix)),
            capacity: Arc::new(Capacity::new(origin)),
            concurrency,
            in_flight,
            knees: knees::Gauges {
                knee: r.gauges(names::SLO_CAPACITY)?,
                headroom: r.gauges(names::SLO_HEADROOM)?,
                shown: Mutex::default(),
            },
            targets: Objectives {
                target: r.float_gauges(names::SLO_TARGET)?,
                threshold: r.float_gauges(names::SLO_THRESHOLD)?,
                shown: Mutex::new(Vec::new()),
            },
        };
        windows.set_classes(classes);
        Ok(windows)
    }

    /// The requests in flight.
    pub(super) fn concurrency(&self) -> &Arc<Concurrency> {
        &self.concurrency
    }

    /// Sets the requests in flight, and the knee and headroom gauges
    /// against `readings` (the configuration in force's) at `now`; the
    /// guard holds the knees as set until the exposition that asked has
    /// read them.
    pub(super) fn refresh(
        &self,
        readings: Option<&Readings>,
        now: Instant,
    ) -> knees::KneesShown<'_> {
        for (labels, count) in self.concurrency.by_class.entries() {
            let labels = labels.each_ref().map(|l| &**l);
            let now = i64::try_from(count.now()).unwrap_or(i64::MAX);
            self.in_flight.with_label_values(&labels).set(now);
        }
        self.knees.update(
            &self.capacity,
            &self.live,
            &self.concurrency.by_model,
            readings,
            now,
        )
    }

    /// Every latency–load curve whose class is in force at `now`, with
    /// its knee and headroom per window against the load now (the
    /// engine's where `readings` has it, else the requests in flight).
    pub(super) fn capacity_report(
        &self,
        now: Instant,
        readings: Option<&Readings>,
    ) -> Vec<CurveReport> {
        knees::report(
            &self.capacity,
            &self.live,
            &self.concurrency.by_model,
            readings,
            now,
        )
    }

    /// The classes in force: the live windows judge by them, and each
    /// class's targets and thresholds are gauges, so PromQL and dashboards
    /// can compare against them without copying numbers. Called at start
    /// and on every reload: series of classes or objectives that are gone
    /// are removed, the others overwritten (never reset, so a scrape cannot
    /// fall between removal and setting).
    pub(super) fn set_classes(&self, classes: &[SloClass]) {
        let mut wanted: Vec<([String; 2], f64, Option<f64>)> = Vec::new();
        for class in classes {
            for objective in &class.objectives {
                wanted.push((
                    [class.name.clone(), objective.kind.as_str().to_owned()],
                    objective.target,
                    Some(objective.threshold.as_secs_f64()),
                ));
            }
            if let Some(goodput) = class.goodput.target {
                wanted.push(([class.name.clone(), "goodput".to_owned()], goodput, None));
            }
        }
        let t = &self.targets;
        let mut shown = t.shown.lock().unwrap_or_else(|e| e.into_inner());
        for old in shown.iter() {
            let still = wanted.iter().find(|(l, _, _)| l == old);
            let values = [old[0].as_str(), old[1].as_str()];
            match still {
                None => {
                    let _ = t.target.remove_label_values(&values);
                    let _ = t.threshold.remove_label_values(&values);
                }
                Some((_, _, None)) => {
                    let _ = t.threshold.remove_label_values(&values);
                }
                Some(_) => {}
            }
        }
        for (l, target, threshold) in &wanted {
            let values = [l[0].as_str(), l[1].as_str()];
            t.target.with_label_values(&values).set(*target);
            if let Some(v) = threshold {
                t.threshold.with_label_values(&values).set(*v);
            }
        }
        *shown = wanted.into_iter().map(|(l, _, _)| l).collect();
        self.live.set_classes(classes);
    }

    /// The live series of a request of `labels` (its route and class),
    /// told that the request starts now (it is in flight there until it
    /// finishes). `class_window` is the compliance window of its class,
    /// when it has a defined one.
    pub(super) fn request(
        &self,
        labels: &Labels,
        class_window: Option<Duration>,
        turns: Arc<slo::live::sessions::RouteSessions>,
    ) -> super::LiveRequest {
        let series = self.live.series(labels.route(), labels.slo(), "");
        series.start(Instant::now());
        super::LiveRequest {
            series,
            class_window,
            tenant: None,
            capacity: self.capacity.clone(),
            turns,
        }
    }
}
