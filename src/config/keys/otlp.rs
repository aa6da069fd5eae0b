//! The keys of `otlp`: OpenTelemetry export.

use super::super::OtlpSettings;
use super::super::raw::fields_of;
use super::key::{Table, key};

/// `otlp`.
pub(super) static OTLP: Table = Table {
    fields: fields_of::<OtlpSettings>,
    keys: &[
        key(
            "endpoint",
            "URL",
            "**required** unless an endpoint variable gives it",
            "The collector, `http://host:port`: `http://otel-collector:4318` for OTLP/HTTP \
            (the proxy adds `/v1/metrics` and `/v1/traces`), `:4317` for gRPC. Plain HTTP \
            only: run an OpenTelemetry Collector (or agent) beside the proxy to forward over \
            TLS.",
        ),
        key(
            "protocol",
            "string",
            "`http/protobuf`",
            "`http/protobuf` or `grpc`.",
        ),
        key(
            "metrics",
            "boolean",
            "`true`",
            "Export the metrics (cumulative histograms).",
        ),
        key(
            "traces",
            "boolean",
            "`true`",
            "Export a span per metered request: its client's sampled trace (the proxy's own \
            span when `trace_context.join` or `start` made one), a root span of its own for \
            a request without trace context, none for a trace its client did not sample.",
        ),
        key(
            "metrics_interval",
            "duration",
            "`60s`",
            "How often the metrics are exported.",
        ),
        key(
            "traces_delay",
            "duration",
            "`5s`",
            "The longest a finished request's span waits for its batch.",
        ),
        key(
            "timeout",
            "duration",
            "`10s`",
            "How long one export may take, retries included.",
        ),
        key(
            "queue",
            "count",
            "`2048`",
            "Finished requests waiting for the exporter. Past it a request is dropped from \
            the export (its span and its measurements) and counted in \
            `tokenmeter_otlp_dropped_total{reason=\"queue_full\"}`.",
        ),
        key("max_batch", "count", "`512`", "Most spans in one export."),
        key(
            "service_name",
            "string",
            "`tokenmeter`",
            "The exported resource's `service.name`.",
        ),
    ],
};
