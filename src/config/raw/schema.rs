//! The serde types that mirror the file, each value kept as the text
//! written with its location. The `///` comments on the fields are the user
//! documentation of each key (`docs/configuration.md` is written from them).

use std::time::Duration;

use serde::Deserialize;

use super::super::kind;

pub(crate) use super::super::{
    AdminSettings, Buckets, GpuSelect, LabelBounds, MetricsEndpoint, MetricsSettings, Protocol,
    ProxySettings, RouteMatch, ScrapeSettings, TenantLabels, Timeouts, TraceSettings, Upstream,
};

pub(crate) use super::super::located::{Entries, List, Pos, Spanned, location_pos, pos};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawConfig {
    /// Address (`IP:port`) the proxy accepts client traffic on.
    /// Default `0.0.0.0:8080`. `--listen` replaces it.
    #[serde(default, deserialize_with = "kind::address")]
    pub listen: Option<std::net::SocketAddr>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin: Option<AdminSettings>,
    /// Forwarding behaviour shared by all routes.
    pub proxy: Option<ProxySettings>,
    /// Metric naming, label bounds and histogram buckets.
    pub metrics: Option<MetricsSettings>,
    /// Routes, in match order: the first route whose `match` accepts a request
    /// handles it. Required, at least one.
    pub routes: Option<Spanned<Vec<Spanned<RawRoute>>>>,
    /// Files defining SLO classes: paths or glob patterns (`slo/*.yaml`),
    /// relative to this file's directory. Each path must exist and each
    /// pattern must match at least one file. Default: none, and then a
    /// route's `slo` is only a label value.
    pub slo_files: Option<List>,
    /// W3C Trace Context (`traceparent`, `tracestate`) of metered requests.
    pub trace_context: Option<TraceSettings>,
    /// OpenTelemetry export (OTLP) of the metrics and of one span per
    /// metered request. Default: off.
    pub otlp: Option<RawOtlp>,
    /// TLS on the proxy listener: its certificate and key, and optionally
    /// the authorities client certificates are verified against. Default:
    /// plain HTTP.
    pub tls: Option<Spanned<crate::config::server_tls::RawServerTls>>,
    /// How the routes' `engine_metrics` and `gpu_metrics` pages are
    /// scraped.
    pub scrape: Option<ScrapeSettings>,
}

/// `otlp`: where and how the OpenTelemetry export goes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawOtlp {
    /// The collector: `http://host:port` (OTLP/HTTP: the signals' paths
    /// `/v1/metrics` and `/v1/traces` are added; gRPC: as it is).
    /// Required.
    pub endpoint: Option<Spanned<String>>,
    /// `http/protobuf` (default) or `grpc`.
    pub protocol: Option<Spanned<String>>,
    /// Export the metrics (boolean, default `true`).
    #[serde(default, deserialize_with = "kind::optional_boolean")]
    pub metrics: Option<bool>,
    /// Export one span per metered request (boolean, default `true`).
    #[serde(default, deserialize_with = "kind::optional_boolean")]
    pub traces: Option<bool>,
    /// How often the metrics are exported. Default `60s`.
    pub metrics_interval: Option<Spanned<String>>,
    /// The longest a finished span waits for its batch. Default `5s`.
    pub traces_delay: Option<Spanned<String>>,
    /// How long one export may take, retries included. Default `10s`.
    pub timeout: Option<Spanned<String>>,
    /// Finished requests waiting for the exporter; past it they are
    /// dropped and counted. Default 2048.
    #[serde(default, deserialize_with = "kind::optional_count")]
    pub queue: Option<usize>,
    /// Most spans in one export. Default 512.
    #[serde(default, deserialize_with = "kind::optional_count")]
    pub max_batch: Option<usize>,
    /// The `service.name` of the exported resource. Default `tokenmeter`.
    pub service_name: Option<String>,
}

/// `routes[i]`: which requests a route takes and where they go.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawRoute {
    /// Unique route name, used as the `route` label. Required; matches
    /// `[a-zA-Z0-9_.:-]+`.
    #[serde(default, deserialize_with = "kind::route_name")]
    pub name: Option<String>,
    /// Which requests this route accepts; all given conditions must hold.
    /// Default: every request (`path_prefix: /`).
    #[serde(rename = "match")]
    pub matcher: Option<RouteMatch>,
    /// Upstream base URL: `http` or `https`, with a host, without user info,
    /// query or fragment. Its path is kept as a base path (without a trailing
    /// `/`) that request paths are appended to. Required, unless `--upstream`
    /// is given on the command line, which replaces it in every route.
    #[serde(default, deserialize_with = "kind::upstream")]
    pub upstream: Option<Upstream>,
    /// Which requests are metered: `auto` (requests to known inference
    /// endpoints such as `.../chat/completions` and `.../completions`),
    /// `openai` (every request, read as OpenAI chat/completions) or `none`
    /// (forward only). Default `auto`.
    #[serde(default, deserialize_with = "kind::protocol")]
    pub protocol: Option<Protocol>,
    /// Upstream timeouts.
    pub timeouts: Option<Timeouts>,
    /// TLS towards an `https` upstream or metrics page.
    pub tls: Option<RawTls>,
    /// Forward the client's `Host` header instead of the upstream's authority.
    /// Default `false`.
    #[serde(default, deserialize_with = "kind::flag")]
    pub preserve_host: bool,
    /// Remove the matched `path_prefix` before appending the request path to
    /// the upstream's base path. Default `false`.
    #[serde(default, deserialize_with = "kind::flag")]
    pub strip_prefix: bool,
    /// Most requests of this route in flight at once (from the request head
    /// to the end of the response body). Past it the proxy answers `503`
    /// with `retry-after: 1` at once, without reading the request or
    /// calling the upstream. A whole number, at least 1. Default: no limit.
    #[serde(default, deserialize_with = "kind::in_flight_limit")]
    pub max_in_flight: Option<usize>,
    /// The route's SLO class, used as the `slo` label value (empty when
    /// unset). With `slo_files`, it must name a class defined there; without,
    /// any label value `[a-zA-Z0-9_.:-]+` is accepted and nothing is judged.
    #[serde(default, deserialize_with = "kind::slo_class")]
    pub slo: Option<String>,
    /// SLO class per model name (the request body's `model`, as sent), which
    /// takes precedence over `slo`: `{llama-3-8b: chat, codestral: code}`.
    #[serde(default, deserialize_with = "kind::classes_by_model")]
    pub slo_by_model: Vec<(String, String)>,
    /// SLO class per operation (`chat`, `embeddings`, `rerank`...), after
    /// `slo_by_model` and before `slo`: `{embeddings: embeddings}`.
    #[serde(default, deserialize_with = "kind::classes_by_operation")]
    pub slo_by_operation: Vec<(meter::Operation, String)>,
    /// Request header a client may use to declare its SLO class
    /// (`x-slo-class`). It takes precedence over `slo_by_model` and `slo`;
    /// values that name no defined class are ignored (the route's class
    /// applies), so the label stays bounded. Requires `slo_files`.
    #[serde(default, deserialize_with = "kind::header_name")]
    pub slo_header: Option<http::HeaderName>,
    /// Judge a request that declares its own objectives in the headers
    /// `x-slo-ttft-ms`, `x-slo-tpot-ms`, `x-slo-e2el-ms` against them, under
    /// the class label `declared`. Default `false`.
    #[serde(default, deserialize_with = "kind::flag")]
    pub slo_request_headers: bool,
    /// The largest bound a client may declare, per objective.
    pub slo_request_max: Option<RawDeclaredMax>,
    /// Whom each request is attributed to, the `tenant` label of the token
    /// and request counters and the access log's `tenant`: a request
    /// header's value (`header`) or the caller's API key mapped to a name
    /// (`api_keys`), one of the two. Default: no tenant (the label is
    /// empty).
    pub tenant: Option<Spanned<RawTenant>>,
    /// The `gen_ai.provider.name` of the route's requests in the
    /// OpenTelemetry export, for an upstream the protocol does not name
    /// (`vllm`, or a well-known value such as `azure.ai.openai`).
    /// `[a-z0-9_.]+`, 1 to 64 characters. Default: the protocol's
    /// well-known value (`openai`, `anthropic`, `gcp.gemini`), else the
    /// protocol's name.
    #[serde(default, deserialize_with = "kind::provider_name")]
    pub otel_provider_name: Option<String>,
    /// The inference server's own Prometheus page (vLLM, SGLang, TGI,
    /// llama.cpp with `--metrics`), scraped on the route's interval, off
    /// the forwarding path: `http` or `https` with a host. Default: not
    /// scraped.
    #[serde(default, deserialize_with = "kind::metrics_url")]
    pub engine_metrics: Option<MetricsEndpoint>,
    /// The page of the NVIDIA DCGM exporter of the GPUs serving the route,
    /// scraped as `engine_metrics` is. Default: not scraped.
    #[serde(default, deserialize_with = "kind::metrics_url")]
    pub gpu_metrics: Option<MetricsEndpoint>,
    /// Which GPUs of `gpu_metrics` serve the route. Only with
    /// `gpu_metrics`. Default: every GPU on the page.
    pub gpu_select: Option<GpuSelect>,
    /// How often this route's pages are scraped, instead of
    /// `scrape.interval`; longer than `scrape.timeout`. Only with
    /// `engine_metrics` or `gpu_metrics`.
    #[serde(default, deserialize_with = "kind::optional_duration")]
    pub scrape_interval: Option<Duration>,
}

/// `routes[i].tenant`: where a request's tenant comes from.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawTenant {
    /// The request header that names the tenant (`x-tenant`, `x-team`): its
    /// value, trimmed, is the tenant. A request without it is `unknown`.
    pub header: Option<Spanned<String>>,
    /// Tenants by API key: the key a request carries is hashed (SHA-256) and
    /// looked up in `keys`. The configuration holds only the hashes.
    pub api_keys: Option<RawApiKeys>,
}

/// `routes[i].tenant.api_keys`: tenants by API key.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawApiKeys {
    /// The headers a key is read from, the first one present: from
    /// `authorization`, the token of `Bearer <token>`; from any other, the
    /// whole value. Default `[authorization, x-api-key]`.
    pub headers: Option<List>,
    /// Tenant name by the SHA-256 of the key, in lowercase hex (what
    /// `tokenmeter hash-key` prints): `{9f86d0…: team-a}`. A request whose
    /// key is not listed, or that has none, is `unknown`. Required.
    pub keys: Option<Spanned<Entries>>,
}

/// An SLO file: `classes`, a list of SLO classes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawSloFile {
    /// The classes this file defines. Required, at least one.
    pub classes: Option<Spanned<Vec<Spanned<RawSloClass>>>>,
}

/// `classes[i]`: one SLO class.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawSloClass {
    /// Class name, the `slo` label value. Required; matches
    /// `[a-zA-Z0-9_.:-]+`; unique across all SLO files.
    pub name: Option<Spanned<String>>,
    /// What the class is for, shown in alert annotations. Default: empty.
    pub description: Option<Spanned<String>>,
    /// Compliance window of the targets (error budget period). A duration,
    /// default `28d`.
    pub window: Option<Spanned<String>>,
    /// Per-request thresholds and their targets, by metric (`ttft`, `tpot`,
    /// `e2el`). Each is either `{pNN: duration}` ("pNN below the duration",
    /// target NN/100, p50 to p99.99) or `{threshold: duration, target:
    /// ratio}`; `ttft: {p95: 500ms}` and `ttft: {threshold: 500ms, target:
    /// 0.95}` mean the same.
    pub objectives: Option<Spanned<RawObjectives>>,
    /// Which thresholds a request must all meet to be good, and the target
    /// share of good requests.
    pub goodput: Option<Spanned<RawGoodput>>,
    /// Also record the class's error ratios per tenant and alert on each
    /// tenant's burn rate (`tokenmeter rules`), for routes that attribute
    /// requests to tenants. A boolean, default `false`.
    pub per_tenant_alerts: Option<Spanned<String>>,
    /// Leave slow readers' requests (see `metrics.slow_reader_share`) out
    /// of the class's judging: they are neither good nor bad. A boolean,
    /// default `false`.
    pub exclude_slow_readers: Option<Spanned<String>>,
}

/// `classes[i].objectives`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawObjectives {
    /// Time to first token (streamed responses).
    pub ttft: Option<Spanned<Entries>>,
    /// Time per output token after the first (streamed responses).
    pub tpot: Option<Spanned<Entries>>,
    /// End-to-end request latency.
    pub e2el: Option<Spanned<Entries>>,
}

/// `classes[i].goodput`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawGoodput {
    /// The objectives a request must all meet to be good. Default: every
    /// objective of the class.
    pub require: Option<List>,
    /// Target share of good requests among judged ones, a ratio in (0, 1)
    /// (`0.9`). Default: none (goodput is counted but has no alerts).
    /// Required for a class without objectives.
    pub target: Option<Spanned<String>>,
}

/// `routes[i].slo_request_max`: the largest bound a client may declare for
/// each objective; a larger one is judged at this bound.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawDeclaredMax {
    /// Default `60s`.
    #[serde(default, deserialize_with = "kind::optional_duration")]
    pub ttft: Option<Duration>,
    /// Default `10s`.
    #[serde(default, deserialize_with = "kind::optional_duration")]
    pub tpot: Option<Duration>,
    /// Default `1h`.
    #[serde(default, deserialize_with = "kind::optional_duration")]
    pub e2el: Option<Duration>,
}

/// `routes[i].tls`: how the certificate of an `https` upstream or metrics
/// page is verified.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawTls {
    /// PEM file of the certificate authorities to trust for this upstream
    /// and the route's `https` metrics pages, instead of the web PKI roots
    /// built in (for servers with an internal or self-signed CA). Relative
    /// to the directory of the config file; read when the configuration is
    /// loaded or reloaded. Default: the web PKI roots.
    #[serde(default, deserialize_with = "kind::text")]
    pub ca_file: Option<String>,
}
