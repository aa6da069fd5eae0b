//! The knee and headroom gauges of the latency–load curves, and the
//! curves as `/slo` reports them
//! (docs/metrics.md, "The latency–load curve and its knee"), computed from
//! the curves when `/metrics` is scraped rather than kept up to date per
//! request: a knee is a function of the windows at the moment it is read,
//! and reading it costs a request nothing.
//!
//! A knee that is unknown has no sample. A series set at one scrape that
//! the next does not set (its knee became unknown, or its `bound`
//! changed) is removed, so the exposition holds this scrape's knees only.

use std::sync::{Mutex, MutexGuard};

use prometheus::IntGaugeVec;
use tokio::time::Instant;

use crate::observe::load::{self, InFlight};
use crate::scrape::Readings;
use slo::capacity::{Capacity, CurveReport, knee};
use slo::live::Live;

/// The label values of one series: route, model, slo, window, bound.
type Series = [String; 5];

/// `llm_slo_capacity_concurrency` and `llm_slo_headroom_concurrency`.
pub(super) struct Gauges {
    pub(super) knee: IntGaugeVec,
    pub(super) headroom: IntGaugeVec,
    /// The series of each family set at the last scrape (knee, headroom).
    pub(super) shown: Mutex<(Vec<Series>, Vec<Series>)>,
}

impl Gauges {
    /// Sets every curve's knee and headroom over each window at `now`
    /// against the classes in force in `live`, the headroom against the
    /// load now (the engine's, where `readings` has it fresh, else the
    /// requests in flight). The guard it returns holds the gauges as set
    /// until the scrape that asked has read them.
    pub(super) fn update(
        &self,
        capacity: &Capacity,
        live: &Live,
        in_flight: &InFlight,
        readings: Option<&Readings>,
        now: Instant,
    ) -> MutexGuard<'_, (Vec<Series>, Vec<Series>)> {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let (mut knees, mut headrooms) = (Vec::new(), Vec::new());
        for curve in capacity.curves() {
            let Some(class) = live.class(curve.slo()) else {
                continue;
            };
            let (route, model, slo) = (curve.route(), curve.model(), curve.slo());
            let load_now = load::now(in_flight, readings, route, model);
            for (window, k) in curve.knees(now, &class) {
                let Some((value, bound)) = k.value() else {
                    continue;
                };
                let labels = [route, model, slo, window, bound.as_str()];
                self.knee
                    .with_label_values(&labels)
                    .set(i64::try_from(value).unwrap_or(i64::MAX));
                knees.push(labels.map(str::to_owned));
                if let Some(h) = knee::headroom(k, load_now) {
                    self.headroom.with_label_values(&labels).set(h.concurrency);
                    headrooms.push(labels.map(str::to_owned));
                }
            }
        }
        for (family, old, new) in [
            (&self.knee, &shown.0, &knees),
            (&self.headroom, &shown.1, &headrooms),
        ] {
            for gone in old.iter().filter(|s| !new.contains(s)) {
                let _ = family.remove_label_values(&gone.each_ref().map(String::as_str));
            }
        }
        *shown = (knees, headrooms);
        shown
    }
}

/// Every curve whose class is in force, over each window at `now`, with
/// its knee and headroom against the load now (as the gauges read it):
/// what `/slo` shows, sorted by route, model and class.
pub(super) fn report(
    capacity: &Capacity,
    live: &Live,
    in_flight: &InFlight,
    readings: Option<&Readings>,
    now: Instant,
) -> Vec<CurveReport> {
    capacity
        .curves()
        .iter()
        .filter_map(|curve| {
            let class = live.class(curve.slo())?;
            let load_now = load::now(in_flight, readings, curve.route(), curve.model());
            Some(curve.report(now, &class, Some(load_now)))
        })
        .collect()
}
