//! The scale-out story, with the real Prometheus server: two tokenmeter
//! replicas serving different traffic are scraped, and the aggregates over
//! both are what the traffic says. Every query of the generated dashboard is
//! evaluated by that server too, so a typo in PromQL fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;
use tokenmeter::dashboard::{self, ClassView};
use tokenmeter::sim::SimConfig;

/// A Prometheus server on a free loopback port, killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

async fn start_prometheus(targets: &[SocketAddr]) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: tokenmeter\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let addr = free_port();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus not found: install Debian's `prometheus` package (see README)");
    let p = Prometheus {
        child,
        addr,
        _dir: dir,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await
        {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(b"GET /-/ready HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            if buf.starts_with(b"HTTP/1.1 200") {
                return p;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "prometheus did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Evaluates `expr` now; returns the API's JSON answer.
async fn query(p: &Prometheus, expr: &str) -> Value {
    let head = format!(
        "GET /api/v1/query?query={} HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n",
        encode(expr)
    );
    let resp = raw_exchange(p.addr, &head, b"").await;
    serde_json::from_slice(&resp.body()).unwrap()
}

/// The single scalar value of an instant-vector answer (None when empty).
fn scalar(answer: &Value) -> Option<f64> {
    assert_eq!(answer["status"], "success", "{answer}");
    let result = answer["data"]["result"].as_array()?;
    let first = result.first()?;
    first["value"][1].as_str()?.parse().ok()
}

async fn eventually(p: &Prometheus, expr: &str, want: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = scalar(&query(p, expr).await);
        if got == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{expr}: got {got:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_aggregate_in_prometheus() {
    let sim = start_sim(SimConfig {
        ttft: Duration::from_millis(30),
        itl: Duration::from_millis(2),
        tokens: 10,
        ..SimConfig::default()
    })
    .await;
    let a = start(config_for(sim)).await;
    let b = start(config_for(sim)).await;
    // Replica A: 6 fast requests. Replica B: 4 with a 300 ms first token.
    for _ in 0..6 {
        let (head, body) = chat_request("m1", true, &[]);
        assert_eq!(raw_exchange(a.proxy_addr, &head, &body).await.status, 200);
    }
    for _ in 0..4 {
        let (head, body) = chat_request("m1", true, &[("x-sim-ttft-ms", "300")]);
        assert_eq!(raw_exchange(b.proxy_addr, &head, &body).await.status, 200);
    }
    scrape_until(a.admin_addr, |s| sum(s, "llm_requests_total", &[]) == 6.0).await;
    scrape_until(b.admin_addr, |s| sum(s, "llm_requests_total", &[]) == 4.0).await;

    let p = start_prometheus(&[a.admin_addr, b.admin_addr]).await;
    eventually(&p, "sum(llm_requests_total{outcome=\"ok\"})", 10.0).await;
    eventually(&p, "count(up{job=\"tokenmeter\"} == 1)", 2.0).await;
    // Histograms add up across replicas, bucket by bucket.
    eventually(&p, "sum(llm_time_to_first_token_seconds_count)", 10.0).await;
    eventually(
        &p,
        "sum(llm_time_to_first_token_seconds_bucket{le=\"0.1\"})",
        6.0,
    )
    .await;
    eventually(
        &p,
        "sum(llm_time_to_first_token_seconds_bucket{le=\"0.3\"})",
        6.0,
    )
    .await;
    eventually(&p, "sum(llm_output_tokens_total)", 100.0).await;
    // The median of the pooled distribution lies in the fast bucket, the
    // p90 in the slow one: a quantile of the sum, not a mean of quantiles.
    let p50 = scalar(
        &query(
            &p,
            "histogram_quantile(0.5, sum by (le) (llm_time_to_first_token_seconds_bucket))",
        )
        .await,
    )
    .unwrap();
    assert!(p50 > 0.025 && p50 <= 0.05, "p50 {p50}");
    let p90 = scalar(
        &query(
            &p,
            "histogram_quantile(0.9, sum by (le) (llm_time_to_first_token_seconds_bucket))",
        )
        .await,
    )
    .unwrap();
    assert!(p90 > 0.3 && p90 <= 0.5, "p90 {p90}");

    // Every dashboard query is valid PromQL for this server.
    let d = dashboard::render(
        "llm",
        &[ClassView {
            name: "chat".into(),
            goodput_target: Some(0.9),
            window: Duration::from_secs(28 * 86_400),
        }],
    );
    for expr in dashboard::expressions(&d) {
        let concrete = expr
            .replace("$__rate_interval", "1m")
            .replace("$route", ".*")
            .replace("$model", ".*")
            .replace("$slo", ".*");
        let answer = query(&p, &concrete).await;
        assert_eq!(answer["status"], "success", "{concrete}: {answer}");
    }
    a.stop().await;
    b.stop().await;
}
