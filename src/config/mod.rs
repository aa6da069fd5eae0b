//! Configuration: YAML in, validated immutable runtime types out.
//!
//! The types in this file are what the rest of the program runs on (every
//! value checked and defaulted), and, section by section, they are also the
//! schema of the file: a section's struct derives `Deserialize` with its
//! defaults (`#[serde(default)]` and its `Default` impl), its `///` field
//! comments are the user documentation of its keys, and it derives
//! `Serialize` for `/config` (`show.rs`). `proxy`, `trace_context`,
//! `metrics`, `scrape`, `admin` and a route's `timeouts`, `match` and
//! `gpu_select` are read so, and a route's other keys (`name`, `upstream`, `protocol`,
//! `preserve_host`, `strip_prefix`, `max_in_flight`, `tls.ca_file`, `slo`,
//! `slo_by_model`, `slo_by_operation`, `slo_header`,
//! `slo_request_headers`, `slo_request_max`, `otel_provider_name`,
//! `engine_metrics`, `gpu_metrics`, `scrape_interval`), with `listen`
//! (`admin`, with its `listen`, is read as `AdminSettings`) and `otlp`'s
//! `metrics`, `traces`, `queue`, `max_batch`, `service_name`, are typed
//! where `raw` reads them, each naming its kind; the flags that replace
//! `listen`, `admin.listen` and `upstream` are applied after. Still read as
//! text with its location (`raw`'s `Spanned` values) and turned into these
//! types by `load`: a route's `tenant` (whose messages must never name what
//! is written as a key of `api_keys.keys`), the `otlp` keys that the
//! `OTEL_*` variables may also set, and the SLO files.
//!
//! Every problem is reported at once, with its file, line, column and key:
//! a typed field is read by a function of `kind.rs` that records a bad value
//! with its location instead of failing (`located.rs`), unknown keys are
//! collected with a did-you-mean (`raw/read.rs`), and the rules across keys
//! are checked in one place, `load/validate.rs` (listen addresses, required
//! `name` and `upstream` against `--upstream`, unique names, shadowed
//! routes, `tls` against the schemes, SLO classes against `slo_files`, the
//! scrape keys). They see typed values, which keep no location: each names
//! the key it reports (`routes[1].scrape_interval`) and the document's
//! `Locator` finds where that key's value is written (`Checker::at_key`).
//! Nothing outside this module sees the raw types or the
//! YAML crate, so either can be replaced in one place.
//!
//! # Adding a key
//!
//! To a section read as its runtime type (`ProxySettings`,
//! `TraceSettings`), a key is one field with its doc line, and a
//! `deserialize_with` naming its kind when it is not a plain string:
//!
//! ```text
//! /// How long ... A duration, default `30s`.
//! #[serde(with = "kind::duration")]
//! pub some_timeout: Duration,
//! ```
//!
//! plus its default in the section's `Default` impl and its row in
//! `docs/configuration.md` (a test checks the reference names every key).
//! `/config` shows it, unknown-key messages offer it, and a bad value is
//! reported with its line, column and key, with nothing else to write. A
//! key that only a restart applies is also one line in [`RESTART_ONLY`]. A
//! new section is a struct like `ProxySettings` (with `Serialize`,
//! `Deserialize`, `#[serde(default)]` and a `Default` impl), a field of
//! `Config`, the same field as an `Option` in `raw::RawConfig`, its line in
//! `raw/read.rs`'s `known_keys` (so an unknown key in it is named and a
//! near one offered), and its default where `load/document.rs` builds a
//! `Config` (from a file: `raw.section.clone().unwrap_or_default()`; from
//! flags alone: `Default::default()`).

mod kind;
mod load;
mod located;
mod metrics;
mod raw;
mod restart;
mod server_tls;
mod show;
mod values;
mod web;

pub use metrics::{Buckets, LabelBounds, MetricsSettings, TenantLabels};
pub use restart::{RESTART_ONLY, RestartOnly};
pub use server_tls::{ClientAuth, ServerTls, ServerTlsFiles, TlsFileError, TlsVersion};
pub use web::WebConfig;

pub use load::{
    ConfigError, ConfigErrors, ENV_FILE, FLAGS_FILE, OtelEnv, Overrides, is_tenant_name,
};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slo::SloClass;

/// Default proxy listen address.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default admin listen address: loopback, so metrics are not exposed by accident.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// [`DEFAULT_LISTEN`] as an address.
pub(crate) fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN
        .parse()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 8080)))
}

/// [`DEFAULT_ADMIN_LISTEN`] as an address.
pub(crate) fn default_admin_listen() -> SocketAddr {
    DEFAULT_ADMIN_LISTEN
        .parse()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9464)))
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// Address the proxy accepts client traffic on.
    pub listen: SocketAddr,
    /// The admin listener: its address and limits.
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
    /// TLS on the proxy listener, when configured: offered to each new
    /// connection (a reload that replaces the certificate applies to the
    /// connections after it).
    pub tls: Option<ServerTls>,
    /// How the routes' engine and GPU pages are scraped, where a route does
    /// not say otherwise.
    pub scrape: ScrapeSettings,
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

/// `trace_context`: what the proxy does with the W3C trace context
/// (`traceparent`, `tracestate`) of metered requests. A client's valid
/// `traceparent` names the request's trace in the access log (`trace_id`)
/// whatever these say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceSettings {
    /// Take part in the client's trace as a span of its own: the upstream
    /// is sent a `traceparent` with the client's trace id and flags and the
    /// proxy's span as the parent (`tracestate` unchanged), so the
    /// upstream's spans (vLLM, SGLang, TGI) hang under the proxy's. A
    /// boolean, default `false`: both headers go to the upstream as the
    /// client sent them.
    #[serde(deserialize_with = "kind::boolean")]
    pub join: bool,
    /// Start a trace for a metered request that comes without a valid
    /// `traceparent`: a new trace id, sampled, with the proxy's span as its
    /// root, sent to the upstream in `traceparent` (a `tracestate` without
    /// a valid `traceparent` is dropped). A boolean, default `false`.
    #[serde(deserialize_with = "kind::boolean")]
    pub start: bool,
}

/// `scrape`: how each route's `engine_metrics` and `gpu_metrics` pages are
/// fetched, off the forwarding path. All of it applies on reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScrapeSettings {
    /// How often each page is fetched, where a route gives no
    /// `scrape_interval`. A duration, default `5s`.
    #[serde(with = "kind::duration")]
    pub interval: Duration,
    /// How long one fetch may take, the body read included; past it the
    /// scrape fails. Below the interval of every route scraped, so that a
    /// slow page never has two fetches in flight. A duration, default `2s`.
    #[serde(with = "kind::duration")]
    pub timeout: Duration,
    /// Largest page read; a larger one fails the scrape, so a runaway
    /// exporter cannot take the proxy's memory. A size, default `4MiB`.
    #[serde(deserialize_with = "kind::size")]
    pub max_body: usize,
}

impl Default for ScrapeSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            max_body: 4 * 1024 * 1024,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSelect {
    /// Values of the exporter's `gpu` label (the device index, `"0"`). A
    /// list of non-empty strings; default: any.
    #[serde(deserialize_with = "kind::label_values")]
    pub gpu: Vec<String>,
    /// Values of its `UUID` label (`GPU-5fd4...`). Default: any.
    #[serde(deserialize_with = "kind::label_values")]
    pub uuid: Vec<String>,
    /// Values of its `Hostname` label (the node). Default: any.
    #[serde(deserialize_with = "kind::label_values")]
    pub hostname: Vec<String>,
}

impl GpuSelect {
    /// Whether no list is given: every GPU on the page is selected.
    pub fn is_all(&self) -> bool {
        self.gpu.is_empty() && self.uuid.is_empty() && self.hostname.is_empty()
    }
}

/// `admin`: the admin listener (`/metrics`, `/healthz`, `/readyz`,
/// `/slo`, `/config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminSettings {
    /// Most client connections open at once on the admin listener; more
    /// wait in the kernel's accept queue. A count, at least 1. Default `64`:
    /// whatever visits the admin port cannot take the file descriptors
    /// forwarding needs. Applied at start only.
    #[serde(deserialize_with = "kind::admin_connections")]
    pub max_connections: usize,
    /// Address (`IP:port`) of the admin listener. Default `127.0.0.1:9464`
    /// (loopback, so metrics are not exposed by accident). Must differ from
    /// `listen`. `--admin-listen` replaces it.
    #[serde(deserialize_with = "kind::admin_address")]
    pub listen: SocketAddr,
    /// A Prometheus exporter-toolkit web config file (the format
    /// node_exporter reads with `--web.config.file`): TLS, basic-auth users
    /// and headers of the admin listener. A path, relative to this file.
    /// Default: none (plain HTTP, open to whoever reaches the address).
    #[serde(deserialize_with = "kind::text")]
    pub web_config_file: Option<String>,
    /// What `web_config_file` says, read with the configuration (its
    /// certificates too), so that a reload reads them again.
    #[serde(skip)]
    pub web: Option<WebConfig>,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            max_connections: 64,
            listen: default_admin_listen(),
            web_config_file: None,
            web: None,
        }
    }
}

/// `proxy`: forwarding behaviour shared by all routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProxySettings {
    /// Largest request body read ahead to learn `model` and `stream`; a
    /// larger body is forwarded as it streams in and metered with an unknown
    /// model. A size: bytes (`4194304`) or with a unit (`512KiB`, `4MiB`,
    /// `100kB`). Default `4MiB`.
    #[serde(rename = "max_request_body", deserialize_with = "kind::size")]
    pub max_request_body_bytes: usize,
    /// Largest request body held whole so that the request can be sent
    /// again if the upstream closes a reused connection under it (the
    /// keep-alive race); an unmetered request's body is read ahead up to
    /// this (a larger one is forwarded as it streams in and is never sent
    /// twice). A size, default `64KiB`.
    #[serde(rename = "max_retry_body", deserialize_with = "kind::size")]
    pub max_retry_body_bytes: usize,
    /// Largest request head (request line and headers) a client may send;
    /// a larger one is answered `431`. A size, from `8KiB` (hyper's floor,
    /// and the default) to `1MiB`: the read buffer each client connection
    /// holds is this size. Applied at start only.
    #[serde(
        rename = "max_request_head",
        deserialize_with = "kind::request_head_size"
    )]
    pub max_request_head_bytes: usize,
    /// How long a client connection may take to send a request head, from
    /// when it opens or its last response ended: a connection that sends
    /// nothing, trickles its head, or sits idle between requests longer is
    /// closed. A duration, default `30s`. Applied at start only.
    #[serde(with = "kind::duration")]
    pub request_head_timeout: Duration,
    /// Most client connections open at once on the proxy listener; more
    /// wait in the kernel's accept queue. A count, at least 1. Default
    /// (`None`): from the process's open-file limit, half of what is left
    /// after the admin listener's share and a reserve of 64 (each proxied
    /// connection can hold an upstream connection too). Applied at start
    /// only.
    #[serde(deserialize_with = "kind::optional_count")]
    pub max_connections: Option<usize>,
    /// Share of `max_connections` open at which the listener is overloaded
    /// and sheds connections that have not reached the upstream. A
    /// percentage, from `1%` to `100%`, default `90%`; held as a share (0
    /// to 1). Applied at start only.
    #[serde(deserialize_with = "kind::percentage")]
    pub overload_threshold: f64,
    /// While overloaded, how long a connection that has not reached the
    /// upstream may wait for its request head or read-ahead body. A
    /// duration, default `3s`. Applied at start only.
    #[serde(with = "kind::duration")]
    pub overload_timeout: Duration,
    /// Idle kept-alive connections kept per upstream for later requests;
    /// beyond this many, a connection whose response ended is closed. A
    /// count, `0` keeps none. Default `256`.
    #[serde(deserialize_with = "kind::idle_count")]
    pub upstream_idle_connections: usize,
    /// How long an idle upstream connection is kept. A duration, default
    /// `90s`.
    #[serde(with = "kind::duration")]
    pub upstream_idle_timeout: Duration,
    /// Largest non-streamed response body kept (as shared references to the
    /// forwarded frames, not copies) to read its usage at the end. A size,
    /// default `16MiB`.
    #[serde(rename = "max_response_body", deserialize_with = "kind::size")]
    pub max_response_body_bytes: usize,
    /// Add `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host` to
    /// forwarded requests. Default `true`.
    #[serde(deserialize_with = "kind::boolean")]
    pub x_forwarded: bool,
    /// Clients (addresses or CIDR ranges: `10.0.0.0/8`, `::1`) whose
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` are passed on, as another
    /// proxy in front sets them. From any other client they are replaced.
    /// Default: none.
    #[serde(deserialize_with = "kind::ip_nets")]
    pub trusted_proxies: Vec<IpNet>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the process exits anyway. A duration (`500ms`, `30s`, `10m`).
    /// Default `30s`.
    #[serde(with = "kind::duration")]
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
    /// The inference server's own Prometheus page; `None`: not scraped.
    pub engine_metrics: Option<MetricsEndpoint>,
    /// The page of the DCGM exporter of the GPUs serving the route; `None`:
    /// not scraped.
    pub gpu_metrics: Option<MetricsEndpoint>,
    /// Which GPUs of `gpu_metrics` serve the route.
    pub gpu_select: GpuSelect,
    /// How often its pages are scraped; `None`: `scrape.interval`.
    #[serde(serialize_with = "show::opt_secs")]
    pub scrape_interval: Option<Duration>,
}

/// `routes[i].match`: which requests a route accepts. All given
/// conditions must hold. Default: every request (`path_prefix: /`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteMatch {
    /// The request path starts with this (plain string prefix). Starts with
    /// `/`. Default `/`.
    #[serde(deserialize_with = "kind::path_prefix")]
    pub path_prefix: String,
    /// The request's host, without port, compared case-insensitively
    /// (held lowercase). Default: any host.
    #[serde(deserialize_with = "kind::host")]
    pub host: Option<String>,
    /// Accepted HTTP methods (case-insensitive, stored uppercase). Default
    /// (`None`): any method.
    #[serde(serialize_with = "show::methods", deserialize_with = "kind::methods")]
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

/// `routes[i].timeouts`: upstream timeouts of one route. Each is a
/// duration greater than zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// TCP (and TLS) connection set-up. Default `5s`.
    #[serde(with = "kind::duration")]
    pub connect: Duration,
    /// From sending the request to receiving the response head. Non-streamed
    /// responses send their head when generation is done, so this is long.
    /// Default `10m`.
    #[serde(with = "kind::duration")]
    pub response_headers: Duration,
    /// Longest silence between two response body frames, reset on every
    /// frame: a long healthy stream never times out, a stalled one does.
    /// Default `5m`.
    #[serde(with = "kind::duration")]
    pub idle: Duration,
    /// Longest silence while the client sends its request body: before its
    /// first byte and between any two of its frames. Past it the request is
    /// answered `408` (outcome `client_timeout`). Default `30s`.
    #[serde(with = "kind::duration")]
    pub request_body: Duration,
    /// Longest time a request body may take to arrive up to what the proxy
    /// reads ahead of forwarding it (to learn `model`, or to hold it for a
    /// retry), from the request head, however steadily it trickles. Past it
    /// the request is answered `408` (outcome `client_timeout`). Default
    /// `60s`.
    #[serde(with = "kind::duration")]
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
