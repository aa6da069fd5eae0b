//! The settings a reload cannot apply, and what changed among them.
//!
//! Some settings belong to sockets or to the metrics registry, which live
//! as long as the process: the listen addresses, the listeners' limits, the
//! metric namespace, the label bounds, the buckets, the OTLP exporter, the
//! currency the cost counters are labelled with. A reload still applies
//! the rest; these take effect at the next start.
//!
//! Each is declared so with its key (`Reload::Restart` in `keys/`), the
//! one place that says it, and compared as `/config` shows it
//! ([`Config::to_json`]): a setting is changed when its shown value is. So
//! a restart-only key is one word in its declaration, and its comparison
//! and message follow from its type. (The OTLP
//! headers are shown by name only, but their values come from the
//! environment, which a reload does not read again.)

use serde_json::Value;

use super::Config;
use super::keys::{self, Reload};

/// One setting only a restart applies.
pub struct RestartOnly {
    /// Its dotted key, as in the file and in `/config`.
    pub key: String,
    /// For a single value, its unit as written after it in the message
    /// (`s`, ` bytes`, or nothing); for a section, what it is, in words.
    pub note: &'static str,
}

/// Every setting a reload cannot change, in the order a change is
/// reported: the keys declared [`Reload::Restart`], in declaration order
/// (`keys/`). A key under one of them is part of it.
pub fn restart_only() -> Vec<RestartOnly> {
    keys::every_key()
        .into_iter()
        .filter_map(|declared| match declared.key.reload {
            Reload::Restart(note) => Some(RestartOnly {
                key: declared.dotted(),
                note,
            }),
            Reload::Live => None,
        })
        .collect()
}

impl Config {
    /// What differs between this (running) config and `new` among the
    /// [`restart_only`] settings, one sentence each:
    /// `proxy.max_request_head changed (8192 bytes -> 16384 bytes)`.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<String> {
        let (old, now) = (self.to_json(), new.to_json());
        restart_only()
            .iter()
            .filter_map(|setting| {
                let (was, is) = (at(&old, &setting.key), at(&now, &setting.key));
                (was != is).then(|| describe(setting, was, is))
            })
            .collect()
    }
}

/// The value at a dotted key; `Null` where there is none.
fn at<'a>(value: &'a Value, dotted: &str) -> &'a Value {
    dotted
        .split('.')
        .try_fold(value, |v, key| v.get(key))
        .unwrap_or(&Value::Null)
}

fn describe(setting: &RestartOnly, was: &Value, is: &Value) -> String {
    match (scalar(was), scalar(is)) {
        (Some(was), Some(is)) => {
            let unit = setting.note;
            format!("{} changed ({was}{unit} -> {is}{unit})", setting.key)
        }
        _ if setting.note.is_empty() => format!("{} changed", setting.key),
        _ => format!("{} ({}) changed", setting.key, setting.note),
    }
}

/// A single value as text (a number as Rust writes it, `30` not `30.0`);
/// `None` for a section or a list.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("unset".to_owned()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => u.to_string(),
            (None, Some(f)) => f.to_string(),
            (None, None) => n.to_string(),
        }),
        Value::String(s) => Some(s.clone()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;
    use crate::config::Overrides;

    fn parse(text: &str) -> Config {
        let route = "routes: [{name: a, upstream: 'http://127.0.0.1:1'}]\n";
        Config::parse(&format!("{text}{route}"), "t.yaml", &Overrides::default()).unwrap()
    }

    #[test]
    fn every_declared_key_is_shown_by_config() {
        let shown =
            parse("proxy: {max_connections: 10}\notlp: {endpoint: 'http://127.0.0.1:4318'}\n")
                .to_json();
        let settings = restart_only();
        assert!(settings.len() > 10, "{}", settings.len());
        for setting in settings {
            assert!(!at(&shown, &setting.key).is_null(), "{}", setting.key);
        }
    }

    #[test]
    fn changes_are_reported_in_order_with_their_values() {
        let started = parse("");
        assert!(started.restart_only_changes(&started.clone()).is_empty());
        let new = parse(
            "listen: 127.0.0.1:1\nproxy: {max_request_head: 16KiB, request_head_timeout: 2500ms, max_connections: 10, overload_threshold: 50%}\n\
             metrics: {namespace: other, models: {max_distinct: 5}}\notlp: {endpoint: 'http://127.0.0.1:4318'}\n",
        );
        assert_eq!(
            started.restart_only_changes(&new),
            [
                "listen changed (0.0.0.0:8080 -> 127.0.0.1:1)",
                "proxy.max_request_head changed (8192 bytes -> 16384 bytes)",
                "proxy.request_head_timeout changed (30s -> 2.5s)",
                "proxy.max_connections changed (unset -> 10)",
                "proxy.overload_threshold changed (0.9 -> 0.5)",
                "metrics.namespace changed (llm -> other)",
                "metrics.models (model label bounds) changed",
                "otlp (OpenTelemetry export) changed",
            ]
        );
    }

    /// The cost counters keep the currency they started with: a reload that
    /// names another one is told it needs a restart, and a price alone is not.
    #[test]
    fn a_currency_change_needs_a_restart() {
        let started = parse("cost: {currency: USD}\n");
        let priced =
            "routes: [{name: a, upstream: 'http://127.0.0.1:1', gpus: 2, gpu_hourly_cost: 3}]\n";
        let repriced = Config::parse(priced, "t.yaml", &Overrides::default()).unwrap();
        assert!(started.restart_only_changes(&repriced).is_empty());
        assert_eq!(
            started.restart_only_changes(&parse("cost: {currency: EUR}\n")),
            ["cost.currency changed (USD -> EUR)"]
        );
    }
}
