//! The configuration in force as JSON, for `GET /config` and `tokenmeter
//! check`: the runtime types serialized (`#[derive(Serialize)]` in
//! `config/mod.rs`), every key under the name the file gives it, so that
//! what an operator reads there is what they would write. Durations are in
//! seconds, sizes in bytes, the overload threshold and the slow reader share
//! shares (0 to 1), SLO classes as their files define them, plus what
//! loading found: the files read.
//!
//! This file holds only the `serialize_with` helpers the derives name and
//! the few types whose shown form is not their fields: a value shown as its
//! text (an address range, an upstream, a protocol), and the secrets.
//!
//! Secrets: the file holds none by construction (upstream URLs with
//! credentials, queries or fragments are refused when loading, no header
//! values are configured, and API keys are known only by their hashes);
//! the OTLP export's headers, which `OTEL_EXPORTER_OTLP_HEADERS` gives,
//! serialize as their names with `<redacted>` values ([`OtlpHeaders`]). The
//! hashes are not shown either: a route's API-key tenants ([`ApiKeys`]) show
//! the headers read, how many keys and which tenant names.

use std::path::PathBuf;
use std::time::Duration;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{
    ApiKeys, Config, IpNet, MetricsEndpoint, OtlpHeaders, OtlpProtocol, OtlpSettings, Protocol,
    Upstream,
};
use slo::SloClass;

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
    /// This configuration as JSON, keyed as the file is (objects' keys in
    /// order, as `serde_json`'s map keeps them).
    pub fn to_json(&self) -> Value {
        // The serializers here fail on nothing (every map key is text), so
        // the fallback is never taken.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A duration in seconds.
pub(super) fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A duration in seconds, when there is one.
pub(super) fn opt_secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    d.map(|d| d.as_secs_f64()).serialize(s)
}

/// Paths as text (also where they are not UTF-8).
pub(super) fn paths<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| p.display().to_string()))
}

/// A path as text.
pub(super) fn path<S: Serializer>(path: &std::path::Path, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&path.display())
}

/// How many there are, not what they are.
pub(super) fn count<T, S: Serializer>(items: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(items.len() as u64)
}

/// Pairs as a map (a later duplicate name wins, as in a YAML mapping).
pub(super) fn pairs<S: Serializer>(pairs: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

/// Pairs of static names (where each setting came from) as a map.
pub(super) fn static_pairs<S: Serializer>(
    pairs: &[(&'static str, &'static str)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().copied())
}

/// SLO class by operation, the operation by its name.
pub(super) fn operations<S: Serializer>(
    pairs: &[(meter::Operation, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().map(|(op, class)| (op.name(), class)))
}

pub(super) fn header<S: Serializer>(name: &http::HeaderName, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(name.as_str())
}

pub(super) fn opt_header<S: Serializer>(
    name: &Option<http::HeaderName>,
    s: S,
) -> Result<S::Ok, S::Error> {
    name.as_ref().map(http::HeaderName::as_str).serialize(s)
}

pub(super) fn methods<S: Serializer>(
    methods: &Option<Vec<http::Method>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match methods {
        Some(methods) => s.collect_seq(methods.iter().map(http::Method::as_str)),
        None => s.serialize_none(),
    }
}

/// Whether a route reads declared objectives, and the largest it accepts
/// (the defaults when it does not), as the file's two keys.
pub(super) fn slo_request<S: Serializer>(
    caps: &Option<slo::declared::Caps>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Max {
        #[serde(serialize_with = "secs")]
        ttft: Duration,
        #[serde(serialize_with = "secs")]
        tpot: Duration,
        #[serde(serialize_with = "secs")]
        e2el: Duration,
    }
    let [ttft, tpot, e2el] = caps.unwrap_or_default().0;
    let mut map = s.serialize_map(Some(2))?;
    map.serialize_entry("slo_request_headers", &caps.is_some())?;
    map.serialize_entry("slo_request_max", &Max { ttft, tpot, e2el })?;
    map.end()
}

/// SLO classes as their files define them.
pub(super) fn classes<S: Serializer>(classes: &[SloClass], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Class<'a> {
        name: &'a str,
        description: &'a str,
        #[serde(serialize_with = "secs")]
        window: Duration,
        objectives: Vec<Objective>,
        goodput: Goodput<'a>,
        per_tenant_alerts: bool,
        exclude_slow_readers: bool,
    }
    #[derive(Serialize)]
    struct Objective {
        objective: &'static str,
        #[serde(serialize_with = "secs")]
        threshold: Duration,
        target: f64,
    }
    #[derive(Serialize)]
    struct Goodput<'a> {
        require: Vec<&'static str>,
        target: &'a Option<f64>,
    }
    s.collect_seq(classes.iter().map(|c| {
        Class {
            name: &c.name,
            description: &c.description,
            window: c.window,
            objectives: c
                .objectives
                .iter()
                .map(|o| Objective {
                    objective: o.kind.as_str(),
                    threshold: o.threshold,
                    target: o.target,
                })
                .collect(),
            goodput: Goodput {
                require: c.goodput.require.iter().map(|k| k.as_str()).collect(),
                target: &c.goodput.target,
            },
            per_tenant_alerts: c.per_tenant_alerts,
            exclude_slow_readers: c.exclude_slow_readers,
        }
    }))
}

/// Where one export's endpoint, protocol, headers and timeout came from.
pub(super) fn export_origins<S: Serializer>(
    origins: &[&'static str; 4],
    s: S,
) -> Result<S::Ok, S::Error> {
    let names = ["endpoint", "protocol", "headers", "timeout"];
    s.collect_map(names.into_iter().zip(origins.iter().copied()))
}

/// Shown as text: `10.0.0.0/8`.
impl Serialize for IpNet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Shown as its URL.
impl Serialize for Upstream {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.url())
    }
}

/// Shown as its URL redacted, never as written.
impl Serialize for MetricsEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.shown)
    }
}

/// Shown as the name a route's `protocol` gives it.
impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Serialize for OtlpProtocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The headers' names, each with the value `<redacted>`: a collector's
/// credentials are never shown.
impl Serialize for OtlpHeaders {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.redacted())
    }
}

/// The headers read, how many keys and the tenant names, never a key hash.
impl Serialize for ApiKeys {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut tenants: Vec<&str> = self.tenants.values().map(String::as_str).collect();
        tenants.sort_unstable();
        tenants.dedup();
        let mut st = s.serialize_struct("ApiKeys", 3)?;
        st.serialize_field(
            "headers",
            &self
                .headers
                .iter()
                .map(http::HeaderName::as_str)
                .collect::<Vec<_>>(),
        )?;
        st.serialize_field("keys", &self.tenants.len())?;
        st.serialize_field("tenants", &tenants)?;
        st.end()
    }
}

/// Whether each signal is exported, and, under `exports`, how: one field
/// of the runtime type is two keys here, so this one is written out.
impl Serialize for OtlpSettings {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Exports<'a> {
            metrics: &'a Option<super::OtlpExport>,
            traces: &'a Option<super::OtlpExport>,
        }
        struct Secs(Duration);
        impl Serialize for Secs {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                secs(&self.0, s)
            }
        }
        struct Map<'a>(&'a [(String, String)]);
        impl Serialize for Map<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                pairs(self.0, s)
            }
        }
        struct Origins<'a>(&'a [(&'static str, &'static str)]);
        impl Serialize for Origins<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                static_pairs(self.0, s)
            }
        }
        let mut st = s.serialize_struct("OtlpSettings", 13)?;
        st.serialize_field("endpoint", &self.endpoint)?;
        st.serialize_field("protocol", &self.protocol)?;
        st.serialize_field("metrics", &self.metrics.is_some())?;
        st.serialize_field("traces", &self.traces.is_some())?;
        st.serialize_field("metrics_interval", &Secs(self.metrics_interval))?;
        st.serialize_field("traces_delay", &Secs(self.traces_delay))?;
        st.serialize_field("timeout", &Secs(self.timeout))?;
        st.serialize_field("queue", &self.queue)?;
        st.serialize_field("max_batch", &self.max_batch)?;
        st.serialize_field("service_name", &self.service_name)?;
        st.serialize_field("resource_attributes", &Map(&self.resource_attributes))?;
        st.serialize_field(
            "exports",
            &Exports {
                metrics: &self.metrics,
                traces: &self.traces,
            },
        )?;
        st.serialize_field("from", &Origins(&self.origins))?;
        st.end()
    }
}
