//! Stage one of loading: the YAML document read into serde types that mirror
//! it, plus every key the types do not know.
//!
//! In the types here (`schema.rs`), a value checked against something
//! outside it (the listen addresses, a route's `tenant`, the `otlp` keys
//! that `OTEL_*` variables may also set, the SLO files' values) is kept as
//! the text written in the file, with its location ([`Spanned`]), for
//! stage two ([`super::load`]) to check. Every other field is typed, as
//! are the sections read as their runtime types (`proxy`,
//! `trace_context`...), and read by `super::located` without failing: a
//! bad value is recorded with its location and the key is found from it. That way one
//! bad value does not stop reading, and every problem is reported at once.
//! The only errors this stage stops at are YAML syntax errors and values of
//! the wrong shape (a list where a mapping belongs), which serde cannot get
//! past.
//!
//! Unknown keys are not rejected with `deny_unknown_fields`, which stops at the
//! first one: the deserializer is wrapped in `serde_ignored`, which reports the
//! path of every key no type claimed, and each path is then located by a
//! second, structure-only pass over the document ([`Node`]).
//!
//! This module (`schema.rs`, the types; `read.rs`, the reading) and
//! `super::located` (positions and typed values) are the only ones that
//! know the YAML crate. It must not apply defaults, or be visible outside
//! `config`.
//!
//! The `///` comments on the fields below are the user documentation of each
//! key (`docs/configuration.md` is written from them).

mod read;
mod schema;

pub(super) use read::{Document, Locator, Segment, UnknownKey, dotted, read, read_slo, segments};
pub(super) use schema::*;

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::read::known_keys;
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
    fn values_are_located_by_their_key_path() {
        let text = "scrape: {timeout: 3s}\nroutes:\n  - name: a\n  - name: b\n    tls:\n      ca_file: x\n    gpu_select: {gpu: ['0']}\n";
        let locator = Locator::new(text);
        let at = |key: &str| locator.value(key).map(|p| (p.line, p.column));
        assert_eq!(at("scrape.timeout"), Some((1, 19)));
        assert_eq!(at("routes[1].tls"), Some((6, 7)));
        assert_eq!(at("routes[1].gpu_select"), Some((7, 17)));
        assert_eq!(at("routes[1].gpu_select.gpu[0]"), Some((7, 24)));
        assert_eq!(at("routes[2]"), None);
        assert_eq!(at("scrape.interval"), None);
        assert_eq!(at("routes[x]"), None);
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

    use super::Segment;
    use super::read::known_keys;

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
admin: {listen: 127.0.0.1:19464, max_connections: 8, web_config_file: tests/data/tls/web.yml}
tls:
  cert_file: tests/data/tls/server.pem
  key_file: tests/data/tls/server.key
  client_ca_file: tests/data/tls/ca.pem
  client_auth_type: VerifyClientCertIfGiven
  min_version: TLS12
  max_version: TLS13
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
  stall_threshold: 2s
  slow_reader_share: 50%
  buckets:
    time_to_first_token: [0.1, 1]
    time_to_response_headers: [0.1, 1]
    time_per_output_token: [0.01, 0.1]
    inter_token_latency: [0.01, 0.1]
    e2e_request_latency: [1, 10]
    output_tokens: [10, 100]
    input_tokens: [10, 100]
    proxy_time: [0.001, 0.01]
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
scrape: {interval: 10s, timeout: 3s, max_body: 1MiB}
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
    slo_request_headers: true
    slo_request_max: {ttft: 30s, tpot: 2s, e2el: 10m}
    tenant: {header: x-tenant}
    otel_provider_name: vllm
    engine_metrics: https://127.0.0.1:8443/metrics
    gpu_metrics: http://127.0.0.1:9400/metrics
    gpu_select: {gpu: ["0"], uuid: [GPU-1], hostname: [node-a]}
    scrape_interval: 4s
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
