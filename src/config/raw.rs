//! Stage one of loading: the YAML document read into serde types that mirror
//! it, plus every key the types do not know.
//!
//! Every value that needs checking (addresses, sizes, durations, URLs,
//! methods, names, numbers, booleans) is kept here as the text written in the
//! file, with its location ([`Spanned`]). That way one bad value does not stop
//! reading, and stage two ([`super::load`]) can report every problem at once.
//! The only errors this stage gives are YAML syntax errors and values of the
//! wrong shape (a list where a mapping belongs), which serde cannot get past.
//!
//! Unknown keys are not rejected with `deny_unknown_fields`, which stops at the
//! first one: the deserializer is wrapped in `serde_ignored`, which reports the
//! path of every key no type claimed, and each path is then located by a
//! second, structure-only pass over the document ([`Node`]).
//!
//! This is the only file that knows the YAML crate. It must not check values,
//! apply defaults, or be visible outside `config`.
//!
//! The `///` comments on the fields below are the user documentation of each
//! key (`docs/configuration.md` is written from them).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
pub(super) use serde_saphyr::Spanned;

/// A YAML list of scalars, each kept as text with its location, the list
/// itself with its own.
pub(super) type List = Spanned<Vec<Spanned<String>>>;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawConfig {
    /// Address (`IP:port`) the proxy accepts client traffic on.
    /// Default `0.0.0.0:8080`.
    pub listen: Option<Spanned<String>>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin: Option<RawAdmin>,
    /// Forwarding behaviour shared by all routes.
    pub proxy: Option<RawProxy>,
    /// Metric naming, label bounds and histogram buckets.
    pub metrics: Option<RawMetrics>,
    /// Routes, in match order: the first route whose `match` accepts a request
    /// handles it. Required, at least one.
    pub routes: Option<Spanned<Vec<Spanned<RawRoute>>>>,
    /// Files defining SLO classes: paths or glob patterns (`slo/*.yaml`),
    /// relative to this file's directory. Each path must exist and each
    /// pattern must match at least one file. Default: none, and then a
    /// route's `slo` is only a label value.
    pub slo_files: Option<List>,
    /// W3C Trace Context (`traceparent`, `tracestate`) of metered requests.
    /// A client's valid `traceparent` names the request's trace in the
    /// access log (`trace_id`) whatever these say.
    pub trace_context: Option<RawTraceContext>,
    /// OpenTelemetry export (OTLP) of the metrics and of one span per
    /// metered request. Default: off.
    pub otlp: Option<RawOtlp>,
}

/// `otlp`: where and how the OpenTelemetry export goes.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawOtlp {
    /// The collector: `http://host:port` (OTLP/HTTP: the signals' paths
    /// `/v1/metrics` and `/v1/traces` are added; gRPC: as it is).
    /// Required.
    pub endpoint: Option<Spanned<String>>,
    /// `http/protobuf` (default) or `grpc`.
    pub protocol: Option<Spanned<String>>,
    /// Export the metrics (boolean, default `true`).
    pub metrics: Option<Spanned<String>>,
    /// Export one span per metered request (boolean, default `true`).
    pub traces: Option<Spanned<String>>,
    /// How often the metrics are exported. Default `60s`.
    pub metrics_interval: Option<Spanned<String>>,
    /// The longest a finished span waits for its batch. Default `5s`.
    pub traces_delay: Option<Spanned<String>>,
    /// How long one export may take, retries included. Default `10s`.
    pub timeout: Option<Spanned<String>>,
    /// Finished requests waiting for the exporter; past it they are
    /// dropped and counted. Default 2048.
    pub queue: Option<Spanned<String>>,
    /// Most spans in one export. Default 512.
    pub max_batch: Option<Spanned<String>>,
    /// The `service.name` of the exported resource. Default `tokenmeter`.
    pub service_name: Option<Spanned<String>>,
}

/// `trace_context`: what the proxy does with the W3C trace context of
/// metered requests.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawTraceContext {
    /// Take part in the client's trace as a span of its own: the upstream
    /// is sent a `traceparent` with the client's trace id and flags and the
    /// proxy's span as the parent (`tracestate` unchanged), so the
    /// upstream's spans (vLLM, SGLang, TGI) hang under the proxy's. A
    /// boolean, default `false`: both headers go to the upstream as the
    /// client sent them.
    pub join: Option<Spanned<String>>,
    /// Start a trace for a metered request that comes without a valid
    /// `traceparent`: a new trace id, sampled, with the proxy's span as its
    /// root, sent to the upstream in `traceparent` (a `tracestate` without
    /// a valid `traceparent` is dropped). A boolean, default `false`.
    pub start: Option<Spanned<String>>,
}

/// `admin`: the admin listener.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawAdmin {
    /// Address (`IP:port`) of the admin listener. Default `127.0.0.1:9464`
    /// (loopback, so metrics are not exposed by accident). Must differ from
    /// `listen`.
    pub listen: Option<Spanned<String>>,
    /// Most client connections open at once on the admin listener; more
    /// wait in the kernel's accept queue. A count, at least 1. Default `64`:
    /// whatever visits the admin port cannot take the file descriptors
    /// forwarding needs. Applied at start only.
    pub max_connections: Option<Spanned<String>>,
}

/// `proxy`: forwarding behaviour shared by all routes.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawProxy {
    /// Largest request body read ahead to learn `model` and `stream`; a larger
    /// body is forwarded as it streams in and metered with an unknown model.
    /// A size: bytes (`4194304`) or with a unit (`512KiB`, `4MiB`, `100kB`).
    /// Default `4MiB`.
    pub max_request_body: Option<Spanned<String>>,
    /// Largest request body held whole so that the request can be sent
    /// again if the upstream closes a reused connection under it (the
    /// keep-alive race); an unmetered request's body is read ahead up to
    /// this. A size, default `64KiB`.
    pub max_retry_body: Option<Spanned<String>>,
    /// Largest request head (request line and headers) a client may send;
    /// a larger one is answered 431. A size, from `8KiB` (the default) to
    /// `1MiB`. Applied at start only.
    pub max_request_head: Option<Spanned<String>>,
    /// How long a client connection may take to send a request head, from
    /// when it opens or its last response ended: a connection that sends
    /// nothing, trickles its head, or sits idle between requests longer is
    /// closed. A duration, default `30s`. Applied at start only.
    pub request_head_timeout: Option<Spanned<String>>,
    /// Most client connections open at once on the proxy listener; more
    /// wait in the kernel's accept queue. A count, at least 1. Default:
    /// from the process's open-file limit, half of what is left after the
    /// admin listener's share and a reserve of 64 (each proxied connection
    /// can hold an upstream connection too). Applied at start only.
    pub max_connections: Option<Spanned<String>>,
    /// Share of `max_connections` open at which the listener is overloaded
    /// and sheds connections that have not reached the upstream. A
    /// percentage, from `1%` to `100%`, default `90%`. Applied at start only.
    pub overload_threshold: Option<Spanned<String>>,
    /// While overloaded, how long a connection that has not reached the
    /// upstream may wait for its request head or read-ahead body. A
    /// duration, default `3s`. Applied at start only.
    pub overload_timeout: Option<Spanned<String>>,
    /// Idle kept-alive connections kept per upstream. A count, `0` keeps
    /// none. Default `256`.
    pub upstream_idle_connections: Option<Spanned<String>>,
    /// How long an idle upstream connection is kept. A duration, default
    /// `90s`.
    pub upstream_idle_timeout: Option<Spanned<String>>,
    /// Largest non-streamed response body kept to read its usage at the end.
    /// A size, default `16MiB`.
    pub max_response_body: Option<Spanned<String>>,
    /// Add `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host` to
    /// forwarded requests. Default `true`.
    pub x_forwarded: Option<Spanned<String>>,
    /// Clients (addresses or CIDR ranges: `10.0.0.0/8`, `::1`) whose
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` are passed on, as another
    /// proxy in front sets them. From any other client they are replaced.
    /// Default: none.
    pub trusted_proxies: Option<List>,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the process exits anyway. A duration (`500ms`, `30s`, `10m`).
    /// Default `30s`.
    pub shutdown_grace: Option<Spanned<String>>,
}

/// `metrics`: metric naming, label bounds and histogram buckets.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawMetrics {
    /// Prefix of the domain metrics (`llm` gives
    /// `llm_time_to_first_token_seconds`). Matches `[a-zA-Z_][a-zA-Z0-9_]*`.
    /// Default `llm`.
    pub namespace: Option<Spanned<String>>,
    /// How values of the `model` label are bounded.
    pub models: Option<RawModels>,
    /// How values of the `tenant` label are bounded, for routes with a
    /// `tenant`.
    pub tenants: Option<RawTenants>,
    /// Largest token count accepted from an upstream's usage report, per
    /// field. A report with a larger count, or with a count that is not a
    /// whole number (negative, fractional, a string), is not counted: the
    /// request's metering degrades (`implausible_usage` parse error) and
    /// the token counters never take a bogus value. A count, at least 1.
    /// Default `10000000`.
    pub max_usage_tokens: Option<Spanned<String>>,
    /// Histogram bucket upper bounds, per metric. A metric left out keeps its
    /// default buckets.
    pub buckets: Option<RawBuckets>,
}

/// `metrics.models`: bounds on the `model` label, so clients sending random
/// model names cannot blow up the number of series.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawModels {
    /// Only these model names are used as label values; any other is reported
    /// as `other`. Non-empty names, no duplicates. Default: no allow-list.
    pub allow: Option<List>,
    /// Without `allow`: the first this-many distinct model names that the
    /// upstream answered with a 2xx are used as label values (a name is
    /// `other` until then, so names the upstream refuses never take a
    /// slot); later new names are reported as `other`. At least 1. Default
    /// `100`.
    pub max_distinct: Option<Spanned<String>>,
}

/// `metrics.tenants`: bounds on the `tenant` label, so clients sending
/// random tenant names cannot blow up the number of series.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawTenants {
    /// Only these tenant names are used as label values; any other is
    /// reported as `other`. Non-empty names, no duplicates. Default: no
    /// allow-list.
    pub allow: Option<List>,
    /// Without `allow`: the first this-many distinct tenant names that the
    /// upstream answered with a 2xx are used as label values (a name is
    /// `other` until then); later new names are reported as `other`. At
    /// least 1. Default `100`.
    pub max_distinct: Option<Spanned<String>>,
    /// Also label the latency and token-count histograms by tenant (the
    /// counters always are). Each tenant then has a histogram series of its
    /// own per route, model and class: many more series. A boolean,
    /// default `false`. Applied at start only.
    pub histograms: Option<Spanned<String>>,
}

/// `metrics.buckets`: histogram bucket upper bounds. Each list is non-empty,
/// of finite numbers greater than zero, strictly increasing.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawBuckets {
    /// Time to first token, in seconds.
    pub time_to_first_token: Option<List>,
    /// Time until the upstream's response headers arrive, in seconds.
    pub time_to_response_headers: Option<List>,
    /// Time per output token after the first, in seconds.
    pub time_per_output_token: Option<List>,
    /// Time between two consecutive token events, in seconds.
    pub inter_token_latency: Option<List>,
    /// End-to-end request latency, in seconds.
    pub e2e_request_latency: Option<List>,
    /// Output (completion) tokens per request.
    pub output_tokens: Option<List>,
    /// Input (prompt) tokens per request.
    pub input_tokens: Option<List>,
}

/// `routes[i]`: which requests a route takes and where they go.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawRoute {
    /// Unique route name, used as the `route` label. Required; matches
    /// `[a-zA-Z0-9_.:-]+`.
    pub name: Option<Spanned<String>>,
    /// Which requests this route accepts; all given conditions must hold.
    /// Default: every request (`path_prefix: /`).
    #[serde(rename = "match")]
    pub matcher: Option<Spanned<RawMatch>>,
    /// Upstream base URL: `http` or `https`, with a host, without user info,
    /// query or fragment. Its path is kept as a base path (without a trailing
    /// `/`) that request paths are appended to. Required, unless `--upstream`
    /// is given on the command line, which replaces it in every route.
    pub upstream: Option<Spanned<String>>,
    /// Which requests are metered: `auto` (requests to known inference
    /// endpoints such as `.../chat/completions` and `.../completions`),
    /// `openai` (every request, read as OpenAI chat/completions) or `none`
    /// (forward only). Default `auto`.
    pub protocol: Option<Spanned<String>>,
    /// Upstream timeouts.
    pub timeouts: Option<RawTimeouts>,
    /// TLS towards an `https` upstream.
    pub tls: Option<Spanned<RawTls>>,
    /// Forward the client's `Host` header instead of the upstream's authority.
    /// Default `false`.
    pub preserve_host: Option<Spanned<String>>,
    /// Remove the matched `path_prefix` before appending the request path to
    /// the upstream's base path. Default `false`.
    pub strip_prefix: Option<Spanned<String>>,
    /// Most requests of this route in flight at once (from the request head
    /// to the end of the response body). Past it the proxy answers `503`
    /// with `retry-after: 1` at once, without reading the request or
    /// calling the upstream. A whole number, at least 1. Default: no limit.
    pub max_in_flight: Option<Spanned<String>>,
    /// The route's SLO class, used as the `slo` label value (empty when
    /// unset). With `slo_files`, it must name a class defined there; without,
    /// any label value `[a-zA-Z0-9_.:-]+` is accepted and nothing is judged.
    pub slo: Option<Spanned<String>>,
    /// SLO class per model name (the request body's `model`, as sent), which
    /// takes precedence over `slo`: `{llama-3-8b: chat, codestral: code}`.
    pub slo_by_model: Option<Spanned<Entries>>,
    /// Request header a client may use to declare its SLO class
    /// (`x-slo-class`). It takes precedence over `slo_by_model` and `slo`;
    /// values that name no defined class are ignored (the route's class
    /// applies), so the label stays bounded. Requires `slo_files`.
    pub slo_header: Option<Spanned<String>>,
    /// Whom each request is attributed to, the `tenant` label of the token
    /// and request counters and the access log's `tenant`: a request
    /// header's value (`header`) or the caller's API key mapped to a name
    /// (`api_keys`), one of the two. Default: no tenant (the label is
    /// empty).
    pub tenant: Option<Spanned<RawTenant>>,
}

/// `routes[i].tenant`: where a request's tenant comes from.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawTenant {
    /// The request header that names the tenant (`x-tenant`, `x-team`): its
    /// value, trimmed, is the tenant. A request without it is `unknown`.
    pub header: Option<Spanned<String>>,
    /// Tenants by API key: the key a request carries is hashed (SHA-256) and
    /// looked up in `keys`. The configuration holds only the hashes.
    pub api_keys: Option<RawApiKeys>,
}

/// `routes[i].tenant.api_keys`: tenants by API key.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawApiKeys {
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
pub(super) struct RawSloFile {
    /// The classes this file defines. Required, at least one.
    pub classes: Option<Spanned<Vec<Spanned<RawSloClass>>>>,
}

/// `classes[i]`: one SLO class.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawSloClass {
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
}

/// `classes[i].objectives`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawObjectives {
    /// Time to first token (streamed responses).
    pub ttft: Option<Spanned<Entries>>,
    /// Time per output token after the first (streamed responses).
    pub tpot: Option<Spanned<Entries>>,
    /// End-to-end request latency.
    pub e2el: Option<Spanned<Entries>>,
}

/// `classes[i].goodput`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawGoodput {
    /// The objectives a request must all meet to be good. Default: every
    /// objective of the class.
    pub require: Option<List>,
    /// Target share of good requests among judged ones, a ratio in (0, 1)
    /// (`0.9`). Default: none (goodput is counted but has no alerts).
    /// Required for a class without objectives.
    pub target: Option<Spanned<String>>,
}

/// A mapping whose keys the user chooses (model names, `p95`), in file
/// order, each value kept as text with its location. Stage two decides which
/// keys are allowed, and points at the value's location for a bad key (the
/// same line): keys are plain strings because a located key cannot pass
/// through `serde_ignored`, which reads every key as text itself.
#[derive(Debug, Default)]
pub(super) struct Entries(pub Vec<(String, Spanned<String>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;

        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of keys to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Entries(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor)
    }
}

/// `routes[i].match`: which requests a route accepts.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawMatch {
    /// The request path starts with this (plain string prefix). Starts with
    /// `/`. Default `/`.
    pub path_prefix: Option<Spanned<String>>,
    /// The request's host, without port, compared case-insensitively.
    /// Default: any host.
    pub host: Option<Spanned<String>>,
    /// Accepted HTTP methods (case-insensitive, stored uppercase). Default:
    /// any method.
    pub methods: Option<List>,
}

/// `routes[i].timeouts`: upstream timeouts. Each is a duration greater than
/// zero.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawTimeouts {
    /// TCP (and TLS) connection set-up. Default `5s`.
    pub connect: Option<Spanned<String>>,
    /// From sending the request to receiving the response head. Non-streamed
    /// responses send their head when generation is done, so this is long.
    /// Default `10m`.
    pub response_headers: Option<Spanned<String>>,
    /// Longest silence between two response body frames, reset on every frame:
    /// a long healthy stream never times out, a stalled one does. Default `5m`.
    pub idle: Option<Spanned<String>>,
    /// Longest silence while the client sends its request body: before its
    /// first byte and between any two of its frames. Past it the request is
    /// answered `408` (outcome `client_timeout`). Default `30s`.
    pub request_body: Option<Spanned<String>>,
    /// Longest time a request body may take to arrive up to what the proxy
    /// reads ahead of forwarding it (to learn `model`, or to hold it for a
    /// retry), from the request head, however steadily it trickles. Past it
    /// the request is answered `408` (outcome `client_timeout`). Default
    /// `60s`.
    pub request_body_total: Option<Spanned<String>>,
}

/// `routes[i].tls`: how an `https` upstream's certificate is verified.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawTls {
    /// PEM file of the certificate authorities to trust for this upstream,
    /// instead of the web PKI roots built in (for servers with an internal
    /// or self-signed CA). Relative to the directory of the config file;
    /// read when the configuration is loaded or reloaded. Default: the web
    /// PKI roots.
    pub ca_file: Option<Spanned<String>>,
}

/// A 1-based position in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pos {
    pub line: u64,
    pub column: u64,
}

/// Where a spanned value is used in the file (for an alias, the alias, not the
/// anchor), or `None` when the YAML crate could not tell.
pub(super) fn pos<T>(value: &Spanned<T>) -> Option<Pos> {
    location_pos(&value.referenced)
}

fn location_pos(location: &serde_saphyr::Location) -> Option<Pos> {
    (location.line() > 0).then(|| Pos {
        line: location.line(),
        column: location.column(),
    })
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    Key(String),
    Index(usize),
}

/// A key path as users write it: `routes[1].timeouts.idle`.
pub(super) fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// A key in the file that no field claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnknownKey {
    /// Path of the key itself (its last segment is the key).
    pub path: Vec<Segment>,
    /// Where the key is written.
    pub pos: Option<Pos>,
    /// The keys allowed where it stands.
    pub expected: &'static [&'static str],
}

/// A file after stage one.
#[derive(Debug)]
pub(super) struct Document<T> {
    pub config: T,
    /// In file order.
    pub unknown: Vec<UnknownKey>,
}

/// The one error stage one can give: bad YAML, or a value of the wrong shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SyntaxError {
    pub pos: Option<Pos>,
    /// Key path of the value at `pos`, when one could be found (else empty).
    pub key: String,
    pub message: String,
}

/// Reads a main config file into raw types, collecting every unknown key.
pub(super) fn read(text: &str) -> Result<Document<RawConfig>, SyntaxError> {
    read_as(text, known_keys)
}

/// Reads an SLO file into raw types, collecting every unknown key.
pub(super) fn read_slo(text: &str) -> Result<Document<RawSloFile>, SyntaxError> {
    read_as(text, known_slo_keys)
}

fn read_as<T: de::DeserializeOwned>(
    text: &str,
    known_keys: fn(&[Segment]) -> &'static [&'static str],
) -> Result<Document<T>, SyntaxError> {
    let mut ignored: Vec<Vec<Segment>> = Vec::new();
    let result: Result<T, serde_saphyr::Error> =
        serde_saphyr::with_deserializer_from_str(text, |deserializer| {
            serde_ignored::deserialize(deserializer, |path| {
                if let Some(path) = key_path(&path) {
                    ignored.push(path);
                }
            })
        });
    let config = result.map_err(|error| syntax_error(text, &error))?;

    let unknown = if ignored.is_empty() {
        Vec::new()
    } else {
        // The second pass only runs when there is something to locate. It
        // cannot fail where the first pass succeeded, except on keys that are
        // not plain scalars inside an unknown key's value; then the keys are
        // still reported, without a position.
        let tree = serde_saphyr::from_str::<Spanned<Node>>(text).ok();
        let mut unknown: Vec<UnknownKey> = ignored
            .into_iter()
            .map(|path| {
                let pos = tree.as_ref().and_then(|tree| key_pos(tree, &path));
                let parent = &path[..path.len().saturating_sub(1)];
                UnknownKey {
                    pos,
                    expected: known_keys(parent),
                    path,
                }
            })
            .collect();
        unknown.sort_by_key(|key| (key.pos.is_none(), key.pos));
        unknown
    };
    Ok(Document { config, unknown })
}

/// Turns a path reported by `serde_ignored` into the path a user wrote, or
/// `None` for the bookkeeping entries that [`Spanned`] itself produces.
///
/// `Spanned<T>` is read as a newtype around a synthetic mapping: a marker key
/// (which it skips, so `serde_ignored` reports it) and the real value under
/// `value`. Option and newtype steps are not written in the file.
fn key_path(path: &serde_ignored::Path<'_>) -> Option<Vec<Segment>> {
    let mut chain = Vec::new();
    let mut step = Some(path);
    while let Some(current) = step {
        chain.push(current);
        step = match current {
            serde_ignored::Path::Root => None,
            serde_ignored::Path::Seq { parent, .. }
            | serde_ignored::Path::Map { parent, .. }
            | serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => Some(*parent),
        };
    }
    let mut segments = Vec::new();
    let mut in_spanned = false;
    for current in chain.into_iter().rev() {
        match current {
            serde_ignored::Path::Root => {}
            serde_ignored::Path::Some { .. } | serde_ignored::Path::NewtypeVariant { .. } => {}
            serde_ignored::Path::NewtypeStruct { .. } => {
                in_spanned = true;
                continue;
            }
            serde_ignored::Path::Seq { index, .. } => segments.push(Segment::Index(*index)),
            serde_ignored::Path::Map { key, .. } => {
                if key.starts_with("__serde_saphyr") {
                    return None;
                }
                if !(in_spanned && key == "value") {
                    segments.push(Segment::Key(key.clone()));
                }
            }
        }
        in_spanned = false;
    }
    Some(segments)
}

/// The keys of `path`, without list indices.
fn keys_of(path: &[Segment]) -> Vec<&str> {
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Key(key) => Some(key.as_str()),
            Segment::Index(_) => None,
        })
        .collect()
}

/// The keys allowed in the mapping at `parent` of an SLO file.
fn known_slo_keys(parent: &[Segment]) -> &'static [&'static str] {
    match keys_of(parent).as_slice() {
        [] => fields_of::<RawSloFile>(),
        ["classes"] => fields_of::<RawSloClass>(),
        ["classes", "objectives"] => fields_of::<RawObjectives>(),
        ["classes", "goodput"] => fields_of::<RawGoodput>(),
        _ => &[],
    }
}

/// The keys allowed in the mapping at `parent`, read from the serde derive
/// itself so the list cannot drift from the types.
fn known_keys(parent: &[Segment]) -> &'static [&'static str] {
    match keys_of(parent).as_slice() {
        [] => fields_of::<RawConfig>(),
        ["admin"] => fields_of::<RawAdmin>(),
        ["proxy"] => fields_of::<RawProxy>(),
        ["metrics"] => fields_of::<RawMetrics>(),
        ["trace_context"] => fields_of::<RawTraceContext>(),
        ["otlp"] => fields_of::<RawOtlp>(),
        ["metrics", "models"] => fields_of::<RawModels>(),
        ["metrics", "tenants"] => fields_of::<RawTenants>(),
        ["metrics", "buckets"] => fields_of::<RawBuckets>(),
        ["routes"] => fields_of::<RawRoute>(),
        ["routes", "match"] => fields_of::<RawMatch>(),
        ["routes", "timeouts"] => fields_of::<RawTimeouts>(),
        ["routes", "tls"] => fields_of::<RawTls>(),
        ["routes", "tenant"] => fields_of::<RawTenant>(),
        ["routes", "tenant", "api_keys"] => fields_of::<RawApiKeys>(),
        _ => &[],
    }
}

/// The field names a derived `Deserialize` struct asks for.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(FieldsProbe) {
        Err(ProbeError(Some(fields))) => fields,
        _ => &[],
    }
}

/// A deserializer that only records the field list of the struct asked for.
struct FieldsProbe;

#[derive(Debug)]
struct ProbeError(Option<&'static [&'static str]>);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field probe")
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        ProbeError(None)
    }
}

impl<'de> Deserializer<'de> for FieldsProbe {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, ProbeError> {
        Err(ProbeError(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ProbeError> {
        Err(ProbeError(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The document's shape with locations and nothing else: used to find where
/// a key or a value is written.
#[derive(Debug)]
enum Node {
    Map(Vec<(Spanned<KeyText>, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i128<E>(self, _: i128) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u128<E>(self, _: u128) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_bytes<E>(self, _: &[u8]) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Node::Map(entries))
            }
        }

        deserializer.deserialize_any(NodeVisitor)
    }
}

/// A mapping key as text; keys that are not scalars never match a path.
#[derive(Debug)]
struct KeyText(Option<String>);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_bool<E>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_owned())))
            }
            fn visit_unit<E>(self) -> Result<KeyText, E> {
                Ok(KeyText(None))
            }
            fn visit_none<E>(self) -> Result<KeyText, E> {
                Ok(KeyText(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<KeyText, D::Error> {
                KeyText::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyText, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(KeyText(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyText, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(KeyText(None))
            }
        }

        // `deserialize_any`, not `deserialize_str`: a key that is a sequence
        // or mapping must not make the whole pass fail.
        deserializer.deserialize_any(KeyVisitor)
    }
}

/// Where the last key of `path` is written.
fn key_pos(tree: &Spanned<Node>, path: &[Segment]) -> Option<Pos> {
    let mut node = tree;
    let mut found = None;
    for segment in path {
        match (&node.value, segment) {
            (Node::Map(entries), Segment::Key(key)) => {
                let (k, v) = entries
                    .iter()
                    .rev()
                    .find(|(k, _)| k.value.0.as_deref() == Some(key.as_str()))?;
                found = pos(k);
                node = v;
            }
            (Node::Seq(items), Segment::Index(index)) => {
                node = items.get(*index)?;
                found = pos(node);
            }
            _ => return None,
        }
    }
    found
}

/// The path of the innermost value written at `at`, if any.
fn value_path_at(tree: &Spanned<Node>, at: Pos) -> Option<Vec<Segment>> {
    fn walk(
        node: &Spanned<Node>,
        at: Pos,
        path: &mut Vec<Segment>,
        best: &mut Option<Vec<Segment>>,
    ) {
        if pos(node) == Some(at) {
            *best = Some(path.clone());
        }
        match &node.value {
            Node::Map(entries) => {
                for (key, value) in entries {
                    if let Some(text) = &key.value.0 {
                        path.push(Segment::Key(text.clone()));
                        walk(value, at, path, best);
                        path.pop();
                    }
                }
            }
            Node::Seq(items) => {
                for (index, item) in items.iter().enumerate() {
                    path.push(Segment::Index(index));
                    walk(item, at, path, best);
                    path.pop();
                }
            }
            Node::Scalar => {}
        }
    }
    let mut best = None;
    walk(tree, at, &mut Vec::new(), &mut best);
    best.filter(|path| !path.is_empty())
}

fn syntax_error(text: &str, error: &serde_saphyr::Error) -> SyntaxError {
    use serde_saphyr::MessageFormatter;

    let pos = error.location().as_ref().and_then(location_pos);
    // The key is found when the document is well-formed YAML and only a value
    // has the wrong shape; a real syntax error leaves it empty.
    let key = pos
        .and_then(|at| {
            let tree = serde_saphyr::from_str::<Spanned<Node>>(text).ok()?;
            value_path_at(&tree, at)
        })
        .map(|path| dotted(&path))
        .unwrap_or_default();
    let message = serde_saphyr::UserMessageFormatter
        .format_message(error.without_snippet())
        .into_owned();
    SyntaxError { pos, key, message }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;

    fn unknown(text: &str) -> Vec<(String, Option<(u64, u64)>)> {
        let doc = read(text).expect("reads");
        doc.unknown
            .iter()
            .map(|key| (dotted(&key.path), key.pos.map(|pos| (pos.line, pos.column))))
            .collect()
    }

    #[test]
    fn known_keys_are_not_reported() {
        let text = "listen: 0.0.0.0:1\nadmin: {listen: 127.0.0.1:2}\nproxy:\n  x_forwarded: true\n\
                    metrics:\n  models: {allow: [a, b], max_distinct: 3}\n  buckets: {input_tokens: [1, 2]}\n\
                    routes:\n  - name: a\n    match: {path_prefix: /, methods: [GET]}\n    upstream: http://h\n    timeouts: {idle: 5s}\n";
        assert_eq!(unknown(text), vec![]);
    }

    #[test]
    fn unknown_keys_are_all_found_and_located() {
        let text = "listen: 0.0.0.0:1\nlisen: x\nroutes:\n  - name: a\n    timeouts:\n      idel: 5s\n  - name: b\n    match:\n      prefix: /x\n      host: h\n    extra: {deep: [1, 2]}\n";
        assert_eq!(
            unknown(text),
            vec![
                ("lisen".to_owned(), Some((2, 1))),
                ("routes[0].timeouts.idel".to_owned(), Some((6, 7))),
                ("routes[1].match.prefix".to_owned(), Some((9, 7))),
                ("routes[1].extra".to_owned(), Some((11, 5))),
            ]
        );
    }

    #[test]
    fn unknown_keys_in_flow_style_and_numbers_as_keys() {
        let text = "admin: {listen: 127.0.0.1:1, port: 2}\n1: x\n";
        assert_eq!(
            unknown(text),
            vec![
                ("admin.port".to_owned(), Some((1, 30))),
                ("1".to_owned(), Some((2, 1))),
            ]
        );
    }

    #[test]
    fn unknown_key_with_a_complex_key_inside_is_still_reported() {
        let doc = read("extra: {[a, b]: 1}\n").expect("reads");
        assert_eq!(doc.unknown.len(), 1);
        assert_eq!(dotted(&doc.unknown[0].path), "extra");
    }

    #[test]
    fn expected_keys_come_from_the_types() {
        assert_eq!(
            known_keys(&[
                Segment::Key("routes".into()),
                Segment::Index(3),
                Segment::Key("timeouts".into())
            ]),
            &[
                "connect",
                "response_headers",
                "idle",
                "request_body",
                "request_body_total"
            ]
        );
        assert!(known_keys(&[]).contains(&"routes"));
        assert!(known_keys(&[Segment::Key("routes".into()), Segment::Index(0)]).contains(&"match"));
    }

    #[test]
    fn wrong_shape_names_the_key() {
        let error =
            read("listen: 0.0.0.0:1\nroutes:\n  - name: a\n    match: [1]\n").expect_err("fails");
        assert_eq!(error.pos.map(|p| p.line), Some(4));
        assert_eq!(error.key, "routes[0].match");
        assert!(!error.message.contains('\n'), "{}", error.message);
    }

    #[test]
    fn syntax_error_has_a_line() {
        let error = read("listen: 0.0.0.0:1\nroutes: [\n").expect_err("fails");
        assert!(error.pos.is_some());
        assert_eq!(error.key, "");
    }

    #[test]
    fn dotted_paths() {
        let path = [
            Segment::Key("routes".into()),
            Segment::Index(1),
            Segment::Key("timeouts".into()),
            Segment::Key("idle".into()),
        ];
        assert_eq!(dotted(&path), "routes[1].timeouts.idle");
    }
}

/// `docs/configuration.md` is the reference of the keys: it must name every
/// key the types above accept, and no other, so it cannot drift from them.
#[cfg(test)]
mod reference {
    use std::collections::BTreeSet;

    use super::{Segment, known_keys};

    /// Every key of the config file, dotted (`routes` entries as
    /// `routes.name`), with whether it holds a mapping of keys of its own.
    fn accepted(path: &mut Vec<Segment>, out: &mut Vec<(String, bool)>) {
        for key in known_keys(path) {
            path.push(Segment::Key((*key).to_owned()));
            let dotted = path
                .iter()
                .filter_map(|s| match s {
                    Segment::Key(k) => Some(k.as_str()),
                    Segment::Index(_) => None,
                })
                .collect::<Vec<_>>()
                .join(".");
            let parent = !known_keys(path).is_empty();
            out.push((dotted, parent));
            accepted(path, out);
            path.pop();
        }
    }

    /// The keys in the first column of the reference's key tables, dotted
    /// as above (the `routes[i]` table's keys are relative to a route).
    fn documented() -> BTreeSet<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let keys = text
            .split("\n## Keys\n")
            .nth(1)
            .and_then(|rest| rest.split("\n### Protocols").next())
            .unwrap_or_default();
        let mut prefix = "";
        let mut out = BTreeSet::new();
        for line in keys.lines() {
            if line.starts_with("### ") {
                prefix = if line.contains("routes[i]") {
                    "routes."
                } else {
                    ""
                };
            }
            let Some(cell) = line.strip_prefix("| `") else {
                continue;
            };
            if let Some((key, _)) = cell.split_once('`') {
                out.insert(format!("{prefix}{key}"));
            }
        }
        out
    }

    /// A config that sets every key (two routes: a tenant by header and
    /// one by API key), read from the package's directory.
    const EVERY_KEY: &str = r#"
listen: 127.0.0.1:18080
admin: {listen: 127.0.0.1:19464, max_connections: 8}
proxy:
  max_request_body: 1MiB
  max_retry_body: 32KiB
  max_request_head: 16KiB
  request_head_timeout: 20s
  max_connections: 500
  overload_threshold: 80%
  overload_timeout: 2s
  upstream_idle_connections: 8
  upstream_idle_timeout: 30s
  max_response_body: 8MiB
  x_forwarded: true
  trusted_proxies: [10.0.0.0/8]
  shutdown_grace: 10s
metrics:
  namespace: llm
  models: {allow: [m1], max_distinct: 10}
  tenants: {allow: [team-a], max_distinct: 10, histograms: true}
  max_usage_tokens: 1000000
  buckets:
    time_to_first_token: [0.1, 1]
    time_to_response_headers: [0.1, 1]
    time_per_output_token: [0.01, 0.1]
    inter_token_latency: [0.01, 0.1]
    e2e_request_latency: [1, 10]
    output_tokens: [10, 100]
    input_tokens: [10, 100]
slo_files: [config/slo/chat.yaml]
trace_context: {join: true, start: false}
otlp:
  endpoint: http://127.0.0.1:4318
  protocol: http/protobuf
  metrics: true
  traces: true
  metrics_interval: 10s
  traces_delay: 1s
  timeout: 5s
  queue: 100
  max_batch: 10
  service_name: tm
routes:
  - name: a
    match: {path_prefix: /a/, host: a.example, methods: [POST]}
    upstream: https://127.0.0.1:8443/base
    protocol: openai
    timeouts: {connect: 1s, response_headers: 1m, idle: 1m, request_body: 10s, request_body_total: 30s}
    preserve_host: true
    strip_prefix: true
    tls: {ca_file: tests/data/tls/ca.pem}
    max_in_flight: 10
    slo: chat
    slo_by_model: {m1: chat}
    slo_header: x-slo-class
    tenant: {header: x-tenant}
  - name: b
    upstream: http://127.0.0.1:8000
    tenant:
      api_keys:
        headers: [authorization]
        keys: {"0000000000000000000000000000000000000000000000000000000000000000": team-a}
"#;

    /// `/config` shows every documented key under its own name (the JSON
    /// value at its dotted path is there; a route's keys in some route),
    /// and no key hash.
    #[test]
    fn the_configuration_in_force_shows_every_documented_key() {
        let config = crate::config::Config::parse(
            EVERY_KEY,
            "every-key.yaml",
            &crate::config::Overrides::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let shown = config.to_json();
        let find = |value: &serde_json::Value, dotted: &str| {
            dotted
                .split('.')
                .try_fold(value, |v, key| v.get(key))
                .is_some_and(|v| !v.is_null())
        };
        let missing: Vec<String> = documented()
            .into_iter()
            .filter(|key| match key.strip_prefix("routes.") {
                Some(key) => !shown["routes"]
                    .as_array()
                    .is_some_and(|routes| routes.iter().any(|r| find(r, key))),
                None => !find(&shown, key),
            })
            .collect();
        assert!(
            missing.is_empty(),
            "not shown by /config: {missing:?}\n{shown}"
        );
        assert!(!shown.to_string().contains("00000000000000"), "{shown}");
    }

    #[test]
    fn the_configuration_reference_names_every_key_and_no_other() {
        let mut keys = Vec::new();
        accepted(&mut Vec::new(), &mut keys);
        let documented = documented();
        assert!(documented.len() > 30, "{documented:?}");
        let missing: Vec<&str> = keys
            .iter()
            .filter(|(key, parent)| !parent && !documented.contains(key))
            .map(|(key, _)| key.as_str())
            .collect();
        assert!(
            missing.is_empty(),
            "keys missing from docs/configuration.md: {missing:?}"
        );
        let all: BTreeSet<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
        let unknown: Vec<&String> = documented
            .iter()
            .filter(|key| !all.contains(key.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "docs/configuration.md names keys the config does not accept: {unknown:?}"
        );
    }
}
