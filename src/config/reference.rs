//! `docs/configuration.md` against the schema: its key tables are written
//! from the keys' declarations (`keys/`; `TOKENMETER_BLESS=1` rewrites
//! them, the prose between them is the page's own), so they name every key
//! the types accept and no other (the declarations are checked against the
//! types' fields); `/config` shows each of them, and each default the
//! reference writes is the one the types hold, so that a default is held
//! once, in the code, and the page cannot drift from it. And
//! `config/tokenmeter.yaml`, the example with every key, names each key
//! the types accept, set or commented out.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::keys::{self, Declared};
use super::raw::{Segment, keys_of};
use super::values::{parse_duration, parse_percentage, parse_size};
use super::{Config, Overrides};

/// The keys the types accept in the mapping at `path`.
fn known_keys(path: &[Segment]) -> &'static [&'static str] {
    keys::known(&keys_of(path))
}

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

/// The rows of the reference's key tables: each key in the first column,
/// dotted as above (the `routes[i]` table's keys are relative to a route),
/// with its default column.
fn documented() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let keys = text
        .split("\n## Keys\n")
        .nth(1)
        .and_then(|rest| rest.split("\n### Protocols").next())
        .unwrap_or_default();
    let mut prefix = "";
    let mut out = BTreeMap::new();
    for line in keys.lines() {
        if line.starts_with("### ") {
            prefix = if line.contains("routes[i]") {
                "routes."
            } else {
                ""
            };
        }
        let cells = cells(line);
        let [key, _, default, ..] = cells.as_slice() else {
            continue;
        };
        if let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) {
            out.insert(format!("{prefix}{key}"), default.clone());
        }
    }
    out
}

/// The cells of a table row (`\|` inside a cell is not a border).
fn cells(line: &str) -> Vec<String> {
    let Some(row) = line.strip_prefix('|') else {
        return Vec::new();
    };
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in row.chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => cells.last_mut().into_iter().for_each(|cell| cell.push(c)),
        }
        escaped = c == '\\';
    }
    cells.pop();
    cells.iter().map(|cell| cell.trim().to_owned()).collect()
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
  native_histograms: {enabled: false, schema: 2, max_buckets: 100}
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
cost: {currency: EUR}
sessions:
  enabled: true
  keys: [{header: x-agent-session}, {body: previous_response_id}]
  idle_timeout: 2m
  max_sessions: 5000
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
    gpu_set: node-a
  - name: b
    upstream: http://127.0.0.1:8000
    gpus: 2
    gpu_hourly_cost: 2.5
    tenant:
      api_keys:
        headers: [authorization]
        keys: {"0000000000000000000000000000000000000000000000000000000000000000": team-a}
"#;

/// A config that opens every optional section with its required keys only
/// (an OTLP endpoint, the listener's certificate, a route with API-key
/// tenants), so that every other key shows its default.
const DEFAULTS: &str = r#"
tls: {cert_file: tests/data/tls/server.pem, key_file: tests/data/tls/server.key}
otlp: {endpoint: "http://127.0.0.1:4318"}
routes:
  - name: a
    upstream: http://127.0.0.1:8000
    tenant:
      api_keys:
        keys: {"0000000000000000000000000000000000000000000000000000000000000000": team-a}
"#;

/// The value `/config` shows at a dotted key (a route's keys in the first
/// route), or `None` where there is none.
fn shown<'v>(config: &'v Value, dotted: &str) -> Option<&'v Value> {
    let (root, dotted) = match dotted.strip_prefix("routes.") {
        Some(key) => (&config["routes"][0], key),
        None => (config, dotted),
    };
    dotted.split('.').try_fold(root, |v, key| v.get(key))
}

/// Whether the reference's default column says what the types hold:
/// `**required**` for no default; a value in backticks for that value (a
/// duration, size or percentage as `/config` shows it: seconds, bytes, a
/// share); `A … B (N bounds)` for a bucket list; words alone ("none",
/// "any host", "from the open-file limit") for no value.
fn agrees(written: &str, value: Option<&Value>) -> bool {
    let number = |v: f64, text: &str| {
        let text = text.trim();
        [
            text.parse::<f64>().ok(),
            parse_size(text).ok().map(|n| n as f64),
            parse_duration(text).ok().map(|d| d.as_secs_f64()),
            parse_percentage(text).ok(),
        ]
        .into_iter()
        .flatten()
        .any(|n| (n - v).abs() <= 1e-9 * v.abs().max(1.0))
    };
    if written.starts_with("**required**") {
        return true;
    }
    let Some(code) = written
        .strip_prefix('`')
        .and_then(|rest| rest.split_once('`'))
        .map(|(code, _)| code)
    else {
        if let Some((range, count)) = written.split_once(" (") {
            let Some(Value::Array(items)) = value else {
                return false;
            };
            let bounds: Vec<f64> = items.iter().filter_map(Value::as_f64).collect();
            let (first, last) = range.split_once(" … ").unwrap_or_default();
            let unit = |text: &str| {
                let (n, scale) = [(" µs", 1e-6), (" ms", 1e-3), (" s", 1.0)]
                    .into_iter()
                    .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, scale)))
                    .unwrap_or((text, 1.0));
                n.parse::<f64>().map(|n| n * scale).unwrap_or(f64::NAN)
            };
            let close = |a: f64, b: Option<&f64>| b.is_some_and(|b| (a - b).abs() <= 1e-9 * b);
            return count == format!("{} bounds)", bounds.len())
                && close(unit(first), bounds.first())
                && close(unit(last), bounds.last());
        }
        return match value {
            None | Some(Value::Null) => true,
            Some(Value::Array(items)) => items.is_empty(),
            Some(Value::Object(entries)) => entries.is_empty(),
            Some(Value::String(text)) => text.is_empty(),
            Some(_) => false,
        };
    };
    match value {
        Some(Value::Bool(b)) => code == b.to_string(),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|n| number(n, code)),
        Some(Value::String(text)) => code == text,
        Some(Value::Array(items)) => {
            let listed: Vec<&str> = code
                .trim_matches(['[', ']'])
                .split(',')
                .map(str::trim)
                .collect();
            let items: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            listed == items
        }
        _ => false,
    }
}

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
    // A list's keys are found in any of its entries.
    fn find(value: &serde_json::Value, keys: &[&str]) -> bool {
        match (value, keys) {
            (v, []) => !v.is_null(),
            (serde_json::Value::Array(items), _) => items.iter().any(|v| find(v, keys)),
            (v, [key, rest @ ..]) => v.get(key).is_some_and(|v| find(v, rest)),
        }
    }
    let find = |value: &serde_json::Value, dotted: &str| {
        find(value, &dotted.split('.').collect::<Vec<_>>())
    };
    let missing: Vec<String> = documented()
        .into_keys()
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
        .filter(|(key, parent)| !parent && !documented.contains_key(key))
        .map(|(key, _)| key.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/configuration.md: {missing:?}"
    );
    let all: Vec<&str> = keys.iter().map(|(key, _)| key.as_str()).collect();
    let unknown: Vec<&String> = documented
        .keys()
        .filter(|key| !all.contains(&key.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/configuration.md names keys the config does not accept: {unknown:?}"
    );
}

/// Each key's default in the reference is the one the types hold, as
/// `/config` shows a config that leaves the key out.
#[test]
fn the_configuration_reference_writes_every_default_the_types_hold() {
    let config = Config::parse(DEFAULTS, "defaults.yaml", &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let json = config.to_json();
    let mut keys = Vec::new();
    accepted(&mut Vec::new(), &mut keys);
    let documented = documented();
    let wrong: Vec<String> = keys
        .iter()
        .filter(|(_, parent)| !parent)
        .filter_map(|(key, _)| {
            let written = documented.get(key)?;
            let value = shown(&json, key);
            (!agrees(written, value)).then(|| format!("{key}: written {written:?}, held {value:?}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "defaults that differ:\n{}",
        wrong.join("\n")
    );
}

/// The comparison itself fails where it should: a wrong value, a wrong
/// kind, a value where there is none, and a bucket list of another length.
#[test]
fn a_wrong_default_is_told() {
    // The values as `/config` would show them, written as its JSON text.
    let v = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
    assert!(agrees("`30s`", Some(&v("30.0"))));
    assert!(!agrees("`31s`", Some(&v("30.0"))));
    assert!(agrees("`4MiB`", Some(&v("4194304"))));
    assert!(agrees("`90%`", Some(&v("0.9"))));
    assert!(!agrees("`true`", Some(&v("false"))));
    assert!(!agrees("none", Some(&v("5"))));
    assert!(agrees("any", Some(&v("[]"))));
    assert!(!agrees("`[a, b]`", Some(&v("[\"a\"]"))));
    assert!(agrees("1 ms … 2 s (3 bounds)", Some(&v("[0.001, 1, 2]"))));
    assert!(!agrees("1 ms … 2 s (4 bounds)", Some(&v("[0.001, 1, 2]"))));
    assert!(!agrees("`llm`", None));
}

/// The dotted keys a config file names (a route's as `routes.KEY`): its
/// keys, and those of its commented-out lines, which set a key once their
/// `# ` is removed (`  # max_connections: 10000`), each under the keys
/// above it by indentation; a flow mapping's keys (`{gpu: ["0"]}`) under
/// its key. Prose comments name no key, unless one starts with a
/// lower-case word and a colon.
fn named_keys(text: &str) -> BTreeSet<String> {
    fn flow(dotted: &str, value: &Value, out: &mut BTreeSet<String>) {
        if let Value::Object(entries) = value {
            for (key, value) in entries {
                let dotted = format!("{dotted}.{key}");
                flow(&dotted, value, out);
                out.insert(dotted);
            }
        }
    }
    let is_key = |key: &str| {
        key.starts_with(|c: char| c.is_ascii_lowercase())
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    let indented = |text: &str| text.len() - text.trim_start().len();
    let mut out = BTreeSet::new();
    // The keys above the line: each with its indentation.
    let mut above: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        let mut indent = indented(line);
        let mut rest = line.trim_start();
        if let Some(commented) = rest.strip_prefix('#') {
            let Some(yaml) = commented.strip_prefix(' ') else {
                continue;
            };
            indent += indented(yaml);
            rest = yaml.trim_start();
        }
        if let Some(item) = rest.strip_prefix("- ") {
            indent += 2 + indented(item);
            rest = item.trim_start();
        }
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        if !is_key(key) || !(value.is_empty() || value.starts_with(' ')) {
            continue;
        }
        while above.last().is_some_and(|(i, _)| *i >= indent) {
            above.pop();
        }
        let dotted = above
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        let value = value.trim();
        if value.starts_with('{') {
            let parsed: Value = serde_saphyr::from_str(value)
                .unwrap_or_else(|e| panic!("`{line}`: not a flow mapping: {e}"));
            flow(&dotted, &parsed, &mut out);
        }
        out.insert(dotted);
        above.push((indent, key.to_owned()));
    }
    out
}

/// `config/tokenmeter.yaml` names every key the types accept, set to its
/// default or, for a key without one, commented out with an example; it
/// and `config/chargeback.yaml` load.
#[test]
fn the_example_config_names_every_key_and_the_examples_load() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("config/tokenmeter.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let named = named_keys(&text);
    let mut keys = Vec::new();
    accepted(&mut Vec::new(), &mut keys);
    assert!(keys.len() > 30, "{keys:?}");
    let missing: Vec<&str> = keys
        .iter()
        .map(|(key, _)| key.as_str())
        .filter(|key| !named.contains(*key))
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from config/tokenmeter.yaml: {missing:?}"
    );
    for file in ["config/tokenmeter.yaml", "config/chargeback.yaml"] {
        Config::load(&root.join(file), &Overrides::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

/// The keys named are found where they are, set or commented out, in block
/// and flow mappings and list items, and prose names none: a key left out
/// is missing.
#[test]
fn a_key_left_out_of_the_example_is_told() {
    let text = "\
# The example: every key.
a:
  b: 1
  # Default: none, or the line below.
  # c: {d: [x], e: {f: 1}}
# g:
#   h: x
routes:
  - # The first route.
    name: x
    # tls: {ca_file: y}
  - name: z
    match:
      path_prefix: /
";
    let named = named_keys(text);
    let want = [
        "a",
        "a.b",
        "a.c",
        "a.c.d",
        "a.c.e",
        "a.c.e.f",
        "g",
        "g.h",
        "routes",
        "routes.name",
        "routes.tls",
        "routes.tls.ca_file",
        "routes.match",
        "routes.match.path_prefix",
    ];
    assert_eq!(
        named,
        want.into_iter().map(str::to_owned).collect::<BTreeSet<_>>()
    );
    // `#` with no space after it is a comment, not a key commented out.
    assert!(named_keys("a:\n  # b: 1\n").contains("a.b"));
    assert!(!named_keys("a: 1\n#b: 2\n").contains("b"));
}

/// The page, and where its key tables are: each `### ` heading of its
/// `## Keys` part with the range of lines of the table under it.
fn key_tables(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "## Keys")
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .position(|l| *l == "### Protocols")
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    let mut i = start;
    while i < end {
        if let Some(heading) = lines[i].strip_prefix("### ") {
            let first = (i + 1..end).find(|&j| lines[j].starts_with('|'));
            if let Some(first) =
                first.filter(|&j| !lines[i + 1..j].iter().any(|l| l.starts_with("### ")))
            {
                let last = (first..end)
                    .find(|&j| !lines[j].starts_with('|'))
                    .unwrap_or(end);
                out.push((heading.to_owned(), first..last));
                i = last;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The declared keys a table of the page holds, as it names them: those
/// of the top under "Top level"; under `` `X` ``, those below `X`, dotted
/// from the top; under `` `routes[i]` ``, a route's, dotted from the route.
fn table_keys<'k>(heading: &str, every: &'k [Declared]) -> Vec<(String, &'k Declared)> {
    let section = heading.trim_matches('`');
    every
        .iter()
        .filter(|d| !d.key.doc.is_empty())
        .filter_map(|d| match (heading, d.path.as_slice()) {
            ("Top level", [_]) => Some((d.dotted(), d)),
            ("`routes[i]`", ["routes", rest @ ..]) if !rest.is_empty() => Some((rest.join("."), d)),
            (_, [first, rest @ ..]) if *first == section && !rest.is_empty() => {
                Some((d.dotted(), d))
            }
            _ => None,
        })
        .collect()
}

/// A table of the page written from the declarations: a row per key,
/// its name, kind, default, what a reload does with it, and its meaning.
fn render(keys: &[(String, &Declared)], every: &[Declared]) -> Vec<String> {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut out = vec![
        "| key | type | default | on reload | meaning |".to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    for (name, declared) in keys {
        // A mapping's keys below it, each: whether only a restart applies it.
        let below: Vec<bool> = every
            .iter()
            .filter(|d| d.key.table.is_none())
            .filter(|d| d.path.len() > declared.path.len() && d.path.starts_with(&declared.path))
            .map(|d| d.restart)
            .collect();
        let reload = if declared.restart || (!below.is_empty() && below.iter().all(|r| *r)) {
            "restart"
        } else if below.iter().any(|r| *r) {
            "in part"
        } else {
            "applied"
        };
        let key = declared.key;
        out.push(
            format!(
                "| `{name}` | {} | {} | {reload} | {} |",
                cell(key.kind),
                cell(key.default),
                cell(key.doc)
            )
            .replace("|  |", "| |"),
        );
    }
    out
}

/// The page's key tables are the declarations' rows, every row of them is
/// in a table, and a key table is under a heading the declarations know.
/// `TOKENMETER_BLESS=1` writes them into the page.
#[test]
fn the_reference_tables_are_written_from_the_declarations() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let every = keys::every_key();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut placed = BTreeSet::new();
    let mut stale = Vec::new();
    // From the last table up, so that a rewritten table moves no other.
    for (heading, range) in key_tables(&text).into_iter().rev() {
        let keys = table_keys(&heading, &every);
        assert!(
            !keys.is_empty(),
            "`### {heading}`: no declared key is written there"
        );
        placed.extend(keys.iter().map(|(_, d)| d.dotted()));
        let rows = render(&keys, &every);
        if lines[range.clone()] != rows[..] {
            let differs = lines[range.clone()]
                .iter()
                .zip(&rows)
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("\n  page: {a}\n  keys: {b}"))
                .unwrap_or_default();
            stale.push(format!("### {heading}{differs}"));
            lines.splice(range, rows);
        }
    }
    // A section without a table of its own yet: written, under its heading,
    // before the routes' table.
    let bless = std::env::var_os("TOKENMETER_BLESS").is_some();
    let unplaced: Vec<&Declared> = every
        .iter()
        .filter(|d| !d.key.doc.is_empty() && !placed.contains(&d.dotted()))
        .collect();
    let mut sections: Vec<&str> = unplaced.iter().map(|d| d.path[0]).collect();
    sections.dedup();
    for section in sections.iter().filter(|_| bless) {
        let heading = format!("`{section}`");
        let at = lines
            .iter()
            .position(|l| l == "### `routes[i]`")
            .unwrap_or(lines.len());
        let mut table = vec![format!("### {heading}"), String::new()];
        table.extend(render(&table_keys(&heading, &every), &every));
        table.push(String::new());
        lines.splice(at..at, table);
        stale.push(format!("### {heading} (new)"));
    }
    assert!(
        bless || unplaced.is_empty(),
        "declared keys with no table in docs/configuration.md (TOKENMETER_BLESS=1 writes one under a heading of its own): {:?}",
        unplaced.iter().map(|d| d.dotted()).collect::<Vec<_>>()
    );
    if bless {
        if !stale.is_empty() {
            std::fs::write(path, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
        }
        return;
    }
    assert!(
        stale.is_empty(),
        "docs/configuration.md's key tables differ from the declarations (TOKENMETER_BLESS=1 rewrites them):\n{}",
        stale.join("\n")
    );
}
