//! The scale-out story, with the real Prometheus server: two tokenmeter
//! replicas running the shipped deployment config serve different traffic
//! and are scraped; the pooled histograms, the shipped recording rules and
//! the dashboard's goodput panel give what the traffic says. Every query of
//! the generated dashboard is evaluated by that server too, so a typo in
//! PromQL fails here. The latency histograms' exemplars, in the
//! OpenMetrics exposition Prometheus asks for, reach its exemplar storage.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;
use tokenmeter::config::{Config, Overrides};
use tokenmeter::dashboard::{self, ClassView};

/// A Prometheus server on a loopback port, killed when dropped.
pub(crate) struct Prometheus {
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

/// Starts Prometheus scraping `targets` every second and evaluating the
/// shipped rules (`deploy/prometheus/rules.yml`) every second.
pub(crate) async fn start_prometheus(targets: &[SocketAddr]) -> Prometheus {
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/rules.yml");
    start_prometheus_with_rules(targets, &std::fs::read_to_string(rules).unwrap()).await
}

/// Starts Prometheus scraping `targets` every second and evaluating the
/// rule file `rules` (its text) every second.
pub(crate) async fn start_prometheus_with_rules(targets: &[SocketAddr], rules: &str) -> Prometheus {
    start_prometheus_with_features(targets, rules, &[]).await
}

/// As [`start_prometheus_with_rules`], with the feature flags `features`
/// (`native-histograms`) on beside exemplar storage.
pub(crate) async fn start_prometheus_with_features(
    targets: &[SocketAddr],
    rules: &str,
    features: &[&str],
) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yml"), rules).unwrap();
    let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: [rules.yml]\n\
         scrape_configs:\n  - job_name: tokenmeter\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let mut child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg("--web.listen-address=127.0.0.1:0")
        .arg(format!(
            "--enable-feature={}",
            ["exemplar-storage"]
                .iter()
                .chain(features)
                .copied()
                .collect::<Vec<_>>()
                .join(",")
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus not found: install Debian's `prometheus` package (see README)");
    // It listens on a port of the system's choosing and logs which: its
    // log is read for that line, then drained.
    let log = std::io::BufReader::new(child.stderr.take().unwrap());
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in log.lines().map_while(Result::ok) {
            if line.contains("msg=\"Listening on\"")
                && let Some((_, addr)) = line.split_once(" address=")
            {
                let _ = found.send(addr.trim().to_owned());
            }
        }
    });
    let Ok(addr) = address.recv_timeout(Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("prometheus did not say where it listens");
    };
    let addr = addr.parse().unwrap();
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

pub(crate) fn encode(s: &str) -> String {
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
pub(crate) async fn query(p: &Prometheus, expr: &str) -> Value {
    api(p, &format!("query?query={}", encode(expr))).await
}

/// `GET /api/v1/<path>`, the JSON answer.
pub(crate) async fn api(p: &Prometheus, path: &str) -> Value {
    let head = format!("GET /api/v1/{path} HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n");
    let resp = raw_exchange(p.addr, &head, b"").await;
    serde_json::from_slice(&resp.body()).unwrap()
}

/// The single scalar value of an instant-vector answer (None when empty).
pub(crate) fn scalar(answer: &Value) -> Option<f64> {
    assert_eq!(answer["status"], "success", "{answer}");
    let result = answer["data"]["result"].as_array()?;
    let first = result.first()?;
    first["value"][1].as_str()?.parse().ok()
}

pub(crate) async fn eventually(p: &Prometheus, expr: &str, want: f64) {
    eventually_near(p, expr, &[], want, 0.0).await;
}

/// Polls `expr` for up to 60 s until its series with `labels` (the first
/// one when none are given) is within `tolerance` of `want`.
pub(crate) async fn eventually_near(
    p: &Prometheus,
    expr: &str,
    labels: &[(&str, &str)],
    want: f64,
    tolerance: f64,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = series(&query(p, expr).await, labels);
        if got.is_some_and(|g| (g - want).abs() <= tolerance) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{expr}: got {got:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Both replicas run the shipped deployment config (chat class: TTFT p95
/// 500 ms) in front of the simulator, on ephemeral ports.
async fn replica(sim: SocketAddr) -> tokenmeter::app::Running {
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        upstream: Some(format!("http://{sim}")),
        ..Default::default()
    };
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/tokenmeter.yaml");
    start(Config::load(&path, &overrides).unwrap()).await
}

async fn chat(proxy: SocketAddr, n: usize, ttft_ms: &str) {
    for _ in 0..n {
        let (head, body) = chat_request("m1", true, &[("x-sim-ttft-ms", ttft_ms)]);
        assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);
    }
}

/// The value of the series of `answer` whose labels include `labels`.
pub(crate) fn series(answer: &Value, labels: &[(&str, &str)]) -> Option<f64> {
    assert_eq!(answer["status"], "success", "{answer}");
    answer["data"]["result"]
        .as_array()?
        .iter()
        .find(|r| labels.iter().all(|(k, v)| r["metric"][*k] == *v))?["value"][1]
        .as_str()?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_aggregate_in_prometheus_needs_tool_prometheus() {
    let sim = start_sim(schedule(30, 2, 10)).await;
    let (a, b) = (replica(sim).await, replica(sim).await);
    let p = start_prometheus(&[a.admin_addr, b.admin_addr]).await;
    eventually(&p, "count(up{job=\"tokenmeter\"} == 1)", 2.0).await;

    // One request each creates the series; once Prometheus has them, rates
    // over the window see only what follows.
    chat(a.proxy_addr, 1, "30").await;
    chat(b.proxy_addr, 1, "700").await;
    eventually(&p, "sum(llm_slo_requests_total{slo=\"chat\"})", 2.0).await;
    // Replica A: 6 fast (good) requests. Replica B: 4 with a 700 ms first
    // token, over the 500 ms TTFT threshold (bad).
    chat(a.proxy_addr, 6, "30").await;
    chat(b.proxy_addr, 4, "700").await;
    eventually(&p, "sum(llm_requests_total{outcome=\"ok\"})", 12.0).await;
    eventually(
        &p,
        "sum(llm_slo_requests_total{slo=\"chat\",verdict=\"bad\"})",
        5.0,
    )
    .await;

    // Histograms add up across replicas, bucket by bucket.
    eventually(&p, "sum(llm_time_to_first_token_seconds_count)", 12.0).await;
    eventually(
        &p,
        "sum(llm_time_to_first_token_seconds_bucket{le=\"0.1\"})",
        7.0,
    )
    .await;
    eventually(
        &p,
        "sum(llm_time_to_first_token_seconds_bucket{le=\"0.5\"})",
        7.0,
    )
    .await;
    eventually(&p, "sum(llm_output_tokens_total)", 120.0).await;
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
    assert!(p90 > 0.5 && p90 <= 0.75, "p90 {p90}");

    // The shipped recording rules over both replicas: 4 of the 10 requests
    // in the window are bad, all of them for TTFT. Rates are extrapolated
    // per replica, so the pooled ratio is exact only to within a little.
    for objective in ["goodput", "ttft"] {
        let expr =
            format!("slo:llm_slo_errors:ratio_rate5m{{slo=\"chat\",objective=\"{objective}\"}}");
        eventually_near(&p, &expr, &[], 0.4, 0.03).await;
    }
    let tpot = scalar(
        &query(
            &p,
            "slo:llm_slo_errors:ratio_rate5m{slo=\"chat\",objective=\"tpot\"}",
        )
        .await,
    );
    assert_eq!(tpot, Some(0.0));

    // The dashboard's queries, with Grafana's variables filled in: every
    // one is valid PromQL for this server, and the goodput panel shows 6/10.
    let d = dashboard::render(
        "llm",
        &[ClassView {
            name: "chat".into(),
            goodput_target: Some(0.9),
            window: Duration::from_secs(28 * 86_400),
        }],
        slo::rules::Histograms::Classic,
    );
    let concrete = |expr: &str| {
        expr.replace("$__rate_interval", "5m")
            .replace("$route", ".*")
            .replace("$model", ".*")
            .replace("$slo", ".*")
            .replace("$tenant", ".*")
            .replace("$operation", ".*")
            .replace("$gpu_set", ".*")
    };
    for expr in dashboard::expressions(&d) {
        let answer = query(&p, &concrete(&expr)).await;
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
    }
    let goodput = dashboard::expressions(&d)
        .into_iter()
        .find(|e| {
            e.starts_with("sum by (slo) (rate(llm_slo_requests_total{")
                && e.contains("verdict=\"good\"")
        })
        .expect("goodput ratio panel");
    // Extrapolated per replica and series like the rules above, so polled
    // the same way.
    eventually_near(&p, &concrete(&goodput), &[("slo", "chat")], 0.6, 0.03).await;
    a.stop().await;
    b.stop().await;
}

/// The trace id of the `traceparent` of request `i`.
fn trace_id(i: usize) -> String {
    format!("4bf92f3577b34da6a3ce929d{i:08x}")
}

/// Requests sent with a `traceparent` (and one with only an
/// `x-request-id`) are exemplars of their TTFT, ITL, TPOT and E2EL buckets
/// in the OpenMetrics scrape, not in the Prometheus text one; Prometheus
/// with exemplar storage scrapes them and gives them back through its
/// exemplars API, trace id and value, next to the bucket they fell in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exemplars_reach_prometheus_needs_tool_prometheus() {
    let sim = start_sim(schedule(30, 2, 10)).await;
    let a = replica(sim).await;
    let p = start_prometheus(&[a.admin_addr]).await;
    eventually(&p, "count(up{job=\"tokenmeter\"} == 1)", 1.0).await;
    let ttfts = ["30", "700"];
    for (i, ttft) in ttfts.iter().enumerate() {
        let traceparent = format!("00-{}-00f067aa0ba902b7-01", trace_id(i));
        let (head, body) = chat_request(
            "m1",
            true,
            &[("x-sim-ttft-ms", ttft), ("traceparent", &traceparent)],
        );
        assert_eq!(raw_exchange(a.proxy_addr, &head, &body).await.status, 200);
    }
    let (head, body) = chat_request("m1", true, &[("x-request-id", "req-only")]);
    assert_eq!(raw_exchange(a.proxy_addr, &head, &body).await.status, 200);

    // The two formats, asked for as scrapers do.
    let scrape = |accept: &'static str| async move {
        let head = format!(
            "GET /metrics HTTP/1.1\r\nhost: a\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
        );
        raw_exchange(a.admin_addr, &head, b"").await
    };
    let om = scrape("application/openmetrics-text;version=1.0.0,text/plain;q=0.5").await;
    assert!(
        om.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{:?}",
        om.headers
    );
    let om = String::from_utf8(om.body()).unwrap();
    assert!(om.ends_with("# EOF\n"));
    for family in [
        "llm_time_to_first_token_seconds",
        "llm_inter_token_latency_seconds",
        "llm_time_per_output_token_seconds",
        "llm_e2e_request_latency_seconds",
    ] {
        let exemplars: Vec<&str> = om
            .lines()
            .filter(|l| l.starts_with(&format!("{family}_bucket{{")) && l.contains(" # {"))
            .collect();
        assert!(!exemplars.is_empty(), "{family}: {om}");
        // Each exemplar's value lies in its bucket.
        for line in &exemplars {
            let le: f64 = line
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .map(|le| {
                    if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    }
                })
                .unwrap();
            let value: f64 = line
                .split("} ")
                .nth(2)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(value <= le, "{line}");
        }
    }
    let ttft: Vec<&str> = om
        .lines()
        .filter(|l| l.starts_with("llm_time_to_first_token_seconds_bucket{") && l.contains(" # {"))
        .collect();
    assert!(
        ttft.iter()
            .any(|l| l.contains(&trace_id(1)) && l.contains("le=\"0.75\"")),
        "{ttft:?}"
    );
    assert!(om.contains(r#"{request_id="req-only"}"#), "{om}");
    let text = scrape("text/plain").await;
    assert!(
        text.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert!(!String::from_utf8(text.body()).unwrap().contains(" # {"));

    // Prometheus stores them: the slow request's TTFT exemplar comes back
    // with its trace id and its value.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let path = format!(
        "query_exemplars?query={}&start={}&end={}",
        encode("llm_time_to_first_token_seconds_bucket"),
        now - 600,
        now + 600
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let slow = loop {
        let answer = api(&p, &path).await;
        assert_eq!(answer["status"], "success", "{answer}");
        let found = answer["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|series| {
                let exemplars = series["exemplars"].as_array()?;
                let e = exemplars
                    .iter()
                    .find(|e| e["labels"]["trace_id"] == trace_id(1).as_str())?;
                Some((series["seriesLabels"].clone(), e.clone()))
            });
        if let Some(found) = found {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no exemplar in {answer}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let (labels, exemplar) = slow;
    assert_eq!(labels["le"], "0.75", "{labels}");
    assert_eq!(labels["route"], "chat", "{labels}");
    let value: f64 = exemplar["value"].as_str().unwrap().parse().unwrap();
    assert!((0.7..0.75).contains(&value), "{exemplar}");
    a.stop().await;
}
