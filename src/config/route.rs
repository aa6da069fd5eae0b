//! A route: which requests it takes, where they go, and what is read
//! beside them (its SLO classes, tenants, engine and GPU pages). [`Route`]
//! is both what the proxy runs on and the schema of `routes[i]` in the
//! file (its keys' user documentation is their declaration, `keys/routes.rs`).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The highest `gpu_hourly_cost` accepted, per GPU-hour: far above any
/// GPU's price in any currency, and low enough that a route's cost
/// counters stay finite for as long as a process runs.
pub const MAX_GPU_HOURLY_COST: f64 = 1_000_000.0;

/// Where a route's requests get their tenant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantSource {
    /// The value of this request header.
    #[serde(serialize_with = "super::show::header")]
    Header(http::HeaderName),
    /// The caller's API key, hashed and looked up.
    ApiKeys(ApiKeys),
}

/// Tenants by the SHA-256 of their API keys. Only hashes are held, and
/// neither its `Debug` nor `/config` shows any of them.
#[derive(Clone, PartialEq, Serialize)]
pub struct ApiKeys {
    /// The headers a key is read from, the first one present.
    #[serde(serialize_with = "super::show::headers")]
    pub headers: Vec<http::HeaderName>,
    /// Tenant name by key hash (shown: how many keys, and the names).
    #[serde(flatten, serialize_with = "super::show::key_tenants")]
    pub tenants: std::collections::HashMap<[u8; 32], String>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("headers", &self.headers)
            .field("keys", &self.tenants.len())
            .finish()
    }
}

/// `routes[i]`: one route, which requests it takes and where they go (its
/// keys declared in `keys/routes.rs`).
/// Read as written (each key's kind checked), then completed when the
/// configuration is loaded: `--upstream` applied, the CA file read,
/// `slo_request_max` kept only with `slo_request_headers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// Unique route name, used as the `route` label. Required; matches
    /// `[a-zA-Z0-9_.:-]+`.
    #[serde(default, deserialize_with = "super::kind::route_name")]
    pub name: String,
    /// Which requests this route accepts; all given conditions must hold.
    /// Default: every request (`path_prefix: /`).
    #[serde(rename = "match", default)]
    pub matcher: RouteMatch,
    /// Upstream base URL: `http` or `https`, with a host, without user info,
    /// query or fragment. Its path is kept as a base path (without a trailing
    /// `/`) that request paths are appended to. Required, unless `--upstream`
    /// is given on the command line, which replaces it in every route.
    #[serde(
        default = "Upstream::stand_in",
        serialize_with = "super::show::display",
        deserialize_with = "super::kind::upstream"
    )]
    pub upstream: Upstream,
    /// Which requests are metered: `auto` (requests to known inference
    /// endpoints such as `.../chat/completions` and `.../completions`),
    /// `openai` (every request, read as OpenAI chat/completions) or `none`
    /// (forward only).
    #[serde(
        default,
        serialize_with = "super::show::display",
        deserialize_with = "super::kind::protocol"
    )]
    pub protocol: Protocol,
    /// Upstream timeouts.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// TLS towards an `https` upstream or metrics page: the certificate
    /// authorities it is verified against (`tls.ca_file`); `None` for the
    /// web PKI roots.
    #[serde(rename = "tls", default, deserialize_with = "super::kind::tls")]
    pub tls_roots: Option<TlsRoots>,
    /// Forward the client's `Host` header instead of the upstream's authority.
    #[serde(default, deserialize_with = "super::kind::flag")]
    pub preserve_host: bool,
    /// Remove the matched `path_prefix` before appending the request path to
    /// the upstream's base path.
    #[serde(default, deserialize_with = "super::kind::flag")]
    pub strip_prefix: bool,
    /// Most requests of this route in flight at once (from the request head
    /// to the end of the response body). Past it the proxy answers `503`
    /// with `retry-after: 1` at once, without reading the request or
    /// calling the upstream. A whole number, at least 1. Default: no limit.
    #[serde(default, deserialize_with = "super::kind::in_flight_limit")]
    pub max_in_flight: Option<usize>,
    /// The route's SLO class, used as the `slo` label value (empty when
    /// unset). With `slo_files`, it must name a class defined there; without,
    /// any label value `[a-zA-Z0-9_.:-]+` is accepted and nothing is judged.
    #[serde(default, deserialize_with = "super::kind::slo_class")]
    pub slo: Option<String>,
    /// SLO class per model name (the request body's `model`, as sent, before
    /// the label is bounded), which takes precedence over `slo`:
    /// `{llama-3-8b: chat, codestral: code}`.
    #[serde(
        default,
        serialize_with = "super::show::pairs",
        deserialize_with = "super::kind::classes_by_model"
    )]
    pub slo_by_model: Vec<(String, String)>,
    /// SLO class per operation (`chat`, `embeddings`, `rerank`...), after
    /// `slo_by_model` and before `slo`: `{embeddings: embeddings}`.
    #[serde(
        default,
        serialize_with = "super::show::operations",
        deserialize_with = "super::kind::classes_by_operation"
    )]
    pub slo_by_operation: Vec<(meter::Operation, String)>,
    /// Request header a client may use to declare its SLO class
    /// (`x-slo-class`). It takes precedence over `slo_by_model` and `slo`;
    /// values that name no defined class are ignored (the route's class
    /// applies), so the label stays bounded. Requires `slo_files`.
    #[serde(
        default,
        serialize_with = "super::show::opt_header",
        deserialize_with = "super::kind::header_name"
    )]
    pub slo_header: Option<http::HeaderName>,
    /// Judge a request that declares its own objectives in the headers
    /// `x-llm-d-slo-ttft-ms`, `x-llm-d-slo-tpot-ms` (or their former names
    /// `x-slo-ttft-ms`, `x-slo-tpot-ms`) and `x-slo-e2el-ms` against them,
    /// under the class label `declared`.
    #[serde(default, deserialize_with = "super::kind::flag")]
    pub slo_request_headers: bool,
    /// The largest bound a client may declare, per objective; `None` when
    /// declarations are not read (no `slo_request_headers`).
    #[serde(
        default,
        serialize_with = "super::show::declared_max",
        deserialize_with = "super::kind::declared_max"
    )]
    pub slo_request_max: Option<slo::declared::Caps>,
    /// Whom each request is attributed to, the `tenant` label of the token
    /// and request counters and the access log's `tenant`: a request
    /// header's value (`header`: llm-d's fairness id is
    /// `x-llm-d-inference-fairness-id`) or the caller's API key mapped to a
    /// name (`api_keys`), one of the two. Default: no tenant (the label is
    /// empty).
    #[serde(default, deserialize_with = "super::kind::tenant")]
    pub tenant: Option<TenantSource>,
    /// The `gen_ai.provider.name` of the route's requests in the
    /// OpenTelemetry export, for an upstream the protocol does not name
    /// (`vllm`, or a well-known value such as `azure.ai.openai`).
    /// `[a-z0-9_.]+`, 1 to 64 characters. Default: the protocol's
    /// well-known value (`openai`, `anthropic`, `gcp.gemini`), else the
    /// protocol's name.
    #[serde(default, deserialize_with = "super::kind::provider_name")]
    pub otel_provider_name: Option<String>,
    /// The inference server's own Prometheus page (vLLM, SGLang, TGI,
    /// llama.cpp with `--metrics`), scraped on the route's interval, off
    /// the forwarding path: `http` or `https` with a host. Default: not
    /// scraped.
    #[serde(
        default,
        serialize_with = "super::show::opt_display",
        deserialize_with = "super::kind::metrics_url"
    )]
    pub engine_metrics: Option<MetricsEndpoint>,
    /// The page of the NVIDIA DCGM exporter of the GPUs serving the route,
    /// scraped as `engine_metrics` is. Default: not scraped.
    #[serde(
        default,
        serialize_with = "super::show::opt_display",
        deserialize_with = "super::kind::metrics_url"
    )]
    pub gpu_metrics: Option<MetricsEndpoint>,
    /// Which GPUs of `gpu_metrics` serve the route. Only with
    /// `gpu_metrics`. Default: every GPU on the page.
    #[serde(default)]
    pub gpu_select: GpuSelect,
    /// How often this route's pages are scraped, instead of
    /// `scrape.interval`; longer than `scrape.timeout`. Only with
    /// `engine_metrics` or `gpu_metrics`.
    #[serde(
        default,
        serialize_with = "super::show::opt_secs",
        deserialize_with = "super::kind::optional_duration"
    )]
    pub scrape_interval: Option<Duration>,
    /// How many GPUs serve the route all the time, for a route without
    /// `gpu_metrics`: its GPU-seconds, divided among its requests
    /// (docs/metrics.md, "Chargeback"). A whole number, at least 1; not
    /// with `gpu_metrics`, which counts them. Default: not counted.
    #[serde(default, deserialize_with = "super::kind::gpus")]
    pub gpus: Option<u32>,
    /// What one of the route's GPUs costs an hour, in `cost.currency`: a
    /// number from 0 to [`MAX_GPU_HOURLY_COST`] (`2.5`). Its GPU-seconds are
    /// priced at it, from the configuration it is in on. Only with `gpus`
    /// or `gpu_metrics`. Default: not priced.
    #[serde(default, deserialize_with = "super::kind::gpu_hourly_cost")]
    pub gpu_hourly_cost: Option<f64>,
    /// The set of GPUs the route shares with the other routes that name
    /// it: one ledger, its GPU-seconds, energy and money counted once and
    /// divided among the requests of all of them. A label value (`gpu_set`),
    /// `[a-zA-Z0-9_.:-]+`, 1 to 64 characters; the routes of a set give the
    /// same `gpus`, or the same `gpu_metrics` and `gpu_select`, and the same
    /// `gpu_hourly_cost`. Default: the routes with the same `gpu_metrics`
    /// and `gpu_select` share their GPUs, each route with `gpus` has its own.
    #[serde(default, deserialize_with = "super::kind::gpu_set")]
    pub gpu_set: Option<String>,
}

/// `routes[i].match`: which requests a route accepts. All given
/// conditions must hold. Default: every request (`path_prefix: /`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteMatch {
    /// The request path starts with this (plain string prefix). Starts with
    /// `/`.
    #[serde(deserialize_with = "super::kind::path_prefix")]
    pub path_prefix: String,
    /// The request's host, without port, compared case-insensitively
    /// (held lowercase). Default: any host.
    #[serde(deserialize_with = "super::kind::host")]
    pub host: Option<String>,
    /// Accepted HTTP methods (case-insensitive, stored uppercase). Default
    /// (`None`): any method.
    #[serde(
        serialize_with = "super::show::methods",
        deserialize_with = "super::kind::methods"
    )]
    pub methods: Option<Vec<http::Method>>,
}

impl Default for RouteMatch {
    fn default() -> Self {
        Self {
            path_prefix: "/".to_owned(),
            host: None,
            methods: None,
        }
    }
}

impl Route {
    /// A route named `name` to `upstream` with every other key at its
    /// default, as a file's route giving only these two reads: the route
    /// of a configuration from flags alone. The defaults are the ones the
    /// fields declare, so there is no list of them to keep in step; reading
    /// no keys fails only if a field has no default, which the tests would
    /// show.
    pub fn with_defaults(
        name: impl Into<String>,
        upstream: Upstream,
    ) -> Result<Route, serde::de::value::Error> {
        let no_keys = std::iter::empty::<(&str, &str)>();
        let read = Route::deserialize(serde::de::value::MapDeserializer::new(no_keys))?;
        Ok(Route {
            name: name.into(),
            upstream,
            ..read
        })
    }
}

/// An upstream base URL, split into what the proxy needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// `http` or `https`.
    pub scheme: http::uri::Scheme,
    /// `host[:port]`.
    pub authority: http::uri::Authority,
    /// Base path without a trailing `/` (empty for the root).
    pub base_path: String,
}

impl Upstream {
    /// What a route read without an upstream holds until `--upstream` gives
    /// one; a configuration left with it is refused (the key is required).
    pub(super) fn stand_in() -> Self {
        Self {
            scheme: http::uri::Scheme::HTTP,
            authority: http::uri::Authority::from_static("invalid."),
            base_path: String::new(),
        }
    }

    /// The upstream as a URL string, for logs and `/config`.
    pub fn url(&self) -> String {
        self.to_string()
    }
}

/// Which requests of a route are metered, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// Meter `POST` requests whose path is a known inference endpoint of any
    /// supported API (the protocol is told by the path); pass others through
    /// unmetered.
    #[default]
    Auto,
    /// Meter every request of the route as this API (named as
    /// `meter::Api::NAMED` says).
    Api(meter::Api),
    /// Forward only; meter nothing.
    None,
}

/// Certificate authorities read from a PEM file (`routes[i].tls.ca_file`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsRoots {
    /// The file, as resolved.
    #[serde(rename = "ca_file", serialize_with = "super::show::path")]
    pub file: PathBuf,
    /// Its certificates, DER-encoded, in file order (shown: how many).
    #[serde(serialize_with = "super::show::count")]
    pub certificates: Vec<Vec<u8>>,
}

/// `routes[i].timeouts`: upstream timeouts of one route. Each is a
/// duration greater than zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// TCP (and TLS) connection set-up.
    #[serde(with = "super::kind::duration")]
    pub connect: Duration,
    /// From sending the request to receiving the response head. Non-streamed
    /// responses send their head when generation is done, so this is long.
    #[serde(with = "super::kind::duration")]
    pub response_headers: Duration,
    /// Longest silence between two response body frames, reset on every frame:
    /// a long healthy stream never times out, a stalled one does.
    #[serde(with = "super::kind::duration")]
    pub idle: Duration,
    /// Longest silence while the client sends its request body: before its
    /// first byte and between any two of its frames. Past it the request is
    /// answered `408` (outcome `client_timeout`).
    #[serde(with = "super::kind::duration")]
    pub request_body: Duration,
    /// Longest time a request body may take to arrive up to what the proxy
    /// reads ahead of forwarding it (to learn `model`, or to hold it for a
    /// retry), from the request head, however steadily it trickles. Past it the
    /// request is answered `408` (outcome `client_timeout`).
    #[serde(with = "super::kind::duration")]
    pub request_body_total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            response_headers: Duration::from_secs(600),
            idle: Duration::from_secs(300),
            request_body: Duration::from_secs(30),
            request_body_total: Duration::from_secs(60),
        }
    }
}

/// A page to scrape (`routes[i].engine_metrics`, `gpu_metrics`).
#[derive(Clone, PartialEq)]
pub struct MetricsEndpoint {
    /// The URL as written, credentials and all: only the scraper reads it.
    pub url: http::Uri,
    /// The URL redacted as an upstream's is (user info, query values,
    /// fragment), for `/config`, logs and messages.
    pub shown: String,
}

/// Shows the redacted URL only, as `/config` does.
impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MetricsEndpoint").field(&self.shown).finish()
    }
}

/// `routes[i].gpu_select`: which GPUs of the route's `gpu_metrics` page
/// serve it, by the DCGM exporter's labels. A GPU is selected when it
/// matches every list given; with none given, every GPU on the page is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSelect {
    /// Values of the exporter's `gpu` label (the device index, `"0"`). A
    /// list of non-empty strings; default: any.
    #[serde(deserialize_with = "super::kind::label_values")]
    pub gpu: Vec<String>,
    /// Values of its `UUID` label (`GPU-5fd4...`). Default: any.
    #[serde(deserialize_with = "super::kind::label_values")]
    pub uuid: Vec<String>,
    /// Values of its `Hostname` label (the node). Default: any.
    #[serde(deserialize_with = "super::kind::label_values")]
    pub hostname: Vec<String>,
}

impl GpuSelect {
    /// Whether no list is given: every GPU on the page is selected.
    pub fn is_all(&self) -> bool {
        self.gpu.is_empty() && self.uuid.is_empty() && self.hostname.is_empty()
    }
}
