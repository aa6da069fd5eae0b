//! The chargeback's windows on `/slo` (docs/metrics.md, "Chargeback", Over
//! a window), on real sockets and tokio's paused clock: requests that span
//! a window's start count only their time inside it, so the window's parts
//! add up to its total; and reading `/metrics` or `/slo` changes nothing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::common::*;
use tokenmeter::config::{Config, Overrides};

/// One request as its client saw it: its tenant, when it was sent and,
/// once it ended, when its last byte arrived.
#[derive(Debug, Clone)]
struct Span {
    tenant: &'static str,
    start: Instant,
    end: Option<Instant>,
}

/// `tenant`'s client, from `delay` on: one streamed request after the
/// other until `until`, each span noted in `spans`.
async fn client(
    proxy: SocketAddr,
    tenant: &'static str,
    delay: Duration,
    until: Instant,
    spans: Arc<Mutex<Vec<Span>>>,
) {
    tokio::time::sleep(delay).await;
    while Instant::now() < until {
        let (head, body) = chat_request("m1", true, &[("x-tenant", tenant)]);
        let start = Instant::now();
        let i = {
            let mut spans = spans.lock().unwrap();
            spans.push(Span {
                tenant,
                start,
                end: None,
            });
            spans.len() - 1
        };
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&body).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        spans.lock().unwrap()[i].end = Some(Instant::now());
    }
}

/// What each tenant's requests that ended by `now` accrued of 1 GPU over
/// `[from, now]`, each request in flight paying `1 / n`; and what the
/// requests still in flight accrued.
fn truth(spans: &[Span], from: Instant, now: Instant) -> (BTreeMap<&'static str, f64>, f64) {
    let mut edges: Vec<Instant> = vec![from, now];
    for s in spans {
        edges.push(s.start.clamp(from, now));
        edges.push(s.end.unwrap_or(now).clamp(from, now));
    }
    edges.sort();
    edges.dedup();
    let (mut ended, mut in_flight) = (BTreeMap::new(), 0.0);
    for w in edges.windows(2) {
        let (a, b) = (w[0], w[1]);
        let live: Vec<&Span> = spans
            .iter()
            .filter(|s| s.start <= a && s.end.is_none_or(|e| e >= b))
            .collect();
        let each = (b - a).as_secs_f64() / live.len().max(1) as f64;
        for s in live {
            match s.end {
                Some(_) => *ended.entry(s.tenant).or_insert(0.0) += each,
                None => in_flight += each,
            }
        }
    }
    (ended, in_flight)
}

/// A window's amount of GPU-seconds.
fn seconds(amount: &Value) -> f64 {
    amount["gpu_seconds"].as_f64().unwrap()
}

/// The chargeback of `/slo`, as JSON.
async fn chargeback(admin: SocketAddr) -> Value {
    let resp = get(admin, "/slo?format=json").await;
    assert_eq!(resp.status, 200);
    let report: Value = serde_json::from_slice(&resp.body()).unwrap();
    report["chargeback"].clone()
}

/// Two tenants' 30-second requests back to back, the second's offset by
/// 15 s, on one GPU: the 1-minute window's start falls inside requests of
/// both, and its parts (tenants good and waste, in flight, other replicas,
/// idle) add up to its total within 1 %; each tenant's figure is what its
/// requests that ended in the window accrued inside it, and in flight what
/// the others accrued there. Scraping `/metrics` again and again changes
/// nothing `/slo` says.
#[tokio::test(start_paused = true)]
async fn thirty_second_requests_across_a_minute_window_add_up() {
    // 30 tokens a second apart: a request lasts 30 s.
    let sim = start_sim(schedule(1000, 1000, 30)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("main.yaml");
    std::fs::write(
        &path,
        format!(
            "routes:\n  - name: chat\n    upstream: http://{sim}\n    gpus: 1\n    gpu_hourly_cost: 3.6\n    tenant: {{header: x-tenant}}\n"
        ),
    )
    .unwrap();
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    let config = Config::load(&path, &overrides).unwrap();
    let proxy = start(config).await;
    let t0 = Instant::now();
    let spans = Arc::new(Mutex::new(Vec::new()));
    let until = t0 + Duration::from_secs(200);
    let mut clients = Vec::new();
    for (tenant, delay) in [("a", 0), ("b", 15)] {
        let delay = Duration::from_secs(delay);
        let spans = spans.clone();
        clients.push(tokio::spawn(client(
            proxy.proxy_addr,
            tenant,
            delay,
            until,
            spans,
        )));
    }
    // `/slo` read every 10 s, as the live page does; then, mid-request for
    // both (a's requests run 0–30, 30–60…; b's 15–45…), the window.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        chargeback(proxy.admin_addr).await;
    }
    tokio::time::sleep(Duration::from_secs(7)).await;
    let now = Instant::now();
    let bill = chargeback(proxy.admin_addr).await;
    assert_eq!(
        Instant::now(),
        now,
        "the clock stood still while /slo was read"
    );
    let set = &bill["routes"][0];
    assert_eq!(set["gpu_set"], "chat");
    let minute = set["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["window"] == "1m")
        .unwrap();
    let span = minute["seconds"].as_f64().unwrap();
    assert!((60.0..=70.0).contains(&span), "{minute}");
    let total = seconds(&minute["total"]);
    assert_near(total, span, 1e-6, "one GPU's time over the window");
    let tenants = minute["tenants"].as_array().unwrap();
    let tenant = |name: &str| {
        let t = tenants.iter().find(|t| t["tenant"] == name).unwrap();
        seconds(&t["good"]) + seconds(&t["waste"])
    };
    let parts = tenants
        .iter()
        .map(|t| seconds(&t["good"]) + seconds(&t["waste"]))
        .sum::<f64>()
        + seconds(&minute["in_flight"])
        + seconds(&minute["other_replicas"])
        + seconds(&minute["idle"]);
    assert_near(parts, total, 0.01, "the window's parts against its total");

    // Each tenant's figure is what it accrued inside the window.
    let from = now - Duration::from_secs_f64(span);
    let (ended, in_flight) = truth(&spans.lock().unwrap(), from, now);
    for name in ["a", "b"] {
        assert_near(tenant(name), ended[name], 0.01, &format!("tenant {name}"));
    }
    assert_near(
        seconds(&minute["in_flight"]),
        in_flight,
        0.01,
        "the requests in flight",
    );
    // Its money follows: 3.6 an hour, a thousandth a GPU-second.
    let cost = minute["total"]["cost"].as_f64().unwrap();
    assert_near(cost, total * 0.001, 1e-9, "the window's cost");

    // Scraping `/metrics` many times (and reading `/slo`) changes
    // nothing `/slo` says: its points are taken on their own clock.
    for _ in 0..20 {
        let (_, samples) = scrape(proxy.admin_addr).await;
        assert!(!samples.is_empty());
    }
    assert_eq!(Instant::now(), now, "the clock stood still while scraped");
    assert_eq!(chargeback(proxy.admin_addr).await, bill);
    for c in clients {
        c.abort();
    }
    proxy.stop().await;
}
