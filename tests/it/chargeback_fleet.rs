//! The fleet's chargeback with the real Prometheus (docs/metrics.md,
//! "Several replicas, one engine"): two replicas in front of one
//! batch-limited engine, each charging its requests their share of the
//! engine's running and waiting requests, are scraped by Prometheus, which
//! evaluates the generated chargeback rules over a window of their own.
//!
//! Nothing here assumes when a scrape happened. The truth is what was
//! measured: the GPU time between two reads of a replica's page lies
//! between the instants around them; the fleet's busy time is the union
//! of the clients' own request spans; and what a rule must have recorded
//! is computed from the samples Prometheus took, at the timestamps it gave
//! them, read back from its query API.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::common::promrate::{Samples, matrix, millis, rate};
use crate::common::*;
use crate::prometheus::{
    Prometheus, api, encode, eventually, scalar, series, start_prometheus_with_rules,
};
use tokenmeter::config::{Config, Overrides};

/// The window of the test's own chargeback rules: it holds the load with
/// an idle stretch at each end, so that no request is in flight where it
/// opens and where it closes.
const WINDOW: &str = "20s";
const WINDOW_MS: i64 = 20_000;

/// Each tenant's clients through each replica, at once: tenant `t1` meets
/// its objectives, `t2` declares a TTFT of 1 ms and misses it every time.
const CLIENTS: [(usize, &str, usize); 4] = [(0, "t1", 2), (0, "t2", 1), (1, "t1", 1), (1, "t2", 2)];
/// Requests each client sends, one after the other.
const EACH: usize = 14;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `expr` evaluated at Unix time `at`.
async fn query_at(p: &Prometheus, expr: &str, at: f64) -> Value {
    api(p, &format!("query?query={}&time={at:.3}", encode(expr))).await
}

/// One streamed chat request of `tenant` through `proxy`, read to its
/// end: its span as the client saw it, and at most how much of it the
/// engine did not count it among its running or waiting requests. The
/// simulator counts a request from its arrival, when it sends the
/// response's head at once, to after its last event, whose send time it
/// stamps: so the client's span less the engine's is at most the time to
/// the head plus the time from the last event's stamp to the end.
async fn request(proxy: SocketAddr, tenant: &str) -> ((Instant, Instant), f64) {
    let mut headers = vec![("x-tenant", tenant), ("x-sim-stamp", "1")];
    if tenant == "t2" {
        headers.push(("x-slo-ttft-ms", "1"));
    }
    let (head, body) = chat_request("m1", true, &headers);
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (sent, sent_ns) = (Instant::now(), sim::stamp::mono_ns());
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let (mut answer, mut buf, mut head_ns) = (Vec::new(), [0u8; 8192], None);
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if head_ns.is_none() && answer.windows(4).any(|w| w == b"\r\n\r\n") {
            head_ns = Some(sim::stamp::mono_ns());
        }
    }
    let (ended, ended_ns) = (Instant::now(), sim::stamp::mono_ns());
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let last: u64 = answer
        .split("\"sim_sent_ns\":")
        .skip(1)
        .map(|s| {
            s[..s.find(|c: char| !c.is_ascii_digit()).unwrap()]
                .parse()
                .unwrap()
        })
        .max()
        .unwrap();
    let outside = (head_ns.unwrap() - sent_ns) + ended_ns.saturating_sub(last);
    ((sent, ended), outside as f64 / 1e9)
}

/// Each replica's page, read between two instants.
async fn read_pages(admins: &[SocketAddr]) -> Vec<Bracketed<Vec<Sample>>> {
    let mut pages = Vec::new();
    for admin in admins {
        pages.push(Bracketed::read(async { scrape(*admin).await.1 }).await);
    }
    pages
}

/// The samples of `metric` in the window that closes at `at_ms`, by
/// series.
async fn window(p: &Prometheus, metric: &str, at_ms: i64) -> Vec<Samples> {
    matrix(&query_at(p, &format!("{metric}[{WINDOW}]"), at_ms as f64 / 1000.0).await)
}

/// Polls until every replica has a sample of the GPU time whose timestamp
/// (when Prometheus began the scrape) is after `after` (Unix seconds), `n`
/// of them: the latest timestamps, by replica.
async fn samples_after(p: &Prometheus, admins: &[SocketAddr], after: f64, n: usize) -> Vec<f64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = query_at(p, "llm_gpu_seconds_total[5s]", unix_now()).await;
        let latest: Vec<Option<f64>> = admins
            .iter()
            .map(|admin| {
                let s = matrix(&answer)
                    .into_iter()
                    .find(|s| s.label("instance") == admin.to_string())?;
                let after: Vec<_> = s
                    .points
                    .iter()
                    .filter(|(t, _)| *t > millis(after))
                    .collect();
                (after.len() >= n).then(|| after.last().unwrap().0 as f64 / 1000.0)
            })
            .collect();
        if latest.iter().all(Option::is_some) {
            return latest.into_iter().flatten().collect();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {n} scrapes of every replica after {after}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A replica of one GPU at 3.6 EUR an hour (a thousandth of a euro a
/// GPU-second), reading the engine's page at `page` every 100 ms.
async fn replica(page: SocketAddr, sim: SocketAddr, dir: &Path) -> tokenmeter::app::Running {
    let slo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/slo/chat.yaml");
    let path = dir.join("tokenmeter.yaml");
    std::fs::write(
        &path,
        format!(
            "slo_files: [{}]\ncost: {{currency: EUR}}\nscrape: {{timeout: 80ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    slo: chat\n    slo_request_headers: true\n    tenant: {{header: x-tenant}}\n    gpus: 1\n    gpu_hourly_cost: 3.6\n    engine_metrics: http://{page}/metrics\n    scrape_interval: 100ms\n",
            slo.display()
        ),
    )
    .unwrap();
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    start(Config::load(&path, &overrides).unwrap()).await
}

/// Two replicas, two tenants through each, six clients on an engine of
/// four slots (so requests wait in it too).
///
/// The chargeback, from each replica's page read before and after the
/// load: each counts one GPU (its GPU time between the reads lies between
/// the instants around them); the tenants of both together were charged
/// the time the engine was busy (the union of the clients' request
/// spans), and each replica's idle time is the rest, as near as the
/// replicas' readings of the engine's page were fresh (each reads it
/// through a recorder that keeps when it asked and had it). Without the engine's
/// load in each replica's share, both would charge the whole GPU while
/// they have requests in flight, and the tenants would count the busy
/// time twice.
///
/// The rules, from Prometheus' own samples: the window holds the load
/// whole (its first and last samples of the tenants' counters are the
/// pages read before and after it), the books close at every sample, and
/// each chargeback rule recorded what Prometheus' rate of those samples,
/// at their timestamps, summed (tenants) or averaged (GPU and idle time)
/// over the replicas, gives. The same evaluation gives the waste share
/// (none for `t1`, all of `t2`'s) and the cost per million good output
/// tokens (the price times `t1`'s GPU time over its good tokens; none for
/// `t2`, which has none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_charge_one_engine_and_the_fleet_adds_up_needs_tool_prometheus() {
    let sim = start_sim(sim::SimConfig {
        slots: NonZeroU32::new(4),
        ..schedule(20, 5, 30)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // Each replica reads the engine's page through a recorder of its own.
    let pages = [serve_recorded(sim).await, serve_recorded(sim).await];
    let replicas = [
        replica(pages[0].0, sim, dir.path()).await,
        replica(pages[1].0, sim, dir.path()).await,
    ];
    let rules = slo::rules::to_yaml(&slo::rules::RuleFile {
        groups: vec![slo::rules::chargeback_group("llm", &[WINDOW])],
    })
    .unwrap();
    let admins: Vec<SocketAddr> = replicas.iter().map(|r| r.admin_addr).collect();
    let p = start_prometheus_with_rules(&admins, &rules).await;
    eventually(&p, "count(up{job=\"tokenmeter\"} == 1)", 2.0).await;

    // One request of each tenant through each replica makes their series,
    // so that every counter has samples across the whole window.
    for (replica, tenant, _) in CLIENTS {
        request(replicas[replica].proxy_addr, tenant).await;
    }
    let warmed = unix_now();
    let before = read_pages(&admins).await;
    // Two scrapes of each replica after the warm-up: the window opens
    // after it and no later than the last of them, all before the load.
    let clean = samples_after(&p, &admins, warmed, 2).await;
    let clean = clean.into_iter().fold(f64::INFINITY, f64::min);

    let load_started = Instant::now();
    let mut clients = Vec::new();
    for (replica, tenant, concurrency) in CLIENTS {
        let proxy = replicas[replica].proxy_addr;
        for _ in 0..concurrency {
            clients.push(tokio::spawn(async move {
                let mut spans = Vec::new();
                for _ in 0..EACH {
                    spans.push(request(proxy, tenant).await);
                }
                spans
            }));
        }
    }
    let (mut spans, mut outside) = (Vec::new(), 0.0);
    for client in clients {
        for (span, out) in client.await.unwrap() {
            spans.push(span);
            outside += out;
        }
    }
    let load_ended = Instant::now();
    let busy = union(&spans).as_secs_f64();
    // How late a replica could learn that the other's requests started or
    // ended: the longest stretch, during the load, from a reading of the
    // engine's page to having the next.
    let (mut stale, mut expired) = (0.0, 0.0);
    for (_, reads) in &pages {
        // A reading counts when it came within half the replica's 80 ms
        // timeout as the recorder saw it; it is fresh for three intervals.
        let (longest, gone) = staleness(
            reads,
            load_started,
            load_ended,
            Duration::from_millis(40),
            Duration::from_millis(300),
        );
        stale = f64::max(stale, longest.as_secs_f64());
        expired += gone.as_secs_f64();
    }
    let after = read_pages(&admins).await;
    let ended = unix_now();

    // The chargeback against the measured truth.
    let of = [("gpu_set", "chat")];
    let delta =
        |r: usize, name: &str| sum(&after[r].read, name, &of) - sum(&before[r].read, name, &of);
    let mut tenants = 0.0;
    let (mut gpu, mut idle) = (Vec::new(), Vec::new());
    for r in 0..admins.len() {
        assert_eq!(sum(&after[r].read, "llm_gpu_in_flight_seconds", &of), 0.0);
        let (shortest, longest) = before[r].span_to(&after[r]);
        let g = delta(r, "llm_gpu_seconds_total");
        assert!(
            (shortest - 1e-6..=longest + 1e-6).contains(&g),
            "replica {r}: one GPU's {g} s between reads {shortest}..{longest} s apart"
        );
        let parts = delta(r, "llm_request_gpu_seconds_total")
            + delta(r, "llm_gpu_other_replicas_seconds_total")
            + delta(r, "llm_gpu_idle_seconds_total");
        assert_near(parts, g, 1e-9, &format!("replica {r}'s books"));
        tenants += delta(r, "llm_request_gpu_seconds_total");
        gpu.push(g);
        idle.push(delta(r, "llm_gpu_idle_seconds_total"));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (gpu, idle) = (mean(&gpu), mean(&idle));
    eprintln!(
        "busy {busy:.4} s of {gpu:.4}: tenants {tenants:.4} ({:+.4} s), idle {idle:.4} against {:.4} ({:+.4} s); pages at most {stale:.4} s stale, none fresh for {expired:.4} s, requests outside the engine's count {outside:.4} s",
        tenants - busy,
        gpu - busy,
        idle - (gpu - busy),
    );
    // Where the load starts and where it ends, a replica charges as if the
    // other's requests had not yet started (or had not yet ended) until
    // its next reading of the engine's page: each end can be off by as
    // long as a reading was stale. While a replica has no fresh reading,
    // the engine's load is unknown to it, and it charges its own requests
    // the whole GPU and leaves nothing to the others (docs/metrics.md):
    // the fleet's tenants, and its idle time, may then count more.
    // And a request the proxy holds but the engine does not count yet (or
    // no longer) makes the others' share of the engine look smaller: the
    // fleet's tenants may count up to that time more.
    let (low, high) = (-2.0 * stale, 2.0 * stale + expired + outside);
    assert!(
        (low..=high).contains(&(tenants - busy)),
        "the tenants' {tenants} GPU-seconds against the load's {busy} s (pages at most {stale} s stale, none fresh for {expired} s, outside the engine's count {outside} s)"
    );
    assert!(
        (low..=high).contains(&(idle - (gpu - busy))),
        "idle {idle} s against {} s of {gpu} s without a request (pages at most {stale} s stale, none fresh for {expired} s)",
        gpu - busy
    );

    // The rules' evaluation whose window opens after the warm-up and no
    // later than the clean scrapes, and closes after a scrape of each
    // replica that follows the pages read after the load.
    let settled = samples_after(&p, &admins, ended, 1).await;
    let settled = settled.into_iter().fold(0.0, f64::max);
    let range = WINDOW_MS as f64 / 1000.0;
    let wait = clean + range + 0.5 - unix_now();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    }
    let answer = query_at(
        &p,
        &format!("timestamp(chargeback:llm_gpu_seconds:rate{WINDOW})"),
        clean + range,
    )
    .await;
    let at = scalar(&answer).unwrap_or_else(|| panic!("no rule evaluated: {answer}"));
    assert!(
        at > warmed + range && at >= settled,
        "the rules' evaluation at {at} has no window holding the load from {warmed} (after warm-up) to {settled} (after the load) inside {WINDOW}"
    );
    let at_ms = millis(at);
    let value = |expr: String, labels: &'static [(&'static str, &'static str)]| {
        let p = &p;
        async move {
            let answer = query_at(p, &expr, at).await;
            series(&answer, labels).unwrap_or_else(|| panic!("{expr}: {answer}"))
        }
    };

    // Prometheus' samples in the window, and what each rule must hold.
    let counters = [
        "llm_gpu_seconds_total",
        "llm_request_gpu_seconds_total",
        "llm_gpu_other_replicas_seconds_total",
        "llm_gpu_idle_seconds_total",
        "llm_gpu_in_flight_seconds",
        "llm_request_gpu_cost_total",
    ];
    let mut taken = Vec::new();
    for c in counters {
        taken.push(window(&p, c, at_ms).await);
    }
    // A scrape timestamped before the evaluation may have been stored
    // after it: a replica's last sample within a scrape interval of the
    // evaluation may then be one the rules did not see.
    let of_replica = |r: usize, c: usize, late: bool| -> Vec<Samples> {
        taken[c]
            .iter()
            .filter(|s| s.label("instance") == admins[r].to_string())
            .map(|s| {
                let mut s = s.clone();
                if late && s.points.last().is_some_and(|(t, _)| *t > at_ms - 1000) {
                    s.points.pop();
                }
                s
            })
            .collect()
    };
    for r in 0..admins.len() {
        for s in of_replica(r, 1, false) {
            let page = |page: &[Sample]| {
                page.iter()
                    .find(|x| {
                        x.name == "llm_request_gpu_seconds_total"
                            && s.labels.iter().all(|(k, v)| {
                                k == "__name__"
                                    || k == "instance"
                                    || k == "job"
                                    || x.labels.get(k).map(String::as_str) == v.as_str()
                            })
                    })
                    .map(|x| x.value)
            };
            if let Some(first) = page(&before[r].read) {
                assert_eq!(
                    s.points[0].1, first,
                    "replica {r}'s first sample in the window: {s:?}"
                );
            }
            assert_eq!(
                Some(s.points.last().unwrap().1),
                page(&after[r].read),
                "replica {r}'s last sample: {s:?}"
            );
        }
        // The books close at every sample Prometheus took.
        let gpu = of_replica(r, 0, false);
        for &(t, total) in &gpu[0].points {
            let parts: f64 = (1..5)
                .flat_map(|c| of_replica(r, c, false))
                .filter_map(|s| s.points.iter().find(|(u, _)| *u == t).map(|(_, v)| *v))
                .sum();
            assert_near(parts, total, 1e-6, "the books at a sample");
        }
    }
    let recorded = [
        value(
            format!("chargeback:llm_gpu_seconds:rate{WINDOW}"),
            &[("gpu_set", "chat")],
        )
        .await,
        value(
            format!("chargeback:llm_request_gpu_seconds:rate{WINDOW}"),
            &[("tenant", "t1")],
        )
        .await,
        value(
            format!("chargeback:llm_request_gpu_seconds:rate{WINDOW}"),
            &[("tenant", "t2")],
        )
        .await,
        value(
            format!("chargeback:llm_gpu_idle_seconds:rate{WINDOW}"),
            &[("gpu_set", "chat")],
        )
        .await,
        value(
            format!("chargeback:llm_gpu_idle:ratio_rate{WINDOW}"),
            &[("gpu_set", "chat")],
        )
        .await,
        value(
            format!("chargeback:llm_request_gpu_cost:rate{WINDOW}"),
            &[("tenant", "t2"), ("currency", "EUR")],
        )
        .await,
    ];
    let replica_rates = |late: [bool; 2], c: usize, tenant: Option<&str>| -> Vec<f64> {
        (0..admins.len())
            .map(|r| {
                of_replica(r, c, late[r])
                    .iter()
                    .filter(|s| tenant.is_none_or(|t| s.label("tenant") == t))
                    .filter_map(|s| rate(&s.points, at_ms, WINDOW_MS))
                    .sum()
            })
            .collect()
    };
    let computed = |late: [bool; 2]| {
        let gpu = mean(&replica_rates(late, 0, None));
        let idle = mean(&replica_rates(late, 3, None));
        [
            gpu,
            replica_rates(late, 1, Some("t1")).iter().sum(),
            replica_rates(late, 1, Some("t2")).iter().sum(),
            idle,
            idle / gpu,
            replica_rates(late, 5, Some("t2")).iter().sum(),
        ]
    };
    let same = |want: [f64; 6]| {
        recorded
            .iter()
            .zip(want)
            .all(|(got, want)| (got - want).abs() <= 1e-9 * want.abs().max(1e-9))
    };
    let candidates = [[false, false], [true, false], [false, true], [true, true]].map(computed);
    assert!(
        candidates.iter().any(|want| same(*want)),
        "the rules recorded {recorded:?}; Prometheus' samples give {candidates:?}"
    );
    eprintln!("rules at {at:.3}: {recorded:?}");

    let waste = format!("chargeback:llm_request_gpu_waste:ratio_rate{WINDOW}");
    assert_eq!(value(waste.clone(), &[("tenant", "t1")]).await, 0.0);
    assert_eq!(value(waste, &[("tenant", "t2")]).await, 1.0);
    let per_million = format!(
        "chargeback:llm_request_gpu_cost_per_million_good_output_tokens:ratio_rate{WINDOW}"
    );
    let t1 = value(
        per_million.clone(),
        &[("tenant", "t1"), ("currency", "EUR")],
    )
    .await;
    let want = value(
        format!(
            "1e6 * 0.001 * chargeback:llm_request_gpu_seconds:rate{WINDOW}{{tenant=\"t1\"}} / on (route, tenant) sum by (route, tenant) (rate(llm_slo_good_output_tokens_total{{tenant=\"t1\"}}[{WINDOW}]))"
        ),
        &[],
    )
    .await;
    assert!((t1 - want).abs() <= 1e-6 * want, "{t1} against {want}");
    let t2 = query_at(&p, &format!("{per_million}{{tenant=\"t2\"}}"), at).await;
    assert_eq!(series(&t2, &[]), None, "{t2}");
    // A tenant's bill a second is its GPU time at the price, good or not.
    let (bill, seconds) = (recorded[5], recorded[2]);
    assert!(
        seconds > 0.0 && (bill - 0.001 * seconds).abs() <= 1e-6 * bill,
        "{bill} against {seconds} GPU-seconds a second"
    );
    for r in replicas {
        r.stop().await;
    }
}
