//! The exposition's shape, held: a fixed run (two routes, one scraping an
//! engine and a DCGM page, tenants, SLO classes, good, failed and refused
//! requests) is scraped in the Prometheus text format and in OpenMetrics,
//! and every line but the samples' values (and the exemplars, which name
//! times and traces) must equal `tests/data/exposition/`. A change of a
//! family, a series or a label value fails here; a deliberate one is
//! written again with `TOKENMETER_BLESS=1` and shows in the diff.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;

use crate::common::*;
use tokenmeter::config::{Config, Overrides};

const DCGM: &str = include_str!("../data/telemetry/dcgm-h100.prom");

/// The run's configuration, loaded from a file as a user's is.
fn config(dir: &std::path::Path, sim: SocketAddr, dcgm: SocketAddr) -> Config {
    std::fs::create_dir_all(dir.join("slo")).unwrap();
    std::fs::write(
        dir.join("slo/classes.yaml"),
        "classes:\n  - name: interactive\n    objectives:\n      ttft: {threshold: 500ms, target: 0.95}\n      tpot: {threshold: 50ms, target: 0.9}\n    goodput: {target: 0.8}\n  - name: batch\n    objectives:\n      e2el: {threshold: 30s, target: 0.99}\n",
    )
    .unwrap();
    let main = format!(
        "scrape: {{interval: 500ms, timeout: 400ms}}\nslo_files: [slo/*.yaml]\nroutes:\n  - name: chat\n    match: {{path_prefix: /v1/}}\n    upstream: http://{sim}\n    slo: interactive\n    max_in_flight: 64\n    tenant: {{header: x-tenant}}\n    engine_metrics: http://{sim}/metrics\n    gpu_metrics: http://{dcgm}/metrics\n    gpu_select: {{hostname: [node-a]}}\n  - name: batch\n    match: {{path_prefix: /batch/}}\n    upstream: http://{sim}\n    slo: batch\n"
    );
    std::fs::write(dir.join("main.yaml"), main).unwrap();
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    Config::load(&dir.join("main.yaml"), &overrides).unwrap()
}

/// A family whose series appear only after two scrapes of the engine that
/// saw prefix-cache lookups between them: whether the run's requests fall
/// between two scrapes is the scheduler's, so it is left out.
const TIMED: &str = "llm_engine_prefix_cache_hit_ratio";

/// `exposition` with each sample's value, timestamp and exemplar left out:
/// the families, their help, type and unit, and each series' name and
/// labels, in the order served.
fn shape(exposition: &str) -> String {
    let mut out = String::new();
    for line in exposition.lines() {
        if line.contains(TIMED) {
            continue;
        }
        if line.starts_with('#') {
            out.push_str(line);
        } else {
            // A series' labels may hold spaces; its value follows the
            // closing brace, or the name where it has no labels.
            let end = match line.rfind('}') {
                Some(brace) if line.find('{').is_some() => brace + 1,
                _ => line.find(' ').unwrap_or(line.len()),
            };
            // OpenMetrics' exemplars come after the value, behind " # ".
            let series = &line[..end];
            let series = series.split(" # ").next().unwrap_or(series);
            out.push_str(series);
        }
        out.push('\n');
    }
    out
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/exposition/{name}"))
}

/// Compares `got` to the golden file `name`, or writes it with
/// `TOKENMETER_BLESS=1`.
fn check(name: &str, got: &str) {
    let path = golden(name);
    if std::env::var_os("TOKENMETER_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    if want != got {
        let mut diff = String::new();
        for line in want.lines().filter(|l| !got.lines().any(|g| g == *l)) {
            diff.push_str(&format!("- {line}\n"));
        }
        for line in got.lines().filter(|l| !want.lines().any(|w| w == *l)) {
            diff.push_str(&format!("+ {line}\n"));
        }
        panic!("the exposition's shape changed ({name}):\n{diff}");
    }
}

async fn get_with(addr: SocketAddr, path: &str, accept: &str) -> String {
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: admin\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
    );
    let resp = raw_exchange(addr, &head, b"").await;
    assert_eq!(resp.status, 200);
    String::from_utf8(resp.body()).unwrap()
}

#[tokio::test]
async fn the_exposition_of_a_fixed_run_keeps_its_families_series_and_labels() {
    let sim = start_sim(sim::SimConfig {
        slots: NonZeroU32::new(4),
        ..schedule(20, 2, 10)
    })
    .await;
    let dcgm = Page::serve(DCGM.to_owned()).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start(config(dir.path(), sim, dcgm.addr)).await;

    // Good streams of two tenants, one of no tenant, one the upstream
    // fails, one the proxy routes nowhere, and one on the second route.
    for tenant in ["team-a", "team-b", "team-a"] {
        let (head, body) = chat_request("sim-model", true, &[("x-tenant", tenant)]);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    }
    let (head, body) = chat_request("sim-model", false, &[]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    let (head, body) = chat_request("sim-model", true, &[("x-sim-status", "500")]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        500
    );
    let (head, body) = chat_request("sim-model", true, &[]);
    let head = head.replacen("/v1/chat/completions", "/batch/v1/chat/completions", 1);
    raw_exchange(proxy.proxy_addr, &head, &body).await;
    let lost = raw_exchange(
        proxy.proxy_addr,
        "GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        b"",
    )
    .await;
    assert_eq!(lost.status, 404);

    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) >= 6.0
            && sum(s, "llm_gpu_seconds_total", &[("gpu_set", "chat")]) > 0.0
            && s.iter().any(|x| x.name == "llm_engine_requests_running")
            && s.iter().any(|x| x.name == "llm_gpus")
    })
    .await;
    let text = get_with(proxy.admin_addr, "/metrics", "text/plain").await;
    let openmetrics = get_with(
        proxy.admin_addr,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    )
    .await;
    check("text.txt", &shape(&text));
    check("openmetrics.txt", &shape(&openmetrics));
    proxy.stop().await;
}
