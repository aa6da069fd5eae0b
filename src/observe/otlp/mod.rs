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
//! The observations are the Prometheus ones (the same TTFT, TPOT, E2EL,
//! ITL gaps and token counts), into the buckets the GenAI semantic
//! conventions advise for each instrument ([`TTFT_BOUNDS`],
//! [`TPOT_BOUNDS`], [`DURATION_BOUNDS`], [`TOKEN_BOUNDS`]), not the
//! Prometheus ones, under the names `otlp.gen_ai_names` chooses.

mod exporters;
mod instruments;
mod semconv;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use prometheus::IntCounter;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::exporters::StartError;
use self::exporters::{Counted, Outcomes, metric_exporter, span_exporter};
use self::instruments::Instruments;
pub use self::instruments::{DURATION_BOUNDS, TOKEN_BOUNDS, TPOT_BOUNDS, TTFT_BOUNDS};
use self::semconv::{
    Request, ResponseModels, SpanIds, operation, provider_name, server_address, span,
};
use super::request::{Finished, Started};
use super::trace::{self as w3c, SAMPLED};
use crate::config::{GenAiNames, OtlpSettings};

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
    names: GenAiNames,
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
        let provider = if let Some(export) = &settings.exports.metrics {
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
        let names = settings.gen_ai_names;
        let instruments = provider.as_ref().map(|p| Instruments::new(p, names));
        let spans = if let Some(export) = &settings.exports.traces {
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
                names,
            }
            .run(stop.clone()),
        );
        drop(entered);
        for (signal, export) in [
            ("metrics", &settings.exports.metrics),
            ("traces", &settings.exports.traces),
        ] {
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
            traces: settings.traces,
            names,
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

    /// Whether the export records each gap of a stream
    /// (`gen_ai.client.inference.time_per_output_chunk`), and so wants
    /// them with the request.
    pub fn wants_chunk_gaps(&self) -> bool {
        self.provider.is_some() && self.names.latest()
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
    names: GenAiNames,
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
            self.batch.push(span(r, ids, &self.scope, self.names));
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

/// What the OTLP export takes of a metered request when it starts, and
/// the [`Request`] it submits when it ends.
pub struct Exported {
    otlp: Arc<Otlp>,
    api: meter::Api,
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
        let provider = provider_name(r.route.otel_provider_name.as_deref(), well_known, r.api);
        let upstream = &r.route.upstream;
        let authority = &upstream.authority;
        let default_port = if upstream.scheme == http::uri::Scheme::HTTPS {
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
            api: r.api,
            operation,
            provider,
            server_address: server_address(authority.host()).to_owned(),
            server_port: authority.port_u16().unwrap_or(default_port),
            method: r.parts.method.clone(),
            span,
        }
    }

    /// Whether [`submit`](Self::submit) wants the stream's gaps.
    pub fn wants_chunk_gaps(&self) -> bool {
        self.otlp.wants_chunk_gaps()
    }

    /// Hands the finished request, with its labels as its histograms have
    /// them and its stream's gaps (as [`Otlp::wants_chunk_gaps`] asked),
    /// to the export's queue, never waiting.
    pub fn submit(self, f: &Finished<'_>, chunk_gaps: Vec<(f64, u64)>) {
        let s = f.summary;
        let [route, model, slo, tenant, _] = f.labels.histograms();
        let request = Request {
            route: route.to_owned(),
            model: model.to_owned(),
            slo: slo.to_owned(),
            tenant: tenant.to_owned(),
            response_model: s.response_model.clone(),
            api: self.api,
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
            usage: s.usage,
            output_tokens: s.output_tokens.map(|(n, _)| n),
            chunk_gaps,
            occupancy: f.occupancy,
            charged: f.charged,
            span: self.span,
            end: std::time::SystemTime::now(),
            turn: f.turn,
            session: f.session.map(|p| (p.key.clone(), p.turn)),
        };
        self.otlp.submit(request);
    }
}
