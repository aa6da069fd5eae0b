//! The keys of the configuration file, each declared once, as a
//! command-line parser declares each flag: its name, what it holds, its
//! default and its documentation as the reference writes them, and whether
//! a reload applies it ([`Key`]). A section's keys are one table
//! ([`Table`]) in a file of their own here, which also names the type serde
//! reads the section into; [`TOP`] holds the keys of the file's top, each
//! section's row pointing at its table.
//!
//! From these declarations come: the keys the reader accepts in each
//! mapping, and offers for an unknown one ([`known`], serde's own list of
//! the type's fields, which the tests below check the declarations
//! against, both ways); the settings only a restart applies
//! (`restart.rs`); and the key tables of `docs/configuration.md`
//! (`reference.rs` writes them, `TOKENMETER_BLESS=1` rewrites the page).
//! Parsing stays serde's: the types name each field's kind
//! (`kind.rs`) and hold its default (`Default`), which the reference's
//! default column is checked against.

mod admin;
mod cost;
mod key;
mod metrics;
mod otlp;
mod proxy;
mod routes;
mod scrape;
mod sessions;
mod tls;
mod trace_context;

pub(super) use key::{Key, Reload, Table};

use super::raw::{RawConfig, fields_of};
use key::key;

/// The keys of the file's top.
pub(super) static TOP: Table = Table {
    fields: fields_of::<RawConfig>,
    keys: &[
        key(
            "listen",
            "address",
            "`0.0.0.0:8080`",
            "Address the proxy accepts client traffic on. Overridden by `--listen`.",
        )
        .restart(""),
        key("admin", "mapping", "", "The admin listener, see below.").keys(&admin::ADMIN),
        key(
            "proxy",
            "mapping",
            "",
            "Forwarding behaviour shared by all routes, see below.",
        )
        .keys(&proxy::PROXY),
        key(
            "metrics",
            "mapping",
            "",
            "Metric naming, label bounds and histogram buckets, see below.",
        )
        .keys(&metrics::METRICS),
        key(
            "routes",
            "list of routes",
            "**required**",
            "Routes in match order: the first route whose `match` accepts a request handles \
            it. At least one.",
        )
        .keys(&routes::ROUTES),
        key(
            "slo_files",
            "list of paths or glob patterns",
            "none",
            "Files defining SLO classes (see [SLO files](#slo-files)), relative to this \
            file's directory: `[slo/*.yaml]`, `[/etc/tokenmeter/slo/chat.yaml]`. A path must \
            be readable; a pattern (with `*`, `?` or `[`) must match at least one file.",
        ),
        key(
            "trace_context",
            "mapping",
            "",
            "What the proxy does with the W3C trace context of metered requests, see below.",
        )
        .keys(&trace_context::TRACE_CONTEXT),
        key(
            "otlp",
            "mapping",
            "off",
            "OpenTelemetry export of the metrics and of one span per metered request, see \
            below.",
        )
        .restart("OpenTelemetry export")
        .keys(&otlp::OTLP),
        key(
            "tls",
            "mapping",
            "off",
            "TLS on the proxy listener, see below.",
        )
        .keys(&tls::TLS),
        key(
            "scrape",
            "mapping",
            "",
            "How the routes' `engine_metrics` and `gpu_metrics` pages are scraped, see below.",
        )
        .keys(&scrape::SCRAPE),
        key(
            "cost",
            "mapping",
            "",
            "How the routes' GPU time is priced, see below.",
        )
        .keys(&cost::COST),
        key(
            "sessions",
            "mapping",
            "",
            "How the requests of one session are told, see below.",
        )
        .keys(&sessions::SESSIONS),
    ],
};

/// A declared key where it stands in the file.
pub(super) struct Declared {
    /// The names from the top of the file to it (a route's under
    /// `routes`, without an index).
    pub path: Vec<&'static str>,
    pub key: &'static Key,
    /// Whether it, or a key it is written under, only applies at a restart.
    #[cfg_attr(not(test), allow(dead_code))] // Read where the reference is written.
    pub restart: bool,
}

impl Declared {
    /// Its path, dotted: `sessions.idle_timeout`.
    pub(super) fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// Every declared key, each followed by the keys of the mapping it holds,
/// in declaration order.
pub(super) fn every_key() -> Vec<Declared> {
    fn walk(table: &'static Table, path: &[&'static str], restart: bool, out: &mut Vec<Declared>) {
        for key in table.keys {
            let mut path = path.to_vec();
            path.push(key.name);
            let restart = restart || matches!(key.reload, Reload::Restart(_));
            out.push(Declared {
                path: path.clone(),
                key,
                restart,
            });
            if let Some(table) = key.table {
                walk(table, &path, restart, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&TOP, &[], false, &mut out);
    out
}

/// The keys allowed in the mapping at `parent` (its key names from the
/// top, list indices left out), as serde's derive of its declared type
/// asks for them; none where no mapping is declared.
pub(super) fn known(parent: &[&str]) -> &'static [&'static str] {
    let mut table = &TOP;
    for name in parent {
        let next = table.keys.iter().find(|key| key.name == *name);
        match next.and_then(|key| key.table) {
            Some(next) => table = next,
            None => return &[],
        }
    }
    (table.fields)()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each declared mapping's keys are the fields its type reads, no more
    /// and no fewer, and a key is declared once in its mapping.
    #[test]
    fn each_table_declares_the_fields_its_type_reads() {
        let mut tables = vec![(String::new(), &TOP)];
        let mut checked = 0;
        while let Some((at, table)) = tables.pop() {
            let mut declared: Vec<&str> = table.keys.iter().map(|key| key.name).collect();
            let mut read = (table.fields)().to_vec();
            assert!(!read.is_empty(), "`{at}`: its type reads no fields");
            declared.sort_unstable();
            read.sort_unstable();
            let len = declared.len();
            declared.dedup();
            assert_eq!(declared.len(), len, "`{at}`: a key declared twice");
            assert_eq!(
                declared, read,
                "`{at}`: declared keys against the type's fields"
            );
            for key in table.keys {
                if let Some(inner) = key.table {
                    tables.push((format!("{at}.{}", key.name), inner));
                }
            }
            checked += 1;
        }
        assert!(checked > 20, "{checked} tables");
    }

    /// A key with a row has its kind and meaning; a mapping without one
    /// holds keys that have theirs.
    #[test]
    fn every_row_is_whole() {
        for declared in every_key() {
            let key = declared.key;
            if key.doc.is_empty() {
                assert!(key.kind.is_empty(), "{}", declared.dotted());
                assert!(
                    key.table.is_some(),
                    "{}: no row and no keys",
                    declared.dotted()
                );
            } else {
                assert!(!key.kind.is_empty(), "{}: no kind", declared.dotted());
            }
        }
    }

    #[test]
    fn known_keys_follow_the_declarations() {
        assert!(known(&[]).contains(&"sessions"));
        assert_eq!(known(&["sessions", "keys"]), ["header", "body"]);
        assert!(known(&["routes", "tenant", "api_keys"]).contains(&"keys"));
        assert!(known(&["routes", "name"]).is_empty());
        assert!(known(&["nowhere"]).is_empty());
    }
}
