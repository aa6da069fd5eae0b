//! Configuration: YAML in, validated immutable runtime types out.
//!
//! Loading runs in two stages. `raw` holds serde types that mirror the file
//! closely (values that need checking, such as durations, addresses and URLs,
//! stay strings with their source location); `load` turns them into the
//! types in this file, collecting *every* problem with its file, line and key
//! before failing. Nothing outside this module sees the raw types or the YAML
//! crate, so either can be replaced in one place.
//!
//! The types here are what the rest of the program runs on: every value is
//! already checked and defaulted.

mod load;
mod raw;
mod restart;
mod show;

pub use restart::{RESTART_ONLY, RestartOnly};

pub use load::{
    ConfigError, ConfigErrors, ENV_FILE, FLAGS_FILE, OtelEnv, Overrides, is_tenant_name,
};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use slo::SloClass;

/// Default proxy listen address.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default admin listen address: loopback, so metrics are not exposed by accident.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// Address the proxy accepts client traffic on.
    pub listen: SocketAddr,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`).
    /// Shown as `admin.listen`, where the file has it.
    #[serde(skip)]
    pub admin_listen: SocketAddr,
    /// The admin listener's limits.
    pub admin: AdminSettings,
    /// Forwarding behaviour shared by all routes.
    pub proxy: ProxySettings,
    /// Metric naming, label bounds and histogram buckets.
    pub metrics: MetricsSettings,
    /// Routes in match order: the first route whose match accepts a request
    /// handles it.
    pub routes: Vec<Route>,
    /// SLO classes from the `slo_files`, in file order. Empty when none are
    /// configured; then a route's `slo` is only a label value.
    #[serde(serialize_with = "show::classes")]
    pub slo_classes: Vec<SloClass>,
    /// What the proxy does with the W3C trace context of metered requests.
    pub trace_context: TraceSettings,
    /// OpenTelemetry export, when configured.
    pub otlp: Option<OtlpSettings>,
    /// The files this config was read from, which a reload watches.
    #[serde(flatten)]
    pub sources: Sources,
}

/// OpenTelemetry export (OTLP): metrics and one span per metered request,
/// from the `otlp` section and the SDKs' `OTEL_*` environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpSettings {
    /// The collector's address as `otlp.endpoint` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` gives it, when one does.
    pub endpoint: Option<String>,
    /// `otlp.protocol` or `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub protocol: OtlpProtocol,
    /// `otlp.timeout` or `OTEL_EXPORTER_OTLP_TIMEOUT`.
    pub timeout: Duration,
    /// Where and how the metrics are sent; `None`: not exported.
    pub metrics: Option<OtlpExport>,
    /// Where and how the spans are sent; `None`: not exported.
    pub traces: Option<OtlpExport>,
    pub metrics_interval: Duration,
    pub traces_delay: Duration,
    /// Finished requests waiting for the exporter.
    pub queue: usize,
    /// Most spans per export.
    pub max_batch: usize,
    pub service_name: String,
    /// The exported resource's other attributes
    /// (`OTEL_RESOURCE_ATTRIBUTES`, without `service.name`).
    pub resource_attributes: Vec<(String, String)>,
    /// Where each setting came from: (setting, `otlp.KEY`, an environment
    /// variable's name, or `default`).
    pub origins: Vec<(&'static str, &'static str)>,
}

/// One signal's export.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtlpExport {
    /// For HTTP/protobuf the URL the exports are posted to (the signal's
    /// path included); for gRPC the collector's `http://host:port`.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Sent with every export (HTTP headers, or gRPC metadata).
    pub headers: OtlpHeaders,
    #[serde(serialize_with = "show::secs")]
    pub timeout: Duration,
    /// Where its endpoint, protocol, headers and timeout came from.
    #[serde(rename = "from", serialize_with = "show::export_origins")]
    pub origins: [&'static str; 4],
}

/// Headers sent with every export: a collector's credentials. Their
/// values are never shown, logged or printed (`Debug` shows the names).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OtlpHeaders(pub Vec<(String, String)>);

impl OtlpHeaders {
    /// The names, each with the value `<redacted>`.
    pub fn redacted(&self) -> Vec<(&str, &'static str)> {
        self.0
            .iter()
            .map(|(k, _)| (k.as_str(), "<redacted>"))
            .collect()
    }
}

impl std::fmt::Debug for OtlpHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.redacted()).finish()
    }
}

/// How OTLP is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (`/v1/metrics`, `/v1/traces`).
    HttpProtobuf,
    /// gRPC.
    Grpc,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::Grpc => "grpc",
        }
    }
}

/// The files a config was read from: what `serve` watches to reload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Sources {
    /// The main file and every SLO file read, as named (relative to the
    /// working directory when relative).
    #[serde(serialize_with = "show::paths")]
    pub files: Vec<PathBuf>,
    /// The `slo_files` globs, joined to the main file's directory: a new
    /// file matching one is a change too.
    #[serde(rename = "slo_files", serialize_with = "show::paths")]
    pub patterns: Vec<PathBuf>,
}

/// What the proxy does with the W3C trace context (`traceparent`,
/// `tracestate`) of metered requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TraceSettings {
    /// Take part in the client's trace: the upstream's `traceparent` names
    /// the proxy's span as the parent. Otherwise the headers go on as sent.
    pub join: bool,
    /// Start a trace (sampled, the proxy's span its root) for a request
    /// without a valid `traceparent`.
    pub start: bool,
}

/// The admin listener's limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdminSettings {
    /// Most connections open at once (its own share of file descriptors).
    pub max_connections: usize,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            max_connections: 64,
        }
    }
}

/// Forwarding behaviour shared by all routes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProxySettings {
    /// Largest request body read ahead to learn `model` and `stream`. A larger
    /// body is forwarded as it streams in, and the request is metered with an
    /// unknown model.
    #[serde(rename = "max_request_body")]
    pub max_request_body_bytes: usize,
    /// Largest request body held whole so that the request can be sent
    /// again after the keep-alive race; an unmetered request's body is read
    /// ahead up to this (a larger one is forwarded as it streams in and is
    /// never sent twice).
    #[serde(rename = "max_retry_body")]
    pub max_retry_body_bytes: usize,
    /// Largest request head (request line and headers) a client may send;
    /// a larger one is answered `431`. At least 8 KiB (hyper's floor), which
    /// is also the default: the read buffer each client connection holds is
    /// this size. Applied when the listener starts (a reload cannot change it).
    #[serde(rename = "max_request_head")]
    pub max_request_head_bytes: usize,
    /// How long a client connection may take to send a request head, from
    /// when it opens or its last response ended (covers idle keep-alive).
    #[serde(serialize_with = "show::secs")]
    pub request_head_timeout: Duration,
    /// Most client connections open at once; `None`: from the open-file
    /// limit at start.
    pub max_connections: Option<usize>,
    /// The share of the connection limit (0 to 1) at which the listener
    /// is overloaded and sheds connections that have not reached the
    /// upstream. Applied at start.
    pub overload_threshold: f64,
    /// While overloaded, how long a connection that has not reached the
    /// upstream may wait for its request head or read-ahead body. Applied
    /// at start.
    #[serde(serialize_with = "show::secs")]
    pub overload_timeout: Duration,
    /// Idle kept-alive connections kept per upstream for later requests;
    /// beyond this many, a connection whose response ended is closed.
    pub upstream_idle_connections: usize,
    /// How long an idle upstream connection is kept.
    #[serde(serialize_with = "show::secs")]
    pub upstream_idle_timeout: Duration,
    /// Largest non-streamed response body kept (as shared references to the
    /// forwarded frames, not copies) to read its usage at the end.
    #[serde(rename = "max_response_body")]
    pub max_response_body_bytes: usize,
    /// Add `X-Forwarded-For` / `X-Forwarded-Proto` / `X-Forwarded-Host`.
    pub x_forwarded: bool,
    /// Clients whose own `X-Forwarded-Proto` / `-Host` are passed on; from
    /// any other client they are replaced.
    pub trusted_proxies: Vec<IpNet>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the process exits anyway.
    #[serde(serialize_with = "show::secs")]
    pub shutdown_grace: Duration,
}

/// An address range: an address and how many of its leading bits a
/// member shares with it (all of them for a single address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl IpNet {
    /// Whether `ip` is in the range (an IPv4 address written as IPv6,
    /// `::ffff:a.b.c.d`, is taken as the IPv4 one).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (net, ip, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => {
                (u128::from(n.to_bits()), u128::from(i.to_bits()), 32)
            }
            (IpAddr::V6(n), IpAddr::V6(i)) => (n.to_bits(), i.to_bits(), 128),
            _ => return false,
        };
        let shift = bits - u32::from(self.prefix.min(bits as u8));
        shift >= 128 || (net >> shift) == (ip >> shift)
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Metric naming, label bounds and histogram buckets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricsSettings {
    /// Prefix of the domain metrics (`llm` gives `llm_time_to_first_token_seconds`).
    pub namespace: String,
    /// How `model` label values are bounded.
    pub models: LabelBounds,
    /// How `tenant` label values are bounded.
    pub tenants: TenantLabels,
    /// Largest token count accepted from a usage report (any field); a
    /// report with a larger or malformed one is a parse error, not counted.
    pub max_usage_tokens: u64,
    /// A gap between two token events longer than this is a stall.
    #[serde(serialize_with = "show::secs")]
    pub stall_threshold: Duration,
    /// A request that waited on its client for more than this share of its
    /// time (0 to 1) is a slow reader's.
    pub slow_reader_share: f64,
    /// Histogram bucket upper bounds, per metric.
    pub buckets: Buckets,
}

/// How the values of a label a client chooses (`model`, `tenant`) are
/// bounded, so a client sending random names cannot blow up the number of
/// series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelBounds {
    /// When set, only these names are used as label values; anything else is
    /// reported as `other`.
    pub allow: Option<Vec<String>>,
    /// Without an allow-list: the first this-many distinct names seen are
    /// used, later new names are reported as `other`.
    pub max_distinct: usize,
}

/// How values of the `tenant` label are bounded, and where it is used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantLabels {
    /// The bounds, as for models.
    #[serde(flatten)]
    pub bounds: LabelBounds,
    /// Whether the latency and token-count histograms carry the tenant too
    /// (the counters always do).
    pub histograms: bool,
}

/// Where a route's requests get their tenant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantSource {
    /// The value of this request header.
    #[serde(serialize_with = "show::header")]
    Header(http::HeaderName),
    /// The caller's API key, hashed and looked up.
    ApiKeys(ApiKeys),
}

/// Tenants by the SHA-256 of their API keys. Only hashes are held, and its
/// `Debug` shows none of them.
#[derive(Clone, PartialEq)]
pub struct ApiKeys {
    /// The headers a key is read from, the first one present.
    pub headers: Vec<http::HeaderName>,
    /// Tenant name by key hash.
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

/// Histogram bucket upper bounds. Latencies in seconds, token counts in tokens.
/// Each list is strictly increasing and finite.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Buckets {
    /// Time to first token, seconds.
    pub time_to_first_token: Vec<f64>,
    /// Time until the upstream's response head arrives, seconds.
    pub time_to_response_headers: Vec<f64>,
    /// Time per output token after the first, seconds.
    pub time_per_output_token: Vec<f64>,
    /// Time between consecutive token events, seconds.
    pub inter_token_latency: Vec<f64>,
    /// End-to-end request latency, seconds.
    pub e2e_request_latency: Vec<f64>,
    /// Output (completion) tokens per request.
    pub output_tokens: Vec<f64>,
    /// Input (prompt) tokens per request.
    pub input_tokens: Vec<f64>,
    /// The proxy's own time on a request's path, seconds.
    pub proxy_time: Vec<f64>,
}

impl Default for Buckets {
    fn default() -> Self {
        Self {
            // 1 ms .. 10 min: fast prefix-cached prompts to long queues.
            time_to_first_token: vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            ],
            time_to_response_headers: vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 120.0, 300.0, 600.0,
            ],
            // TPOT and ITL: 0.5 ms .. 10 s.
            time_per_output_token: vec![
                0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
            inter_token_latency: vec![
                0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
            // E2EL: 10 ms .. 1 h.
            e2e_request_latency: vec![
                0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
                45.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
            ],
            output_tokens: vec![
                1.0, 4.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
                16384.0, 32768.0, 65536.0,
            ],
            input_tokens: vec![
                16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
                65536.0, 131072.0, 262144.0, 1048576.0,
            ],
            // The proxy's own time: 50 µs .. 2.5 s (connecting included).
            proxy_time: vec![
                0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                0.25, 0.5, 1.0, 2.5,
            ],
        }
    }
}

/// One route: which requests it takes and where they go.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    /// Unique name, used as the `route` label.
    pub name: String,
    /// Which requests this route accepts.
    #[serde(rename = "match")]
    pub matcher: RouteMatch,
    /// Where requests go.
    pub upstream: Upstream,
    /// Which requests are metered, and how their payloads are read.
    pub protocol: Protocol,
    /// Upstream timeouts.
    pub timeouts: Timeouts,
    /// Forward the client's `Host` header instead of the upstream's authority.
    pub preserve_host: bool,
    /// Remove the matched path prefix before appending the path to the
    /// upstream's base path.
    pub strip_prefix: bool,
    /// Most requests in flight at once; `None` for no limit.
    pub max_in_flight: Option<usize>,
    /// The certificate authorities an `https` upstream is verified against;
    /// `None` for the web PKI roots.
    #[serde(rename = "tls")]
    pub tls_roots: Option<TlsRoots>,
    /// The route's SLO class, the `slo` label (empty label when unset). With
    /// SLO classes configured it names one of them.
    pub slo: Option<String>,
    /// SLO class by the request's model name (as sent, before the label is
    /// bounded), taking precedence over `slo`.
    #[serde(serialize_with = "show::pairs")]
    pub slo_by_model: Vec<(String, String)>,
    /// SLO class by the request's operation (`embeddings`, `rerank`...),
    /// after `slo_by_model` and before `slo`.
    #[serde(serialize_with = "show::operations")]
    pub slo_by_operation: Vec<(meter::Operation, String)>,
    /// Header by which a client may declare its class; it takes precedence
    /// over `slo_by_model` and `slo` when it names a defined class.
    #[serde(serialize_with = "show::opt_header")]
    pub slo_header: Option<http::HeaderName>,
    /// Whether a request may declare its own objectives (judged against
    /// them under the class `declared`), and the largest it may declare;
    /// `None`: declarations are not read. Shown as the file's two keys,
    /// `slo_request_headers` and `slo_request_max`.
    #[serde(flatten, serialize_with = "show::slo_request")]
    pub slo_request_max: Option<slo::declared::Caps>,
    /// Where its requests get their tenant; `None`: no tenant (an empty
    /// label).
    pub tenant: Option<TenantSource>,
    /// `gen_ai.provider.name` of its requests in the OpenTelemetry export;
    /// `None`: the protocol's.
    pub otel_provider_name: Option<String>,
}

/// Which requests a route accepts. All given conditions must hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteMatch {
    /// The request path starts with this (always starts with `/`).
    pub path_prefix: String,
    /// The request's host (without port), compared case-insensitively.
    pub host: Option<String>,
    /// Accepted methods; `None` accepts any.
    #[serde(serialize_with = "show::methods")]
    pub methods: Option<Vec<http::Method>>,
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
    /// The upstream as a URL string, for logs and `/config`.
    pub fn url(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// Which requests of a route are metered, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Meter `POST` requests whose path is a known inference endpoint of any
    /// supported API (the protocol is told by the path); pass others through
    /// unmetered.
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
    #[serde(rename = "ca_file", serialize_with = "show::path")]
    pub file: PathBuf,
    /// Its certificates, DER-encoded, in file order (shown: how many).
    #[serde(serialize_with = "show::count")]
    pub certificates: Vec<Vec<u8>>,
}

/// Upstream timeouts of one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Timeouts {
    /// TCP (and TLS) connection set-up.
    #[serde(serialize_with = "show::secs")]
    pub connect: Duration,
    /// From sending the request to receiving the response head. Non-streamed
    /// responses send their head when generation is done, so this is long.
    #[serde(serialize_with = "show::secs")]
    pub response_headers: Duration,
    /// Longest silence between two response body frames, reset on every
    /// frame, so a long healthy stream never times out but a stalled one does.
    #[serde(serialize_with = "show::secs")]
    pub idle: Duration,
    /// Longest silence while the client sends its request body (before its
    /// first byte, and between frames).
    #[serde(serialize_with = "show::secs")]
    pub request_body: Duration,
    /// Longest time the part of a request body read ahead may take to
    /// arrive, from the request head, however steadily it trickles.
    #[serde(serialize_with = "show::secs")]
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

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            max_request_body_bytes: 4 * 1024 * 1024,
            max_retry_body_bytes: 64 * 1024,
            max_request_head_bytes: 8 * 1024,
            request_head_timeout: Duration::from_secs(30),
            max_connections: None,
            overload_threshold: 0.9,
            overload_timeout: Duration::from_secs(3),
            upstream_idle_connections: 256,
            upstream_idle_timeout: Duration::from_secs(90),
            max_response_body_bytes: 16 * 1024 * 1024,
            x_forwarded: true,
            trusted_proxies: Vec::new(),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            namespace: "llm".to_owned(),
            models: LabelBounds {
                allow: None,
                max_distinct: 100,
            },
            tenants: TenantLabels {
                bounds: LabelBounds {
                    allow: None,
                    max_distinct: 100,
                },
                histograms: false,
            },
            max_usage_tokens: 10_000_000,
            stall_threshold: Duration::from_secs(1),
            slow_reader_share: 0.2,
            buckets: Buckets::default(),
        }
    }
}
