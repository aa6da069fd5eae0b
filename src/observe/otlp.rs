//! OpenTelemetry export (OTLP over HTTP/protobuf or gRPC) of the request
//! metrics, under the GenAI semantic conventions' names, and of one span
//! per metered request.
//!
//! Nothing of it runs on the forwarding path but [`Otlp::submit`]: a
//! finished request is put, without waiting, on a bounded queue, or
//! dropped and counted when the queue is full. One task takes the requests
//! off the queue, on a runtime of its own with one thread (the CPU that
//! encoding a batch takes is never a forwarding thread's), records their
//! measurements into the
//! OpenTelemetry SDK's instruments (exported, cumulative, by the SDK's
//! periodic reader on its own thread) and gathers their spans into batches
//! it exports itself. A slow or absent collector makes the task wait (each
//! export is bounded by `otlp.timeout`), the queue fill, and requests be
//! dropped and counted: forwarding never waits for it.
//!
//! The observations are the Prometheus ones (the same TTFT, TPOT, E2EL
//! and token counts), into the buckets the GenAI semantic conventions
//! advise for each instrument ([`TTFT_BOUNDS`], [`TPOT_BOUNDS`],
//! [`DURATION_BOUNDS`], [`TOKEN_BOUNDS`]), not the Prometheus ones.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use prometheus::IntCounter;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use super::request::{Finished, Started};
use super::trace::{self as w3c, SAMPLED};
use crate::config::{OtlpExport, OtlpHeaders, OtlpProtocol, OtlpSettings};
use meter::{Api, Operation};
use opentelemetry_otlp::tonic_types::metadata::MetadataMap;

/// A finished metered request, as it is exported.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request's labels, as its Prometheus histograms have them
    /// (`tenant` empty unless the histograms carry it).
    pub route: String,
    pub model: String,
    pub slo: String,
    pub tenant: String,
    /// The model the response says answered (`gen_ai.response.model`).
    pub response_model: Option<String>,
    /// `gen_ai.operation.name` and `gen_ai.provider.name`.
    pub operation: &'static str,
    pub provider: Cow<'static, str>,
    /// The upstream's host and port (`server.address`, `server.port`).
    pub server_address: String,
    pub server_port: u16,
    pub method: http::Method,
    pub status: Option<u16>,
    /// `ok`, or how it failed (`error.type`).
    pub outcome: &'static str,
    /// `good` or `bad` against its SLO class, when judged.
    pub verdict: Option<&'static str>,
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    /// For a request that ended `ok`.
    pub e2el: Option<Duration>,
    /// From the request head to its end, whatever the outcome.
    pub elapsed: Duration,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Its span, when it has one to export.
    pub span: Option<SpanIds>,
    /// When it ended.
    pub end: SystemTime,
}

/// The ids of a request's span: its trace, its own id, its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanIds {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, when it sent one.
    pub parent: Option<[u8; 8]>,
}

/// `gen_ai.operation.name` of a request to `path` of `api`, and the
/// conventions' well-known `gen_ai.provider.name` of its protocol, when it
/// has one (OpenAI's, Anthropic's and Gemini's APIs, and the calls that
/// generate nothing on their paths; the self-hosted engines' own APIs have
/// none).
pub fn operation(api: Api, path: &str) -> (&'static str, Option<&'static str>) {
    let provider = match api {
        Api::OpenAi | Api::Responses => Some("openai"),
        Api::Anthropic => Some("anthropic"),
        Api::Gemini => Some("gcp.gemini"),
        Api::NonGenerating => {
            let path = path.trim_end_matches('/');
            if path.ends_with("/v1/embeddings") {
                Some("openai")
            } else if path.ends_with(":embedContent")
                || path.ends_with(":batchEmbedContents")
                || path.ends_with(":countTokens")
            {
                Some("gcp.gemini")
            } else {
                None
            }
        }
        Api::Ollama | Api::Tgi | Api::LlamaCpp | Api::Sglang | Api::Triton | Api::Generate => None,
    };
    (Operation::of(api, path).name(), provider)
}

/// The `gen_ai.provider.name` of a request of `api`: the route's
/// `otel_provider_name` when set, else the protocol's well-known value,
/// else the protocol's name as a route's `protocol` key spells it
/// (`unknown` for a call that generates nothing).
pub fn provider_name(
    route: Option<&str>,
    well_known: Option<&'static str>,
    api: Api,
) -> Cow<'static, str> {
    match (route, well_known) {
        (Some(name), _) => Cow::Owned(name.to_owned()),
        (None, Some(name)) => Cow::Borrowed(name),
        // A call that generates nothing on a path no API owns.
        (None, None) if api == Api::NonGenerating => Cow::Borrowed("unknown"),
        (None, None) => Cow::Borrowed(api.name()),
    }
}

/// `server.address`: a host as a URL's authority has it, an IPv6
/// address without its brackets.
pub fn server_address(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The counters of what the export lost, registered with the metrics.
#[derive(Clone)]
pub struct Counters {
    pub metrics_queue_full: IntCounter,
    pub traces_queue_full: IntCounter,
    pub traces_export_failed: IntCounter,
    pub metrics_failures: IntCounter,
    pub traces_failures: IntCounter,
}

/// The export: the queue's sending end, and the task behind it on a
/// runtime of its own.
pub struct Otlp {
    queue: mpsc::Sender<Request>,
    traces: bool,
    counters: Counters,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    provider: Option<SdkMeterProvider>,
    /// One thread that runs the export task and the exporters' I/O, so
    /// that encoding a batch never holds a thread that forwards.
    _runtime: Background,
}

/// A runtime that is let go without waiting for its tasks when dropped
/// (from async code too, where dropping a runtime would panic).
struct Background(Option<tokio::runtime::Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Otlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Otlp").finish_non_exhaustive()
    }
}

// The explicit bucket boundaries the GenAI semantic conventions (v1.41.0,
// docs/gen-ai/gen-ai-metrics.md) advise for each instrument.

/// `gen_ai.server.time_to_first_token`, in seconds.
pub const TTFT_BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// `gen_ai.server.time_per_output_token`, in seconds.
pub const TPOT_BOUNDS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// `gen_ai.client.operation.duration`, in seconds.
pub const DURATION_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// `gen_ai.client.token.usage`, in tokens.
pub const TOKEN_BOUNDS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// Why the OTLP export could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("starting the export's runtime")]
    Runtime(#[source] std::io::Error),
    #[error("building the OTLP exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// A header the configuration checked and the exporter refused: its
    /// name only.
    #[error("the export header `{0}` is not a valid header")]
    Header(String),
}

impl Otlp {
    /// Starts exporting as `settings` say, on a thread of its own.
    pub fn start(settings: &OtlpSettings, counters: Counters) -> Result<Self, StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let handle = runtime.handle().clone();
        let runtime = Background(Some(runtime));
        // The exporters' clients (tonic's channel, the metric exports'
        // HTTP client) spawn onto the runtime they are built in.
        let entered = handle.enter();
        // Not `Resource::builder()`, whose detectors read the process's
        // environment: the configuration has read it already.
        let resource = Resource::builder_empty()
            .with_detector(Box::new(
                opentelemetry_sdk::resource::TelemetryResourceDetector,
            ))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .with_attributes(
                settings
                    .resource_attributes
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .with_service_name(settings.service_name.clone())
            .build();
        let provider = if let Some(export) = &settings.metrics {
            let exporter = Counted {
                inner: metric_exporter(export)?,
                outcomes: Outcomes::new("metrics", counters.metrics_failures.clone()),
            };
            let reader = PeriodicReader::builder(exporter)
                .with_interval(settings.metrics_interval)
                .build();
            Some(
                SdkMeterProvider::builder()
                    .with_resource(resource.clone())
                    .with_reader(reader)
                    .build(),
            )
        } else {
            None
        };
        let instruments = provider.as_ref().map(Instruments::new);
        let spans = if let Some(export) = &settings.traces {
            let mut exporter = span_exporter(export)?;
            exporter.set_resource(&resource);
            Some(exporter)
        } else {
            None
        };
        let (queue, requests) = mpsc::channel(settings.queue);
        let stop = CancellationToken::new();
        let task = handle.spawn(
            Exporting {
                requests,
                instruments,
                spans,
                batch: Vec::new(),
                max_batch: settings.max_batch,
                delay: settings.traces_delay,
                counters: counters.clone(),
                outcomes: Outcomes::new("traces", counters.traces_failures.clone()),
                scope: InstrumentationScope::builder("tokenmeter")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
                response_models: ResponseModels::default(),
            }
            .run(stop.clone()),
        );
        drop(entered);
        for (signal, export) in [("metrics", &settings.metrics), ("traces", &settings.traces)] {
            if let Some(e) = export {
                tracing::info!(
                    signal,
                    endpoint = %e.endpoint,
                    protocol = e.protocol.as_str(),
                    headers = ?e.headers,
                    "exporting OTLP"
                );
            }
        }
        Ok(Self {
            queue,
            traces: settings.traces.is_some(),
            counters,
            stop,
            task: Mutex::new(Some(task)),
            provider,
            _runtime: runtime,
        })
    }

    /// Whether requests' spans are exported.
    pub fn traces(&self) -> bool {
        self.traces
    }

    /// Hands a finished request to the export, or drops it (counted) when
    /// the queue is full or the export has stopped. Never waits.
    pub fn submit(&self, request: Request) {
        if let Err(e) = self.queue.try_send(request) {
            let request = match e {
                mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r) => r,
            };
            if self.provider.is_some() {
                self.counters.metrics_queue_full.inc();
            }
            if request.span.is_some() {
                self.counters.traces_queue_full.inc();
            }
        }
    }

    /// Exports what is queued and stops: the spans' last batch, then the
    /// metrics' last collection (each bounded by the exporters' timeout).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
        if let Some(provider) = self.provider.clone() {
            // The SDK's shutdown blocks its caller while it exports.
            let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(e)) = done {
                tracing::warn!(error = %e, "OTLP metrics: the last export failed");
            }
        }
    }
}

fn metric_exporter(e: &OtlpExport) -> Result<opentelemetry_otlp::MetricExporter, StartError> {
    let builder =
        opentelemetry_otlp::MetricExporter::builder().with_temporality(Temporality::Cumulative);
    Ok(match e.protocol {
        OtlpProtocol::HttpProtobuf => builder
            .with_http()
            .with_endpoint(e.endpoint.clone())
            .with_headers(e.headers.0.iter().cloned().collect())
            .with_timeout(e.timeout)
            .with_http_client(OnRuntime::new(e.timeout))
            .build()
            .map_err(StartError::Exporter)?,
        OtlpProtocol::Grpc => builder
            .with_tonic()
            .with_endpoint(e.endpoint.clone())
            .with_metadata(metadata(&e.headers)?)
            .with_timeout(e.timeout)
            .build()
            .map_err(StartError::Exporter)?,
    })
}

fn span_exporter(e: &OtlpExport) -> Result<opentelemetry_otlp::SpanExporter, StartError> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    Ok(match e.protocol {
        OtlpProtocol::HttpProtobuf => builder
            .with_http()
            .with_endpoint(e.endpoint.clone())
            .with_headers(e.headers.0.iter().cloned().collect())
            .with_timeout(e.timeout)
            .build()
            .map_err(StartError::Exporter)?,
        OtlpProtocol::Grpc => builder
            .with_tonic()
            .with_endpoint(e.endpoint.clone())
            .with_metadata(metadata(&e.headers)?)
            .with_timeout(e.timeout)
            .build()
            .map_err(StartError::Exporter)?,
    })
}

/// The headers as gRPC metadata.
fn metadata(headers: &OtlpHeaders) -> Result<MetadataMap, StartError> {
    let mut map = http::HeaderMap::new();
    for (name, value) in &headers.0 {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| StartError::Header(name.clone()))?;
        let value =
            http::HeaderValue::from_str(value).map_err(|_| StartError::Header(name.to_string()))?;
        map.append(name, value);
    }
    Ok(MetadataMap::from_headers(map))
}

/// The SDK's instruments, under the GenAI semantic conventions' names.
struct Instruments {
    ttft: Histogram<f64>,
    tpot: Histogram<f64>,
    duration: Histogram<f64>,
    tokens: Histogram<u64>,
}

impl Instruments {
    fn new(provider: &SdkMeterProvider) -> Self {
        let meter = provider.meter("tokenmeter");
        let seconds = |name: &'static str, description: &'static str, bounds: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(bounds.to_vec())
                .build()
        };
        Self {
            ttft: seconds(
                "gen_ai.server.time_to_first_token",
                "Time to generate the first token, from the request head (tokenmeter's TTFT).",
                &TTFT_BOUNDS,
            ),
            tpot: seconds(
                "gen_ai.server.time_per_output_token",
                "Time per output token after the first (tokenmeter's TPOT).",
                &TPOT_BOUNDS,
            ),
            duration: seconds(
                "gen_ai.client.operation.duration",
                "Request duration: E2EL for a request that ended ok, else how long it lasted (with error.type).",
                &DURATION_BOUNDS,
            ),
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Input and output tokens per completed request.")
                .with_boundaries(TOKEN_BOUNDS.to_vec())
                .build(),
        }
    }

    /// Records `r`'s measurements, its response model as `response_model`
    /// says (bounded).
    fn record(&self, r: &Request, response_model: Option<&str>) {
        let mut attributes = common_attributes(r, response_model);
        if r.outcome != "ok" {
            attributes.push(KeyValue::new("error.type", r.outcome));
        }
        if let Some(d) = r.ttft {
            self.ttft.record(d.as_secs_f64(), &attributes);
        }
        if let Some(d) = r.tpot {
            self.tpot.record(d.as_secs_f64(), &attributes);
        }
        self.duration
            .record(r.e2el.unwrap_or(r.elapsed).as_secs_f64(), &attributes);
        // As Prometheus's token histograms: completed requests only.
        if r.e2el.is_some() {
            for (kind, n) in [("input", r.input_tokens), ("output", r.output_tokens)] {
                if let Some(n) = n {
                    let mut with_kind = attributes.clone();
                    with_kind.push(KeyValue::new("gen_ai.token.type", kind));
                    self.tokens.record(n, &with_kind);
                }
            }
        }
    }
}

/// The attributes metrics and spans share, with `response_model` as
/// `gen_ai.response.model`.
fn common_attributes(r: &Request, response_model: Option<&str>) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", r.operation),
        KeyValue::new("gen_ai.provider.name", r.provider.clone()),
        KeyValue::new("gen_ai.request.model", r.model.clone()),
        KeyValue::new("server.address", r.server_address.clone()),
        KeyValue::new("server.port", i64::from(r.server_port)),
        KeyValue::new("tokenmeter.route", r.route.clone()),
    ];
    if !r.slo.is_empty() {
        a.push(KeyValue::new("tokenmeter.slo", r.slo.clone()));
    }
    if !r.tenant.is_empty() {
        a.push(KeyValue::new("tokenmeter.tenant", r.tenant.clone()));
    }
    if let Some(model) = response_model {
        a.push(KeyValue::new("gen_ai.response.model", model.to_owned()));
    }
    a
}

/// The most distinct response models the metrics carry; later new ones are
/// `other` (upstreams name them, so their number is not the proxy's to
/// choose). Spans carry each as it came.
const MAX_RESPONSE_MODELS: usize = 100;

/// The response models the metrics have carried so far.
#[derive(Default)]
struct ResponseModels(std::collections::HashSet<String>);

impl ResponseModels {
    /// `name`, or `other` once [`MAX_RESPONSE_MODELS`] others were seen.
    fn bounded<'a>(&mut self, name: &'a str) -> &'a str {
        if self.0.contains(name) {
            return name;
        }
        if self.0.len() < MAX_RESPONSE_MODELS {
            self.0.insert(name.to_owned());
            return name;
        }
        "other"
    }
}

/// The span of a finished request.
fn span(r: &Request, ids: SpanIds, scope: &InstrumentationScope) -> SpanData {
    let start = r.end.checked_sub(r.elapsed).unwrap_or(r.end);
    let mut attributes = common_attributes(r, r.response_model.as_deref());
    attributes.push(KeyValue::new(
        "http.request.method",
        r.method.as_str().to_owned(),
    ));
    if let Some(status) = r.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    attributes.push(KeyValue::new("tokenmeter.outcome", r.outcome));
    if let Some(verdict) = r.verdict {
        attributes.push(KeyValue::new("tokenmeter.slo.verdict", verdict));
    }
    if let Some(n) = r.input_tokens {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(n) = r.output_tokens {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", n as i64));
    }
    if let Some(d) = r.tpot {
        attributes.push(KeyValue::new("tokenmeter.tpot_seconds", d.as_secs_f64()));
    }
    let status = match r.outcome {
        "ok" => Status::Ok,
        // The client left: not the server's error.
        "client_abort" | "client_timeout" => Status::Unset,
        outcome => Status::error(outcome),
    };
    if r.outcome != "ok" {
        attributes.push(KeyValue::new("error.type", r.outcome));
    }
    let mut events = SpanEvents::default();
    if let Some(ttft) = r.ttft {
        events.events.push(Event::new(
            "first_token",
            start + ttft,
            vec![KeyValue::new(
                "gen_ai.server.time_to_first_token",
                ttft.as_secs_f64(),
            )],
            0,
        ));
    }
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(ids.trace_id),
            SpanId::from_bytes(ids.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        ),
        parent_span_id: ids.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: ids.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(format!("{} {}", r.operation, r.model)),
        start_time: start,
        end_time: r.end,
        attributes,
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

/// The task behind the queue.
struct Exporting {
    requests: mpsc::Receiver<Request>,
    instruments: Option<Instruments>,
    spans: Option<opentelemetry_otlp::SpanExporter>,
    batch: Vec<SpanData>,
    max_batch: usize,
    delay: Duration,
    counters: Counters,
    outcomes: Outcomes,
    scope: InstrumentationScope,
    response_models: ResponseModels,
}

impl Exporting {
    async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.delay);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut taken = Vec::with_capacity(64);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                n = self.requests.recv_many(&mut taken, 64) => {
                    if n == 0 {
                        break;
                    }
                    for r in taken.drain(..) {
                        self.take(&r);
                    }
                    if self.batch.len() >= self.max_batch {
                        self.export().await;
                    }
                }
                _ = tick.tick() => self.export().await,
            }
        }
        // What was queued when the proxy stopped.
        self.requests.close();
        while let Ok(r) = self.requests.try_recv() {
            self.take(&r);
        }
        self.export().await;
        if let Some(spans) = &self.spans {
            let _ = spans.shutdown();
        }
    }

    fn take(&mut self, r: &Request) {
        if let Some(instruments) = &self.instruments {
            let model = r.response_model.as_deref();
            instruments.record(r, model.map(|m| self.response_models.bounded(m)));
        }
        if self.spans.is_some()
            && let Some(ids) = r.span
        {
            self.batch.push(span(r, ids, &self.scope));
        }
    }

    async fn export(&mut self) {
        let Some(exporter) = &self.spans else {
            return;
        };
        while !self.batch.is_empty() {
            let rest = self.batch.split_off(self.batch.len().min(self.max_batch));
            let batch = std::mem::replace(&mut self.batch, rest);
            let n = batch.len();
            let result = exporter.export(batch).await;
            self.outcomes.note(
                &result,
                "spans are dropped and counted until the collector answers",
            );
            if result.is_err() {
                // The rest of the batch is dropped with it: one export
                // waits up to the timeout, not one per batch.
                let n = n + std::mem::take(&mut self.batch).len();
                self.counters.traces_export_failed.inc_by(n as u64);
            }
        }
    }
}

/// The outcomes of one signal's exports: failures counted, and logged as
/// a warning at the first of a run (then at debug), and the recovery.
struct Outcomes {
    signal: &'static str,
    failures: IntCounter,
    failing: AtomicBool,
}

impl Outcomes {
    fn new(signal: &'static str, failures: IntCounter) -> Self {
        Self {
            signal,
            failures,
            failing: AtomicBool::new(false),
        }
    }

    /// `lost` says what a failure costs.
    fn note(&self, result: &OTelSdkResult, lost: &str) {
        let signal = self.signal;
        match result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(signal, "OTLP: exporting again");
                }
            }
            Err(e) => {
                self.failures.inc();
                if self.failing.swap(true, Ordering::Relaxed) {
                    tracing::debug!(signal, error = %e, "OTLP export failed");
                } else {
                    tracing::warn!(signal, error = %e, "OTLP export failed; {lost}");
                }
            }
        }
    }
}

/// The OTLP metric exporter, with its outcomes counted and logged.
struct Counted {
    inner: opentelemetry_otlp::MetricExporter,
    outcomes: Outcomes,
}

impl PushMetricExporter for Counted {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        self.outcomes
            .note(&result, "the next export carries the totals");
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The HTTP client of the metric exports: the SDK's periodic reader runs
/// them on a thread of its own, outside the runtime hyper needs, so each
/// request is sent from a task on the runtime.
#[derive(Debug, Clone)]
struct OnRuntime {
    inner: opentelemetry_http::hyper::HyperClient,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    fn new(timeout: Duration) -> Self {
        Self {
            inner: opentelemetry_http::hyper::HyperClient::with_default_connector(timeout, None),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let inner = self.inner.clone();
        self.runtime
            .spawn(async move { inner.send_bytes(request).await })
            .await?
    }
}
/// What the OTLP export takes of a metered request when it starts, and
/// the [`Request`] it submits when it ends.
pub struct Exported {
    otlp: Arc<Otlp>,
    operation: &'static str,
    provider: Cow<'static, str>,
    server_address: String,
    server_port: u16,
    method: http::Method,
    span: Option<SpanIds>,
}

impl Exported {
    /// What `otlp` will export of the request `r`.
    pub fn new(otlp: &Arc<Otlp>, r: &Started<'_>) -> Self {
        let (operation, well_known) = operation(r.api, r.parts.uri.path());
        let provider = provider_name(r.otel_provider_name, well_known, r.api);
        let authority = &r.upstream.authority;
        let default_port = if r.upstream.scheme == http::uri::Scheme::HTTPS {
            443
        } else {
            80
        };
        // A sampled trace's span (the proxy's own when it joined or started
        // the trace), or a root span for a request without trace context;
        // none for a trace its client chose not to sample.
        let span = match r.trace {
            _ if !otlp.traces() => None,
            Some(t) if t.flags & SAMPLED == 0 => None,
            Some(t) => Some(SpanIds {
                trace_id: t.trace_id.0,
                span_id: t.span.unwrap_or_else(w3c::SpanId::random).0,
                parent: t.parent.map(|p| p.0),
            }),
            None => Some(SpanIds {
                trace_id: w3c::TraceId::random().0,
                span_id: w3c::SpanId::random().0,
                parent: None,
            }),
        };
        Self {
            otlp: otlp.clone(),
            operation,
            provider,
            server_address: server_address(authority.host()).to_owned(),
            server_port: authority.port_u16().unwrap_or(default_port),
            method: r.parts.method.clone(),
            span,
        }
    }

    /// Hands the finished request, with its label values (route, model,
    /// slo, tenant, operation), to the export's queue, never waiting.
    pub fn submit(self, labels: [&str; 5], f: &Finished<'_>) {
        let s = f.summary;
        let [route, model, slo, tenant, _] = labels;
        let request = Request {
            route: route.to_owned(),
            model: model.to_owned(),
            slo: slo.to_owned(),
            tenant: tenant.to_owned(),
            response_model: s.response_model.clone(),
            operation: self.operation,
            provider: self.provider,
            server_address: self.server_address,
            server_port: self.server_port,
            method: self.method,
            status: s.status,
            outcome: s.outcome.as_str(),
            verdict: f.judged.and_then(|(_, v)| v.label()),
            ttft: s.ttft,
            tpot: s.tpot,
            e2el: s.e2el,
            elapsed: s.elapsed,
            input_tokens: s.usage.input,
            output_tokens: s.output_tokens.map(|(n, _)| n),
            span: self.span,
            end: std::time::SystemTime::now(),
        };
        self.otlp.submit(request);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn provider_name_is_the_routes_else_the_protocols_well_known_value_else_its_name() {
        let (op, known) = operation(Api::OpenAi, "/v1/chat/completions");
        assert_eq!((op, known), ("chat", Some("openai")));
        assert_eq!(provider_name(None, known, Api::OpenAi), "openai");
        assert_eq!(
            provider_name(Some("azure.ai.openai"), known, Api::OpenAi),
            "azure.ai.openai"
        );
        for (api, path, name) in [
            (Api::Anthropic, "/v1/messages", "anthropic"),
            (
                Api::Gemini,
                "/v1beta/models/g:generateContent",
                "gcp.gemini",
            ),
            (Api::Responses, "/v1/responses", "openai"),
            (Api::NonGenerating, "/v1/embeddings", "openai"),
            (
                Api::NonGenerating,
                "/v1beta/models/e:embedContent",
                "gcp.gemini",
            ),
            (Api::NonGenerating, "/rerank", "unknown"),
        ] {
            let (_, known) = operation(api, path);
            assert_eq!(provider_name(None, known, api), name, "{api:?}");
        }
        for api in [
            Api::Tgi,
            Api::LlamaCpp,
            Api::Sglang,
            Api::Triton,
            Api::Ollama,
            Api::Generate,
        ] {
            let (_, known) = operation(api, "/generate");
            assert_eq!(known, None, "{api:?}");
            assert_eq!(provider_name(None, known, api), api.name());
            assert_eq!(provider_name(Some("vllm"), known, api), "vllm");
        }
    }

    #[test]
    fn server_address_drops_an_ipv6_addresses_brackets() {
        for (authority, address) in [
            ("127.0.0.1:8000", "127.0.0.1"),
            ("[::1]:8000", "::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("inference.example:443", "inference.example"),
        ] {
            let a: http::uri::Authority = authority.parse().unwrap();
            assert_eq!(server_address(a.host()), address);
        }
    }

    #[test]
    fn boundaries_are_increasing() {
        for bounds in [
            &TTFT_BOUNDS[..],
            &TPOT_BOUNDS,
            &DURATION_BOUNDS,
            &TOKEN_BOUNDS,
        ] {
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
        }
    }
}
