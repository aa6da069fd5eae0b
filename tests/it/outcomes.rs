//! Each way a request can end gives the client the right status and counts
//! the right outcome: upstream down, reset mid-stream, error status, error
//! event, each timeout, a client that goes away, and a graceful shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use sim::SimConfig;
use tokenmeter::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Requests of `outcome` with `status_class`, over every route/model/slo.
fn outcomes(s: &[Sample], outcome: &str, class: &str) -> f64 {
    sum(
        s,
        "llm_requests_total",
        &[("outcome", outcome), ("status_class", class)],
    )
}

async fn settle(admin: SocketAddr, total: f64) -> Vec<Sample> {
    scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= total).await
}

/// Waits (bounded) until the simulator counts one stream dropped by its
/// client: the proxy cancelled the upstream request.
async fn upstream_sees_abort(sim: SocketAddr) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sim_stats(sim).await["aborted"] != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "upstream never saw the abort"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn with_timeouts(
    upstream: SocketAddr,
    f: impl FnOnce(&mut tokenmeter::config::Timeouts),
) -> Config {
    let mut config = config_for(upstream);
    f(&mut config.routes[0].timeouts);
    config
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_proxy_error() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let proxy = start(config_for(closed)).await;
    let (head, body) = chat_request("m1", true, &[]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 502);
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("upstream_unreachable")
    );
    let err: serde_json::Value = serde_json::from_slice(&resp.body()).unwrap();
    assert_eq!(err["error"]["type"], "tokenmeter_error");
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "proxy_error", "5xx"), 1.0);
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 0.0);
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn upstream_reset_mid_stream_is_an_upstream_error() {
    let Stack { proxy, .. } = Stack::start(schedule(10, 10, 20), config_for).await;
    let (head, body) = chat_request("m1", true, &[("x-sim-abort-after", "3")]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    assert!(
        resp.truncated,
        "the client must see the stream break, not a clean end"
    );
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "upstream_error", "2xx"), 1.0);
    // TTFT is observed whatever the outcome; E2EL and TPOT only for ok.
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 1.0);
    assert_eq!(sum(&s, "llm_inter_token_latency_seconds_count", &[]), 2.0);
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 0.0);
    assert_eq!(sum(&s, "llm_time_per_output_token_seconds_count", &[]), 0.0);
    // No usage arrived: the tokens seen are counted, as a lower bound.
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "events")]),
        3.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn error_status_and_error_event_are_upstream_errors_passed_through() {
    let Stack { sim, proxy } = Stack::start(schedule(10, 10, 20), config_for).await;
    let (head, body) = chat_request("m1", true, &[("x-sim-status", "503")]);
    let direct = raw_exchange(sim, &head, &body).await;
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 503);
    assert_eq!(resp.body(), direct.body());
    let (head, body) = chat_request("m1", true, &[("x-sim-error-after", "2")]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    assert!(!resp.truncated);
    let s = settle(proxy.admin_addr, 2.0).await;
    assert_eq!(outcomes(&s, "upstream_error", "5xx"), 1.0);
    assert_eq!(outcomes(&s, "upstream_error", "2xx"), 1.0);
    assert_eq!(
        sum(&s, "llm_time_to_response_headers_seconds_count", &[]),
        2.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn slow_response_head_is_a_504_timeout() {
    let Stack { sim, proxy } = Stack::start(schedule(10, 10, 20), |sim| {
        with_timeouts(sim, |t| t.response_headers = Duration::from_millis(200))
    })
    .await;
    let (head, body) = chat_request("m1", true, &[("x-sim-headers-delay-ms", "5000")]);
    let started = tokio::time::Instant::now();
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 504);
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("upstream_headers_timeout")
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "timeout", "5xx"), 1.0);
    // The abandoned upstream request is cancelled.
    upstream_sees_abort(sim).await;
    proxy.stop().await;
}

#[tokio::test]
async fn silent_stream_hits_the_idle_timeout() {
    let Stack { sim, proxy } = Stack::start(schedule(10, 10, 20), |sim| {
        with_timeouts(sim, |t| t.idle = Duration::from_millis(300))
    })
    .await;
    let (head, body) = chat_request("m1", true, &[("x-sim-stall-after", "4")]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    assert!(resp.truncated);
    let text = String::from_utf8(resp.body()).unwrap();
    assert_eq!(
        text.matches(" tok").count(),
        4,
        "the tokens before the stall arrive"
    );
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "timeout", "2xx"), 1.0);
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 1.0);
    upstream_sees_abort(sim).await;
    proxy.stop().await;
}

#[tokio::test]
async fn a_long_healthy_stream_never_hits_the_idle_timeout() {
    let sim = start_sim(SimConfig {
        ttft: Duration::from_millis(100),
        itl: Duration::from_millis(100),
        tokens: 8,
        ..SimConfig::default()
    })
    .await;
    // Each gap (100 ms) is under the idle limit; the whole stream is not.
    let proxy = start(with_timeouts(sim, |t| t.idle = Duration::from_millis(250))).await;
    let (head, body) = chat_request("m1", true, &[]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert!(!resp.truncated);
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "ok", "2xx"), 1.0);
    proxy.stop().await;
}

#[tokio::test]
async fn connect_timeout_is_a_504() {
    // A listener whose accept queue is full and never drained: the
    // kernel drops further SYNs, so connecting hangs.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let _listener = socket.listen(1).unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(100), TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    let proxy = start(with_timeouts(addr, |t| {
        t.connect = Duration::from_millis(200)
    }))
    .await;
    let (head, body) = chat_request("m1", true, &[]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(
        resp.status,
        504,
        "{}",
        String::from_utf8_lossy(&resp.body())
    );
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("upstream_connect_timeout")
    );
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "timeout", "5xx"), 1.0);
    proxy.stop().await;
}

#[tokio::test]
async fn client_abort_mid_stream_is_counted_and_reaches_the_upstream() {
    let Stack { sim, proxy } = Stack::start(schedule(10, 50, 100), config_for).await;
    let stream = open_stream(proxy.proxy_addr, 4, &[]).await;
    drop(stream);
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "client_abort", "2xx"), 1.0);
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 1.0);
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 0.0);
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 0.0);
    upstream_sees_abort(sim).await;
    proxy.stop().await;
}

#[tokio::test]
async fn client_abort_before_the_response_head_is_counted() {
    let Stack { proxy, .. } = Stack::start(schedule(10, 10, 20), config_for).await;
    let (head, body) = chat_request("m1", true, &[("x-sim-headers-delay-ms", "5000")]);
    let mut stream = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    // Wait until the request is in flight, then go away.
    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_in_flight", &[]) == 1.0
    })
    .await;
    drop(stream);
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(outcomes(&s, "client_abort", "none"), 1.0);
    proxy.stop().await;
}

#[tokio::test]
async fn shutdown_drains_in_flight_streams_and_reports_not_ready() {
    let sim = start_sim(SimConfig {
        ttft: Duration::from_millis(10),
        itl: Duration::from_millis(40),
        tokens: 20,
        ..SimConfig::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    let (admin, addr) = (proxy.admin_addr, proxy.proxy_addr);
    let mut stream = open_stream(addr, 2, &[]).await;
    proxy.shutdown();
    // Draining: not ready, no new connections, the open stream goes on.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(admin, "/readyz").await;
        if r.status == 503 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting while draining"
    );
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("data: [DONE]"), "stream cut by the shutdown");
    assert!(text.ends_with("0\r\n\r\n"));
    proxy.wait().await;
}

#[tokio::test]
async fn past_max_in_flight_requests_get_503_at_once_and_slots_free_as_streams_end() {
    let sim = start_sim(schedule(10, 50, 100)).await;
    let mut config = config_for(sim);
    config.routes[0].max_in_flight = Some(2);
    let proxy = start(config).await;
    let rejected = |s: &[Sample]| {
        value(
            s,
            "tokenmeter_rejected_requests_total",
            &[("route", "test"), ("reason", "max_in_flight")],
        )
    };
    // Declared at 0 before any rejection.
    assert_eq!(rejected(&scrape(proxy.admin_addr).await.1), 0.0);

    let a = open_stream(proxy.proxy_addr, 2, &[]).await;
    let b = open_stream(proxy.proxy_addr, 2, &[]).await;

    // A third metered request and an unmetered one: answered by the proxy,
    // at once, without reaching the upstream.
    let (head, body) = chat_request("m1", true, &[]);
    let started = std::time::Instant::now();
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert!(started.elapsed() < Duration::from_secs(2), "not at once");
    assert_eq!(resp.status, 503);
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert_eq!(resp.header("x-tokenmeter-error"), Some("overloaded"));
    let err: serde_json::Value = serde_json::from_slice(&resp.body()).unwrap();
    assert_eq!(err["error"]["code"], "overloaded");
    let models = get(proxy.proxy_addr, "/v1/models").await;
    assert_eq!(models.status, 503);
    assert_eq!(sim_stats(sim).await["requests"], 2);
    let s = scrape(proxy.admin_addr).await.1;
    assert_eq!(rejected(&s), 2.0);
    // The metered one ends as a proxy error; the two streams are in flight.
    assert_eq!(outcomes(&s, "proxy_error", "5xx"), 1.0);
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 2.0);

    // A stream that ends (here: its client goes away) gives its slot back.
    drop(a);
    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_in_flight", &[]) == 1.0
    })
    .await;
    let (head, body) = chat_request("m1", true, &[("x-sim-tokens", "3")]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    assert!(!resp.truncated);
    // And the slot of a completed stream comes back too.
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    assert_eq!(rejected(&scrape(proxy.admin_addr).await.1), 2.0);
    drop(b);
    proxy.stop().await;
}

/// An upstream that answers each request with `reply`, in one write, and
/// then closes: its response cut short, all of it already sent.
async fn cut_upstream(reply: &'static [u8]) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request: its head and its `content-length` bytes.
                let mut req = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n @ 1..) = s.read(&mut chunk).await else {
                        return;
                    };
                    req.extend_from_slice(&chunk[..n]);
                    let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&req[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if req.len() >= end + 4 + length {
                        break;
                    }
                }
                let _ = s.write_all(reply).await;
            });
        }
    });
    addr
}

/// What an upstream sent before it failed reaches the client whole: its
/// response head, and each chunk, even when the failure comes in the same
/// read as they do; then the client sees the stream break.
#[tokio::test]
async fn what_the_upstream_sent_before_failing_reaches_the_client() {
    const HEAD: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    const CHUNK: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    let head_only: &'static str = HEAD;
    let with_chunk: &'static str =
        Box::leak(format!("{HEAD}{:x}\r\n{CHUNK}\r\n", CHUNK.len()).into_boxed_str());
    for (reply, body) in [(head_only, ""), (with_chunk, CHUNK)] {
        let upstream = cut_upstream(reply.as_bytes()).await;
        let proxy = start(config_for(upstream)).await;
        for _ in 0..20 {
            let (head, request) = chat_request("m1", true, &[]);
            let resp = raw_exchange(proxy.proxy_addr, &head, &request).await;
            assert_eq!(resp.status, 200);
            assert!(resp.truncated, "the client sees the stream break");
            assert_eq!(String::from_utf8_lossy(&resp.body()), body);
        }
        let s = settle(proxy.admin_addr, 20.0).await;
        assert_eq!(outcomes(&s, "upstream_error", "2xx"), 20.0);
        proxy.stop().await;
    }
}
