//! Configuration: YAML in, validated immutable runtime types out.
//!
//! The types in this file and in `route.rs` are what the rest of the
//! program runs on (every value checked and defaulted), and, section by
//! section, they are also the schema of the file: a section's struct
//! derives `Deserialize` with its defaults (`#[serde(default)]` and its
//! `Default` impl) and `Serialize` for `/config` (`show.rs`); each of its
//! keys is declared once in `keys/`, with the user documentation of it.
//! `proxy`, `trace_context`, `metrics`, `scrape`, `admin`, `otlp` and each
//! route (`Route`, with its `match`, `timeouts` and `gpu_select`) are read
//! so; the one other key of the main file, `listen`, is typed where `raw`
//! reads it. A route as read is then completed by `load/routes.rs`
//! (`--upstream` applied, its CA file read). The flags that replace
//! `listen`, `admin.listen` and `upstream` are applied after the file, and
//! the `OTEL_*` variables fill in the `otlp` keys the file does not give
//! (`load/otlp.rs`, which also resolves each signal's export and says
//! where each setting came from). A configuration from flags alone is an
//! empty document checked the same way, `--upstream` its one route. Still
//! read as text with its location (`raw`'s `Spanned`): `slo_files` (paths
//! and globs resolved against the file's directory). An SLO file's classes
//! are read into `slo::SloClass` itself (`slo_class.rs`, serde's remote
//! derive naming each field's kind), and their rules across keys checked
//! by `load/classes.rs`.
//!
//! Every problem is reported at once, with its file, line, column and key:
//! a typed field is read by a function of `kind.rs` that records a bad value
//! with its location instead of failing (`located.rs`), unknown keys are
//! collected with a did-you-mean (`raw/read.rs`), and the rules across keys
//! are checked in one place, `load/validate.rs` (listen addresses, required
//! `name` and `upstream` against `--upstream`, unique names, shadowed
//! routes, `tls` against the schemes, SLO classes against `slo_files`, a
//! route's `tenant`, the scrape keys). They see typed values, which keep no
//! location: each names the key it reports (`routes[1].scrape_interval`)
//! and the document's `Locator` finds where that key's value is written
//! (`Checker::at_key`). Nothing outside this module sees the raw types or
//! the YAML crate, so either can be replaced in one place.
//!
//! # Adding a key
//!
//! A key is one field of its section's type, with its default in the
//! section's `Default` impl (a route's are on its fields,
//! `#[serde(default)]`), the one place a default is held, and a
//! `deserialize_with` naming its kind when it is not a plain string:
//!
//! ```text
//! #[serde(with = "kind::duration")]
//! pub some_timeout: Duration,
//! ```
//!
//! and one declaration in its section's table in `keys/` (ripgrep's way
//! with a flag: everything said of it, said once):
//!
//! ```text
//! key("some_timeout", "duration", "`30s`", "How long ... (the user's text)."),
//! ```
//!
//! with `.restart("s")` when only a restart applies it. From the
//! declaration come its row in `docs/configuration.md` (`reference.rs`
//! writes the key tables, `TOKENMETER_BLESS=1`), the keys the reader
//! accepts and offers for a near miss (`keys::known`, serde's field list
//! of each declared mapping's type, checked against the declarations
//! both ways), and the restart-needed warning (`restart.rs`). The tests
//! also ask for it in the example file, `config/tokenmeter.yaml`. A rule
//! that relates it to other keys is one more function in
//! `load/validate.rs`. `/config` shows it, and a bad value is reported
//! with its line, column and key, with nothing else to write.
//!
//! A new section is its type (a struct like `ProxySettings`, with
//! `Serialize`, `Deserialize`, `#[serde(default)]` and a `Default` impl)
//! and its declarations (its table, a file of `keys/`, and its row in
//! `keys::TOP`, which points at the table); then the same type as a field
//! of `Config`, as an `Option` in `raw::RawConfig`, and its default where
//! `load/document.rs` builds the `Config`
//! (`raw.section.clone().unwrap_or_default()`), three lines the compiler
//! and the declarations' test ask for. `TOKENMETER_BLESS=1` writes its
//! table into the page under a heading of its own, where a sentence or
//! two of prose may follow.

mod error;
mod gpu_set;
mod keys;
mod kind;
mod load;
mod located;
mod metrics;
mod raw;
#[cfg(test)]
mod reference;
mod restart;
mod route;
mod server_tls;
mod sessions;
mod show;
mod slo_class;
mod values;
mod web;

pub use gpu_set::{GpuSet, GpuSetId, gpu_sets};
pub use metrics::{Buckets, LabelBounds, MetricsSettings, NativeHistograms, TenantLabels};
pub use restart::{RestartOnly, restart_only};
pub use server_tls::{ClientAuth, ServerTls, ServerTlsFiles, TlsFileError, TlsVersion};
pub use sessions::{SessionBody, SessionKeySpec, SessionSettings};
pub use web::WebConfig;

pub use route::{
    ApiKeys, GpuSelect, MAX_GPU_HOURLY_COST, MetricsEndpoint, Protocol, Route, RouteMatch,
    TenantSource, Timeouts, TlsRoots, Upstream,
};

pub use load::{ConfigError, ConfigErrors, ENV_FILE, FLAGS_FILE, OtelEnv, Overrides};
pub use values::is_tenant_name;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use slo::SloClass;

/// Default proxy listen address.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));
/// Default admin listen address: loopback, so metrics are not exposed by accident.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9464));

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
    /// How the routes' GPU time is priced.
    pub cost: CostSettings,
    /// How the requests of a session are told, and the table's bounds.
    pub sessions: SessionSettings,
    /// The files this config was read from, which a reload watches.
    #[serde(flatten)]
    pub sources: Sources,
}

/// `otlp`: OpenTelemetry export (OTLP) of the metrics and of one span per
/// metered request. The keys are the file's; the SDKs' `OTEL_*` variables
/// fill in those it does not give (`load/otlp.rs`), which also resolves
/// where each signal is sent (`exports`) and says where each setting came
/// from (`from`). A change needs a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OtlpSettings {
    /// The collector, `http://host:port` (OTLP/HTTP: the signals' paths
    /// `/v1/metrics` and `/v1/traces` are added; gRPC: as it is). Required
    /// unless an endpoint variable gives it.
    #[serde(deserialize_with = "kind::otlp_endpoint")]
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`.
    #[serde(deserialize_with = "kind::otlp_protocol")]
    pub protocol: OtlpProtocol,
    /// Export the metrics. A boolean; in force, whether they are exported.
    #[serde(deserialize_with = "kind::boolean")]
    pub metrics: bool,
    /// Export one span per metered request. A boolean; in force, whether they
    /// are exported.
    #[serde(deserialize_with = "kind::boolean")]
    pub traces: bool,
    /// How often the metrics are exported. A duration.
    #[serde(with = "kind::duration")]
    pub metrics_interval: Duration,
    /// The longest a finished span waits for its batch. A duration.
    #[serde(with = "kind::duration")]
    pub traces_delay: Duration,
    /// How long one export may take, retries included. A duration.
    #[serde(with = "kind::duration")]
    pub timeout: Duration,
    /// Finished requests waiting for the exporter; past it they are dropped and
    /// counted. A count.
    #[serde(deserialize_with = "kind::count")]
    pub queue: usize,
    /// Most spans in one export. A count.
    #[serde(deserialize_with = "kind::count")]
    pub max_batch: usize,
    /// The `service.name` of the exported resource.
    #[serde(deserialize_with = "kind::name")]
    pub service_name: String,
    /// The exported resource's other attributes
    /// (`OTEL_RESOURCE_ATTRIBUTES`, without `service.name`).
    #[serde(skip_deserializing, serialize_with = "show::pairs")]
    pub resource_attributes: Vec<(String, String)>,
    /// Where and how each signal is sent.
    #[serde(skip_deserializing)]
    pub exports: OtlpExports,
    /// The GenAI semantic conventions' names the export uses, from
    /// `OTEL_SEMCONV_STABILITY_OPT_IN` (read once, at start).
    #[serde(skip_deserializing)]
    pub gen_ai_names: GenAiNames,
    /// Where each setting came from: (setting, `otlp.KEY`, an environment
    /// variable's name, or `default`).
    #[serde(
        rename = "from",
        skip_deserializing,
        serialize_with = "show::static_pairs"
    )]
    pub origins: Vec<(&'static str, &'static str)>,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: OtlpProtocol::HttpProtobuf,
            metrics: true,
            traces: true,
            metrics_interval: Duration::from_secs(60),
            traces_delay: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
            queue: 2048,
            max_batch: 512,
            service_name: "tokenmeter".to_owned(),
            resource_attributes: Vec::new(),
            exports: OtlpExports::default(),
            gen_ai_names: GenAiNames::default(),
            origins: Vec::new(),
        }
    }
}

/// Which names of the GenAI semantic conventions the OTLP export's metrics
/// and spans carry (docs/metrics.md, "OpenTelemetry").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GenAiNames {
    /// Those of semantic-conventions v1.41.0, the last release that held
    /// them: the default until the conventions are declared stable.
    #[default]
    Released,
    /// The newest (`gen_ai_latest_experimental`).
    Latest,
    /// Both, for a migration (`gen_ai_latest_experimental/dup`).
    Both,
}

impl GenAiNames {
    /// What `OTEL_SEMCONV_STABILITY_OPT_IN` asks for: a comma-separated
    /// list, in which only the GenAI entries count (`/dup` wins, as
    /// `http/dup` does for HTTP's names); any other entry is another
    /// domain's, and ignored, as the specification asks.
    pub fn from_opt_in(list: Option<&str>) -> Self {
        let entries = || list.unwrap_or_default().split(',').map(str::trim);
        if entries().any(|e| e == "gen_ai_latest_experimental/dup") {
            Self::Both
        } else if entries().any(|e| e == "gen_ai_latest_experimental") {
            Self::Latest
        } else {
            Self::Released
        }
    }

    /// Whether the names of v1.41.0 are exported.
    pub fn released(self) -> bool {
        matches!(self, Self::Released | Self::Both)
    }

    /// Whether the newest names are exported.
    pub fn latest(self) -> bool {
        matches!(self, Self::Latest | Self::Both)
    }
}

/// Where and how each signal is sent; `None`: not exported.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OtlpExports {
    pub metrics: Option<OtlpExport>,
    pub traces: Option<OtlpExport>,
}

/// One signal's export.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtlpExport {
    /// For HTTP/protobuf the URL the exports are posted to (the signal's
    /// path included); for gRPC the collector's `http://host:port`.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Sent with every export (HTTP headers, or gRPC metadata).
    #[serde(serialize_with = "show::redacted")]
    pub headers: OtlpHeaders,
    #[serde(serialize_with = "show::secs")]
    pub timeout: Duration,
    /// Where its endpoint, protocol, headers and timeout came from.
    #[serde(rename = "from", serialize_with = "show::export_origins")]
    pub origins: [&'static str; 4],
}

/// Headers sent with every export: a collector's credentials. Their
/// values are never shown, logged or printed (`Debug` and `/config` show
/// the names, each with `<redacted>`).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (`/v1/metrics`, `/v1/traces`).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// gRPC.
    #[serde(rename = "grpc")]
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
    /// Take part in the client's trace as a span of its own: the upstream is
    /// sent a `traceparent` with the client's trace id and flags and the
    /// proxy's span as the parent (`tracestate` unchanged), so the upstream's
    /// spans (vLLM, SGLang, TGI) hang under the proxy's. A boolean: both
    /// headers go to the upstream as the client sent them.
    #[serde(deserialize_with = "kind::boolean")]
    pub join: bool,
    /// Start a trace for a metered request that comes without a valid
    /// `traceparent`: a new trace id, sampled, with the proxy's span as its
    /// root, sent to the upstream in `traceparent` (a `tracestate` without a
    /// valid `traceparent` is dropped). A boolean.
    #[serde(deserialize_with = "kind::boolean")]
    pub start: bool,
}

/// `scrape`: how each route's `engine_metrics` and `gpu_metrics` pages are
/// fetched, off the forwarding path. All of it applies on reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScrapeSettings {
    /// How often each page is fetched, where a route gives no
    /// `scrape_interval`. A duration.
    #[serde(with = "kind::duration")]
    pub interval: Duration,
    /// How long one fetch may take, the body read included; past it the scrape
    /// fails. Below the interval of every route scraped, so that a slow page
    /// never has two fetches in flight. A duration.
    #[serde(with = "kind::duration")]
    pub timeout: Duration,
    /// Largest page read; a larger one fails the scrape, so a runaway exporter
    /// cannot take the proxy's memory. A size.
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

/// `cost`: how the routes' GPU time is priced (each route's
/// `gpu_hourly_cost`, which applies on reload, from the reload on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostSettings {
    /// The currency of every `gpu_hourly_cost`, the `currency` label of the
    /// cost families: `USD`, `EUR`, `credits`... 1 to 16 letters, digits,
    /// `_` or `-`. Applied at start only: a reload never relabels the cost
    /// counters.
    #[serde(deserialize_with = "kind::currency")]
    pub currency: String,
}

impl Default for CostSettings {
    fn default() -> Self {
        Self {
            currency: "USD".to_owned(),
        }
    }
}

/// `admin`: the admin listener (`/metrics`, `/healthz`, `/readyz`,
/// `/slo`, `/config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminSettings {
    /// Most client connections open at once on the admin listener; more wait in
    /// the kernel's accept queue. A count, at least 1: the listener's own
    /// share, so that whatever visits the admin port cannot take the file
    /// descriptors forwarding needs. Applied at start only.
    #[serde(deserialize_with = "kind::admin_connections")]
    pub max_connections: usize,
    /// Address (`IP:port`) of the admin listener, loopback unless given, so
    /// that metrics are not exposed by accident. Must differ from `listen`.
    /// `--admin-listen` replaces it.
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
            listen: DEFAULT_ADMIN_LISTEN,
            web_config_file: None,
            web: None,
        }
    }
}

/// `proxy`: forwarding behaviour shared by all routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProxySettings {
    /// Largest request body read ahead to learn `model` and `stream`; a larger
    /// body is forwarded as it streams in and metered with an unknown model. A
    /// size: bytes (`4194304`) or with a unit (`512KiB`, `4MiB`, `100kB`).
    #[serde(rename = "max_request_body", deserialize_with = "kind::size")]
    pub max_request_body_bytes: usize,
    /// Largest request body held whole so that the request can be sent again if
    /// the upstream closes a reused connection under it (the keep-alive race);
    /// an unmetered request's body is read ahead up to this (a larger one is
    /// forwarded as it streams in and is never sent twice). A size.
    #[serde(rename = "max_retry_body", deserialize_with = "kind::size")]
    pub max_retry_body_bytes: usize,
    /// Largest request head (request line and headers) a client may send;
    /// a larger one is answered `431`. A size, from `8KiB` (the default) to
    /// `1MiB`: a client connection's read buffer grows to hold a head up to
    /// this size. Applied at start only.
    #[serde(
        rename = "max_request_head",
        deserialize_with = "kind::request_head_size"
    )]
    pub max_request_head_bytes: usize,
    /// How long a client connection may take to send a request head, from when
    /// it opens or its last response ended: a connection that sends nothing,
    /// trickles its head, or sits idle between requests longer is closed. A
    /// duration. Applied at start only.
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
    /// Share of `max_connections` open at which the listener is overloaded and
    /// sheds connections that have not reached the upstream. A percentage, from
    /// `1%` to `100%`; held as a share (0 to 1). Applied at start only.
    #[serde(deserialize_with = "kind::percentage")]
    pub overload_threshold: f64,
    /// While overloaded, how long a connection that has not reached the
    /// upstream may wait for its request head or read-ahead body. A duration.
    /// Applied at start only.
    #[serde(with = "kind::duration")]
    pub overload_timeout: Duration,
    /// Idle kept-alive connections kept per upstream for later requests; beyond
    /// this many, a connection whose response ended is closed. A count, `0`
    /// keeps none.
    #[serde(deserialize_with = "kind::idle_count")]
    pub upstream_idle_connections: usize,
    /// How long an idle upstream connection is kept. A duration.
    #[serde(with = "kind::duration")]
    pub upstream_idle_timeout: Duration,
    /// Largest non-streamed response body kept (as shared references to the
    /// forwarded frames, not copies) to read its usage at the end. A size.
    #[serde(rename = "max_response_body", deserialize_with = "kind::size")]
    pub max_response_body_bytes: usize,
    /// Add `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host` to
    /// forwarded requests.
    #[serde(deserialize_with = "kind::boolean")]
    pub x_forwarded: bool,
    /// Clients (addresses or CIDR ranges: `10.0.0.0/8`, `::1`) whose
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` are passed on, as another
    /// proxy in front sets them. From any other client they are replaced.
    /// Default: none.
    #[serde(serialize_with = "show::displays", deserialize_with = "kind::ip_nets")]
    pub trusted_proxies: Vec<IpNet>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish before
    /// the process exits anyway. A duration (`500ms`, `30s`, `10m`).
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

impl Config {
    /// A warning when the admin listener is open to more than this host
    /// with nobody asked for credentials: whoever reaches the address reads
    /// the metrics, the configuration and the live page. Said at start-up
    /// and by `tokenmeter check`.
    pub fn admin_exposure(&self) -> Option<String> {
        let guarded = self
            .admin
            .web
            .as_ref()
            .is_some_and(|web| web.requires_auth());
        (!self.admin.listen.ip().is_loopback() && !guarded).then(|| {
            format!(
                "the admin listener on {} is reachable beyond this host and asks for no credentials: anyone who reaches it reads /metrics, /config and /slo (set admin.web_config_file with basic_auth_users, or listen on loopback)",
                self.admin.listen
            )
        })
    }
}
