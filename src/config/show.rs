//! The configuration in force as JSON, for `GET /config` and `tokenmeter
//! check`: the runtime types serialized (`#[derive(Serialize)]` in
//! `config/mod.rs`), every key under the name the file gives it, so that
//! what an operator reads there is what they would write. Durations are in
//! seconds, sizes in bytes, the overload threshold and the slow reader share
//! shares (0 to 1), SLO classes as their files define them, plus what
//! loading found: the files read.
//!
//! This file holds only the `serialize_with` helpers the derives name: a
//! value shown as its text (an address range, an upstream, a protocol), a
//! duration in seconds, and the secrets. No `Serialize` is written by hand.
//!
//! Secrets: the file holds none by construction (upstream URLs with
//! credentials, queries or fragments are refused when loading, no header
//! values are configured, and API keys are known only by their hashes);
//! the OTLP export's headers, which `OTEL_EXPORTER_OTLP_HEADERS` gives,
//! serialize as their names with `<redacted>` values. The hashes are not
//! shown either: a route's API-key tenants show the headers read, how many
//! keys and which tenant names.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{Config, MetricsEndpoint, OtlpHeaders, Protocol, Upstream};

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

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Its URL.
impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// Its URL redacted, never as written.
impl std::fmt::Display for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
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

/// The largest objectives a route accepts declared (the defaults when it
/// reads none).
pub(super) fn declared_max<S: Serializer>(
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
    Max { ttft, tpot, e2el }.serialize(s)
}

/// Where one export's endpoint, protocol, headers and timeout came from.
pub(super) fn export_origins<S: Serializer>(
    origins: &[&'static str; 4],
    s: S,
) -> Result<S::Ok, S::Error> {
    let names = ["endpoint", "protocol", "headers", "timeout"];
    s.collect_map(names.into_iter().zip(origins.iter().copied()))
}

/// A value as its text (`Display`): an address range, an upstream, a
/// redacted page URL, a route's protocol.
pub(super) fn display<T: std::fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Values as their text.
pub(super) fn displays<T: std::fmt::Display, S: Serializer>(
    items: &[T],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(items.iter().map(ToString::to_string))
}

/// A value as its text, when there is one.
pub(super) fn opt_display<T: std::fmt::Display, S: Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    v.as_ref().map(ToString::to_string).serialize(s)
}

/// Headers as their names, each with the value `<redacted>`: a
/// collector's credentials are never shown.
pub(super) fn redacted<S: Serializer>(headers: &OtlpHeaders, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(headers.redacted())
}

/// Header names.
pub(super) fn headers<S: Serializer>(names: &[http::HeaderName], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(names.iter().map(http::HeaderName::as_str))
}

/// Tenants by key hash as how many keys and which tenant names, never a
/// hash.
pub(super) fn key_tenants<S: Serializer>(
    tenants: &std::collections::HashMap<[u8; 32], String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Shown<'a> {
        keys: usize,
        tenants: Vec<&'a str>,
    }
    let mut names: Vec<&str> = tenants.values().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    Shown {
        keys: tenants.len(),
        tenants: names,
    }
    .serialize(s)
}
