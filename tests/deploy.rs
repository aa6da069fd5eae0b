//! The shipped deployment files are valid for the real tools that read them.

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
