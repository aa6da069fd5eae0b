//! `GET /config`: the configuration in force (after reloads and
//! command-line overrides), as JSON, for an operator asking "what is this
//! instance actually running?".
//!
//! Secrets: the config holds none by construction (upstream URLs with
//! credentials are rejected when loading, no header values are configured,
//! and API keys are known only by their hashes). The hashes are not written
//! either: a route's API-key tenants show the headers read, how many keys
//! and which tenant names.

use serde_json::{Value, json};

use crate::config::{Config, Protocol, Route, TenantSource};

use slo::SloClass;

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Auto => "auto",
        Protocol::Api(api) => api.name(),
        Protocol::None => "none",
    }
}

fn route(r: &Route) -> Value {
    json!({
        "name": r.name,
        "match": {
            "path_prefix": r.matcher.path_prefix,
            "host": r.matcher.host,
            "methods": r.matcher.methods.as_ref().map(|ms| ms.iter().map(|m| m.as_str()).collect::<Vec<_>>()),
        },
        "upstream": r.upstream.url(),
        "protocol": protocol(r.protocol),
        "timeouts_seconds": {
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
        "slo_by_model": r.slo_by_model.iter().map(|(m, c)| json!({"model": m, "slo": c})).collect::<Vec<_>>(),
        "slo_header": r.slo_header.as_ref().map(|h| h.as_str()),
        "tenant": r.tenant.as_ref().map(tenant),
    })
}

/// A route's tenant source: for API keys, the headers read and the tenant
/// names, never a key hash.
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
        "window_seconds": secs(c.window),
        "objectives": c.objectives.iter().map(|o| json!({
            "objective": o.kind.as_str(),
            "threshold_seconds": secs(o.threshold),
            "target": o.target,
        })).collect::<Vec<_>>(),
        "goodput": {
            "require": c.goodput.require.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "target": c.goodput.target,
        },
    })
}

/// The configuration as JSON.
pub fn render(c: &Config) -> Value {
    let b = &c.metrics.buckets;
    json!({
        "listen": c.listen.to_string(),
        "admin": {"listen": c.admin_listen.to_string(), "max_connections": c.admin.max_connections},
        "proxy": {
            "max_request_body_bytes": c.proxy.max_request_body_bytes,
            "max_retry_body_bytes": c.proxy.max_retry_body_bytes,
            "max_request_head_bytes": c.proxy.max_request_head_bytes,
            "request_head_timeout_seconds": secs(c.proxy.request_head_timeout),
            "max_connections": c.proxy.max_connections,
            "overload_threshold": c.proxy.overload_threshold,
            "overload_timeout_seconds": secs(c.proxy.overload_timeout),
            "upstream_idle_connections": c.proxy.upstream_idle_connections,
            "upstream_idle_timeout_seconds": secs(c.proxy.upstream_idle_timeout),
            "max_response_body_bytes": c.proxy.max_response_body_bytes,
            "x_forwarded": c.proxy.x_forwarded,
            "trusted_proxies": c.proxy.trusted_proxies.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "shutdown_grace_seconds": secs(c.proxy.shutdown_grace),
        },
        "metrics": {
            "namespace": c.metrics.namespace,
            "models": {"allow": c.metrics.models.allow, "max_distinct": c.metrics.models.max_distinct},
            "tenants": {
                "allow": c.metrics.tenants.bounds.allow,
                "max_distinct": c.metrics.tenants.bounds.max_distinct,
                "histograms": c.metrics.tenants.histograms,
            },
            "max_usage_tokens": c.metrics.max_usage_tokens,
            "buckets": {
                "time_to_first_token": b.time_to_first_token,
                "time_to_response_headers": b.time_to_response_headers,
                "time_per_output_token": b.time_per_output_token,
                "inter_token_latency": b.inter_token_latency,
                "e2e_request_latency": b.e2e_request_latency,
                "output_tokens": b.output_tokens,
                "input_tokens": b.input_tokens,
            },
        },
        "routes": c.routes.iter().map(route).collect::<Vec<_>>(),
        "slo_classes": c.slo_classes.iter().map(class).collect::<Vec<_>>(),
        "trace_context": {"join": c.trace_context.join, "start": c.trace_context.start},
        "otlp": c.otlp.as_ref().map(|o| json!({
            "endpoint": o.endpoint,
            "protocol": o.protocol.as_str(),
            "metrics": o.metrics,
            "traces": o.traces,
            "metrics_interval_seconds": secs(o.metrics_interval),
            "traces_delay_seconds": secs(o.traces_delay),
            "timeout_seconds": secs(o.timeout),
            "queue": o.queue,
            "max_batch": o.max_batch,
            "service_name": o.service_name,
        })),
        "sources": c.sources.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    })
}
