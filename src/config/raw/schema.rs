//! The serde types of the file's top and of the SLO files. The main
//! file's sections are runtime types (`ProxySettings`, `Route`...) and its
//! few other keys typed here; an SLO file's classes are read into
//! `slo::SloClass` (`super::super::slo_class`). The user documentation of
//! each key of the main file is its declaration (`super::super::keys`),
//! which is checked against the fields here.

use serde::Deserialize;

use super::super::kind;

pub(crate) use super::super::{
    AdminSettings, CostSettings, MetricsSettings, OtlpSettings, ProxySettings, Route,
    ScrapeSettings, TraceSettings,
};

pub(crate) use super::super::located::{List, Pos, Spanned, location_pos, pos};
pub(crate) use super::super::slo_class::{Class, GoodputKeys, ObjectivesKeys, SloClassKeys};

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
    /// How the requests of one session are told.
    pub sessions: Option<crate::config::SessionSettings>,
}

/// An SLO file: `classes`, a list of SLO classes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawSloFile {
    /// The classes this file defines. Required, at least one.
    pub classes: Option<Spanned<Vec<Spanned<Class>>>>,
}
