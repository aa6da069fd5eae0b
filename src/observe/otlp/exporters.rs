//! The OTLP exporters, over HTTP/protobuf or gRPC, and the outcomes of
//! their exports, counted and logged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use prometheus::IntCounter;

use crate::config::{OtlpExport, OtlpHeaders, OtlpProtocol};

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

pub(super) fn metric_exporter(
    e: &OtlpExport,
) -> Result<opentelemetry_otlp::MetricExporter, StartError> {
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

pub(super) fn span_exporter(
    e: &OtlpExport,
) -> Result<opentelemetry_otlp::SpanExporter, StartError> {
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

/// The outcomes of one signal's exports: failures counted, and logged as
/// a warning at the first of a run (then at debug), and the recovery.
pub(super) struct Outcomes {
    signal: &'static str,
    failures: IntCounter,
    failing: AtomicBool,
}

impl Outcomes {
    pub(super) fn new(signal: &'static str, failures: IntCounter) -> Self {
        Self {
            signal,
            failures,
            failing: AtomicBool::new(false),
        }
    }

    /// `lost` says what a failure costs.
    pub(super) fn note(&self, result: &OTelSdkResult, lost: &str) {
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
pub(super) struct Counted {
    pub(super) inner: opentelemetry_otlp::MetricExporter,
    pub(super) outcomes: Outcomes,
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
