//! The `otlp` section.

use std::time::Duration;

use super::super::raw::{RawConfig, Spanned};
use super::super::{OtlpProtocol, OtlpSettings};

use super::checker::Checker;
use super::values::*;

impl Checker<'_> {
    pub(crate) fn otlp(&mut self, raw: &RawConfig) -> Option<OtlpSettings> {
        let o = raw.otlp.as_ref()?;
        let Some(endpoint_field) = &o.endpoint else {
            self.at(
                None,
                "otlp.endpoint",
                "required key is missing: the collector's URL, such as http://127.0.0.1:4318",
            );
            return None;
        };
        let endpoint = self.value(Some(endpoint_field), "otlp.endpoint", parse_otlp_endpoint);
        let protocol = self
            .value(o.protocol.as_ref(), "otlp.protocol", |text| match text {
                "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
                "grpc" => Ok(OtlpProtocol::Grpc),
                other => Err(format!(
                    "unknown protocol `{other}`: use http/protobuf or grpc"
                )),
            })
            .unwrap_or(OtlpProtocol::HttpProtobuf);
        let mut flag = |field: &Option<Spanned<String>>, key| {
            self.value(field.as_ref(), key, parse_bool).unwrap_or(true)
        };
        let (metrics, traces) = (
            flag(&o.metrics, "otlp.metrics"),
            flag(&o.traces, "otlp.traces"),
        );
        let mut duration = |field: &Option<Spanned<String>>, key, default| {
            self.value(field.as_ref(), key, parse_duration)
                .filter(|d: &Duration| !d.is_zero())
                .unwrap_or(default)
        };
        let metrics_interval = duration(
            &o.metrics_interval,
            "otlp.metrics_interval",
            Duration::from_secs(60),
        );
        let traces_delay = duration(&o.traces_delay, "otlp.traces_delay", Duration::from_secs(5));
        let timeout = duration(&o.timeout, "otlp.timeout", Duration::from_secs(10));
        let queue = self
            .value(o.queue.as_ref(), "otlp.queue", parse_positive_count)
            .unwrap_or(2048);
        let max_batch = self
            .value(o.max_batch.as_ref(), "otlp.max_batch", parse_positive_count)
            .unwrap_or(512);
        let service_name = o
            .service_name
            .as_ref()
            .map_or_else(|| "tokenmeter".to_owned(), |s| s.value.clone());
        Some(OtlpSettings {
            endpoint: endpoint?,
            protocol,
            metrics,
            traces,
            metrics_interval,
            traces_delay,
            timeout,
            queue,
            max_batch,
            service_name,
        })
    }
}

/// An OTLP collector's URL: `http://host:port`, nothing after the port
/// (the signals' paths are the exporter's). TLS is not spoken: a collector
/// or agent beside the proxy receives, and forwards over TLS if need be.
/// Errors show the URL redacted (`redact_url`).
pub(crate) fn parse_otlp_endpoint(text: &str) -> Result<String, String> {
    let upstream = parse_base_url(text, "a collector beside the proxy holds the credentials")?;
    if upstream.scheme != http::uri::Scheme::HTTP {
        return Err(format!(
            "`{}`: only http:// is supported; run an OpenTelemetry Collector beside the proxy to forward over TLS",
            redact_url(text)
        ));
    }
    if !upstream.base_path.is_empty() {
        return Err(format!(
            "`{}`: give the collector's address without a path (the exporter adds /v1/metrics and /v1/traces)",
            redact_url(text)
        ));
    }
    Ok(format!("http://{}", upstream.authority))
}
