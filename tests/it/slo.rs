//! SLO judging end to end: SLO files loaded from disk, requests through the
//! proxy to the simulator on real sockets, verdicts read from `/metrics`.
//!
//! Thresholds are far from the simulated schedules (10 ms against 500 ms,
//! 5 ms against 220 ms), so a slow machine does not flip a verdict, and a
//! late schedule is late by any clock: the simulator's delays are lower
//! bounds of what the proxy measures. No request takes longer than 2 s.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use tokenmeter::config::Config;

const SLO_FILE: &str = "\
classes:
  - name: interactive
    description: test class
    objectives:
      ttft: {p95: 500ms}
      tpot: {threshold: 220ms, target: 0.9}
      e2el: {p99: 12s}
  - name: bulk
    goodput: {target: 0.99}
";

const MAIN_FILE: &str = "\
slo_files: [slo/*.yaml]
routes:
  - name: chat
    upstream: http://127.0.0.1:1
    slo: interactive
    slo_by_model: {big-model: bulk}
    slo_header: x-slo-class
";

/// The config above, written to `dir`, loaded as a user's would be, on
/// ephemeral ports in front of `upstream`.
fn config(dir: &Path, upstream: SocketAddr) -> Config {
    config_from_files(dir, MAIN_FILE, &[("classes.yaml", SLO_FILE)], upstream)
}

const SLO: (&str, &str) = ("slo", "interactive");

fn verdicts(s: &[Sample], verdict: &str) -> f64 {
    sum(s, "llm_slo_requests_total", &[SLO, ("verdict", verdict)])
}

fn violations(s: &[Sample], objective: &str) -> f64 {
    sum(
        s,
        "llm_slo_violations_total",
        &[SLO, ("objective", objective)],
    )
}

#[tokio::test]
async fn exactly_the_requests_over_a_threshold_are_bad() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;

    // (count, headers): 7 within every threshold (5 tokens each), 4 with a
    // late first token, 3 with slow tokens, 1 of those with both. Slow
    // requests have 3 tokens so good output tokens tell them apart.
    let slow_ttft = [("x-sim-ttft-ms", "800"), ("x-sim-tokens", "3")];
    let slow_tpot = [("x-sim-itl-ms", "400"), ("x-sim-tokens", "3")];
    let both = [
        ("x-sim-ttft-ms", "800"),
        ("x-sim-itl-ms", "400"),
        ("x-sim-tokens", "3"),
    ];
    let plan: Vec<(usize, &[(&str, &str)])> =
        vec![(7, &[]), (3, &slow_ttft), (2, &slow_tpot), (1, &both)];
    let n: usize = plan.iter().map(|(count, _)| count).sum();

    let mut tasks = tokio::task::JoinSet::new();
    for (count, headers) in plan {
        for _ in 0..count {
            let (head, body) = chat_request("m1", true, headers);
            let addr = proxy.proxy_addr;
            tasks.spawn(async move { raw_exchange(addr, &head, &body).await });
        }
    }
    while let Some(resp) = tasks.join_next().await {
        let resp = resp.unwrap();
        assert_eq!(resp.status, 200);
        assert!(!resp.truncated);
    }
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[]) >= n as f64
    })
    .await;

    assert_eq!(
        sum(s.as_slice(), "llm_requests_total", &[("outcome", "ok")]),
        n as f64
    );
    assert_eq!(verdicts(&s, "bad"), 6.0);
    assert_eq!(verdicts(&s, "good"), 7.0);
    assert_eq!(violations(&s, "ttft"), 4.0);
    assert_eq!(violations(&s, "tpot"), 3.0);
    // Declared, and counted as zero rather than absent.
    assert!(s.iter().any(|x| x.name == "llm_slo_violations_total"
        && x.labels.get("objective").map(String::as_str) == Some("e2el")));
    assert_eq!(violations(&s, "e2el"), 0.0);
    assert_eq!(
        sum(&s, "llm_slo_good_output_tokens_total", &[SLO]),
        7.0 * 5.0
    );

    // Each threshold is an exact bucket bound, reading compliance exactly.
    let bucket = |name: &str, le: &str| {
        value(
            &s,
            &format!("llm_{name}_bucket"),
            &[SLO, ("model", "m1"), ("le", le)],
        )
    };
    assert_eq!(bucket("time_to_first_token_seconds", "0.5"), (n - 4) as f64);
    assert_eq!(
        bucket("time_per_output_token_seconds", "0.22"),
        (n - 3) as f64
    );
    assert_eq!(bucket("e2e_request_latency_seconds", "12"), n as f64);

    // The targets and thresholds, for PromQL.
    let target = |objective: &str| {
        value(
            &s,
            "llm_slo_objective_target",
            &[SLO, ("objective", objective)],
        )
    };
    assert_eq!(target("ttft"), 0.95);
    assert_eq!(target("tpot"), 0.9);
    assert_eq!(target("e2el"), 0.99);
    assert_eq!(
        value(
            &s,
            "llm_slo_objective_target",
            &[("slo", "bulk"), ("objective", "goodput")]
        ),
        0.99
    );
    assert_eq!(
        value(
            &s,
            "llm_slo_threshold_seconds",
            &[SLO, ("objective", "tpot")]
        ),
        0.22
    );
    proxy.stop().await;
}

#[tokio::test]
async fn aborted_requests_are_bad_only_once_a_threshold_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;
    let no_token_soon = [("x-sim-ttft-ms", "5000")];

    // Gone at once, long before the 500 ms TTFT threshold: not judged.
    drop(open_stream(proxy.proxy_addr, 1, &no_token_soon).await);
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "client_abort")]) >= 1.0
    })
    .await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(sum(&s, "llm_slo_requests_total", &[]), 0.0);

    // Still waiting for a first token 700 ms in: the TTFT threshold passed
    // before the client gave up, so the request is bad.
    let stream = open_stream(proxy.proxy_addr, 1, &no_token_soon).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    drop(stream);
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "client_abort")]) >= 2.0
    })
    .await;
    assert_eq!(verdicts(&s, "bad"), 1.0);
    assert_eq!(verdicts(&s, "good"), 0.0);
    assert_eq!(violations(&s, "ttft"), 1.0);
    assert_eq!(violations(&s, "tpot") + violations(&s, "e2el"), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn failed_requests_are_bad_only_once_a_threshold_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;

    // Reset after 2 fast tokens: failed before any threshold, not judged.
    let (head, body) = chat_request("m1", true, &[("x-sim-abort-after", "2")]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert!(resp.truncated);
    // An error status: failed at once, not judged.
    let (head, body) = chat_request("m1", true, &[("x-sim-status", "503")]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        503
    );
    // First token 800 ms late, then reset: bad on TTFT.
    let (head, body) = chat_request(
        "m1",
        true,
        &[("x-sim-ttft-ms", "800"), ("x-sim-abort-after", "1")],
    );
    assert!(raw_exchange(proxy.proxy_addr, &head, &body).await.truncated);

    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "upstream_error")]) >= 3.0
    })
    .await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        3.0
    );
    assert_eq!(verdicts(&s, "bad"), 1.0);
    assert_eq!(verdicts(&s, "good"), 0.0);
    assert_eq!(violations(&s, "ttft"), 1.0);
    assert_eq!(violations(&s, "tpot") + violations(&s, "e2el"), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn class_comes_from_the_header_the_model_or_the_route() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;
    let cases: [(&str, &[(&str, &str)]); 4] = [
        ("m1", &[]),
        ("big-model", &[]),
        ("m1", &[("x-slo-class", "bulk")]),
        // Not a defined class: falls back to the route's, bounding the label.
        ("m1", &[("x-slo-class", "made-up")]),
    ];
    for (model, headers) in cases {
        let (head, body) = chat_request(model, true, headers);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    }
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[]) >= 4.0
    })
    .await;
    let good = |slo: &str| {
        sum(
            &s,
            "llm_slo_requests_total",
            &[("slo", slo), ("verdict", "good")],
        )
    };
    assert_eq!(good("interactive"), 2.0);
    assert_eq!(good("bulk"), 2.0);
    assert!(
        !s.iter()
            .any(|x| x.labels.get("slo").map(String::as_str) == Some("made-up"))
    );
    proxy.stop().await;
}

#[tokio::test]
async fn live_status_reports_the_schedule_per_route_and_class() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| config(dir.path(), sim)).await;

    // 7 on the schedule (TTFT 10 ms, 5 tokens 5 ms apart), 3 with a first
    // token 800 ms late (3 tokens): K/N = 7/10 good.
    let slow = [("x-sim-ttft-ms", "800"), ("x-sim-tokens", "3")];
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10 {
        let headers: &[(&str, &str)] = if i < 3 { &slow } else { &[] };
        let (head, body) = chat_request("m1", true, headers);
        let addr = proxy.proxy_addr;
        tasks.spawn(async move { raw_exchange(addr, &head, &body).await });
    }
    while let Some(resp) = tasks.join_next().await {
        assert_eq!(resp.unwrap().status, 200);
    }
    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[]) >= 10.0
    })
    .await;

    let report = admin_json(proxy.admin_addr, "/slo").await;
    assert_eq!(report["windows"], serde_json::json!(["1m", "5m", "1h"]));
    let series = report["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{report}");
    let series = &series[0];
    assert_eq!(
        (series["route"].as_str(), series["slo"].as_str()),
        (Some("chat"), Some("interactive"))
    );
    assert_eq!(series["objectives"][0]["threshold_seconds"], 0.5);
    for w in series["windows"].as_array().unwrap() {
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        assert_eq!(w["requests"], 10, "{w}");
        assert_eq!(w["ok"], 10);
        assert_eq!(w["output_tokens"], 7 * 5 + 3 * 3);
        let g = &w["goodput"];
        assert_eq!((g["good"].as_u64(), g["bad"].as_u64()), (Some(7), Some(3)));
        assert_eq!(f(&g["ratio"]), 7.0 / 10.0);
        // No goodput target in this class: no burn rate.
        assert!(g["burn_rate"].is_null());
        assert!(f(&g["rate"]) > 0.0 && f(&w["request_rate"]) >= f(&g["rate"]));
        let ttft = &w["compliance"][0];
        assert_eq!(ttft["objective"], "ttft");
        assert_eq!(
            (ttft["judged"].as_u64(), ttft["met"].as_u64()),
            (Some(10), Some(7))
        );
        // (1 − 0.7) / (1 − 0.95) = 6.
        assert!((f(&ttft["burn_rate"]) - 6.0).abs() < 1e-9, "{ttft}");
        // Quantiles: rank ⌊q (n − 1)⌋; the schedule is a lower bound (1 %
        // sketch error), the upper bounds are far from the other mode.
        let p = |metric: &str, q: &str| f(&w[metric][q]);
        assert!(p("ttft", "p50") >= 0.010 * 0.99, "{w}");
        assert!(p("ttft", "p50") < 0.4, "{w}");
        assert!(p("ttft", "p99") >= 0.8 * 0.99, "{w}");
        assert_eq!(w["ttft"]["count"], 10);
        assert_eq!(w["tpot"]["count"], 10);
        assert_eq!(w["e2el"]["count"], 10);
        assert!(p("e2el", "p99") >= 0.8 * 0.99);
        // One ITL gap per pair of consecutive tokens.
        assert_eq!(w["itl"]["count"], 7 * 4 + 3 * 2);
        assert!(p("itl", "p50") < 0.4);
    }

    // The same as a table, for a person.
    let text = get(proxy.admin_addr, "/slo?format=text").await;
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let text = String::from_utf8(text.body()).unwrap();
    assert!(text.contains("route chat  slo interactive"), "{text}");
    assert!(text.contains("70.00%"), "{text}");
    let html = raw_exchange(
        proxy.admin_addr,
        "GET /slo HTTP/1.1\r\nhost: admin\r\naccept: text/html\r\nconnection: close\r\n\r\n",
        b"",
    )
    .await;
    assert_eq!(
        html.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(String::from_utf8(html.body()).unwrap().contains("<pre>"));
    proxy.stop().await;
}

/// A request on a route with `slo_request_headers` that declares its own
/// objectives is judged against them under `declared`: good and bad by
/// its own bounds, a bound past the route's cap judged at the cap; an
/// implausible value is refused, counted, and the request judged by its
/// class; a route without the setting ignores the headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_objectives_judge_the_request_that_declares_them() {
    let dir = tempfile::tempdir().unwrap();
    let main = "\
slo_files: [slo/*.yaml]
routes:
  - name: strict
    match: {host: strict.test}
    upstream: http://127.0.0.1:1
    slo: interactive
  - name: chat
    upstream: http://127.0.0.1:1
    slo: interactive
    slo_header: x-slo-class
    slo_request_headers: true
    slo_request_max: {ttft: 300ms}
";
    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 5), |sim| {
        config_from_files(dir.path(), main, &[("classes.yaml", SLO_FILE)], sim)
    })
    .await;
    // (model, headers, host): the model tells the requests apart in the
    // counters. Thresholds are far from the schedules.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        // Within its own TTFT bound, 2 s capped at the route's 300 ms (and
        // its class asks for nothing else).
        ("good", vec![("x-slo-ttft-ms", "2000")], "test"),
        // A 400 ms first token against its own 50 ms.
        (
            "late",
            vec![("x-slo-ttft-ms", "50"), ("x-sim-ttft-ms", "400")],
            "test",
        ),
        // 60 ms between tokens against its own 5.5 ms TPOT; declared over
        // the `slo_header` class.
        (
            "slow",
            vec![
                ("x-slo-tpot-ms", "5.5"),
                ("x-sim-itl-ms", "60"),
                ("x-slo-class", "bulk"),
            ],
            "test",
        ),
        // Asks for 10 minutes; judged at the route's 300 ms cap.
        (
            "capped",
            vec![("x-slo-ttft-ms", "600000"), ("x-sim-ttft-ms", "600")],
            "test",
        ),
        // Implausible: refused, judged by its class (good there).
        (
            "refused",
            vec![("x-slo-ttft-ms", "soon"), ("x-slo-e2el-ms", "0")],
            "test",
        ),
        // Not declared: its class.
        ("plain", vec![], "test"),
        // A route that does not read declarations: its class.
        ("ignored", vec![("x-slo-ttft-ms", "1")], "strict.test"),
    ];
    let n = cases.len();
    for (model, headers, host) in cases {
        let (head, body) = chat_request(model, true, &headers);
        let head = head.replace("host: test", &format!("host: {host}"));
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200,
            "{model}"
        );
    }
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[]) == n as f64
    })
    .await;
    let verdict = |model: &str, slo: &str| {
        let of = |v| {
            sum(
                &s,
                "llm_slo_requests_total",
                &[("model", model), ("slo", slo), ("verdict", v)],
            )
        };
        match (of("good"), of("bad")) {
            (1.0, 0.0) => "good",
            (0.0, 1.0) => "bad",
            other => panic!("{model} under {slo}: {other:?}"),
        }
    };
    assert_eq!(verdict("good", "declared"), "good");
    assert_eq!(verdict("late", "declared"), "bad");
    assert_eq!(verdict("slow", "declared"), "bad");
    assert_eq!(verdict("capped", "declared"), "bad");
    assert_eq!(verdict("refused", "interactive"), "good");
    assert_eq!(verdict("plain", "interactive"), "good");
    assert_eq!(verdict("ignored", "interactive"), "good");
    let declared = ("slo", "declared");
    let violated = |o| {
        sum(
            &s,
            "llm_slo_violations_total",
            &[declared, ("objective", o)],
        )
    };
    assert_eq!(
        (violated("ttft"), violated("tpot"), violated("e2el")),
        (2.0, 1.0, 0.0)
    );
    let refused = |o| {
        sum(
            &s,
            "tokenmeter_slo_declarations_refused_total",
            &[("route", "chat"), ("objective", o)],
        )
    };
    assert_eq!(
        (refused("ttft"), refused("tpot"), refused("e2el")),
        (1.0, 0.0, 1.0)
    );
    let report = admin_json(proxy.admin_addr, "/slo").await;
    let series = report["series"].as_array().unwrap();
    let own = series
        .iter()
        .find(|s| s["route"] == "chat" && s["slo"] == "declared")
        .unwrap_or_else(|| panic!("no declared series: {report}"));
    let g = &own["windows"][0]["goodput"];
    assert_eq!(
        (g["good"].as_u64(), g["bad"].as_u64()),
        (Some(1), Some(3)),
        "{own}"
    );
    proxy.stop().await;
}
