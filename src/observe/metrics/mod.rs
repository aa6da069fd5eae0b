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
//! that ask for it, in OpenMetrics with the latency histograms' exemplars
//! (`openmetrics.rs`, `exemplars.rs`). Beside this file, which registers
//! the families and counts what the proxy reports of itself
//! ([`Event`]s): the families a request touches (`families.rs`), and one
//! request's Prometheus recorder and live series (`request.rs`), which
//! observe the labels resolved for the request (`observe::labels`); the
//! bounds of the `model` and `tenant` labels are registered here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use tokio::time::Instant;

use crate::config::MetricsSettings;
use crate::observe::event::{Event, HandshakeFailure, Listener, Rejection, Shed};
use crate::observe::labels::{Bounds, Labels};
use crate::observe::load::InFlight;
use crate::scrape::Readings;

use slo::capacity::Capacity;
use slo::live::Live;
use slo::{ObjectiveKind, SloClass};

use names::{self, Family};

mod capacity;
mod deferred;
mod exemplars;
mod families;
mod openmetrics;
mod request;
mod telemetry;

use families::Families;
pub use request::{LiveRequest, RequestRecorder, status_class};

pub use exemplars::ExemplarId;
use exemplars::{Exemplars, Exemplified};
pub use openmetrics::{CONTENT_TYPE as OPENMETRICS_CONTENT_TYPE, wants_openmetrics};
pub use telemetry::{
    EngineModelView, EngineView, GpuView, MeanMax, PerGpuSecond, RouteTelemetry, TelemetryReport,
};

/// All metric families, registered.
pub struct Metrics {
    /// What each request touches, shared by all of them.
    families: Arc<Families>,
    /// The bounds of the `model` and `tenant` labels.
    bounds: Arc<Bounds>,
    unrouted: IntCounter,
    passthrough: IntCounterVec,
    rejected: IntCounterVec,
    declarations_refused: IntCounterVec,
    upstream_retries: IntCounterVec,
    slo_target: GaugeVec,
    slo_threshold: GaugeVec,
    /// The (slo, objective) pairs of the target and threshold gauges, so a
    /// reload can remove those of classes that went away.
    slo_gauge_labels: Mutex<Vec<[String; 2]>>,
    reloads: IntCounterVec,
    last_reload_success: Gauge,
    last_reload_successful: IntGauge,
    open_connections: IntGaugeVec,
    max_connections: IntGaugeVec,
    receiving_body: IntGaugeVec,
    /// Indexed by `Shed as usize`, each series made at start.
    shed_connections: [IntCounter; 3],
    /// By listener, then reason (their `ALL` order).
    tls_handshake_failures: [[IntCounter; 5]; 2],
    log_lines_dropped: IntCounter,
    otlp_dropped: IntCounterVec,
    otlp_failures: IntCounterVec,
    /// Where `log_lines_dropped` is read from at each scrape (the process's
    /// log writer), once the binary has set it.
    log_drops: std::sync::OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>,
    /// The sliding windows behind `/slo`.
    live: Arc<Live>,
    /// The routes' engines and GPUs, read at each exposition.
    telemetry: Arc<telemetry::Telemetry>,
    /// The latency–load curves, over the same windows.
    capacity: Arc<Capacity>,
    /// The knee and headroom gauges, set from the curves at each scrape.
    capacity_gauges: capacity::Gauges,
    /// The metered requests in flight by route and model label: each
    /// request's load at arrival, and the load now where no engine is
    /// scraped.
    in_flight_load: Arc<InFlight>,
    /// The exemplified histograms' full names, for the OpenMetrics
    /// exposition.
    exemplified: Vec<(String, Exemplified)>,
    registry: Registry,
}

/// `configured` with every threshold of `kind` from `classes` added as an
/// exact bound (sorted, without duplicates), so `le="0.5"` is a series.
pub fn merged_buckets(configured: &[f64], classes: &[SloClass], kind: ObjectiveKind) -> Vec<f64> {
    let mut bounds: Vec<f64> = configured.to_vec();
    bounds.extend(
        classes
            .iter()
            .filter_map(|class| class.objective(kind))
            .map(|objective| objective.threshold.as_secs_f64()),
    );
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

impl Metrics {
    /// Creates and registers every metric family in `registry`. The SLO
    /// classes' thresholds are merged into the TTFT, TPOT and E2EL buckets.
    pub fn new(
        settings: &MetricsSettings,
        classes: &[SloClass],
        registry: Registry,
    ) -> Result<Self, prometheus::Error> {
        let ns = settings.namespace.as_str();
        let b = &settings.buckets;
        let ttft_buckets = merged_buckets(&b.time_to_first_token, classes, ObjectiveKind::Ttft);
        let tpot_buckets = merged_buckets(&b.time_per_output_token, classes, ObjectiveKind::Tpot);
        let e2el_buckets = merged_buckets(&b.e2e_request_latency, classes, ObjectiveKind::E2el);
        // Each family is named, labelled and described by the catalogue.
        let histogram = |f: Family, buckets: &[f64]| -> Result<HistogramVec, prometheus::Error> {
            let h = HistogramVec::new(
                HistogramOpts::new(f.name(ns), f.help).buckets(buckets.to_vec()),
                f.labels,
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let counter = |f: Family| -> Result<IntCounterVec, prometheus::Error> {
            let c = IntCounterVec::new(Opts::new(f.name(ns), f.help), f.labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let plain = |f: Family| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(f.name(ns), f.help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauges = |f: Family| -> Result<IntGaugeVec, prometheus::Error> {
            let g = IntGaugeVec::new(Opts::new(f.name(ns), f.help), f.labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let float_gauges = |f: Family| -> Result<GaugeVec, prometheus::Error> {
            let g = GaugeVec::new(Opts::new(f.name(ns), f.help), f.labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };

        let families = Families {
            ttft: histogram(names::TTFT, &ttft_buckets)?,
            ttft_visible: histogram(names::TTFT_VISIBLE, &ttft_buckets)?,
            headers: histogram(names::RESPONSE_HEADERS, &b.time_to_response_headers)?,
            tpot: histogram(names::TPOT, &tpot_buckets)?,
            itl: histogram(names::ITL, &b.inter_token_latency)?,
            itl_buckets: b.inter_token_latency.as_slice().into(),
            e2el: histogram(names::E2EL, &e2el_buckets)?,
            output_tokens: histogram(names::OUTPUT_TOKENS, &b.output_tokens)?,
            input_tokens: histogram(names::INPUT_TOKENS, &b.input_tokens)?,
            requests: counter(names::REQUESTS)?,
            output_tokens_total: counter(names::OUTPUT_TOKENS_TOTAL)?,
            input_tokens_total: counter(names::INPUT_TOKENS_TOTAL)?,
            cached_input_tokens_total: counter(names::CACHED_INPUT_TOKENS_TOTAL)?,
            reasoning_output_tokens_total: counter(names::REASONING_OUTPUT_TOKENS_TOTAL)?,
            stalls: counter(names::STALLS)?,
            stalled_seconds: {
                let f = names::STALLED_SECONDS;
                let c = prometheus::CounterVec::new(Opts::new(f.name(ns), f.help), f.labels)?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            server_queue: histogram(names::SERVER_QUEUE, &b.time_to_first_token)?,
            server_prefill: histogram(names::SERVER_PREFILL, &b.time_to_first_token)?,
            server_decode: histogram(names::SERVER_DECODE, &b.e2e_request_latency)?,
            outside_engine: histogram(names::OUTSIDE_ENGINE, &b.time_to_first_token)?,
            outside_engine_negative: counter(names::OUTSIDE_ENGINE_NEGATIVE)?,
            client_wait: histogram(names::CLIENT_WAIT, &b.e2e_request_latency)?,
            slow_readers: counter(names::SLOW_READERS)?,
            proxy_time: histogram(names::PROXY_TIME, &b.proxy_time)?,
            in_flight: gauges(names::IN_FLIGHT)?,
            parse_errors: counter(names::PARSE_ERRORS)?,
            slo_requests: counter(names::SLO_REQUESTS)?,
            slo_violations: counter(names::SLO_VIOLATIONS)?,
            slo_good_output_tokens: counter(names::SLO_GOOD_OUTPUT_TOKENS)?,
            slo_load_requests: counter(names::SLO_LOAD_REQUESTS)?,
            slo_load_violations: counter(names::SLO_LOAD_VIOLATIONS)?,
            exemplars: Exemplars::new(
                [
                    &ttft_buckets,
                    &tpot_buckets,
                    &b.inter_token_latency,
                    &e2el_buckets,
                ],
                names::TTFT.labels,
            ),
            histogram_series: Default::default(),
            counter_series: Default::default(),
            in_flight_series: Default::default(),
        };
        let bounds = Bounds::new(
            settings,
            plain(names::MODEL_OVERFLOW)?,
            plain(names::TENANT_OVERFLOW)?,
        );
        // The curves' windows start with the live windows', so that both
        // slide together.
        let origin = Instant::now();
        let live = Arc::new(Live::new(
            origin,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        ));
        let capacity = Arc::new(Capacity::new(origin));
        let metrics = Metrics {
            families: Arc::new(families),
            bounds: Arc::new(bounds),
            unrouted: plain(names::UNROUTED)?,
            passthrough: counter(names::PASSTHROUGH)?,
            rejected: counter(names::REJECTED)?,
            declarations_refused: counter(names::DECLARATIONS_REFUSED)?,
            upstream_retries: counter(names::UPSTREAM_RETRIES)?,
            slo_target: float_gauges(names::SLO_TARGET)?,
            slo_threshold: float_gauges(names::SLO_THRESHOLD)?,
            slo_gauge_labels: Mutex::new(Vec::new()),
            reloads: counter(names::RELOADS)?,
            last_reload_success: {
                let f = names::LAST_RELOAD_SUCCESS;
                let g = Gauge::new(f.name(ns), f.help)?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            last_reload_successful: {
                let f = names::LAST_RELOAD_SUCCESSFUL;
                let g = IntGauge::new(f.name(ns), f.help)?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            open_connections: gauges(names::OPEN_CONNECTIONS)?,
            max_connections: gauges(names::MAX_CONNECTIONS)?,
            receiving_body: gauges(names::RECEIVING_BODY)?,
            shed_connections: {
                let shed = counter(names::SHED_CONNECTIONS)?;
                Shed::ALL.map(|reason| shed.with_label_values(&[reason.as_str()]))
            },
            tls_handshake_failures: {
                let failed = counter(names::TLS_HANDSHAKE_FAILURES)?;
                Listener::ALL.map(|listener| {
                    HandshakeFailure::ALL.map(|reason| {
                        failed.with_label_values(&[listener.as_str(), reason.as_str()])
                    })
                })
            },
            log_lines_dropped: plain(names::LOG_LINES_DROPPED)?,
            otlp_dropped: counter(names::OTLP_DROPPED)?,
            otlp_failures: counter(names::OTLP_EXPORT_FAILURES)?,
            log_drops: std::sync::OnceLock::new(),
            live: live.clone(),
            telemetry: {
                let t = Arc::new(telemetry::Telemetry::new(ns, live)?);
                registry.register(Box::new(telemetry::Registered(t.clone())))?;
                t
            },
            capacity,
            capacity_gauges: capacity::Gauges {
                knee: gauges(names::SLO_CAPACITY)?,
                headroom: gauges(names::SLO_HEADROOM)?,
                shown: Mutex::default(),
            },
            in_flight_load: Arc::default(),
            exemplified: vec![
                (names::TTFT.name(ns), Exemplified::Ttft),
                (names::TPOT.name(ns), Exemplified::Tpot),
                (names::ITL.name(ns), Exemplified::Itl),
                (names::E2EL.name(ns), Exemplified::E2el),
            ],
            registry,
        };
        metrics.set_slo_targets(classes);
        for result in ["success", "failure"] {
            metrics.reloads.with_label_values(&[result]);
        }
        metrics.last_reload_successful.set(1);
        let f = names::BUILD_INFO;
        let info = IntGaugeVec::new(Opts::new(f.name(ns), f.help), f.labels)?;
        metrics.registry.register(Box::new(info.clone()))?;
        info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Ok(metrics)
    }

    /// Reads `tokenmeter_log_lines_dropped_total` from `dropped` (a running
    /// total) at each scrape. Only the first source set is used.
    pub fn count_log_drops(&self, dropped: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.log_drops.set(Box::new(dropped));
    }

    /// The routes' engine and GPU figures of `readings` (those of the
    /// configuration in force) now, as the exposition has them, for `/slo`
    /// and the live page.
    pub fn telemetry(&self, readings: Option<&Readings>) -> TelemetryReport {
        self.telemetry.report(readings, Instant::now())
    }

    /// Per class, its targets and thresholds as gauges, so PromQL and
    /// dashboards can compare against them without copying numbers. Called
    /// at start and on every reload: series of classes or objectives that
    /// are gone are removed, the others overwritten (never reset, so a
    /// scrape cannot fall between removal and setting).
    pub fn set_slo_targets(&self, classes: &[SloClass]) {
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
        let mut labels = self
            .slo_gauge_labels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for old in labels.iter() {
            let still = wanted.iter().find(|(l, _, _)| l == old);
            let values = [old[0].as_str(), old[1].as_str()];
            match still {
                None => {
                    let _ = self.slo_target.remove_label_values(&values);
                    let _ = self.slo_threshold.remove_label_values(&values);
                }
                Some((_, _, None)) => {
                    let _ = self.slo_threshold.remove_label_values(&values);
                }
                Some(_) => {}
            }
        }
        for (l, target, threshold) in &wanted {
            let values = [l[0].as_str(), l[1].as_str()];
            self.slo_target.with_label_values(&values).set(*target);
            if let Some(t) = threshold {
                self.slo_threshold.with_label_values(&values).set(*t);
            }
        }
        *labels = wanted.into_iter().map(|(l, _, _)| l).collect();
        self.live.set_classes(classes);
    }

    /// Counts a configuration reload; on success, `unix_time` is when the
    /// new config was loaded. Start-up counts as a success without
    /// counting a reload.
    pub fn config_loaded(&self, reload: Option<bool>, unix_time: f64) {
        match reload {
            None => self.last_reload_success.set(unix_time),
            Some(true) => {
                self.reloads.with_label_values(&["success"]).inc();
                self.last_reload_success.set(unix_time);
                self.last_reload_successful.set(1);
            }
            Some(false) => {
                self.reloads.with_label_values(&["failure"]).inc();
                self.last_reload_successful.set(0);
            }
        }
    }

    /// The live windows behind `/slo`.
    pub fn live(&self) -> &Live {
        &self.live
    }

    /// The latency–load curves.
    pub fn capacity(&self) -> &Arc<Capacity> {
        &self.capacity
    }

    /// Every latency–load curve whose class is in force at `now`, with its
    /// knee and headroom per window against the load now (the engine's
    /// where `readings` has it, else the requests in flight).
    pub fn capacity_report(
        &self,
        now: Instant,
        readings: Option<&Readings>,
    ) -> Vec<slo::capacity::CurveReport> {
        capacity::report(
            &self.capacity,
            &self.live,
            &self.in_flight_load,
            readings,
            now,
        )
    }

    /// The metered requests in flight by route and model label.
    pub fn in_flight_load(&self) -> &Arc<InFlight> {
        &self.in_flight_load
    }

    /// The registry the metrics live in.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition of the registry: the Prometheus text format 0.0.4,
    /// or with `openmetrics` the OpenMetrics text format, which has the
    /// latency histograms' exemplars. The engines' and GPUs' families, and
    /// the knee and headroom gauges (read against the engines' loads where
    /// they are scraped), are those of `readings`: the configuration in
    /// force's.
    pub fn encode(&self, openmetrics: bool, readings: Option<&Readings>) -> String {
        self.telemetry.refresh(readings, Instant::now());
        let _gauges = self.capacity_gauges.update(
            &self.capacity,
            &self.live,
            &self.in_flight_load,
            readings,
            Instant::now(),
        );
        if let Some(dropped) = self.log_drops.get() {
            let (now, counted) = (dropped(), self.log_lines_dropped.get());
            if now > counted {
                self.log_lines_dropped.inc_by(now - counted);
            }
        }
        let families = self.registry.gather();
        if openmetrics {
            return openmetrics::encode(&families, &self.exemplified, &self.families.exemplars);
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// The bounds of the labels clients choose, by which each request's
    /// labels are resolved.
    pub fn bounds(&self) -> &Arc<Bounds> {
        &self.bounds
    }

    /// The Prometheus recorder of one metered request of `labels`,
    /// counted in flight, with the handles of its histograms resolved
    /// (once its labels are final). `exemplar`, when the request has one,
    /// is what its latency observations' exemplars name.
    pub fn request(&self, labels: &Labels, exemplar: Option<ExemplarId>) -> RequestRecorder {
        let in_flight = self
            .families
            .in_flight([labels.route(), labels.model(), labels.slo()]);
        in_flight.inc();
        let mut recorder = RequestRecorder {
            families: self.families.clone(),
            handles: None,
            deferred: None,
            in_flight,
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

    /// The counters of what the OTLP export loses (each series made, so
    /// it reads 0 from the start).
    pub fn otlp_counters(&self) -> crate::observe::otlp::Counters {
        let dropped = |signal, reason| self.otlp_dropped.with_label_values(&[signal, reason]);
        crate::observe::otlp::Counters {
            metrics_queue_full: dropped("metrics", "queue_full"),
            traces_queue_full: dropped("traces", "queue_full"),
            traces_export_failed: dropped("traces", "export_failed"),
            metrics_failures: self.otlp_failures.with_label_values(&["metrics"]),
            traces_failures: self.otlp_failures.with_label_values(&["traces"]),
        }
    }

    /// The live series of a request of `labels` (its route and class),
    /// told that the request starts now (it is in flight there until it
    /// finishes). `class_window` is the compliance window of its class,
    /// when it has a defined one.
    pub fn live_request(&self, labels: &Labels, class_window: Option<Duration>) -> LiveRequest {
        let series = self.live.series(labels.route(), labels.slo(), "");
        series.start(Instant::now());
        LiveRequest {
            series,
            class_window,
            tenant: None,
            capacity: self.capacity.clone(),
        }
    }

    /// Counts what the proxy reports of itself.
    pub fn count(&self, event: Event<'_>) {
        match event {
            Event::Unrouted => self.unrouted.inc(),
            Event::Passthrough { route } => self.passthrough.with_label_values(&[route]).inc(),
            Event::Rejected { route, reason } => self
                .rejected
                .with_label_values(&[route, reason.as_str()])
                .inc(),
            Event::DeclarationRefused { route, objective } => self
                .declarations_refused
                .with_label_values(&[route, objective.as_str()])
                .inc(),
            Event::Retried { route, race } => self
                .upstream_retries
                .with_label_values(&[route, race.as_str()])
                .inc(),
            Event::Shed(reason) => self.shed_connections[reason as usize].inc(),
            Event::Handshake(listener, reason) => {
                self.tls_handshake_failures[listener as usize][reason as usize].inc()
            }
        }
    }

    /// Makes the series of a route's own counters, at 0, so that their
    /// rates are defined before anything happens: its upstream's retries,
    /// and, when it limits its requests in flight (`limited`), its
    /// rejections.
    pub fn declare_route(&self, route: &str, limited: bool) {
        for race in [h1::Race::Closed, h1::Race::Reset] {
            self.upstream_retries
                .with_label_values(&[route, race.as_str()]);
        }
        if limited {
            self.rejected
                .with_label_values(&[route, Rejection::MaxInFlight.as_str()]);
        }
    }

    /// Counts a request whose body is being read ahead, before it goes to
    /// the upstream, until the guard is dropped.
    pub fn receiving_body(&self, route: &str) -> ReceivingBody {
        let gauge = self.receiving_body.with_label_values(&[route]);
        gauge.inc();
        ReceivingBody(gauge)
    }

    /// The gauge of `listener`'s open connections, its limit `max` set.
    pub fn connections(&self, listener: &str, max: usize) -> IntGauge {
        self.max_connections
            .with_label_values(&[listener])
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        self.open_connections.with_label_values(&[listener])
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
        m.count(Event::Rejected {
            route: "r",
            reason: Rejection::BadHost,
        });
        m.count(Event::DeclarationRefused {
            route: "r",
            objective: slo::ObjectiveKind::Ttft,
        });
        m.count(Event::Passthrough { route: "r" });
        m.declare_route("r", true);
        let _ = m.connections("proxy", 1);
        let gathered = registry.gather();
        let catalogue: std::collections::BTreeMap<String, names::Family> =
            names::ALL.iter().map(|f| (f.name("llm"), *f)).collect();
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
