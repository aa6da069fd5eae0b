//! The latency–load curve and its knee end to end: a batch-limited
//! simulator of 4 slots under closed-loop load at concurrency 1, 2, 3, 4,
//! 5, 6 and 8, through one proxy (the load is its requests in flight) and
//! through two (the load is the engine's running and waiting requests,
//! read from the simulator's `/metrics`; without the phase of 5, see
//! there), against a class with TTFT p95 ≤ 500 ms; the knee is read from
//! `/metrics` and `/slo`.
//!
//! A request holds its slot 700 ms (50 ms to its first token, then 26
//! more tokens 25 ms apart). The `c` clients of a phase start 20 ms apart
//! and send back to back, so the 4 slots' requests run about in step: up
//! to 4 clients never wait, and from 5 on, each round's fifth and later
//! requests wait for a slot until the round's first ends, 700 − 4 × 20 =
//! 620 ms at least, well past the 500 ms threshold, while the others'
//! TTFT is 50 ms. Under this pacing a client's request meets exactly `c`
//! requests in flight (itself included), and the engine's page reads `c`
//! running and waiting. So the knee is 4, measured (loads 5 and 6 share a
//! bucket that breaks), whatever the machine's speed: delays only lengthen
//! the waits of those that wait.
//!
//! Each client's first request in a phase is of another class (`warmup`),
//! whose curve is apart, though it loads the route and model like any
//! other: when `c`
//! clients start at once, the engine's latest scrape was read before the
//! phase's first waiters queued, so their load is read low; the phase's
//! later requests read it right.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use tokenmeter::config::Config;

pub(crate) const SLO_FILE: &str = "\
classes:
  - name: chat
    description: TTFT p95 within 500 ms
    objectives:
      ttft: {p95: 500ms}
  - name: warmup
    description: a curve apart
    objectives:
      e2el: {p50: 60s}
";

/// Routes model `m`, allow-listed so that its label is its own from the
/// first request, in class `chat` or the one `x-slo-class` names; `top`
/// and `route` are more keys at the top and of the route.
pub(crate) fn main_file(top: &str, route: &str) -> String {
    format!(
        "slo_files: [slo/*.yaml]\n\
         metrics:\n  models:\n    allow: [m]\n\
         {top}\
         routes:\n  - name: chat\n    upstream: http://127.0.0.1:1\n    slo: chat\n    slo_header: x-slo-class\n{route}"
    )
}

/// 4 slots, each request held 700 ms, serving model `m` (its page's
/// `model_name`).
pub(crate) fn four_slots() -> sim::SimConfig {
    sim::SimConfig {
        slots: std::num::NonZeroU32::new(4),
        model: "m".to_owned(),
        ..schedule(50, 25, 27)
    }
}

/// One phase of closed-loop load: `c` clients, started 20 ms apart, client
/// `i` sending to `proxies[i % len]` one warm-up request then `n` more,
/// each as soon as the last one's answer has arrived.
async fn phase(proxies: &[SocketAddr], c: usize, n: usize) {
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..c {
        let proxy = proxies[i % proxies.len()];
        clients.spawn(async move {
            tokio::time::sleep(Duration::from_millis(20 * i as u64)).await;
            for class in std::iter::once("warmup").chain(std::iter::repeat_n("chat", n)) {
                let (head, body) = chat_request("m", true, &[("x-slo-class", class)]);
                let resp = raw_exchange(proxy, &head, &body).await;
                assert_eq!(resp.status, 200);
                assert!(!resp.truncated);
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.unwrap();
    }
}

/// The phases, each `(concurrency, requests of class chat per client)`.
pub(crate) async fn ramp(proxies: &[SocketAddr], plan: &[(usize, usize)]) {
    for &(c, n) in plan {
        phase(proxies, c, n).await;
    }
}

/// Requests of class `chat` a plan sends to `proxy` of `proxies`.
fn sent(plan: &[(usize, usize)], proxies: usize, proxy: usize) -> f64 {
    plan.iter()
        .map(|&(c, n)| (0..c).filter(|i| i % proxies == proxy).count() * n)
        .sum::<usize>() as f64
}

const M: (&str, &str) = ("slo", "chat");

/// Checks what `proxy` exported of model `m` once it has counted all
/// `judged` requests: the knee at 4, measured, in every window; the
/// headroom against the idle route; the buckets behind the knee.
async fn knee_is_4(proxy: &tokenmeter::app::Running, judged: f64) {
    // Once the route is idle: where the engine is scraped, its reading
    // says so by the next scrape.
    let idle = |s: &[Sample]| {
        ["1m", "5m", "1h"].iter().all(|w| {
            let labels = [M, ("window", *w), ("bound", "measured")];
            value(s, "llm_slo_headroom_concurrency", &labels) == 4.0
        })
    };
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_load_requests_total", &[M]) >= judged && idle(s)
    })
    .await;
    assert_eq!(sum(&s, "llm_slo_load_requests_total", &[M]), judged);
    let bucket = |le: &str, verdict: &str| {
        value(
            &s,
            "llm_slo_load_requests_total",
            &[M, ("load_le", le), ("verdict", verdict)],
        )
    };
    let buckets: Vec<String> = s
        .iter()
        .filter(|x| x.name == "llm_slo_load_requests_total" && x.labels["slo"] == "chat")
        .map(|x| {
            format!(
                "{}/{}={}",
                x.labels["load_le"], x.labels["verdict"], x.value
            )
        })
        .collect();
    // Not vacuous: the bucket of load 4 has enough requests to be believed
    // and held, and the one above it enough to break.
    assert!(bucket("4", "good") >= 20.0, "{buckets:?}");
    assert!(
        bucket("4", "bad") <= bucket("4", "good") * 0.05,
        "{buckets:?}"
    );
    let six = bucket("6", "good") + bucket("6", "bad");
    assert!(
        six >= 20.0 && bucket("6", "bad") > six * 0.05,
        "{buckets:?}"
    );
    for window in ["1m", "5m", "1h"] {
        let labels = [M, ("window", window), ("bound", "measured")];
        assert_eq!(
            value(&s, "llm_slo_capacity_concurrency", &labels),
            4.0,
            "{window}"
        );
        // Nothing in flight now: all of the knee is left.
        assert_eq!(
            value(&s, "llm_slo_headroom_concurrency", &labels),
            4.0,
            "{window}"
        );
        assert_eq!(
            sum(
                &s,
                "llm_slo_capacity_concurrency",
                &[M, ("window", window), ("bound", "lower")]
            ),
            0.0
        );
    }

    let slo = admin_json(proxy.admin_addr, "/slo").await;
    let curve = slo["capacity"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["slo"] == "chat")
        .unwrap_or_else(|| panic!("no curve of chat: {slo}"));
    assert_eq!(
        (&curve["route"], &curve["model"]),
        (&"chat".into(), &"m".into())
    );
    assert_eq!(curve["min_judged"], 20);
    assert_eq!(curve["load_now"], 0);
    for w in curve["windows"].as_array().unwrap() {
        let knee = &w["knee"];
        assert_eq!(knee["state"], "measured", "{w}");
        assert_eq!(knee["concurrency"], 4, "{w}");
        assert_eq!(knee["bound"], "measured", "{w}");
        assert_eq!(knee["first_break"], 5, "{w}");
        assert_eq!(knee["headroom"], 4, "{w}");
        let four = w["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["load_le"] == "4")
            .unwrap();
        assert_eq!(four["state"], "holds", "{w}");
    }
    let text = String::from_utf8(get(proxy.admin_addr, "/slo?format=text").await.body()).unwrap();
    assert!(
        text.contains("capacity  route chat  model m  slo chat  load now 0"),
        "{text}"
    );
}

fn config(dir: &Path, main: &str, upstream: SocketAddr) -> Config {
    config_from_files(dir, main, &[("chat.yaml", SLO_FILE)], upstream)
}

/// One proxy, counting the requests in flight to the route and model: a
/// request meets as many as there are clients, itself included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_slot_engine_has_its_knee_at_4_by_the_requests_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let main = main_file("", "");
    let Stack { proxy, .. } =
        Stack::start(four_slots(), |sim| config(dir.path(), &main, sim)).await;
    let plan = [(1, 2), (2, 2), (3, 2), (4, 6), (5, 4), (6, 4), (8, 2)];
    ramp(&[proxy.proxy_addr], &plan).await;
    knee_is_4(&proxy, sent(&plan, 1, 0)).await;
}

/// Two proxies in front of one engine whose page they scrape: each sees
/// half the clients, but counts their load by the engine's running and
/// waiting requests, so each finds the engine's knee, 4, not 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_find_the_engines_knee_by_its_running_and_waiting_requests() {
    let sim = start_sim(four_slots()).await;
    // The route's engine is the simulator's page, scraped several times a
    // round, with room for a busy machine's late scrapes (a reading is
    // served for three intervals).
    let main = main_file(
        "scrape:\n  interval: 200ms\n  timeout: 150ms\n",
        &format!("    engine_metrics: http://{sim}/metrics\n"),
    );
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = start(config(dirs[0].path(), &main, sim)).await;
    let b = start(config(dirs[1].path(), &main, sim)).await;
    // Each proxy has enough requests of its own in the buckets of loads 4
    // and 5–6 to believe them. No phase of 5: a scrape that falls between
    // one request's end and its client's next (a few milliseconds, more
    // on a busy machine) reads one less, and at 5 that is the bucket of 4;
    // at 6 and 8 such a reading stays in the bucket above the knee.
    let plan = [(1, 2), (2, 2), (3, 2), (4, 12), (6, 7), (8, 3)];
    ramp(&[a.proxy_addr, b.proxy_addr], &plan).await;
    knee_is_4(&a, sent(&plan, 2, 0)).await;
    knee_is_4(&b, sent(&plan, 2, 1)).await;
}
