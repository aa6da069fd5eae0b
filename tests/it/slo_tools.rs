//! `tokenmeter rules --format pyrra` and `--format sloth` for every SLO
//! file the repository ships or tests with, on classic and native
//! histograms: each object read into a strict mirror of its tool's schema
//! (written here from Pyrra's `ServiceLevelObjective` CRD and Sloth's
//! `prometheus/v1` spec, unknown keys refused, required keys required,
//! values in the tool's ranges), and every query in them accepted by
//! promtool. With `--histograms native` the Prometheus rules and the
//! dashboard's queries are accepted by promtool too, and without the flag
//! both are what they were.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::common::BIN;
use crate::deploy::promtool;

/// Pyrra's `ServiceLevelObjective` (`pyrra.dev/v1alpha1`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PyrraObject {
    api_version: String,
    kind: String,
    metadata: PyrraMetadata,
    spec: PyrraSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraMetadata {
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraSpec {
    #[serde(default)]
    description: String,
    target: String,
    window: String,
    indicator: PyrraIndicator,
    alerting: Option<PyrraAlerting>,
    partial_response_strategy: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraIndicator {
    ratio: Option<PyrraRatio>,
    latency: Option<PyrraLatency>,
    #[serde(rename = "latencyNative")]
    latency_native: Option<PyrraLatencyNative>,
    // `bool_gauge`, which tokenmeter never writes, is left out: one would
    // be refused as unknown.
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraRatio {
    errors: PyrraQuery,
    total: PyrraQuery,
    grouping: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraLatency {
    success: PyrraQuery,
    total: PyrraQuery,
    grouping: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraLatencyNative {
    latency: String,
    total: PyrraQuery,
    grouping: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PyrraQuery {
    metric: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PyrraAlerting {
    disabled: Option<bool>,
    burnrates: Option<bool>,
    absent: Option<bool>,
    name: Option<String>,
    absent_name: Option<String>,
}

/// Sloth's `prometheus/v1` spec.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlothSpec {
    version: String,
    service: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    slos: Vec<SlothSlo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlothSlo {
    name: String,
    #[serde(default)]
    description: String,
    objective: f64,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    sli: SlothSli,
    alerting: SlothAlerting,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlothSli {
    // `raw` and `plugin`, which tokenmeter never writes, are left out: one
    // would be refused as unknown.
    events: Option<SlothEvents>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlothEvents {
    error_query: String,
    total_query: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlothAlerting {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    page_alert: Option<SlothAlert>,
    ticket_alert: Option<SlothAlert>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlothAlert {
    #[serde(default)]
    disable: bool,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every SLO file shipped (`config/slo`, `deploy/config/slo`) or tested with
/// (`tests/data`).
fn slo_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["config/slo", "deploy/config/slo", "tests/data/slo"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    files.push(root().join("tests/data/rules/tenant-slo.yaml"));
    files.sort();
    files
}

/// A config of one route whose classes are those of `slo_file`.
fn config_of(dir: &Path, slo_file: &Path) -> PathBuf {
    let config = dir.join("tokenmeter.yaml");
    std::fs::write(
        &config,
        format!(
            "slo_files: [{:?}]\nroutes:\n  - name: chat\n    upstream: http://127.0.0.1:8000\n",
            slo_file.display().to_string()
        ),
    )
    .unwrap();
    config
}

/// `tokenmeter ARGS` as it prints it.
fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "tokenmeter {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A DNS-1123 label: what Kubernetes takes as an object's name.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A Prometheus duration (`28d`, `500ms`, `1h30m`), as Pyrra and Sloth
/// parse them: whole numbers of units, largest first.
fn is_prom_duration(s: &str) -> bool {
    let units = ["y", "w", "d", "h", "m", "s", "ms"];
    let mut rest = s;
    let mut last = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = units
            .iter()
            .enumerate()
            .rev()
            .find(|(_, u)| rest.starts_with(**u) && !(**u == "m" && rest.starts_with("ms")))
        else {
            return false;
        };
        if last.is_some_and(|l| unit.0 <= l) {
            return false;
        }
        last = Some(unit.0);
        rest = &rest[unit.1.len()..];
    }
    last.is_some()
}

/// A Prometheus label name.
fn is_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A Kubernetes label key: an optional DNS prefix and `/`, then a name of
/// at most 63 letters, digits, `-`, `_` and `.`, alphanumeric at each end.
fn is_k8s_label_key(s: &str) -> bool {
    let name = s.rsplit_once('/').map_or(s, |(_, n)| n);
    is_k8s_label_value(name) && !name.is_empty()
}

fn is_k8s_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !s.starts_with(['-', '_', '.'])
        && !s.ends_with(['-', '_', '.'])
}

/// What the tools hold: the class objectives of `config` (latency ones, and
/// errors where the class has a goodput target), as (class, objective).
fn expected(config: &Path) -> Vec<(String, &'static str)> {
    let config = tokenmeter::config::Config::load(config, &Default::default()).unwrap();
    let mut out = Vec::new();
    for class in &config.slo_classes {
        for o in &class.objectives {
            out.push((class.name.clone(), o.kind.as_str()));
        }
        if class.goodput.target.is_some() {
            out.push((class.name.clone(), "errors"));
        }
    }
    out
}

const KINDS: [&str; 2] = ["classic", "native"];

/// Every object `tokenmeter rules` writes for every SLO file, read into the
/// tools' schemas, with the queries they hold (Sloth's windowed).
fn objects_of_every_slo_file() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut queries = Vec::new();
    for file in slo_files() {
        let config = config_of(dir.path(), &file);
        let want = expected(&config);
        let c = config.to_str().unwrap();
        for kind in KINDS {
            let text = run(&[
                "rules",
                "--config",
                c,
                "--format",
                "pyrra",
                "--histograms",
                kind,
            ]);
            for line in text
                .lines()
                .filter(|l| l.trim_start().starts_with("target:"))
            {
                // Pyrra's CRD types the target a string: quoted, or YAML
                // reads a number.
                assert!(
                    line.contains("target: \"") || line.contains("target: '"),
                    "{line}"
                );
            }
            let objects: Vec<PyrraObject> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: {e}\n{text}", file.display()));
            assert_eq!(objects.len(), want.len(), "{}: {text}", file.display());
            let mut names = std::collections::HashSet::new();
            for (o, (class, objective)) in objects.iter().zip(&want) {
                check_pyrra(o, class, objective, kind, &mut queries);
                assert!(names.insert(o.metadata.name.clone()), "{}", o.metadata.name);
            }
            let text = run(&[
                "rules",
                "--config",
                c,
                "--format",
                "sloth",
                "--histograms",
                kind,
            ]);
            let specs: Vec<SlothSpec> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: {e}\n{text}", file.display()));
            let slos: Vec<&SlothSlo> = specs.iter().flat_map(|s| &s.slos).collect();
            assert_eq!(slos.len(), want.len(), "{}: {text}", file.display());
            for spec in &specs {
                assert_eq!(spec.version, "prometheus/v1");
                assert!(is_sloth_name(&spec.service), "{}", spec.service);
                assert!(spec.labels.keys().all(|k| is_label_name(k)));
            }
            for (slo, (class, objective)) in slos.into_iter().zip(&want) {
                check_sloth(slo, class, objective, &mut queries);
            }
        }
    }
    queries
}

fn check_pyrra(
    o: &PyrraObject,
    class: &str,
    objective: &str,
    kind: &str,
    queries: &mut Vec<String>,
) {
    assert_eq!(o.api_version, "pyrra.dev/v1alpha1");
    assert_eq!(o.kind, "ServiceLevelObjective");
    assert!(is_dns_label(&o.metadata.name), "{}", o.metadata.name);
    assert!(o.metadata.namespace.is_none() && o.metadata.annotations.is_empty());
    for (k, v) in &o.metadata.labels {
        assert!(is_k8s_label_key(k) && is_k8s_label_value(v), "{k}: {v}");
        // Pyrra copies these onto its rules, as label names.
        if let Some(label) = k.strip_prefix("pyrra.dev/") {
            assert!(is_label_name(label), "{k}");
        }
    }
    assert_eq!(o.metadata.labels["pyrra.dev/objective"], objective);
    let target: f64 = o.spec.target.parse().unwrap();
    assert!(target > 0.0 && target < 100.0, "{}", o.spec.target);
    assert!(is_prom_duration(&o.spec.window), "{}", o.spec.window);
    assert!(!o.spec.description.is_empty());
    assert!(o.spec.partial_response_strategy.is_none());
    let alerting = o.spec.alerting.as_ref().unwrap();
    assert!(alerting.name.as_deref().is_some_and(is_label_value_name));
    assert!(alerting.disabled.is_none() && alerting.burnrates.is_none());
    assert!(alerting.absent.is_none() && alerting.absent_name.is_none());
    let i = &o.spec.indicator;
    let class_matcher = format!("slo=\"{class}\"");
    let selectors: Vec<&str> = match (objective, kind) {
        ("errors", _) => {
            let r = i.ratio.as_ref().expect("a ratio indicator");
            assert!(i.latency.is_none() && i.latency_native.is_none());
            assert!(r.grouping.is_none());
            assert!(
                r.errors.metric.contains("outcome=~\""),
                "{}",
                r.errors.metric
            );
            vec![&r.errors.metric, &r.total.metric]
        }
        (_, "classic") => {
            let l = i.latency.as_ref().expect("a latency indicator");
            assert!(i.ratio.is_none() && i.latency_native.is_none());
            assert!(l.grouping.is_none());
            // As Pyrra checks: a bucket with a numeric `le`, and a count.
            let (name, rest) = l.success.metric.split_once('{').unwrap();
            assert!(name.ends_with("_bucket"), "{name}");
            let le = rest
                .split_once("le=\"")
                .unwrap()
                .1
                .split_once('"')
                .unwrap()
                .0;
            le.parse::<f64>().unwrap();
            assert!(
                l.total
                    .metric
                    .split_once('{')
                    .unwrap()
                    .0
                    .ends_with("_count")
            );
            vec![&l.success.metric, &l.total.metric]
        }
        _ => {
            let l = i
                .latency_native
                .as_ref()
                .expect("a latencyNative indicator");
            assert!(i.ratio.is_none() && i.latency.is_none());
            assert!(l.grouping.is_none());
            assert!(is_prom_duration(&l.latency), "{}", l.latency);
            let name = l.total.metric.split_once('{').unwrap().0;
            assert!(
                !name.ends_with("_bucket") && !name.ends_with("_count"),
                "{name}"
            );
            vec![&l.total.metric]
        }
    };
    for s in selectors {
        assert!(s.contains(&class_matcher), "{s}");
        queries.push(s.to_owned());
    }
}

/// Sloth's SLO and service names: letters, digits, `-`, `_` and `.`,
/// alphanumeric at each end.
fn is_sloth_name(s: &str) -> bool {
    is_k8s_label_value(s) && !s.is_empty()
}

/// An alert name: a valid metric name without colons.
fn is_label_value_name(s: &str) -> bool {
    is_label_name(s)
}

fn check_sloth(slo: &SlothSlo, class: &str, objective: &str, queries: &mut Vec<String>) {
    assert!(is_sloth_name(&slo.name), "{}", slo.name);
    assert!(
        slo.objective > 0.0 && slo.objective <= 100.0,
        "{}",
        slo.objective
    );
    assert!(!slo.description.is_empty());
    assert_eq!(slo.labels["slo"], class);
    assert_eq!(slo.labels["objective"], objective);
    assert!(slo.labels.keys().all(|k| is_label_name(k)));
    let events = slo.sli.events.as_ref().expect("an events SLI");
    let a = &slo.alerting;
    assert!(is_label_value_name(&a.name), "{}", a.name);
    assert!(
        a.labels
            .keys()
            .chain(a.annotations.keys())
            .all(|k| is_label_name(k))
    );
    for (alert, severity) in [(&a.page_alert, "page"), (&a.ticket_alert, "ticket")] {
        let alert = alert.as_ref().unwrap();
        assert!(!alert.disable && alert.annotations.is_empty());
        assert_eq!(alert.labels["severity"], severity);
    }
    for q in [&events.error_query, &events.total_query] {
        assert!(q.contains("[{{.window}}]"), "{q}");
        assert!(q.contains(&format!("slo=\"{class}\"")), "{q}");
        // Sloth's short and long windows.
        for window in ["5m", "3d", "28d"] {
            queries.push(q.replace("{{.window}}", window));
        }
    }
}

#[test]
fn pyrra_and_sloth_objects_of_every_slo_file_follow_the_tools_schemas() {
    let queries = objects_of_every_slo_file();
    assert!(queries.len() > 50, "{}", queries.len());
}

/// Writes `exprs` as recording rules and has promtool check them.
fn promtool_checks(exprs: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let mut file = String::from("groups:\n  - name: checked\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let body: String = e.lines().map(|l| format!("          {l}\n")).collect();
        file.push_str(&format!(
            "      - record: checked:query{i}\n        expr: |\n{body}"
        ));
    }
    std::fs::write(dir.path().join("rules.yml"), file).unwrap();
    promtool(&["check", "rules", "rules.yml"], dir.path());
}

/// The keys of a rule group these tests read.
#[derive(Debug, Deserialize)]
struct RuleGroup {
    name: String,
    rules: Vec<RecordingRule>,
}

#[derive(Debug, Deserialize)]
struct RecordingRule {
    expr: String,
}

#[test]
fn every_query_of_the_pyrra_and_sloth_objects_is_valid_promql_needs_tool_promtool() {
    promtool_checks(&objects_of_every_slo_file());
}

/// Without `--histograms`, rules and dashboard are the classic ones; with
/// `native`, the rule file is the classic one and the latency groups after
/// it, and promtool takes it and every query of the native dashboard.
#[test]
fn native_histograms_rules_and_dashboard_are_valid_promql_needs_tool_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let config = root().join("deploy/config/tokenmeter.yaml");
    let c = config.to_str().unwrap();
    let default = run(&["rules", "--config", c]);
    assert_eq!(
        default,
        run(&[
            "rules",
            "--config",
            c,
            "--format",
            "prometheus",
            "--histograms",
            "classic"
        ])
    );
    let native = run(&["rules", "--config", c, "--histograms", "native"]);
    let added = native
        .strip_prefix(default.as_str())
        .expect("the classic rules first");
    // The groups after the classic ones, a YAML sequence.
    let added: Vec<RuleGroup> = serde_saphyr::from_str(added).unwrap();
    let names: Vec<&str> = added.iter().map(|g| g.name.as_str()).collect();
    // The classes with a latency objective (`batch` has none).
    assert_eq!(
        names,
        [
            "latency:chat",
            "latency:code-completion",
            "latency:document-generation",
            "latency:embeddings"
        ]
    );
    let exprs: Vec<&str> = added
        .iter()
        .flat_map(|g| &g.rules)
        .map(|r| r.expr.as_str())
        .collect();
    assert!(exprs.contains(
        &"histogram_fraction(0, 0.5, sum by (slo) (rate(llm_time_to_first_token_seconds{slo=\"chat\"}[5m])))"
    ));
    assert!(
        exprs
            .iter()
            .all(|e| !e.contains("_bucket") && !e.contains(", le)"))
    );
    std::fs::write(dir.path().join("native.yml"), &native).unwrap();
    promtool(&["check", "rules", "native.yml"], dir.path());

    let dashboard = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["dashboard", "--config", c];
        all.extend_from_slice(args);
        serde_json::from_str(&run(&all)).unwrap()
    };
    assert_eq!(dashboard(&[]), dashboard(&["--histograms", "classic"]));
    let native = dashboard(&["--histograms", "native"]);
    let concrete: Vec<String> = tokenmeter::dashboard::expressions(&native)
        .iter()
        .map(|e| {
            e.replace("$__rate_interval", "5m")
                .replace("$route", ".*")
                .replace("$model", ".*")
                .replace("$slo", ".*")
                .replace("$tenant", ".*")
                .replace("$operation", ".*")
                .replace("$gpu_set", ".*")
        })
        .collect();
    // The histograms by turn and of sessions keep classic buckets only
    // (docs/metrics.md): theirs are the native dashboard's only buckets.
    let classic_only: Vec<String> = names::SESSIONS
        .iter()
        .filter(|f| f.kind == names::Kind::Histogram)
        .map(|f| format!("{}_bucket", f.name("llm")))
        .collect();
    for e in &concrete {
        let rest = classic_only
            .iter()
            .fold(e.clone(), |e, bucket| e.replace(bucket.as_str(), ""));
        assert!(!rest.contains("_bucket"), "{e}");
    }
    assert!(
        concrete
            .iter()
            .any(|e| e.contains("llm_turn_time_to_first_token_seconds_bucket"))
    );
    promtool_checks(&concrete);
}
