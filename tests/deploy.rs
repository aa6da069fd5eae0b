//! The shipped deployment files are valid for the real tools that read them,
//! and the generated Prometheus rules are fresh, valid and behave as
//! designed (`promtool test rules`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn prometheus_config_passes_promtool() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/prometheus.yml");
    let out = Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(&path)
        .output()
        .expect("promtool not found: install Debian's `prometheus` package (see README)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const BIN: &str = env!("CARGO_BIN_EXE_tokenmeter");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `tokenmeter rules --config CONFIG` as the binary prints it.
fn generated_rules(config: &str) -> String {
    let out = Command::new(BIN)
        .arg("rules")
        .arg("--config")
        .arg(root().join(config))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn promtool(args: &[&str], dir: &Path) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool not found: install Debian's `prometheus` package (see README)");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each committed rule file is what `tokenmeter rules` makes of its config
/// today; regenerate with the command in the message when this fails.
#[test]
fn committed_rule_files_are_up_to_date() {
    for (config, rules) in [
        ("config/multi-upstream.yaml", "deploy/prometheus/rules.yml"),
        (
            "tests/data/rules/chat-config.yaml",
            "tests/data/rules/chat-rules.yml",
        ),
    ] {
        let committed = std::fs::read_to_string(root().join(rules)).unwrap();
        assert!(
            committed == generated_rules(config),
            "{rules} is stale: run `tokenmeter rules --config {config} --out {rules}`"
        );
    }
}

#[test]
fn generated_rules_pass_promtool_check() {
    let dir = tempfile::tempdir().unwrap();
    for config in [
        "config/multi-upstream.yaml",
        "tests/data/rules/chat-config.yaml",
    ] {
        let path = dir.path().join("rules.yml");
        std::fs::write(&path, generated_rules(config)).unwrap();
        promtool(&["check", "rules", path.to_str().unwrap()], dir.path());
    }
}

/// A budget-burning series fires the page (and the ticket) at the minute
/// worked out in the test file; a healthy one fires nothing.
#[test]
fn burn_rate_alerts_pass_their_promtool_unit_tests() {
    promtool(
        &["test", "rules", "burn.test.yaml"],
        &root().join("tests/data/rules"),
    );
}
