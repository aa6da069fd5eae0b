//! GPU sets on real sockets (docs/metrics.md, "Chargeback"): two routes in
//! front of one DCGM page share one ledger, whose GPU-seconds, joules and
//! cost are counted once, whose parts add up per set, and whose batch the
//! requests of both routes share; the page is scraped once for both.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::dcgm::Dcgm;
use crate::common::*;

/// One request as its client saw it: its route, when it was sent and when
/// its last byte arrived.
struct Span {
    /// Its `x-request-id`: its access line's `request_id`.
    id: String,
    route: &'static str,
    start: Instant,
    end: Instant,
}

/// Sends one streamed chat request to `route` (its path prefix) for
/// tenant `route` and reads the whole answer.
async fn request(proxy: SocketAddr, route: &'static str) -> Span {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let id = format!("sets-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let (head, body) = chat_request("m1", true, &[("x-tenant", route), ("x-request-id", &id)]);
    let head = head.replacen("POST /", &format!("POST /{route}/"), 1);
    let start = Instant::now();
    let answer = raw_exchange(proxy, &head, &body).await;
    let end = Instant::now();
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body())
    );
    Span {
        id,
        route,
        start,
        end,
    }
}

/// Clients of each route, `(route, concurrency)`, each sending `each`
/// requests one after the other, all at once: every request's span.
async fn load(proxy: SocketAddr, clients: &[(&'static str, usize)], each: usize) -> Vec<Span> {
    let mut tasks = Vec::new();
    for &(route, concurrency) in clients {
        for _ in 0..concurrency {
            tasks.push(tokio::spawn(async move {
                let mut spans = Vec::new();
                for _ in 0..each {
                    spans.push(request(proxy, route).await);
                }
                spans
            }));
        }
    }
    let mut spans = Vec::new();
    for task in tasks {
        spans.extend(task.await.unwrap());
    }
    spans
}

/// Each route's share of `gpus` GPUs over `spans`: the integral, over
/// every moment some request is in flight on either route, of its
/// requests in flight over all of them.
fn shares(spans: &[Span], gpus: f64) -> BTreeMap<&'static str, f64> {
    let mut edges: Vec<(Instant, i32, &'static str)> = Vec::new();
    for s in spans {
        edges.push((s.start, 1, s.route));
        edges.push((s.end, -1, s.route));
    }
    edges.sort_by_key(|&(at, step, _)| (at, step));
    let mut in_flight: BTreeMap<&'static str, i32> = BTreeMap::new();
    let mut shares = BTreeMap::new();
    let mut last = edges[0].0;
    for (at, step, route) in edges {
        let all: i32 = in_flight.values().sum();
        if all > 0 {
            let span = at.duration_since(last).as_secs_f64();
            for (r, n) in &in_flight {
                *shares.entry(*r).or_insert(0.0) += gpus * span * f64::from(*n) / f64::from(all);
            }
        }
        *in_flight.entry(route).or_insert(0) += step;
        last = at;
    }
    shares
}

/// The `gpu_set` values of `name`'s series.
fn sets(s: &[Sample], name: &str) -> Vec<String> {
    let mut sets: Vec<String> = s
        .iter()
        .filter(|x| x.name == name)
        .filter_map(|x| x.labels.get("gpu_set").cloned())
        .collect();
    sets.sort();
    sets.dedup();
    sets
}

/// Routes `one` and `two` in front of one DCGM page of 2 GPUs drawing
/// 200 W each, priced at 3.6 an hour, with requests on both at once: the
/// page is scraped once an interval, not once per route; the set
/// `one+two` counts 2 GPUs (its GPU-seconds grow at 2 a second, not 4),
/// its joules the page's growth and its cost at 0.001 a GPU-second,
/// each once; its parts add up; and each route's requests are charged
/// their share of the batch both routes' requests make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routes_on_one_gpu_page_count_its_gpus_once_and_share_its_batch() {
    let dcgm = Arc::new(Dcgm::new(vec![("GPU-a", 1e9), ("GPU-b", 2e9)]));
    let made = dcgm.clone();
    let page = serve_made(move || made.page()).await;
    let sim = start_sim(sim::SimConfig {
        slots: NonZeroU32::new(4),
        ..schedule(40, 8, 25)
    })
    .await;
    let route = |name: &str| {
        format!(
            "  - name: {name}\n    match: {{path_prefix: /{name}/}}\n    strip_prefix: true\n    upstream: http://{sim}\n    gpu_metrics: http://{page}/metrics\n    gpu_hourly_cost: 3.6\n    tenant: {{header: x-tenant}}\n"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("main.yaml");
    let text = format!(
        "scrape: {{interval: 200ms, timeout: 150ms}}\nroutes:\n{}{}",
        route("one"),
        route("two")
    );
    std::fs::write(&path, text).unwrap();
    let mut child = serve(&[OsStr::new("--config"), path.as_os_str()]);
    let set = [("gpu_set", "one+two")];
    // Two readings give the first joules.
    let first = scrape_until(child.admin, |s| {
        sum(s, "llm_gpu_energy_joules_total", &set) > 0.0
    })
    .await;
    let (from, fetched_from) = (Instant::now(), dcgm.served.lock().unwrap().len());

    let spans = load(child.proxy, &[("one", 2), ("two", 1)], 6).await;
    // The joules of the requests' last moments come at the counters'
    // next move; then the counters stop, so that the pages the proxy has
    // read are all that counts.
    dcgm.pages_more(2).await;
    dcgm.freeze();
    dcgm.pages_more(2).await;
    let (_, s) = scrape(child.admin).await;
    let (to, fetched_to) = (Instant::now(), dcgm.served.lock().unwrap().len());
    let elapsed = to.duration_since(from).as_secs_f64();

    // One page, one scrape an interval (at most 5 a second, not 10),
    // whatever the routes.
    let per_second = (fetched_to - fetched_from) as f64 / elapsed;
    assert!(
        fetched_to > fetched_from && per_second < 7.0,
        "{per_second} fetches a second"
    );
    // One set, under the routes' names joined; each route shows its GPUs.
    for family in ["llm_gpu_seconds_total", "llm_gpu_energy_joules_total"] {
        assert_eq!(sets(&s, family), ["one+two"], "{family}");
    }
    assert_eq!(
        sets(&s, "llm_request_gpu_seconds_total"),
        ["one+two"],
        "the requests of both routes"
    );
    for r in ["one", "two"] {
        assert_eq!(sum(&s, "llm_gpus", &[("route", r)]), 2.0, "{r}");
    }

    // Counted once: 2 GPUs over the time between the two scrapes.
    let grew = sum(&s, "llm_gpu_seconds_total", &set) - sum(&first, "llm_gpu_seconds_total", &set);
    assert_near(grew, 2.0 * elapsed, 0.1, "GPU-seconds between two scrapes");
    let seconds = sum(&s, "llm_gpu_seconds_total", &set);
    let cost = sum(&s, "llm_gpu_cost_total", &set);
    assert_near(cost, seconds * 0.001, 1e-9, "cost");
    // The joules counted once: the counters' growth over the pages the
    // proxy read.
    let failures: f64 = ["one", "two"]
        .iter()
        .map(|r| {
            sum(
                &s,
                "tokenmeter_scrape_failures_total",
                &[("route", r), ("target", "gpu")],
            )
        })
        .sum();
    let truth = dcgm.truth(Duration::from_millis(600), failures as usize);
    let joules = sum(&s, "llm_gpu_energy_joules_total", &set);
    let rounding = 1e-9 * truth.high;
    assert!(
        joules >= truth.low - rounding && joules <= truth.high + rounding,
        "{joules} J against the page's growth {truth:?} ({failures} failed scrapes)"
    );
    assert_eq!(sum(&s, "tokenmeter_gpu_energy_resets_total", &set), 0.0);

    for quantity in ["seconds", "energy_joules", "cost"] {
        let (parts, whole) = parts_and_total(&s, "one+two", quantity);
        assert_near(parts, whole, 0.005, quantity);
    }
    // Each route's requests were charged their share of the one batch:
    // the shares of the spans the clients measured, to within what their
    // spans and the proxy's own differ by, on 2 GPUs.
    let lines = access_lines(&mut child.lines, spans.len());
    let widened: f64 = spans
        .iter()
        .map(|s| widening(&lines, &s.id, s.end - s.start))
        .sum();
    let charged = |r| sum(&s, "llm_request_gpu_seconds_total", &[("route", r)]);
    let want = shares(&spans, 2.0);
    for (r, want) in &want {
        let got = charged(r);
        assert!(
            (got - want).abs() <= 2.0 * widened,
            "route {r}'s GPU-seconds: {got} against {want}, the spans {widened} s apart"
        );
    }
    let busy: f64 = want.values().sum();
    let both = charged("one") + charged("two");
    assert!(
        (both - busy).abs() <= 2.0 * widened,
        "both routes: {both} against {busy}, the spans {widened} s apart"
    );
}
