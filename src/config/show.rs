//! The configuration in force as JSON, for `GET /config`: every key of the
//! file under its own name, where the file has it, so that what an operator
//! reads there is what they would write. Durations are in seconds, sizes in
//! bytes, the overload threshold and the slow reader share shares (0 to 1), SLO classes as their
//! files define them, plus what loading found: the files read.
//!
//! Secrets: the file holds none by construction (upstream URLs with
//! credentials, queries or fragments are refused when loading, no header
//! values are configured, and API keys are known only by their hashes);
//! the OTLP export's headers, which `OTEL_EXPORTER_OTLP_HEADERS` gives,
//! show their names with `<redacted>` values. The
//! hashes are not shown either: a route's API-key tenants show the headers
//! read, how many keys and which tenant names.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Config, OtlpExport, OtlpHeaders, OtlpSettings, Protocol, Route, TenantSource};
use slo::SloClass;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Protocol {
    /// The name a route's `protocol` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::Api(api) => api.name(),
            Protocol::None => "none",
        }
    }
}

impl Config {
    /// This configuration as JSON, keyed as the file is.
    pub fn to_json(&self) -> Value {
        let p = &self.proxy;
        let m = &self.metrics;
        let b = &m.buckets;
        json!({
            "listen": self.listen.to_string(),
            "admin": {
                "listen": self.admin_listen.to_string(),
                "max_connections": self.admin.max_connections,
            },
            "proxy": {
                "max_request_body": p.max_request_body_bytes,
                "max_retry_body": p.max_retry_body_bytes,
                "max_request_head": p.max_request_head_bytes,
                "request_head_timeout": secs(p.request_head_timeout),
                "max_connections": p.max_connections,
                "overload_threshold": p.overload_threshold,
                "overload_timeout": secs(p.overload_timeout),
                "upstream_idle_connections": p.upstream_idle_connections,
                "upstream_idle_timeout": secs(p.upstream_idle_timeout),
                "max_response_body": p.max_response_body_bytes,
                "x_forwarded": p.x_forwarded,
                "trusted_proxies": p.trusted_proxies.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "shutdown_grace": secs(p.shutdown_grace),
            },
            "metrics": {
                "namespace": m.namespace,
                "models": {"allow": m.models.allow, "max_distinct": m.models.max_distinct},
                "tenants": {
                    "allow": m.tenants.bounds.allow,
                    "max_distinct": m.tenants.bounds.max_distinct,
                    "histograms": m.tenants.histograms,
                },
                "max_usage_tokens": m.max_usage_tokens,
                "stall_threshold": secs(m.stall_threshold),
                "slow_reader_share": m.slow_reader_share,
                "buckets": {
                    "time_to_first_token": b.time_to_first_token,
                    "time_to_response_headers": b.time_to_response_headers,
                    "time_per_output_token": b.time_per_output_token,
                    "inter_token_latency": b.inter_token_latency,
                    "e2e_request_latency": b.e2e_request_latency,
                    "output_tokens": b.output_tokens,
                    "input_tokens": b.input_tokens,
                    "proxy_time": b.proxy_time,
                },
            },
            "routes": self.routes.iter().map(route).collect::<Vec<_>>(),
            "slo_files": self.sources.patterns.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "trace_context": {"join": self.trace_context.join, "start": self.trace_context.start},
            "otlp": self.otlp.as_ref().map(otlp),
            "slo_classes": self.slo_classes.iter().map(class).collect::<Vec<_>>(),
            "files": self.sources.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        })
    }
}

/// The export settings, from the file and the `OTEL_*` variables, with
/// where each came from; the headers' names, never their values.
fn otlp(o: &OtlpSettings) -> Value {
    let export = |e: &OtlpExport| {
        let [endpoint, protocol, headers, timeout] = e.origins;
        json!({
            "endpoint": e.endpoint,
            "protocol": e.protocol.as_str(),
            "headers": headers_json(&e.headers),
            "timeout": secs(e.timeout),
            "from": {"endpoint": endpoint, "protocol": protocol, "headers": headers, "timeout": timeout},
        })
    };
    json!({
        "endpoint": o.endpoint,
        "protocol": o.protocol.as_str(),
        "metrics": o.metrics.is_some(),
        "traces": o.traces.is_some(),
        "metrics_interval": secs(o.metrics_interval),
        "traces_delay": secs(o.traces_delay),
        "timeout": secs(o.timeout),
        "queue": o.queue,
        "max_batch": o.max_batch,
        "service_name": o.service_name,
        "resource_attributes": o.resource_attributes.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>(),
        "exports": {
            "metrics": o.metrics.as_ref().map(export),
            "traces": o.traces.as_ref().map(export),
        },
        "from": o.origins.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect::<serde_json::Map<_, _>>(),
    })
}

fn headers_json(h: &OtlpHeaders) -> Value {
    h.redacted()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::from(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn route(r: &Route) -> Value {
    let caps = r.slo_request_max.unwrap_or_default().0;
    json!({
        "name": r.name,
        "match": {
            "path_prefix": r.matcher.path_prefix,
            "host": r.matcher.host,
            "methods": r.matcher.methods.as_ref().map(|ms| ms.iter().map(|m| m.as_str()).collect::<Vec<_>>()),
        },
        "upstream": r.upstream.url(),
        "protocol": r.protocol.name(),
        "timeouts": {
            "connect": secs(r.timeouts.connect),
            "response_headers": secs(r.timeouts.response_headers),
            "idle": secs(r.timeouts.idle),
            "request_body": secs(r.timeouts.request_body),
            "request_body_total": secs(r.timeouts.request_body_total),
        },
        "preserve_host": r.preserve_host,
        "strip_prefix": r.strip_prefix,
        "max_in_flight": r.max_in_flight,
        "tls": r.tls_roots.as_ref().map(|t| json!({
            "ca_file": t.file.display().to_string(),
            "certificates": t.certificates.len(),
        })),
        "slo": r.slo,
        "slo_by_model": r.slo_by_model.iter().map(|(m, c)| (m.clone(), Value::from(c.as_str()))).collect::<serde_json::Map<_, _>>(),
        "slo_by_operation": r.slo_by_operation.iter().map(|(op, c)| (op.name().to_owned(), Value::from(c.as_str()))).collect::<serde_json::Map<_, _>>(),
        "slo_header": r.slo_header.as_ref().map(|h| h.as_str()),
        "slo_request_headers": r.slo_request_max.is_some(),
        "slo_request_max": {"ttft": secs(caps[0]), "tpot": secs(caps[1]), "e2el": secs(caps[2])},
        "tenant": r.tenant.as_ref().map(tenant),
        "otel_provider_name": r.otel_provider_name,
    })
}

/// A route's tenant source: for API keys, the headers read, how many keys
/// and the tenant names, never a key hash.
fn tenant(t: &TenantSource) -> Value {
    match t {
        TenantSource::Header(name) => json!({"header": name.as_str()}),
        TenantSource::ApiKeys(keys) => {
            let mut tenants: Vec<&str> = keys.tenants.values().map(String::as_str).collect();
            tenants.sort_unstable();
            tenants.dedup();
            json!({"api_keys": {
                "headers": keys.headers.iter().map(|h| h.as_str()).collect::<Vec<_>>(),
                "keys": keys.tenants.len(),
                "tenants": tenants,
            }})
        }
    }
}

fn class(c: &SloClass) -> Value {
    json!({
        "name": c.name,
        "description": c.description,
        "window": secs(c.window),
        "objectives": c.objectives.iter().map(|o| json!({
            "objective": o.kind.as_str(),
            "threshold": secs(o.threshold),
            "target": o.target,
        })).collect::<Vec<_>>(),
        "goodput": {
            "require": c.goodput.require.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "target": c.goodput.target,
        },
        "per_tenant_alerts": c.per_tenant_alerts,
        "exclude_slow_readers": c.exclude_slow_readers,
    })
}
