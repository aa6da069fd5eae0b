//! Every metric tokenmeter exports, registered into a [`Registry`] that the
//! caller owns (never the global default, so each test and each proxy
//! instance has its own): the families of the catalogue ([`names`]:
//! names, help texts, labels), with their buckets.
//!
//! Domain metrics carry the configured namespace (`llm_` by default) and the
//! labels `route`, `model` and `slo`; the proxy's own health metrics use the
//! `tokenmeter_` prefix. Label handles are resolved once per request in
//! [`Metrics::request`]; the per-token path touches only those handles.
//!
//! This module decides nothing about *when* a number is observed: the meter's
//! [`Summary`] says so (docs/metrics.md), and the recorder here writes what it is
//! given. Likewise it does not judge SLOs: [`slo::judge`] does, and
//! the recorder counts its verdict. It does make every SLO threshold an exact
//! bucket boundary of its histogram, so `le="<threshold>"` reads compliance.
//!
//! The registry is exposed in the Prometheus text format or, for scrapers
//! that ask for it (`format.rs`), in OpenMetrics with the latency
//! histograms' exemplars (`openmetrics.rs`, `exemplars.rs`) or in the
//! Prometheus protobuf format with the histograms' native buckets too
//! (`protobuf.rs`, `native.rs`). Each owner registers its own
//! families under its prefix (`register.rs`), and [`Metrics`] composes
//! them (linkerd2-proxy's way): the families a request touches
//! (`families.rs`), with one request's Prometheus recorder and live series
//! (`request.rs`), which observe the labels resolved for the request
//! (`observe::labels`); the proxy's own health (`health.rs`); the live
//! windows, the latency–load curves and the requests in flight, with the
//! families read from them (`windows.rs`, `knees.rs`); and the engines'
//! and GPUs' figures, filled from the readings of the configuration in
//! force when the exposition asks (`engines.rs`). The bounds of the
//! `model` and `tenant` labels are registered here.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{Encoder, IntGauge, Registry, TextEncoder};
use tokio::time::Instant;

use crate::config::MetricsSettings;
use crate::observe::labels::{Bounds, Labels};
use crate::observe::occurrence::Occurrence;
use crate::scrape::Readings;

use slo::SloClass;
use slo::live::Live;

mod charges;
mod deferred;
mod engines;
mod exemplars;
mod families;
mod format;
mod health;
mod held;
mod knees;
mod native;
mod openmetrics;
mod protobuf;
mod register;
mod request;
mod sessions;
mod windows;

use families::Families;
use health::Health;
use register::Register;
use windows::Windows;

pub use charges::{
    Bill, ChargePlan, ChargebackReport, FixedGpus, render_text as render_chargeback,
};
pub use engines::{
    EngineModelView, EngineSources, EngineView, GpuView, MeanMax, PerGpuSecond, RouteTelemetry,
    TelemetryReport,
};
pub use exemplars::ExemplarId;
use exemplars::Exemplified;
pub use families::merged_buckets;
pub use format::Format;
pub use request::{LiveRequest, RequestRecorder, status_class};
pub use sessions::Sessions;
pub use windows::{Concurrency, Place};

/// Every metric family, registered by the owners that keep them, which
/// this composes: the families of a request, the proxy's own health, the
/// live windows with the curves and the requests in flight, and the
/// engines' and GPUs' figures.
pub struct Metrics {
    /// What each request touches, shared by all of them.
    families: Arc<Families>,
    /// The bounds of the `model` and `tenant` labels.
    bounds: Arc<Bounds>,
    health: Health,
    windows: Windows,
    /// The routes' engines and GPUs, read at each exposition.
    engines: Arc<engines::Engines>,
    /// The routes' GPU time, energy and money, and who was charged them.
    charges: Arc<charges::Charges>,
    /// The sessions open, and their families.
    sessions: Arc<Sessions>,
    /// The exemplified histograms' full names, for the OpenMetrics
    /// exposition.
    exemplified: Vec<(String, Exemplified)>,
    registry: Registry,
}

impl Metrics {
    /// Each owner registers its families in `registry`. The SLO classes'
    /// thresholds are merged into the TTFT, TPOT and E2EL buckets.
    pub fn new(
        settings: &MetricsSettings,
        classes: &[SloClass],
        registry: Registry,
    ) -> Result<Self, prometheus::Error> {
        let ns = settings.namespace.as_str();
        let r = Register {
            registry: &registry,
            namespace: ns,
        };
        let native = settings.native_histograms;
        let native = native.enabled.then_some(native::Shape {
            schema: native.schema,
            max_buckets: native.max_buckets,
        });
        let families = Families::register(r, &settings.buckets, classes, native)?;
        let bounds = Bounds::new(
            settings,
            r.counter(names::MODEL_OVERFLOW)?,
            r.counter(names::TENANT_OVERFLOW)?,
        );
        let health = Health::register(r)?;
        let windows = Windows::register(r, classes)?;
        let engines = engines::Engines::register(r, windows.live.clone())?;
        let charges = charges::Charges::register(r)?;
        let sessions = Sessions::register(r)?;
        let exemplified = vec![
            (names::TTFT.name(ns), Exemplified::Ttft),
            (names::TPOT.name(ns), Exemplified::Tpot),
            (names::ITL.name(ns), Exemplified::Itl),
            (names::E2EL.name(ns), Exemplified::E2el),
        ];
        Ok(Metrics {
            families: Arc::new(families),
            bounds: Arc::new(bounds),
            health,
            windows,
            engines,
            charges,
            sessions,
            exemplified,
            registry,
        })
    }

    /// Reads `tokenmeter_log_lines_dropped_total` from `dropped` (a running
    /// total) at each scrape. Only the first source set is used.
    pub fn count_log_drops(&self, dropped: impl Fn() -> u64 + Send + Sync + 'static) {
        self.health.count_log_drops(dropped);
    }

    /// Every route's GPU time, energy and money over the live windows, and
    /// who was charged them, for `/slo` and the live page: the routes of
    /// `engines.charges` (the snapshot in force's).
    pub fn chargeback(&self, engines: EngineSources<'_>) -> ChargebackReport {
        self.charges.report(engines.charges, Instant::now())
    }

    /// Takes a point of the ledgers of `engines.charges` (the snapshot in
    /// force's) for the chargeback's windows, when the last is 10 s old:
    /// the app calls it every second, so that the windows of `/slo` are
    /// sampled on their own clock, whoever reads them.
    pub fn tick_chargeback(&self, engines: EngineSources<'_>, now: Instant) {
        self.charges.tick(engines.charges, now);
    }

    /// The routes' engine and GPU figures of `engines` (those of the
    /// snapshot in force) now, as the exposition has them, for `/slo` and
    /// the live page.
    pub fn telemetry(&self, engines: EngineSources<'_>) -> TelemetryReport {
        let now = Instant::now();
        self.engines.report(engines.readings, engines.fixed, now)
    }

    /// The classes in force: their targets and thresholds as gauges, and
    /// the live windows' classes. Called at start and on every reload.
    pub fn set_slo_targets(&self, classes: &[SloClass]) {
        self.windows.set_classes(classes);
    }

    /// Counts a configuration reload; on success, `unix_time` is when the
    /// new config was loaded. Start-up counts as a success without
    /// counting a reload.
    pub fn config_loaded(&self, reload: Option<bool>, unix_time: f64) {
        self.health.config_loaded(reload, unix_time);
    }

    /// The sessions open on this replica, and their families.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Every route's sessions open now and its turns and sessions over
    /// the live windows, for `/slo` and the live page.
    pub fn sessions_report(&self) -> slo::live::sessions::SessionsReport {
        self.sessions.report(Instant::now())
    }

    /// The live windows behind `/slo`.
    pub fn live(&self) -> &Arc<Live> {
        &self.windows.live
    }

    /// Every latency–load curve whose class is in force at `now`, with its
    /// knee and headroom per window against the load now (the engine's
    /// where `readings` has it, else the requests in flight).
    pub fn capacity_report(
        &self,
        now: Instant,
        readings: Option<&Readings>,
    ) -> Vec<slo::capacity::CurveReport> {
        self.windows.capacity_report(now, readings)
    }

    /// The registry the metrics live in.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition of the registry: the Prometheus text format 0.0.4,
    /// or with `openmetrics` the OpenMetrics text format, which has the
    /// latency histograms' exemplars. The engines' and GPUs' families, and
    /// the knee and headroom gauges (read against the engines' loads where
    /// they are scraped), are those of `engines`: the snapshot in force's.
    pub fn encode(&self, openmetrics: bool, engines: EngineSources<'_>) -> String {
        let families = self.gather(engines);
        if openmetrics {
            return openmetrics::encode(&families, &self.exemplified, &self.families.exemplars);
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// The exposition in `format` ([`Format::content_type`] says which):
    /// the text formats of [`Metrics::encode`], or the Prometheus protobuf
    /// format, each histogram with its exemplars and, when native
    /// histograms are on, its native buckets.
    pub fn exposition(&self, format: Format, engines: EngineSources<'_>) -> Vec<u8> {
        match format {
            Format::Protobuf => {
                let families = self.gather(engines);
                let f = &*self.families;
                protobuf::encode(&families, &self.exemplified, &f.exemplars, f)
            }
            Format::OpenMetrics => self.encode(true, engines).into_bytes(),
            Format::Text => self.encode(false, engines).into_bytes(),
        }
    }

    /// Brings the families computed at the scrape up to date, then gathers
    /// the registry.
    fn gather(&self, engines: EngineSources<'_>) -> Vec<prometheus::proto::MetricFamily> {
        let now = Instant::now();
        self.engines.refresh(engines.readings, engines.fixed, now);
        self.charges.refresh(engines.charges, now);
        self.sessions.refresh();
        let _knees = self.windows.refresh(engines.readings, now);
        self.health.refresh();
        self.registry.gather()
    }

    /// The bounds of the labels clients choose, by which each request's
    /// labels are resolved.
    pub fn bounds(&self) -> &Arc<Bounds> {
        &self.bounds
    }

    /// The Prometheus recorder of one metered request of `labels`, with
    /// the handles of its histograms resolved (once its labels are final).
    /// `exemplar`, when the request has one, is what its latency
    /// observations' exemplars name.
    pub fn request(&self, labels: &Labels, exemplar: Option<ExemplarId>) -> RequestRecorder {
        let mut recorder = RequestRecorder {
            families: self.families.clone(),
            handles: None,
            deferred: None,
            itl: None,
            exemplar,
            max_gap: None,
        };
        // A pending name's are resolved at its response head, to its own
        // label or `other`, and those of a request that named no model once
        // its response names one (or it ends): none is made before it is
        // known which.
        if !labels.histograms_wait() {
            recorder.handles = Some(recorder.resolve_handles(labels));
        }
        recorder
    }

    /// The requests in flight: a request enters them when it starts, and
    /// again when its labels change.
    pub fn concurrency(&self) -> &Arc<Concurrency> {
        self.windows.concurrency()
    }

    /// The counters of what the OTLP export loses (each series made, so
    /// it reads 0 from the start).
    pub fn otlp_counters(&self) -> crate::observe::otlp::Counters {
        self.health.otlp_counters()
    }

    /// The live series of a request of `labels` (its route and class),
    /// told that the request starts now (it is in flight there until it
    /// finishes). `class_window` is the compliance window of its class,
    /// when it has a defined one.
    pub fn live_request(&self, labels: &Labels, class_window: Option<Duration>) -> LiveRequest {
        let turns = self.sessions.route_windows(labels.route());
        self.windows.request(labels, class_window, turns)
    }

    /// Counts what the proxy reports of itself.
    pub fn count(&self, occurrence: Occurrence<'_>) {
        self.health.count(occurrence);
    }

    /// Makes the series of a route's own counters, at 0, so that their
    /// rates are defined before anything happens: its upstream's retries,
    /// and, when it limits its requests in flight (`limited`), its
    /// rejections.
    pub fn declare_route(&self, route: &str, limited: bool) {
        self.health.declare_route(route, limited);
    }

    /// Counts a request whose body is being read ahead, before it goes to
    /// the upstream, until the guard is dropped.
    pub fn receiving_body(&self, route: &str) -> ReceivingBody {
        let gauge = self.health.receiving_body(route);
        gauge.inc();
        ReceivingBody(gauge)
    }

    /// The gauge of `listener`'s open connections, its limit `max` set.
    pub fn connections(&self, listener: &str, max: usize) -> IntGauge {
        self.health.connections(listener, max)
    }
}

/// A request counted while its body is read ahead.
pub struct ReceivingBody(IntGauge);

impl Drop for ReceivingBody {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MetricsSettings;
    use crate::observe::occurrence::Rejection;

    /// Every family of the catalogue is registered, and every family the
    /// exporter serves is the catalogue's, with its kind, help and labels.
    #[test]
    fn the_exporter_registers_the_catalogue() {
        let registry = Registry::new();
        let m = Metrics::new(&MetricsSettings::default(), &[], registry.clone()).unwrap();
        // Each name of the catalogue is taken: registering it again fails.
        for f in names::ALL {
            let again = IntGauge::new(f.name("llm"), "again").unwrap();
            assert!(
                matches!(
                    registry.register(Box::new(again)),
                    Err(prometheus::Error::AlreadyReg)
                ),
                "{} is not registered",
                f.name("llm")
            );
        }
        // Families with series are gathered: each is the catalogue's.
        let labels = Labels::resolve(
            m.bounds(),
            "r",
            Some("m"),
            Some("s"),
            Some("t"),
            meter::Operation::Chat,
        );
        let _ = m.request(&labels, None);
        let _place = m.concurrency().enter(&labels);
        m.count(Occurrence::Rejected {
            route: "r",
            reason: Rejection::BadHost,
        });
        m.count(Occurrence::DeclarationRefused {
            route: "r",
            objective: slo::ObjectiveKind::Ttft,
        });
        m.count(Occurrence::Passthrough { route: "r" });
        m.declare_route("r", true);
        let _ = m.connections("proxy", 1);
        let gathered = registry.gather();
        let catalogue: std::collections::BTreeMap<String, names::Family> = names::ALL
            .iter()
            .chain(&names::SESSIONS)
            .map(|f| (f.name("llm"), *f))
            .collect();
        for family in &gathered {
            let f = catalogue
                .get(family.name())
                .unwrap_or_else(|| panic!("{} is not in the catalogue", family.name()));
            let kind = match family.get_field_type() {
                prometheus::proto::MetricType::HISTOGRAM => names::Kind::Histogram,
                prometheus::proto::MetricType::COUNTER => names::Kind::Counter,
                _ => names::Kind::Gauge,
            };
            assert_eq!(kind, f.kind, "{}", family.name());
            assert_eq!(family.help(), f.help);
            for metric in family.get_metric() {
                let labels: Vec<&str> = metric.get_label().iter().map(|l| l.name()).collect();
                let mut want: Vec<&str> = f.labels.to_vec();
                want.sort_unstable();
                assert_eq!(labels, want, "{}", family.name());
            }
        }
        assert!(gathered.len() >= 10, "{}", gathered.len());
    }
}
