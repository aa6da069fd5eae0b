//! The serde types of the file's top and of the SLO files. The main
//! file's sections are runtime types (`ProxySettings`, `Route`...) and its
//! few other keys typed here; an SLO file's values are kept as the text
//! written with its location. The `///` comments on the fields are the
//! user documentation of each key (`docs/configuration.md` is written from
//! them).

use serde::Deserialize;

use super::super::kind;

pub(crate) use super::super::{
    AdminSettings, Buckets, CostSettings, GpuSelect, LabelBounds, MetricsSettings, OtlpSettings,
    ProxySettings, Route, RouteMatch, ScrapeSettings, TenantLabels, Timeouts, TraceSettings,
};

pub(crate) use super::super::located::{Entries, List, Pos, Spanned, location_pos, pos};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawConfig {
    /// Address (`IP:port`) the proxy accepts client traffic on. `--listen`
    /// replaces it.
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
    pub routes: Option<Spanned<Vec<Spanned<Route>>>>,
    /// Files defining SLO classes: paths or glob patterns (`slo/*.yaml`),
    /// relative to this file's directory. Each path must exist and each
    /// pattern must match at least one file. Default: none, and then a
    /// route's `slo` is only a label value.
    pub slo_files: Option<List>,
    /// W3C Trace Context (`traceparent`, `tracestate`) of metered requests.
    pub trace_context: Option<TraceSettings>,
    /// OpenTelemetry export (OTLP) of the metrics and of one span per
    /// metered request. Default: off.
    pub otlp: Option<OtlpSettings>,
    /// TLS on the proxy listener: its certificate and key, and optionally
    /// the authorities client certificates are verified against. Default:
    /// plain HTTP.
    pub tls: Option<Spanned<crate::config::server_tls::RawServerTls>>,
    /// How the routes' `engine_metrics` and `gpu_metrics` pages are
    /// scraped.
    pub scrape: Option<ScrapeSettings>,
    /// How the routes' GPU time is priced.
    pub cost: Option<CostSettings>,
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
    #[serde(default, deserialize_with = "kind::text")]
    pub description: Option<String>,
    /// Compliance window of the targets (error budget period). A duration,
    /// default `28d`.
    #[serde(default, deserialize_with = "kind::optional_duration")]
    pub window: Option<std::time::Duration>,
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
    #[serde(default, deserialize_with = "kind::flag")]
    pub per_tenant_alerts: bool,
    /// Leave slow readers' requests (see `metrics.slow_reader_share`) out
    /// of the class's judging: they are neither good nor bad. A boolean,
    /// default `false`.
    #[serde(default, deserialize_with = "kind::flag")]
    pub exclude_slow_readers: bool,
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
