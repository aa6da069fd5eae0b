//! The catalogue's own rules, and the reference that lists it.

use super::*;

#[test]
fn names_are_distinct_and_follow_prometheus_conventions() {
    let every: Vec<&Family> = ALL
        .iter()
        .chain(&TELEMETRY)
        .chain(&CHARGEBACK)
        .chain(&SESSIONS)
        .collect();
    assert!(CAPACITY.iter().all(|f| ALL.contains(f)));
    let mut names: Vec<String> = every.iter().map(|f| f.name("llm")).collect();
    for (f, name) in every.iter().zip(&names) {
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name}"
        );
        assert_eq!(f.kind == Kind::Counter, name.ends_with("_total"), "{name}");
        assert!(f.namespaced || name.starts_with("tokenmeter_"), "{name}");
        assert!(!f.help.is_empty());
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), every.len());
}

/// The metrics reference names every family, under the default
/// namespace, so the documentation cannot fall behind the exporter.
#[test]
fn the_reference_names_every_family() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/metrics.md"
    ))
    .unwrap();
    let missing: Vec<String> = ALL
        .iter()
        .chain(&TELEMETRY)
        .chain(&CHARGEBACK)
        .chain(&SESSIONS)
        .map(|f| f.name("llm"))
        .filter(|name| !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/metrics.md does not list {missing:?}"
    );
}
