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

use crate::observe::occupancy;
use crate::scrape::Readings;
use slo::capacity::{Capacity, CurveReport, knee};
use slo::found::Found;
use slo::in_flight::InFlight;
use slo::live::Live;

/// The label values of one series: route, model, slo, window, bound.
type KneeSeries = [String; 5];

/// The series of each family set at the last scrape (knee, headroom),
/// held as set until the exposition that set them has read them.
pub(super) type KneesShown<'a> = MutexGuard<'a, (Vec<KneeSeries>, Vec<KneeSeries>)>;

/// `llm_slo_capacity_concurrency` and `llm_slo_headroom_concurrency`.
pub(super) struct Gauges {
    pub(super) knee: IntGaugeVec,
    pub(super) headroom: IntGaugeVec,
    /// The series of each family set at the last scrape (knee, headroom).
    pub(super) shown: Mutex<(Vec<KneeSeries>, Vec<KneeSeries>)>,
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
        in_flight: &Found<InFlight, 2>,
        readings: Option<&Readings>,
        now: Instant,
    ) -> KneesShown<'_> {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let (mut knees, mut headrooms) = (Vec::new(), Vec::new());
        for curve in capacity.curves() {
            let Some(class) = live.class(curve.slo()) else {
                continue;
            };
            let (route, model, slo) = (curve.route(), curve.model(), curve.slo());
            let load_now = occupancy::now(in_flight, readings, route, model);
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
    in_flight: &Found<InFlight, 2>,
    readings: Option<&Readings>,
    now: Instant,
) -> Vec<CurveReport> {
    capacity
        .curves()
        .iter()
        .filter_map(|curve| {
            let class = live.class(curve.slo())?;
            let load_now = occupancy::now(in_flight, readings, curve.route(), curve.model());
            Some(curve.report(now, &class, Some(load_now)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use prometheus::Opts;

    use super::*;
    use meter::{Outcome, ServerTimings, Summary, TokenSource, Usage};
    use slo::SloClass;
    use slo::capacity::LoadSample;

    /// The class the latency–load tests judge by, TTFT p95 within 500 ms,
    /// read by the configuration's loader from its one file.
    fn chat() -> SloClass {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/slo/chat.yaml");
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("main.yaml");
        let text = format!(
            "slo_files: ['{file}']\nroutes:\n  - name: r\n    upstream: http://127.0.0.1:1\n"
        );
        std::fs::write(&main, text).unwrap();
        let config = crate::config::Config::load(&main, &Default::default()).unwrap();
        let [class] = <[SloClass; 1]>::try_from(config.slo_classes).unwrap();
        assert_eq!(class.name, "chat");
        class
    }

    fn sample(class: &SloClass, ttft_ms: u64) -> LoadSample {
        let ttft = Duration::from_millis(ttft_ms);
        let s = Summary {
            outcome: Outcome::Ok,
            status: Some(200),
            streamed: true,
            ttft: Some(ttft),
            ttft_visible: Some(ttft),
            e2el: Some(ttft),
            elapsed: ttft,
            tpot: None,
            output_tokens: Some((1, TokenSource::Usage)),
            usage: Usage::default(),
            server: ServerTimings::default(),
            client_wait: Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 1,
            token_events: 1,
            first_token_event: Some(0),
            first_visible_event: Some(0),
            terminal_event: None,
            parse_errors: 0,
        };
        LoadSample::new(class, &s, slo::judge(class, &s, false)).unwrap()
    }

    fn gauge(name: &str) -> IntGaugeVec {
        IntGaugeVec::new(Opts::new(name, name), names::SLO_CAPACITY.labels).unwrap()
    }

    /// The series set, as `window/bound=value`, sorted.
    fn shown(g: &IntGaugeVec) -> Vec<String> {
        let mut out: Vec<String> = prometheus::core::Collector::collect(g)[0]
            .get_metric()
            .iter()
            .map(|m| {
                let label = |n: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == n)
                        .map(|l| l.value().to_owned())
                        .unwrap()
                };
                format!(
                    "{}/{}={}",
                    label("window"),
                    label("bound"),
                    m.get_gauge().get_value()
                )
            })
            .collect();
        out.sort();
        out
    }

    /// A knee that is a lower bound, then measured once a bucket above it
    /// breaks: the `lower` series go, the `measured` ones come; a curve of
    /// a class no longer in force has none; the headroom is read against
    /// the requests in flight now.
    #[tokio::test(start_paused = true)]
    async fn the_gauges_hold_this_scrapes_knees_only() {
        let now = Instant::now();
        let (capacity, live, in_flight) =
            (Capacity::new(now), Live::new(now, 0.0), Found::default());
        let class = chat();
        live.set_classes(std::slice::from_ref(&class));
        let gauges = Gauges {
            knee: gauge("knee"),
            headroom: gauge("headroom"),
            shown: Mutex::default(),
        };
        let curve = capacity.curve("r", "m", "chat");
        capacity
            .curve("r", "m", "gone")
            .record(now, 1, &sample(&class, 10));
        for _ in 0..20 {
            curve.record(now, 1, &sample(&class, 10));
        }
        let (_held, _) = in_flight.get(["r", "m"], InFlight::default).enter();
        drop(gauges.update(&capacity, &live, &in_flight, None, now));
        let windows = |bound: &str, v: i64| -> Vec<String> {
            let mut w: Vec<String> = ["1h", "1m", "5m"]
                .iter()
                .map(|w| format!("{w}/{bound}={v}"))
                .collect();
            w.sort();
            w
        };
        assert_eq!(shown(&gauges.knee), windows("lower", 1));
        assert_eq!(shown(&gauges.headroom), windows("lower", 0));
        for _ in 0..20 {
            curve.record(now, 2, &sample(&class, 900));
        }
        drop(gauges.update(&capacity, &live, &in_flight, None, now));
        assert_eq!(shown(&gauges.knee), windows("measured", 1));
        assert_eq!(shown(&gauges.headroom), windows("measured", 0));
        // Nothing is claimed once the windows are empty.
        let later = now + Duration::from_secs(3700);
        drop(gauges.update(&capacity, &live, &in_flight, None, later));
        assert!(shown(&gauges.knee).is_empty());
        assert!(shown(&gauges.headroom).is_empty());
    }
}
