//! The latency–load curve and its knee end to end, at loads the test sets:
//! the proxy in front of an upstream whose answers the test writes
//! (`gated_upstream`), against class `chat` (TTFT p95 ≤ 500 ms, the
//! shared fixture). Each request of class `chat` meets a load the test
//! chose: by the requests in flight through one proxy, held open by the
//! test, or, through two proxies, by the running and waiting requests of
//! an engine page the test writes and both scrape. 20 requests meet a load
//! of 4 and are answered at once; 20 meet 5 or 6, and 2 of those have
//! their first token held 600 ms. So the bucket of 4 holds and that of 5–6
//! breaks (2 of 20 late is 90 % within the threshold), and the knee is 4,
//! measured: it follows from the loads and the holds, which the scheduler
//! can only lengthen (a held token is never early, and a request answered
//! at once has all of 500 ms to spare). The knee is read from `/metrics`
//! and from `/slo`'s table, compared whole.
//!
//! The rule itself, bucket by bucket and window by window on a told
//! clock, is tested in `crates/slo/src/capacity/`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokenmeter::config::Config;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::*;

/// The class of the requests that make the load, on a curve apart from
/// `chat`'s (which holds only the requests the test measures); judged only
/// by completing.
const BACKGROUND: &str = "\
classes:
  - name: background
    goodput: {target: 0.5}
";

/// How long a late request's first token is held: past the 500 ms
/// threshold of `chat` by any clock.
const LATE: Duration = Duration::from_millis(600);

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

/// `main` with the classes `chat` and `background`, in front of
/// `upstream`.
pub(crate) fn config(dir: &Path, main: &str, upstream: SocketAddr) -> Config {
    config_from_files(
        dir,
        main,
        &[("chat.yaml", CHAT_CLASS), ("background.yaml", BACKGROUND)],
        upstream,
    )
}

/// One streamed request of model `m` in `class`, sent through `proxy` and
/// seen by the upstream (so counted in flight, its load taken): the
/// client's socket and the gate of its response body.
async fn open(
    proxy: SocketAddr,
    gates: &mut UnboundedReceiver<Gate>,
    class: &str,
) -> (TcpStream, Gate) {
    let (head, body) = chat_request("m", true, &[("x-slo-class", class)]);
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let gate = tokio::time::timeout(Duration::from_secs(10), gates.recv())
        .await
        .expect("the request never reached the upstream")
        .unwrap();
    (stream, gate)
}

/// Answers an open request with one token and the end of its stream, and
/// reads the whole response.
async fn answer((mut stream, gate): (TcpStream, Gate)) {
    for event in [
        "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: [DONE]\n\n",
    ] {
        gate.send(Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
            .await
            .unwrap();
    }
    drop(gate);
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf))
        .await
        .expect("the response never ended")
        .unwrap();
    let resp = parse_response(&buf);
    assert_eq!(resp.status, 200);
    assert!(!resp.truncated);
}

/// The requests of `slo` on a curve of `admin`'s proxy.
fn judged(s: &[Sample], slo: &str) -> f64 {
    sum(s, "llm_slo_load_requests_total", &[("slo", slo)])
}

/// Waits until `admin`'s proxy has put `n` requests of `slo` on its
/// curve: counted out of flight, too (a request leaves the count before
/// it is put on the curve), which the client's last byte does not tell.
async fn until_judged(admin: SocketAddr, slo: &str, n: f64) {
    let s = scrape_until(admin, |s| judged(s, slo) >= n).await;
    assert_eq!(judged(&s, slo), n, "{slo}");
}

/// `count` requests of class `chat`, one at a time, answered at once:
/// each meets the load in flight now, plus itself. With `admin`, each is
/// waited for until counted out.
async fn answered(
    proxy: SocketAddr,
    gates: &mut UnboundedReceiver<Gate>,
    count: usize,
    admin: Option<(SocketAddr, f64)>,
) {
    for i in 0..count {
        answer(open(proxy, gates, "chat").await).await;
        if let Some((admin, before)) = admin {
            until_judged(admin, "chat", before + (i + 1) as f64).await;
        }
    }
}

/// Checks what the proxy of `admin` exported once its 40 requests of
/// `chat` are counted: 20 good in the bucket of 4, 18 good and 2 bad in
/// that of 5–6, the knee at 4, measured, in every window, the headroom
/// against `load_now`, and `/slo`'s table of the curves, whole: `curves`.
async fn knee_is_4(admin: SocketAddr, load_now: i64, curves: &str) {
    let s = scrape_until(admin, |s| judged(s, "chat") >= 40.0).await;
    let bucket = |le: &str, verdict: &str| {
        value(
            &s,
            "llm_slo_load_requests_total",
            &[("slo", "chat"), ("load_le", le), ("verdict", verdict)],
        )
    };
    assert_eq!(
        [
            bucket("4", "good"),
            bucket("4", "bad"),
            bucket("6", "good"),
            bucket("6", "bad")
        ],
        [20.0, 0.0, 18.0, 2.0]
    );
    assert_eq!(judged(&s, "chat"), 40.0);
    for window in ["1m", "5m", "1h"] {
        let labels = [("slo", "chat"), ("window", window), ("bound", "measured")];
        let knee = value(&s, "llm_slo_capacity_concurrency", &labels);
        let headroom = value(&s, "llm_slo_headroom_concurrency", &labels);
        assert_eq!((knee, headroom), (4.0, (4 - load_now) as f64), "{window}");
        let lower = [("slo", "chat"), ("window", window), ("bound", "lower")];
        assert_eq!(sum(&s, "llm_slo_capacity_concurrency", &lower), 0.0);
    }

    let text = String::from_utf8(get(admin, "/slo?format=text").await.body()).unwrap();
    // The live windows come first, with latencies the test does not
    // control, and the sessions' after; the curves are counts only.
    let at = text.find("capacity  ").unwrap_or_else(|| panic!("{text}"));
    let end = text[at..]
        .find("\nsessions  ")
        .map_or(text.len(), |e| at + e + 1);
    assert_eq!(&text[at..end], curves);
}

/// One proxy, counting the requests in flight to the route and model: a
/// request meets the requests the test holds open, and itself.
#[tokio::test]
async fn the_knee_is_read_from_the_requests_in_flight_each_request_met() {
    let (upstream, mut gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start(config(dir.path(), &main_file("", ""), upstream)).await;
    let (addr, admin) = (proxy.proxy_addr, proxy.admin_addr);

    // 3 requests in the background: each of the next 20 meets 4.
    let mut background = Vec::new();
    for _ in 0..3 {
        background.push(open(addr, &mut gates, "background").await);
    }
    answered(addr, &mut gates, 20, Some((admin, 0.0))).await;
    // A fourth: the next two meet 5 and 6, and are held.
    background.push(open(addr, &mut gates, "background").await);
    let late = [
        open(addr, &mut gates, "chat").await,
        open(addr, &mut gates, "chat").await,
    ];
    let held_from = tokio::time::Instant::now();
    // Back to 3 in the background, beside the 2 held: the next 18 meet 6.
    answer(background.pop().unwrap()).await;
    until_judged(admin, "background", 1.0).await;
    answered(addr, &mut gates, 18, Some((admin, 20.0))).await;
    tokio::time::sleep_until(held_from + LATE).await;
    for request in late {
        answer(request).await;
    }
    for request in background {
        answer(request).await;
    }
    until_judged(admin, "background", 4.0).await;

    // The background's curve: one request at each load it met, 1 to 4,
    // too few to tell anything.
    knee_is_4(
        admin,
        0,
        "\
capacity  route chat  model m  slo background  load now 0  (a bucket needs 20 judged)
window knee state      knee bound     headroom first break
1m     unknown            - -                -           -
5m     unknown            - -                -           -
1h     unknown            - -                -           -
       1m buckets  1:1 too_few  2:1 too_few  3:1 too_few  4:1 too_few
       5m buckets  1:1 too_few  2:1 too_few  3:1 too_few  4:1 too_few
       1h buckets  1:1 too_few  2:1 too_few  3:1 too_few  4:1 too_few

capacity  route chat  model m  slo chat  load now 0  (a bucket needs 20 judged)
window knee state      knee bound     headroom first break
1m     measured           4 measured         4           5
5m     measured           4 measured         4           5
1h     measured           4 measured         4           5
       1m buckets  4:20 holds  6:20 breaks
       5m buckets  4:20 holds  6:20 breaks
       1h buckets  4:20 holds  6:20 breaks

",
    )
    .await;
    proxy.stop().await;
}

/// The engine's page as the test sets it: `running` and `waiting`
/// requests of model `m`, its KV cache half full.
pub(crate) fn engine(running: u32, waiting: u32) -> String {
    vllm_page("m", running, waiting, 0.5)
}

/// The scrape settings of a route whose load is its engine's: twice a
/// second, a reading served for three intervals, so the page the test set
/// is read for longer than each phase takes.
pub(crate) const SCRAPED: &str = "scrape:\n  interval: 500ms\n  timeout: 400ms\n";

/// Waits until `admin`'s proxy has read the engine's page with `running`
/// and `waiting` requests.
async fn until_read(admin: SocketAddr, running: f64, waiting: f64) {
    let read = |s: &[Sample]| {
        let figure = |name| value(s, name, &[("model", "m")]);
        (
            figure("llm_engine_requests_running"),
            figure("llm_engine_requests_waiting"),
        )
    };
    let s = scrape_until(admin, |s| read(s) == (running, waiting)).await;
    assert_eq!(
        read(&s),
        (running, waiting),
        "the engine's page was not read"
    );
}

/// A proxy whose route's engine is `page`, and the gates of its upstream.
pub(crate) type Replica = (tokenmeter::app::Running, UnboundedReceiver<Gate>);

/// Through each of `replicas`, 40 requests of class `chat` one at a time,
/// at loads set by the engine's `page`: 20 while it shows 4 running, then
/// 20 while it shows 4 running and 2 waiting, 2 of them held. Each
/// replica's curve has its knee at 4, and its load now is 6.
pub(crate) async fn knee_at_4_by_the_engine(page: &Page, replicas: &mut [Replica]) {
    page.set(engine(4, 0));
    for (proxy, _) in replicas.iter() {
        until_read(proxy.admin_addr, 4.0, 0.0).await;
    }
    for (proxy, gates) in replicas.iter_mut() {
        answered(proxy.proxy_addr, gates, 20, None).await;
    }
    page.set(engine(4, 2));
    for (proxy, _) in replicas.iter() {
        until_read(proxy.admin_addr, 4.0, 2.0).await;
    }
    let mut late = Vec::new();
    for (proxy, gates) in replicas.iter_mut() {
        late.push(open(proxy.proxy_addr, gates, "chat").await);
        late.push(open(proxy.proxy_addr, gates, "chat").await);
    }
    let held_from = tokio::time::Instant::now();
    for (proxy, gates) in replicas.iter_mut() {
        answered(proxy.proxy_addr, gates, 18, None).await;
    }
    tokio::time::sleep_until(held_from + LATE).await;
    for request in late {
        answer(request).await;
    }
}

/// Two proxies in front of one engine whose page they scrape, each with
/// one request of its own in flight at a time (three at most): each counts
/// the load by the engine's running and waiting requests, so each finds
/// the engine's knee, 4, whatever its own share of the traffic.
#[tokio::test]
async fn two_replicas_find_the_engines_knee_by_its_running_and_waiting_requests() {
    let page = Page::serve(engine(4, 0)).await;
    let main = main_file(SCRAPED, &format!("    engine_metrics: {}\n", page.url()));
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut replicas = Vec::new();
    for dir in &dirs {
        let (upstream, gates) = gated_upstream().await;
        replicas.push((start(config(dir.path(), &main, upstream)).await, gates));
    }
    knee_at_4_by_the_engine(&page, &mut replicas).await;
    // The load now is the engine's too: 6, past the knee.
    for (proxy, _) in &replicas {
        knee_is_4(
            proxy.admin_addr,
            6,
            "\
capacity  route chat  model m  slo chat  load now 6  (a bucket needs 20 judged)
window knee state      knee bound     headroom first break
1m     measured           4 measured        -2           5
5m     measured           4 measured        -2           5
1h     measured           4 measured        -2           5
       1m buckets  4:20 holds  6:20 breaks
       5m buckets  4:20 holds  6:20 breaks
       1h buckets  4:20 holds  6:20 breaks

",
        )
        .await;
    }
    for (proxy, _) in replicas {
        proxy.stop().await;
    }
}
