//! The admin page and its JSON, with traffic flowing through the proxy to
//! the simulator on real sockets.
//!
//! - `/slo/history` is checked like the rest of the admin API: its shape,
//!   and its points summed over the hour equal `/slo`'s hour window.
//! - The page itself is loaded in headless Chromium (Debian's `chromium`,
//!   driven by `tests/page/check.mjs` with playwright-core from
//!   `tests/page/package.json`): every chart has drawn points for the
//!   traffic sent, with the class's thresholds and units on its axes, no
//!   script error or refused request (the content security policy allows
//!   nothing from elsewhere); a burst of slow requests turns the TTFT
//!   objective from ok to breach within two refreshes while TPOT stays
//!   ok; and the page fits a 400 px wide window. A route with a priced
//!   GPU and two tenants, one of which misses the objective it declares,
//!   has its "Who used the GPUs" chart: a bar per tenant, good and wasted,
//!   with `/slo`'s amounts.
//! - Agent-like sessions through the binary, ended by their idle timeout,
//!   have their "Sessions" section (`sessions.rs`).
//!
//! Thresholds are far from the simulated schedules (TTFT 10 ms and 2.5 s
//! against 600 ms), so a slow machine does not flip a verdict.
//!
//! A missing `chromium`, Node.js or `npm ci --prefix tests/page` fails the
//! browser test with what to install. With `TOKENMETER_PAGE_SCREENSHOT` set
//! to a path, a test saves a screenshot of the page there.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;
use tokenmeter::config::Config;

mod sessions;

const SLO_FILE: &str = "\
classes:
  - name: interactive
    objectives:
      ttft: {threshold: 600ms, target: 0.9}
      tpot: {threshold: 220ms, target: 0.9}
    goodput: {target: 0.5}
";

const MAIN_FILE: &str = "\
slo_files: [slo/*.yaml]
routes:
  - name: chat
    upstream: http://127.0.0.1:1
    slo: interactive
";

fn config(dir: &Path, upstream: SocketAddr) -> Config {
    config_from_files(dir, MAIN_FILE, &[("classes.yaml", SLO_FILE)], upstream)
}

/// Fast requests (half of them with their response head held 20 ms, so the
/// head and prefill phases differ; the other half reporting the server's
/// phases, 4 ms of the 10 ms to the first token queued, as vLLM's
/// per-request metrics do) and one the upstream fails; `n` in all, four at
/// a time.
async fn traffic(proxy: SocketAddr, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let headers: Vec<(&str, &str)> = match i {
            0 => vec![("x-sim-status", "503")],
            i if i % 2 == 0 => vec![("x-sim-headers-delay-ms", "20")],
            _ => vec![("x-sim-queue-ms", "4")],
        };
        let (head, body) = chat_request("m1", true, &headers);
        tasks.spawn(async move { raw_exchange(proxy, &head, &body).await.status });
        if tasks.len() == 4 {
            tasks.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(status) = tasks.join_next().await {
        status.unwrap();
    }
}

/// `n` requests at once whose first token comes 2.5 s late.
async fn slow_burst(proxy: SocketAddr, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (head, body) = chat_request("m1", true, &[("x-sim-ttft-ms", "2500")]);
        tasks.spawn(async move { raw_exchange(proxy, &head, &body).await.status });
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
}

async fn settled(admin: SocketAddr, requests: f64) {
    scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= requests).await;
}

#[tokio::test]
async fn history_sums_to_the_hour_of_slo_and_the_page_is_served_with_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;
    let admin = proxy.admin_addr;
    traffic(proxy.proxy_addr, 12).await;
    settled(admin, 12.0).await;

    let slo = admin_json(admin, "/slo").await;
    let all = admin_json(admin, "/slo/history").await;
    let series = all["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{all}");
    let h = &series[0];
    assert_eq!(
        (h["route"].as_str(), h["slo"].as_str()),
        (Some("chat"), Some("interactive"))
    );
    assert_eq!(h["point_seconds"], 10.0);
    assert_eq!(h["objectives"], slo["series"][0]["objectives"]);
    assert_eq!(h["goodput_target"], 0.5);
    let points = h["points"].as_array().unwrap();
    assert!(!points.is_empty() && points.len() <= 360);
    // Consecutive points, 10 s apart, the last one being filled now.
    for pair in points.windows(2) {
        let t = |p: &Value| p["t"].as_f64().unwrap();
        assert_eq!(t(&pair[1]) - t(&pair[0]), 10.0);
    }
    let last = points.last().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let t = last["t"].as_f64().unwrap();
    assert!(t <= now && now - t < 12.0, "{t} vs {now}");

    let hour = &slo["series"][0]["windows"][2];
    assert_eq!(hour["window"], "1h");
    let total = |f: &dyn Fn(&Value) -> u64| points.iter().map(f).sum::<u64>();
    assert_eq!(
        total(&|p| p["requests"].as_u64().unwrap()),
        hour["requests"].as_u64().unwrap()
    );
    assert_eq!(total(&|p| p["requests"].as_u64().unwrap()), 12);
    assert_eq!(
        total(&|p| p["outcomes"]["ok"].as_u64().unwrap()),
        hour["ok"].as_u64().unwrap()
    );
    assert_eq!(
        total(&|p| p["outcomes"]["upstream_error"].as_u64().unwrap()),
        1
    );
    assert_eq!(
        total(&|p| p["output_tokens"].as_u64().unwrap()),
        hour["output_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        total(&|p| p["good"].as_u64().unwrap()),
        hour["goodput"]["good"].as_u64().unwrap()
    );
    assert_eq!(
        total(&|p| p["bad"].as_u64().unwrap()),
        hour["goodput"]["bad"].as_u64().unwrap()
    );
    assert_eq!(
        total(&|p| p["ttft"]["count"].as_u64().unwrap()),
        hour["ttft"]["count"].as_u64().unwrap()
    );
    assert_eq!(
        total(&|p| p["itl"]["count"].as_u64().unwrap()),
        hour["itl"]["count"].as_u64().unwrap()
    );
    // Every completed stream has its phases; the held heads show in the
    // first one (requests 2, 4, .., 10: five of them, 20 ms each at least).
    assert_eq!(total(&|p| p["phases"]["requests"].as_u64().unwrap()), 11);
    let head: f64 = points
        .iter()
        .map(|p| p["phases"]["headers_seconds"].as_f64().unwrap())
        .sum();
    assert!(head >= 5.0 * 0.020, "{head}");
    // The six odd requests reported the server's phases: 4 ms queued, 6 ms
    // of prefill, 4 gaps of 5 ms decoding, and some outside time (from the
    // proxy's t0 to the simulator's start, and back).
    assert_eq!(hour["queue"]["count"], 6);
    assert_eq!(hour["decode"]["count"], 6);
    assert_eq!(
        total(&|p| p["queue"]["count"].as_u64().unwrap()),
        6,
        "{points:?}"
    );
    assert_eq!(
        total(&|p| p["engine_phases"]["requests"].as_u64().unwrap()),
        hour["outside"]["count"].as_u64().unwrap()
    );
    let engine = |key: &str| -> f64 {
        points
            .iter()
            .map(|p| p["engine_phases"][key].as_f64().unwrap())
            .sum()
    };
    let phased = total(&|p| p["engine_phases"]["requests"].as_u64().unwrap()) as f64;
    assert!(phased >= 1.0, "{points:?}");
    assert!((engine("queue_seconds") - phased * 0.004).abs() < 1e-9);
    assert!((engine("prefill_seconds") - phased * 0.006).abs() < 1e-9);
    assert!((engine("decode_seconds") - phased * 0.020).abs() < 1e-9);
    assert!(engine("outside_seconds") > 0.0);
    let p50 = hour["prefill"]["p50"].as_f64().unwrap();
    assert!((p50 - 0.006).abs() < 0.006 * 0.011, "{p50}");
    assert!(
        points
            .iter()
            .any(|p| p["in_flight_peak"].as_u64().unwrap() >= 1)
    );
    assert_eq!(slo["series"][0]["in_flight"], 0);
    assert_eq!(last["in_flight_end"], 0);
    // The scatter: each ok request's input tokens (from usage) and TTFT.
    let scatter = h["scatter"].as_array().unwrap();
    assert_eq!(scatter.len(), 11, "{scatter:?}");
    for s in scatter {
        let s = s.as_array().unwrap();
        assert!(s[1].as_f64().unwrap() > 0.0 && s[2].as_f64().unwrap() >= 0.010 * 0.99);
    }
    // Status per objective, then goodput.
    let status: Vec<_> = slo["series"][0]["status"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["objective"].as_str().unwrap(),
                s["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(status, [("ttft", "ok"), ("tpot", "ok"), ("goodput", "ok")]);

    // Filters: one series, from a time on.
    let none = admin_json(admin, "/slo/history?route=other").await;
    assert_eq!(none["series"], serde_json::json!([]));
    let since = admin_json(
        admin,
        &format!("/slo/history?route=chat&slo=interactive&since={t}"),
    )
    .await;
    let since = since["series"][0]["points"].as_array().unwrap();
    assert_eq!(since.len(), 1);
    assert_eq!(since[0]["t"], last["t"]);
    let bad = get(admin, "/slo/history?since=soon").await;
    assert_eq!(bad.status, 400);

    // The page and its parts, each with the policy that keeps it to this
    // origin.
    for (path, kind) in [
        ("/", "text/html; charset=utf-8"),
        ("/assets/page.js", "text/javascript; charset=utf-8"),
        ("/assets/load.js", "text/javascript; charset=utf-8"),
        ("/assets/bill.js", "text/javascript; charset=utf-8"),
        ("/assets/page.css", "text/css; charset=utf-8"),
    ] {
        let resp = get(admin, path).await;
        assert_eq!(resp.status, 200, "{path}");
        assert_eq!(resp.header("content-type"), Some(kind), "{path}");
        let policy = resp.header("content-security-policy").unwrap();
        assert!(
            policy.starts_with("default-src 'none'; script-src 'self'"),
            "{policy}"
        );
        assert_eq!(resp.header("x-content-type-options"), Some("nosniff"));
    }
    proxy.stop().await;
}

/// The trade-off row, drawn by Chromium: an engine whose page shows 4 and
/// then 6 requests running and waiting, with requests of class `chat`
/// meeting each load (`crate::capacity`), shows its latency-vs-load curve
/// with the knee at 4, and, with its engine and GPU pages scraped, the
/// KV/GPU activity, engine queue and tokens per GPU-second charts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_draws_latency_against_load_and_the_engine_and_gpus_needs_tools_chromium_and_node() {
    use crate::capacity::{SCRAPED, config, engine, knee_at_4_by_the_engine, main_file};
    let page = Page::serve(engine(4, 0)).await;
    // A DCGM exporter's page: the fixture of `tests/data/telemetry/`.
    let dcgm = Page::serve(
        std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/telemetry/dcgm-h100.prom"),
        )
        .unwrap(),
    )
    .await;
    let main = main_file(
        SCRAPED,
        &format!(
            "    engine_metrics: {}\n    gpu_metrics: {}\n",
            page.url(),
            dcgm.url()
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let (upstream, gates) = gated_upstream().await;
    let mut replicas = [(start(config(dir.path(), &main, upstream)).await, gates)];
    knee_at_4_by_the_engine(&page, &mut replicas).await;
    let [(proxy, _)] = replicas;
    let admin = proxy.admin_addr;
    scrape_until(admin, |s| {
        value(
            s,
            "llm_slo_capacity_concurrency",
            &[("slo", "chat"), ("window", "5m"), ("bound", "measured")],
        ) == 4.0
            && sum(s, "llm_gpus", &[]) > 0.0
    })
    .await;

    let url = format!("http://{admin}/#route=chat&slo=chat");
    let loaded = Browser::loaded_once(url, None).await;
    assert_eq!(loaded["event"], "loaded", "{loaded}");
    let load = &loaded["charts"]["load"];
    assert_eq!(load["hidden"], false, "{load}");
    assert_eq!(load["labelled"], true, "{load}");
    assert_eq!(load["knee"], "4", "{load}");
    assert_eq!(load["knee_state"], "measured", "{load}");
    // The percentile and the goodput at both loads, and the objective.
    for name in ["TTFT p95", "goodput"] {
        let (points, _) = drawn(&loaded, "load", name);
        assert!(points >= 2, "{name}: {load}");
    }
    let (_, ttft) = drawn(&loaded, "load", "TTFT p95");
    assert!(ttft > 0.5, "the break's p95 is over the threshold: {ttft}");
    assert_eq!(load["thresholds"], serde_json::json!([0.5]));
    assert!(load["note"].as_str().unwrap().contains("Knee: 4"), "{load}");
    // The engine and the GPUs: a point per refresh since the page opened.
    for (chart, series) in [
        (
            "engine",
            &["KV cache use", "SM active (mean)", "DRAM active (mean)"][..],
        ),
        ("queue", &["running", "waiting"]),
        ("per_gpu", &["good", "all"]),
    ] {
        assert_eq!(loaded["charts"][chart]["hidden"], false, "{chart}");
        assert_eq!(loaded["charts"][chart]["labelled"], true, "{chart}");
        for name in series {
            let (points, _) = drawn(&loaded, chart, name);
            assert!(points >= 1, "{chart}/{name}: {}", loaded["charts"][chart]);
        }
    }
    let (_, sm) = drawn(&loaded, "engine", "SM active (mean)");
    assert!(sm > 0.0 && sm <= 1.0, "{sm}");
    proxy.stop().await;
}

const GPU_FILE: &str = "\
slo_files: [slo/*.yaml]
routes:
  - name: chat
    upstream: http://127.0.0.1:1
    slo: interactive
    gpus: 1
    gpu_hourly_cost: 2.5
    tenant: {header: x-tenant}
    slo_request_headers: true
";

/// "Who used the GPUs", drawn by Chromium: a route with one GPU at 2.5 USD
/// an hour, tenant `a`'s requests good and tenant `b`'s all missing the
/// 1 ms TTFT they declare. Its chart has a bar per tenant, `a` all good and
/// `b` all waste, each of the amount `/slo` reports for the 5-minute
/// window, and the idle, in flight and other replicas bars; its title
/// names the currency and its note the idle and waste shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_draws_who_used_the_gpus_good_and_wasted_per_tenant_needs_tools_chromium_and_node() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(40, 10, 10), |sim| {
        config_from_files(dir.path(), GPU_FILE, &[("classes.yaml", SLO_FILE)], sim)
    })
    .await;
    let admin = proxy.admin_addr;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let headers: &[(&str, &str)] = if i % 2 == 0 {
            &[("x-tenant", "a")]
        } else {
            &[("x-tenant", "b"), ("x-slo-ttft-ms", "1")]
        };
        let (head, body) = chat_request("m1", true, headers);
        let to = proxy.proxy_addr;
        tasks.spawn(async move { raw_exchange(to, &head, &body).await.status });
        if tasks.len() == 4 {
            assert_eq!(tasks.join_next().await.unwrap().unwrap(), 200);
        }
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    settled(admin, 16.0).await;

    let shot = dir.path().join("page.png");
    let url = format!("http://{admin}/#route=chat&slo=interactive");
    let loaded = Browser::loaded_once(url, Some(shot.clone())).await;
    assert_eq!(loaded["event"], "loaded", "{loaded}");
    assert_eq!(loaded["no_gpus_note"], false, "{loaded}");
    let chart = &loaded["charts"]["bill:chat"];
    assert_eq!(chart["hidden"], false, "{chart}");
    assert_eq!(chart["labelled"], true, "{chart}");
    let title = chart["title"].as_str().unwrap();
    assert!(title.contains("USD") && title.contains("5 min"), "{title}");

    // The tenants' requests have all ended: their charges are those /slo
    // reports now, whatever the time since the page read them.
    let slo = admin_json(admin, "/slo").await;
    let bill = &slo["chargeback"]["routes"][0];
    assert_eq!(bill["gpu_set"], "chat", "{bill}");
    assert_eq!(bill["routes"], serde_json::json!(["chat"]), "{bill}");
    assert_eq!(bill["currency"], "USD", "{bill}");
    let window = &bill["windows"][1];
    assert_eq!(window["window"], "5m", "{window}");
    let charged = |tenant: &str, part: &str| -> f64 {
        let t = window["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tenant"] == tenant)
            .unwrap_or_else(|| panic!("no tenant {tenant}: {window}"));
        t[part]["cost"].as_f64().unwrap()
    };
    let drawn = |row: &str, part: &str| -> (f64, f64) {
        let p = chart["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["row"] == row && p["part"] == part)
            .unwrap_or_else(|| panic!("no {part} of {row}: {chart}"));
        (p["value"].as_f64().unwrap(), p["width"].as_f64().unwrap())
    };
    for (tenant, good, waste) in [("a", true, false), ("b", false, true)] {
        let row = format!("tenant {tenant}");
        for (part, has) in [("good", good), ("waste", waste)] {
            let (value, width) = drawn(&row, part);
            let want = charged(tenant, part);
            assert!(
                (value - want).abs() <= 1e-12,
                "{row} {part}: {value} vs {want}"
            );
            assert_eq!(value > 0.0, has, "{row} {part}: {value}");
            assert_eq!(width > 0.0, has, "{row} {part}: {width} px");
        }
    }
    for row in ["in flight", "other replicas", "idle"] {
        assert!(chart["series"][row].is_object(), "no {row} bar: {chart}");
    }
    // b's share of the charge, all of it waste.
    let waste = chart["waste_share"]
        .as_str()
        .unwrap()
        .parse::<f64>()
        .unwrap();
    let (a, b) = (charged("a", "good"), charged("b", "waste"));
    assert!((waste - b / (a + b)).abs() < 1e-9, "{waste}");
    let idle = chart["idle_share"]
        .as_str()
        .unwrap()
        .parse::<f64>()
        .unwrap();
    assert!((0.0..1.0).contains(&idle), "{idle}");
    let note = chart["note"].as_str().unwrap();
    assert!(note.contains("idle") && note.contains("wasted"), "{note}");

    let png = std::fs::read(&shot).unwrap_or_default();
    if std::env::var_os("TOKENMETER_PAGE_SCREENSHOT").is_none() {
        assert!(png.starts_with(b"\x89PNG"), "no screenshot at {shot:?}");
    }
    proxy.stop().await;
}

/// The page driver: a node process speaking JSON lines.
struct Browser {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Browser {
    /// Loads `url` (saving a screenshot as [`Browser::open`] does), reads
    /// what the page reported once loaded, and closes the browser.
    async fn loaded_once(url: String, screenshot: Option<PathBuf>) -> Value {
        tokio::task::spawn_blocking(move || {
            let mut b = Browser::open(&url, screenshot.as_deref());
            let loaded = b.next();
            b.say("done");
            loaded
        })
        .await
        .unwrap()
    }

    /// Loads `url`; with `screenshot` (or `TOKENMETER_PAGE_SCREENSHOT`,
    /// which wins), the driver saves the page there before it quits.
    fn open(url: &str, screenshot: Option<&Path>) -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/page");
        assert!(
            Path::new(&std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()))
                .exists(),
            "the page test needs Debian's chromium: apt-get install chromium"
        );
        assert!(
            dir.join("node_modules/playwright-core").exists(),
            "the page test needs playwright-core: npm ci --prefix tests/page (Node.js 20 or later)"
        );
        let mut cmd = Command::new("node");
        cmd.arg(dir.join("check.mjs")).arg(url);
        match std::env::var_os("TOKENMETER_PAGE_SCREENSHOT") {
            Some(path) => {
                cmd.arg(path);
            }
            None => {
                cmd.args(screenshot);
            }
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the page test needs Node.js: apt-get install nodejs");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The next message, within a minute.
    fn next(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the page driver stopped or said nothing for a minute");
        let msg: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(msg["problems"].as_array().map_or(0, Vec::len), 0, "{msg}");
        msg
    }

    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A chart's series `name`: how many points it drew and the largest.
fn drawn(msg: &Value, chart: &str, name: &str) -> (u64, f64) {
    let s = &msg["charts"][chart]["series"][name];
    assert!(
        s.is_object(),
        "chart {chart} has no series {name}: {}",
        msg["charts"][chart]
    );
    (s["points"].as_u64().unwrap(), s["max"].as_f64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_draws_the_traffic_and_turns_red_on_a_burst_of_slow_requests_needs_tools_chromium_and_node()
 {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;
    let admin = proxy.admin_addr;
    traffic(proxy.proxy_addr, 24).await;
    settled(admin, 24.0).await;

    let url = format!("http://{admin}/");
    let (b, loaded) = tokio::task::spawn_blocking(move || {
        let mut b = Browser::open(&url, None);
        let loaded = b.next();
        (b, loaded)
    })
    .await
    .unwrap();
    assert_eq!(loaded["event"], "loaded", "{loaded}");
    assert_eq!(loaded["options"], serde_json::json!(["chat · interactive"]));
    // No route counts GPUs: no bill, and a line that says why.
    assert_eq!(loaded["no_gpus_note"], true, "{loaded}");
    assert!(
        !loaded["charts"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("bill:")),
        "{loaded}"
    );
    for chart in loaded["charts"].as_object().unwrap().values() {
        assert!(
            chart["hidden"] == true || chart["labelled"] == true,
            "{chart}"
        );
    }
    // No engine or GPU is scraped: their charts are not shown; the
    // latency-vs-load chart is, with the load every request met.
    for chart in ["engine", "queue", "per_gpu"] {
        assert_eq!(loaded["charts"][chart]["hidden"], true, "{chart}");
    }
    assert_eq!(loaded["charts"]["load"]["hidden"], false);

    // Every chart drew the traffic: 24 requests over a point or two.
    for (chart, series) in [
        ("ttft", &["p50", "p95", "p99"][..]),
        ("tpot", &["p50", "p95", "p99"]),
        ("itl", &["p50", "p95", "p99"]),
        ("e2el", &["p50", "p95", "p99"]),
        ("goodput", &["good / judged"]),
        ("throughput", &["requests", "good"]),
        ("tokens", &["output tokens", "of good requests"]),
        (
            "phases",
            &["queue", "prefill", "decode", "outside the engine"],
        ),
        ("headers", &["headers p50", "TTFT p50"]),
        ("outcomes", &["ok", "upstream error"]),
        ("in_flight", &["peak"]),
    ] {
        for name in series {
            let (points, max) = drawn(&loaded, chart, name);
            assert!(
                points >= 1 && max > 0.0,
                "{chart}/{name}: {points} points, max {max}"
            );
        }
    }
    // Where the time goes, by the server's own phases, and said so.
    let note = loaded["charts"]["phases"]["note"].as_str().unwrap();
    assert!(note.contains("server's own timings"), "{note}");
    // Each ok request is a dot: 23.
    assert_eq!(drawn(&loaded, "scatter", "requests").0, 23);
    // Latencies in seconds on the axis, around the 10 ms schedule; the
    // thresholds drawn where the class puts them.
    let (_, ttft_max) = drawn(&loaded, "ttft", "p99");
    assert!((0.0099..0.6).contains(&ttft_max), "{ttft_max}");
    let ticks = loaded["charts"]["ttft"]["ticks"].to_string();
    assert!(ticks.contains(" ms"), "{ticks}");
    assert_eq!(
        loaded["charts"]["ttft"]["thresholds"],
        serde_json::json!([0.6])
    );
    assert_eq!(
        loaded["charts"]["tpot"]["thresholds"],
        serde_json::json!([0.22])
    );
    assert_eq!(
        loaded["charts"]["scatter"]["thresholds"],
        serde_json::json!([0.6])
    );
    assert_eq!(
        loaded["charts"]["goodput"]["thresholds"],
        serde_json::json!([0.5])
    );
    assert!(
        loaded["charts"]["goodput"]["ticks"]
            .to_string()
            .contains("100 %")
    );
    let (_, ok_max) = drawn(&loaded, "goodput", "good / judged");
    assert!(ok_max > 0.9 && ok_max <= 1.0, "{ok_max}");
    // Green before the burst, in words as well as colour.
    for objective in ["ttft", "tpot", "goodput"] {
        let row = &loaded["states"][objective];
        assert_eq!(row["state"], "ok", "{objective}: {row}");
        assert!(row["text"].as_str().unwrap().contains("OK"), "{row}");
    }

    // 12 slow requests: 23 of 36 within the TTFT threshold in 5 minutes,
    // below the 90 % target; TPOT is untouched.
    slow_burst(proxy.proxy_addr, 12).await;
    settled(admin, 36.0).await;
    let (mut b, states) = tokio::task::spawn_blocking(move || {
        let mut b = b;
        b.say("watch");
        let mut seen = Vec::new();
        loop {
            let msg = b.next();
            assert_eq!(msg["event"], "states", "{msg}");
            let refreshes = msg["refreshes"].as_u64().unwrap();
            seen.push((refreshes, msg["states"].clone()));
            if msg["states"]["ttft"] == "breach" || refreshes >= 4 {
                break;
            }
        }
        b.say("stop");
        (b, seen)
    })
    .await
    .unwrap();
    let (refreshes, last) = states.last().unwrap();
    assert_eq!(last["ttft"], "breach", "{states:?}");
    assert!(
        *refreshes <= 2,
        "turned red only after {refreshes} refreshes: {states:?}"
    );
    assert_eq!(last["tpot"], "ok", "{states:?}");

    // A narrow window: the charts stack into one column, nothing scrolls
    // sideways.
    let narrow = tokio::task::spawn_blocking(move || {
        // States of refreshes that ended as "stop" was read come first.
        let mut msg = b.next();
        while msg["event"] == "states" {
            msg = b.next();
        }
        drop(b);
        msg
    })
    .await
    .unwrap();
    assert_eq!(narrow["event"], "narrow", "{narrow}");
    let width = narrow["width"].as_f64().unwrap();
    assert!(
        narrow["scroll_width"].as_f64().unwrap() <= width,
        "{narrow}"
    );
    for w in narrow["chart_widths"].as_array().unwrap() {
        assert!(w.as_f64().unwrap() <= width, "{narrow}");
    }
    proxy.stop().await;
}
