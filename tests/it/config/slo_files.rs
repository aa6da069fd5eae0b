//! SLO files: the shipped presets, their forms and their errors.

use super::*;

use slo::{ObjectiveKind, SloClass};

/// Writes `files` (name, text) into a fresh directory and loads `main.yaml`.
fn load_files(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Config, ConfigErrors>) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let result = Config::load(&dir.path().join("main.yaml"), &Overrides::default());
    (dir, result)
}

const MAIN_WITH_SLO: &str = "slo_files: [slo/*.yaml]\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo: chat\n";

fn class<'a>(config: &'a Config, name: &str) -> &'a SloClass {
    config
        .slo_classes
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no class {name}"))
}

#[test]
fn shipped_slo_presets_load_with_their_targets() {
    let path = PathBuf::from(CONFIG_DIR).join("multi-upstream.yaml");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    let mut names: Vec<&str> = config.slo_classes.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "batch",
            "chat",
            "code-completion",
            "document-generation",
            "embeddings"
        ]
    );
    let ms = Duration::from_millis;
    let thresholds = |c: &SloClass| -> Vec<(ObjectiveKind, Duration, f64)> {
        c.objectives
            .iter()
            .map(|o| (o.kind, o.threshold, o.target))
            .collect()
    };
    let chat = class(&config, "chat");
    assert_eq!(
        thresholds(chat),
        [
            (ObjectiveKind::Ttft, ms(500), 0.95),
            (ObjectiveKind::Tpot, ms(50), 0.95)
        ]
    );
    assert_eq!(chat.window, Duration::from_secs(28 * 86400));
    assert_eq!(
        chat.goodput.require,
        [ObjectiveKind::Ttft, ObjectiveKind::Tpot]
    );
    assert_eq!(
        thresholds(class(&config, "code-completion")),
        [
            (ObjectiveKind::Ttft, ms(200), 0.95),
            (ObjectiveKind::Tpot, ms(30), 0.95)
        ]
    );
    let doc = class(&config, "document-generation");
    assert_eq!(thresholds(doc), [(ObjectiveKind::Ttft, ms(3000), 0.95)]);
    assert_eq!(doc.goodput.target, Some(0.9));
    let batch = class(&config, "batch");
    assert!(batch.objectives.is_empty() && batch.goodput.require.is_empty());
    assert_eq!(batch.goodput.target, Some(0.99));
    assert_eq!(
        thresholds(class(&config, "embeddings")),
        [(ObjectiveKind::E2el, ms(500), 0.95)]
    );
    let rest = config
        .routes
        .iter()
        .find(|r| r.name == "rest")
        .expect("route");
    assert_eq!(
        rest.slo_by_operation,
        [
            (meter::Operation::Embeddings, "embeddings".to_owned()),
            (meter::Operation::Rerank, "embeddings".to_owned()),
            (meter::Operation::Score, "embeddings".to_owned()),
        ]
    );
    let chat_route = config
        .routes
        .iter()
        .find(|r| r.name == "chat")
        .expect("route");
    assert_eq!(chat_route.slo.as_deref(), Some("chat"));
    assert_eq!(
        chat_route.slo_header.as_ref().map(|h| h.as_str()),
        Some("x-slo-class")
    );
    assert_eq!(chat_route.slo_by_model.len(), 1);
}

#[test]
fn percentile_and_ratio_forms_mean_the_same() {
    let slo = "classes:\n  - name: chat\n    objectives:\n      ttft: {p95: 500ms}\n      e2el: {p99.9: 1m}\n  - name: chat2\n    objectives:\n      ttft: {threshold: 500ms, target: 0.95}\n      e2el: {threshold: 60s, target: 0.999}\n";
    let (_dir, result) = load_files(&[("main.yaml", MAIN_WITH_SLO), ("slo/a.yaml", slo)]);
    let config = result.expect("valid");
    let (a, b) = (class(&config, "chat"), class(&config, "chat2"));
    assert_eq!(a.objectives, b.objectives);
    assert_eq!(a.goodput, b.goodput);
    assert_eq!(a.objectives[1].target, 0.999);
}

#[test]
fn slo_file_errors_name_their_file_line_and_key_all_at_once() {
    let slo = "\
classes:
  - name: chat
    window: 4 fortnights
    objectives:
      ttft: {p95: 500}
      tpot: {threshold: 50ms, target: 95}
      e2el: {p95: 1s, target: 0.9}
      itl: {p95: 1s}
    goodput:
      require: [ttft, e2e]
      target: 1.5
  - name: 'bad name'
    objectives:
      ttft: {threshold: 1s}
  - name: empty
    extra: 1
";
    let (dir, result) = load_files(&[("main.yaml", MAIN_WITH_SLO), ("slo/a.yaml", slo)]);
    let errors = match result {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(ConfigErrors(errors)) => errors,
    };
    let file = dir.path().join("slo/a.yaml").display().to_string();
    let got: Vec<(&str, Option<u64>, &str)> = errors
        .iter()
        .map(|e| (e.file.as_str(), e.line, e.key.as_str()))
        .collect();
    let expected_in_slo_file = [
        (Some(3), "classes[0].window"),
        (Some(5), "classes[0].objectives.ttft.p95"),
        (Some(6), "classes[0].objectives.tpot.target"),
        (Some(7), "classes[0].objectives.e2el"),
        (Some(8), "classes[0].objectives.itl"),
        (Some(10), "classes[0].goodput.require[1]"),
        (Some(11), "classes[0].goodput.target"),
        (Some(12), "classes[1].name"),
        (Some(14), "classes[1].objectives.ttft.target"),
        (Some(15), "classes[2]"),
        (Some(16), "classes[2].extra"),
    ];
    for (line, key) in expected_in_slo_file {
        assert!(
            got.contains(&(file.as_str(), line, key)),
            "no error for {key} at line {line:?}: {errors:#?}"
        );
    }
    // `chat` is not defined (its file has errors), so the route's class is
    // unknown too: reported in the main file.
    assert!(
        errors
            .iter()
            .any(|e| e.file.ends_with("main.yaml") && e.key == "routes[0].slo"),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), expected_in_slo_file.len() + 1, "{errors:#?}");
}

#[test]
fn an_slo_file_must_list_classes() {
    let main =
        "slo_files: [slo/*.yaml]\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n";
    for (text, line, message) in [
        (
            "{}\n",
            None,
            "required key is missing: list at least one SLO class",
        ),
        ("classes: []\n", Some(1), "must list at least one SLO class"),
    ] {
        let (_dir, result) = load_files(&[("main.yaml", main), ("slo/a.yaml", text)]);
        let errors = match result {
            Ok(config) => panic!("expected errors, got {config:#?}"),
            Err(ConfigErrors(errors)) => errors,
        };
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let e = &errors[0];
        assert!(e.file.ends_with("a.yaml"), "{e}");
        assert_eq!(
            (e.line, e.key.as_str(), e.message.as_str()),
            (line, "classes", message)
        );
    }
}

#[test]
fn slo_files_must_exist_and_class_names_be_unique() {
    let class_file = "classes:\n  - name: chat\n    objectives: {ttft: {p95: 1s}}\n";
    let main = "slo_files: [a.yaml, b.yaml, missing.yaml, 'none/*.yaml']\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo: chat\n    slo_by_model: {m: nope}\n";
    let (_dir, result) = load_files(&[
        ("main.yaml", main),
        ("a.yaml", class_file),
        ("b.yaml", class_file),
    ]);
    let errors = match result {
        Ok(_) => panic!("expected errors"),
        Err(ConfigErrors(errors)) => errors,
    };
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let has = |file_end: &str, key: &str, text: &str| {
        assert!(
            errors
                .iter()
                .any(|e| e.file.ends_with(file_end) && e.key == key && e.message.contains(text)),
            "no {key} error with {text:?} in {messages:#?}"
        );
    };
    has("main.yaml", "slo_files[2]", "cannot read");
    has("main.yaml", "slo_files[3]", "matches no file");
    has(
        "main.yaml",
        "routes[0].slo_by_model.m",
        "unknown SLO class `nope`",
    );
    has("b.yaml", "classes[0].name", "duplicate SLO class `chat`");
    assert_eq!(errors.len(), 4, "{messages:#?}");
}

#[test]
fn slo_header_needs_slo_files() {
    let errors = errors_of(
        "routes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo: anything\n    slo_header: x-slo-class\n",
    );
    assert_eq!(lines_and_keys(&errors), [(Some(5), "routes[0].slo_header")]);
}

/// A class unknown to the `slo_files` is found where it is written, also
/// under a model name holding a `.` or a `/` (the key path is not split
/// on them).
#[test]
fn an_unknown_class_is_located_under_any_model_name() {
    let main = "slo_files: [slo/*.yaml]\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo_by_model:\n      meta-llama/Llama-3.1-8B: chat\n      qwen2.5-7b: nope\n    slo_by_operation: {embeddings: nope}\n";
    let (_dir, result) = load_files(&[
        ("main.yaml", main),
        (
            "slo/c.yaml",
            "classes:\n  - name: chat\n    objectives: {ttft: {p95: 1s}}\n",
        ),
    ]);
    let errors = match result {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(ConfigErrors(errors)) => errors,
    };
    let at: Vec<(Option<u64>, Option<u64>, &str)> = errors
        .iter()
        .map(|e| (e.line, e.column, e.key.as_str()))
        .collect();
    assert_eq!(
        at,
        [
            (Some(7), Some(19), "routes[0].slo_by_model.qwen2.5-7b"),
            (Some(8), Some(36), "routes[0].slo_by_operation.embeddings"),
        ],
        "{}",
        ConfigErrors(errors.clone())
    );
}
