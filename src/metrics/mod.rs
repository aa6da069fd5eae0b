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

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use tokio::time::Instant;

use crate::config::{MetricsSettings, ModelLabels};

use meter::{ParseError, Summary};
use slo::live::{Aggregate, Live, Series};
use slo::sketch::Sketch;
use slo::{ObjectiveKind, SloClass, Verdict};

/// Label value used when a request names no model.
pub const UNKNOWN_MODEL: &str = "unknown";
/// Label value for models past the allow-list or the distinct-name cap.
pub const OTHER_MODEL: &str = "other";

use names::{self, Family};

/// All metric families, registered.
pub struct Metrics {
    ttft: HistogramVec,
    ttft_visible: HistogramVec,
    headers: HistogramVec,
    tpot: HistogramVec,
    itl: HistogramVec,
    e2el: HistogramVec,
    output_tokens: HistogramVec,
    input_tokens: HistogramVec,
    requests: IntCounterVec,
    output_tokens_total: IntCounterVec,
    input_tokens_total: IntCounterVec,
    cached_input_tokens_total: IntCounterVec,
    reasoning_output_tokens_total: IntCounterVec,
    in_flight: IntGaugeVec,
    parse_errors: IntCounterVec,
    unrouted: IntCounter,
    passthrough: IntCounterVec,
    rejected: IntCounterVec,
    upstream_retries: IntCounterVec,
    model_overflow: IntCounter,
    slo_requests: IntCounterVec,
    slo_violations: IntCounterVec,
    slo_good_output_tokens: IntCounterVec,
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
    log_lines_dropped: IntCounter,
    /// Where `log_lines_dropped` is read from at each scrape (the process's
    /// log writer), once the binary has set it.
    log_drops: std::sync::OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>,
    /// The sliding windows behind `/slo`.
    live: Live,
    models: Arc<ModelLabeler>,
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

        let metrics = Metrics {
            ttft: histogram(names::TTFT, &ttft_buckets)?,
            ttft_visible: histogram(names::TTFT_VISIBLE, &ttft_buckets)?,
            headers: histogram(names::RESPONSE_HEADERS, &b.time_to_response_headers)?,
            tpot: histogram(names::TPOT, &tpot_buckets)?,
            itl: histogram(names::ITL, &b.inter_token_latency)?,
            e2el: histogram(names::E2EL, &e2el_buckets)?,
            output_tokens: histogram(names::OUTPUT_TOKENS, &b.output_tokens)?,
            input_tokens: histogram(names::INPUT_TOKENS, &b.input_tokens)?,
            requests: counter(names::REQUESTS)?,
            output_tokens_total: counter(names::OUTPUT_TOKENS_TOTAL)?,
            input_tokens_total: counter(names::INPUT_TOKENS_TOTAL)?,
            cached_input_tokens_total: counter(names::CACHED_INPUT_TOKENS_TOTAL)?,
            reasoning_output_tokens_total: counter(names::REASONING_OUTPUT_TOKENS_TOTAL)?,
            in_flight: gauges(names::IN_FLIGHT)?,
            parse_errors: counter(names::PARSE_ERRORS)?,
            unrouted: plain(names::UNROUTED)?,
            passthrough: counter(names::PASSTHROUGH)?,
            rejected: counter(names::REJECTED)?,
            upstream_retries: counter(names::UPSTREAM_RETRIES)?,
            model_overflow: plain(names::MODEL_OVERFLOW)?,
            slo_requests: counter(names::SLO_REQUESTS)?,
            slo_violations: counter(names::SLO_VIOLATIONS)?,
            slo_good_output_tokens: counter(names::SLO_GOOD_OUTPUT_TOKENS)?,
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
            log_lines_dropped: plain(names::LOG_LINES_DROPPED)?,
            log_drops: std::sync::OnceLock::new(),
            live: Live::new(
                Instant::now(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
            ),
            models: Arc::new(ModelLabeler::new(&settings.models)),
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

    /// The registry the metrics live in.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition of the registry.
    pub fn encode(&self) -> String {
        if let Some(dropped) = self.log_drops.get() {
            let (now, counted) = (dropped(), self.log_lines_dropped.get());
            if now > counted {
                self.log_lines_dropped.inc_by(now - counted);
            }
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Resolves the label handles of one metered request and counts it in
    /// flight. `model` is the request's model name, bounded here; `slo` is
    /// the `slo` label.
    pub fn request(&self, route: &str, model: Option<&str>, slo: Option<&str>) -> RequestRecorder {
        let (model, pending) = match self.models.label(model, &self.model_overflow) {
            Label::Use(model) => (model, None),
            Label::Pending(name) => (
                OTHER_MODEL.to_owned(),
                Some(Box::new(Pending {
                    name,
                    labeler: self.models.clone(),
                    overflow: self.model_overflow.clone(),
                    ttft: self.ttft.clone(),
                    headers: self.headers.clone(),
                    itl: self.itl.clone(),
                    in_flight: self.in_flight.clone(),
                })),
            ),
        };
        let labels = [route, model.as_str(), slo.unwrap_or("")];
        let in_flight = self.in_flight.with_label_values(&labels);
        in_flight.inc();
        // A pending name's are resolved at its response head, to its own
        // label or `other`: none is made before it is known which.
        let handles = pending.is_none().then(|| Handles {
            ttft: self.ttft.with_label_values(&labels),
            headers: self.headers.with_label_values(&labels),
            itl: self.itl.with_label_values(&labels),
        });
        RequestRecorder {
            pending,
            handles,
            in_flight,
            families: Families {
                ttft_visible: self.ttft_visible.clone(),
                tpot: self.tpot.clone(),
                e2el: self.e2el.clone(),
                output_tokens: self.output_tokens.clone(),
                input_tokens: self.input_tokens.clone(),
                requests: self.requests.clone(),
                output_tokens_total: self.output_tokens_total.clone(),
                input_tokens_total: self.input_tokens_total.clone(),
                cached_input_tokens_total: self.cached_input_tokens_total.clone(),
                reasoning_output_tokens_total: self.reasoning_output_tokens_total.clone(),
                parse_errors: self.parse_errors.clone(),
                slo_requests: self.slo_requests.clone(),
                slo_violations: self.slo_violations.clone(),
                slo_good_output_tokens: self.slo_good_output_tokens.clone(),
            },
            route: route.to_owned(),
            model,
            slo: slo.unwrap_or("").to_owned(),
        }
    }

    /// The live series of a request of `route` under `slo`, told that the
    /// request starts now (it is in flight there until it finishes).
    /// `class_window` is the compliance window of its class, when it has a
    /// defined one.
    pub fn live_request(
        &self,
        route: &str,
        slo: Option<&str>,
        class_window: Option<Duration>,
    ) -> LiveRequest {
        let series = self.live.series(route, slo.unwrap_or(""));
        series.start(Instant::now());
        LiveRequest {
            series,
            class_window,
        }
    }

    /// Counts a request that matched no route.
    pub fn unrouted(&self) {
        self.unrouted.inc();
    }

    /// Counts a request answered without forwarding it; `reason` is one of
    /// a fixed set (`max_in_flight`, `bad_host`).
    pub fn rejected(&self, route: &str, reason: &'static str) {
        self.rejected.with_label_values(&[route, reason]).inc();
    }

    /// Declares the rejection series of a route with `max_in_flight`, at 0,
    /// so that its rate is defined before the first rejection.
    pub fn limited(&self, route: &str) {
        self.rejected.with_label_values(&[route, "max_in_flight"]);
    }

    /// The counter of a route's upstream retries for `reason` (`closed` or
    /// `reset`).
    pub fn upstream_retries(&self, route: &str, reason: &'static str) -> IntCounter {
        self.upstream_retries.with_label_values(&[route, reason])
    }

    /// Counts a metered request in flight while its body is awaited, before
    /// its model is known (model `unknown`), until the guard is dropped.
    pub fn waiting_for_body(&self, route: &str, slo: Option<&str>) -> WaitingForBody {
        let gauge = self
            .in_flight
            .with_label_values(&[route, UNKNOWN_MODEL, slo.unwrap_or("")]);
        gauge.inc();
        WaitingForBody(gauge)
    }

    /// The gauge of `listener`'s open connections, its limit `max` set.
    pub fn connections(&self, listener: &str, max: usize) -> IntGauge {
        self.max_connections
            .with_label_values(&[listener])
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        self.open_connections.with_label_values(&[listener])
    }

    /// Counts a request forwarded without metering.
    pub fn passthrough(&self, route: &str) {
        self.passthrough.with_label_values(&[route]).inc();
    }
}

/// Families touched once, at the end of a request (cheap `Arc` clones).
struct Families {
    ttft_visible: HistogramVec,
    tpot: HistogramVec,
    e2el: HistogramVec,
    output_tokens: HistogramVec,
    input_tokens: HistogramVec,
    requests: IntCounterVec,
    output_tokens_total: IntCounterVec,
    input_tokens_total: IntCounterVec,
    cached_input_tokens_total: IntCounterVec,
    reasoning_output_tokens_total: IntCounterVec,
    parse_errors: IntCounterVec,
    slo_requests: IntCounterVec,
    slo_violations: IntCounterVec,
    slo_good_output_tokens: IntCounterVec,
}

/// A request counted in flight while its body is awaited.
pub struct WaitingForBody(IntGauge);

impl Drop for WaitingForBody {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A model name not yet admitted to a label slot: it is, once the upstream
/// answers it with a 2xx, if a slot is still free (so that names clients
/// make up, which upstreams refuse, never take the slots of real models).
/// Until then the request is labelled `other`. What relabelling needs is
/// here, boxed: only the first requests of a new name carry it.
struct Pending {
    name: String,
    labeler: Arc<ModelLabeler>,
    overflow: IntCounter,
    ttft: HistogramVec,
    headers: HistogramVec,
    itl: HistogramVec,
    in_flight: IntGaugeVec,
}

/// A request that ended, as each of its observers is handed it (the
/// Prometheus recorder, the live series, the access log).
pub struct Finished<'a> {
    pub summary: &'a Summary,
    /// The class it was judged against and the verdict, when its `slo`
    /// names a defined class.
    pub judged: Option<(&'a SloClass, Verdict)>,
    /// Its time to response headers, when a head came.
    pub headers: Option<Duration>,
    /// When it ended, read on the forwarding path (the body's last poll or
    /// its drop), like every other timestamp; it places the request in the
    /// live windows.
    pub at: Instant,
}

/// A request's live series, told when it starts and fed once when it
/// finishes (`/slo`, the error budget, the history).
pub struct LiveRequest {
    series: Arc<Series>,
    /// The compliance window of the request's class, when it has one.
    class_window: Option<Duration>,
}

impl LiveRequest {
    /// Folds the finished request, with `itl`, the sketch of its ITL gaps
    /// gathered while it streamed, into its series, under the series' lock.
    pub fn finish(&self, f: &Finished<'_>, itl: Sketch) {
        let s = f.summary;
        let request = Aggregate::request(s, f.judged.map(|(_, v)| v), itl, f.headers);
        let input_ttft = s.usage.input.zip(s.ttft.map(|d| d.as_secs_f64()));
        self.series
            .record(f.at, &request, self.class_window, input_ttft);
    }
}

/// The Prometheus recorder of one request: handles of the series touched
/// while the stream flows are resolved up front; the rest are counted when
/// it finishes.
pub struct RequestRecorder {
    /// The model name waiting for a 2xx to be admitted as a label.
    pending: Option<Box<Pending>>,
    /// The series observed while the stream flows; `None` only for a
    /// pending model name until its response head.
    handles: Option<Handles>,
    in_flight: IntGauge,
    families: Families,
    route: String,
    model: String,
    slo: String,
}

impl RequestRecorder {
    fn labels(&self) -> [&str; 3] {
        [&self.route, &self.model, &self.slo]
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `2xx`..`5xx`, or `none` when the client received no status.
pub fn status_class(status: Option<u16>) -> &'static str {
    match status {
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        _ => "none",
    }
}

/// The series a stream observes as it flows, resolved once.
struct Handles {
    ttft: Histogram,
    headers: Histogram,
    itl: Histogram,
}

impl RequestRecorder {
    /// The upstream answered with `status`: a pending model name is
    /// admitted on a 2xx (if a slot is free), and this request moves to its
    /// label; otherwise it stays `other`. Either way its stream's series
    /// are resolved here.
    fn admit(&mut self, status: u16) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let admitted = (200..300).contains(&status) && pending.labeler.admit(&pending.name);
        let model = if admitted {
            pending.name.as_str()
        } else {
            OTHER_MODEL
        };
        let labels = [self.route.as_str(), model, self.slo.as_str()];
        self.handles = Some(Handles {
            ttft: pending.ttft.with_label_values(&labels),
            headers: pending.headers.with_label_values(&labels),
            itl: pending.itl.with_label_values(&labels),
        });
        if admitted {
            let in_flight = pending.in_flight.with_label_values(&labels);
            in_flight.inc();
            self.in_flight.dec();
            self.in_flight = in_flight;
            self.model = pending.name;
        } else {
            // Never admitted: reported as `other`.
            pending.overflow.inc();
        }
    }
}

/// What the meter reports as the stream flows, observed on the handles
/// resolved for this request (atomics: no lock, no allocation).
impl RequestRecorder {
    pub fn response_headers(&mut self, elapsed: Duration, status: u16) {
        self.admit(status);
        if let Some(h) = &self.handles {
            h.headers.observe(secs(elapsed));
        }
    }

    pub fn first_visible_token(&mut self, ttft: Duration) {
        // Once per request, so resolving the handle here costs nothing per token.
        self.families
            .ttft_visible
            .with_label_values(&self.labels())
            .observe(secs(ttft));
    }

    pub fn first_token(&mut self, ttft: Duration) {
        if let Some(h) = &self.handles {
            h.ttft.observe(secs(ttft));
        }
    }

    pub fn inter_token(&mut self, gap: Duration) {
        if let Some(h) = &self.handles {
            h.itl.observe(secs(gap));
        }
    }

    pub fn parse_error(&mut self, error: ParseError) {
        self.families
            .parse_errors
            .with_label_values(&[self.route.as_str(), error.kind()])
            .inc();
    }

    /// Counts the finished request and observes what its summary holds,
    /// and its verdict.
    pub fn finish(&mut self, finished: &Finished<'_>) {
        let s = finished.summary;
        self.in_flight.dec();
        if let Some(pending) = self.pending.take() {
            // Never admitted: reported as `other`.
            pending.overflow.inc();
        }
        let labels = self.labels();
        let f = &self.families;
        f.requests
            .with_label_values(&[
                labels[0],
                labels[1],
                labels[2],
                s.outcome.as_str(),
                status_class(s.status),
            ])
            .inc();
        if let Some(d) = s.e2el {
            f.e2el.with_label_values(&labels).observe(secs(d));
        }
        if let Some(d) = s.tpot {
            f.tpot.with_label_values(&labels).observe(secs(d));
        }
        if let Some((n, source)) = s.output_tokens {
            f.output_tokens_total
                .with_label_values(&[labels[0], labels[1], labels[2], source.as_str()])
                .inc_by(n);
            if s.e2el.is_some() {
                f.output_tokens.with_label_values(&labels).observe(n as f64);
            }
        }
        if let Some(n) = s.usage.input {
            f.input_tokens_total.with_label_values(&labels).inc_by(n);
            if s.e2el.is_some() {
                f.input_tokens.with_label_values(&labels).observe(n as f64);
            }
        }
        if let Some(n) = s.usage.cached_input {
            f.cached_input_tokens_total
                .with_label_values(&labels)
                .inc_by(n);
        }
        if let Some(n) = s.usage.reasoning {
            f.reasoning_output_tokens_total
                .with_label_values(&labels)
                .inc_by(n);
        }
        if let Some((class, verdict)) = finished.judged {
            self.count_verdict(class, verdict, s);
        }
    }
}

impl RequestRecorder {
    /// Counts the SLO verdict of a finished request. Every series of the
    /// class is touched, so good, bad and each objective read 0 (not
    /// absent) until something happens, and ratios are defined from the
    /// first request on.
    fn count_verdict(&self, class: &SloClass, verdict: Verdict, s: &Summary) {
        let f = &self.families;
        let [route, model, slo] = self.labels();
        for label in ["good", "bad"] {
            let counter = f
                .slo_requests
                .with_label_values(&[route, model, slo, label]);
            if verdict.label() == Some(label) {
                counter.inc();
            }
        }
        let violations = verdict.violations();
        for objective in &class.objectives {
            let kind = objective.kind;
            let counter = f
                .slo_violations
                .with_label_values(&[route, model, slo, kind.as_str()]);
            if violations.contains(kind) {
                counter.inc();
            }
        }
        let good_tokens = f
            .slo_good_output_tokens
            .with_label_values(&[route, model, slo]);
        if let (Verdict::Good { .. }, Some((n, _))) = (verdict, s.output_tokens) {
            good_tokens.inc_by(n);
        }
    }
}

/// Bounds the values of the `model` label.
struct ModelLabeler {
    allow: Option<HashSet<String>>,
    max_distinct: usize,
    /// Names admitted so far without an allow-list.
    seen: Mutex<HashSet<String>>,
}

impl ModelLabeler {
    fn new(cfg: &ModelLabels) -> Self {
        Self {
            allow: cfg.allow.as_ref().map(|a| a.iter().cloned().collect()),
            max_distinct: cfg.max_distinct,
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// The label of a request naming `model`, or, for a name not admitted
    /// yet while slots are free, [`Label::Pending`]. A name refused for
    /// good (not allow-listed, or no slot left) is counted in `overflow`.
    fn label(&self, model: Option<&str>, overflow: &IntCounter) -> Label {
        let Some(model) = model.filter(|m| !m.is_empty()) else {
            return Label::Use(UNKNOWN_MODEL.to_owned());
        };
        let admitted = match &self.allow {
            Some(allow) => allow.contains(model),
            None => {
                let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                if seen.contains(model) {
                    true
                } else if seen.len() < self.max_distinct {
                    return Label::Pending(model.to_owned());
                } else {
                    false
                }
            }
        };
        if admitted {
            Label::Use(model.to_owned())
        } else {
            overflow.inc();
            Label::Use(OTHER_MODEL.to_owned())
        }
    }

    /// Admits `model` to a label slot (the upstream answered it), if it has
    /// one or one is free.
    fn admit(&self, model: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(model) {
            return true;
        }
        if seen.len() < self.max_distinct {
            seen.insert(model.to_owned());
            return true;
        }
        false
    }
}

/// What label a request's model gets.
#[derive(Debug, PartialEq, Eq)]
enum Label {
    Use(String),
    /// Not admitted yet: `other` until the upstream answers it with a 2xx.
    Pending(String),
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
        let _ = m.request("r", Some("m"), Some("s"));
        m.rejected("r", "bad_host");
        m.passthrough("r");
        let _ = m.upstream_retries("r", "closed");
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

    #[test]
    fn model_labels_are_bounded_and_taken_only_on_an_answer() {
        let c = IntCounter::new("x", "x").unwrap();
        let l = ModelLabeler::new(&ModelLabels {
            allow: None,
            max_distinct: 2,
        });
        let used = |m: &str| Label::Use(m.to_owned());
        let pending = |m: &str| Label::Pending(m.to_owned());
        // A name waits for the upstream's answer; asking again does not
        // take a slot.
        assert_eq!(l.label(Some("a"), &c), pending("a"));
        assert_eq!(l.label(Some("a"), &c), pending("a"));
        assert!(l.admit("a"));
        assert_eq!(l.label(Some("a"), &c), used("a"));
        assert_eq!(l.label(Some("b"), &c), pending("b"));
        assert_eq!(l.label(Some("c"), &c), pending("c"));
        assert!(l.admit("c"));
        // The slots are taken: b's answer came too late.
        assert!(!l.admit("b"));
        assert_eq!(l.label(Some("b"), &c), used(OTHER_MODEL));
        assert_eq!(l.label(Some("c"), &c), used("c"));
        assert_eq!(l.label(None, &c), used(UNKNOWN_MODEL));
        assert_eq!(l.label(Some(""), &c), used(UNKNOWN_MODEL));
        assert_eq!(c.get(), 1);
        let l = ModelLabeler::new(&ModelLabels {
            allow: Some(vec!["x".into()]),
            max_distinct: 100,
        });
        assert_eq!(l.label(Some("x"), &c), used("x"));
        assert_eq!(l.label(Some("y"), &c), used(OTHER_MODEL));
    }
}
