//! What production traffic does to a proxy, each rule on real sockets: a
//! client that leaves at the terminal event, bogus usage from an upstream,
//! a client's broken body, and the header rules of a hop.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use hyper::body::Frame;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn frame(text: &str) -> Result<Frame<Bytes>, std::convert::Infallible> {
    Ok(Frame::data(Bytes::copy_from_slice(text.as_bytes())))
}

/// Reads from `stream` until what arrived contains `needle` (bounded).
async fn read_until(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(needle.len()).any(|w| w == needle) {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("stream stalled")
            .unwrap();
        assert!(n > 0, "stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    seen
}

/// The response the proxy sends on `client` before it closes the
/// connection (a reset after it still counts).
async fn answer(client: &mut TcpStream) -> RawResponse {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut buf))
        .await
        .expect("an answer");
    parse_response(&buf)
}

async fn settle(admin: SocketAddr, total: f64) -> Vec<Sample> {
    scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= total).await
}

/// An SSE body of OpenAI chat chunks: one token, then a usage chunk with
/// `completion_tokens` written as given, then `[DONE]`.
fn chat_stream(completion_tokens: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\n\
         data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{completion_tokens}}}}}\n\n\
         data: [DONE]\n\n"
    )
}

// A stream ends at its terminal event.

#[tokio::test]
async fn a_client_that_leaves_right_after_done_completed_its_request() {
    let (upstream, mut gates) = gated_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let (head, body) = chat_request("m1", true, &[]);
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    let gate = gates.recv().await.unwrap();
    for event in chat_stream("1").split_inclusive("\n\n") {
        gate.send(frame(event)).await.unwrap();
    }
    read_until(&mut client, b"[DONE]").await;
    // As the sync `openai` SDK does: gone at `[DONE]`, while the upstream's
    // body has not ended yet.
    drop(client);
    // Something more from the upstream: the proxy finds the client gone.
    let _ = gate.send(frame(": trailing keep-alive\n\n")).await;
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        0.0
    );
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 1.0);
    assert_eq!(sum(&s, "llm_time_per_output_token_seconds_count", &[]), 0.0);
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "usage")]),
        1.0
    );
    drop(gate);
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_before_done_aborted() {
    let (upstream, mut gates) = gated_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let (head, body) = chat_request("m1", true, &[]);
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    let gate = gates.recv().await.unwrap();
    let stream = chat_stream("1");
    let (usage_and_token, _done) = stream.rsplit_once("data: [DONE]").unwrap();
    gate.send(frame(usage_and_token)).await.unwrap();
    read_until(&mut client, b"usage").await;
    drop(client);
    let _ = gate.send(frame(": keep-alive\n\n")).await;
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 0.0);
    drop(gate);
    proxy.stop().await;
}

// Counters never go down.

#[tokio::test]
async fn implausible_usage_is_rejected_and_the_token_counters_stay_monotonic() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let send = |completion_tokens: &'static str| async move {
        let inline = hex(chat_stream(completion_tokens).as_bytes());
        let (head, body) = chat_request("m1", true, &[("x-body-hex", &inline)]);
        let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
        assert_eq!(resp.status, 200);
    };
    send("5").await;
    let s = settle(proxy.admin_addr, 1.0).await;
    let output = |s: &[Sample]| sum(s, "llm_output_tokens_total", &[]);
    assert_eq!(output(&s), 5.0);
    for (i, bogus) in ["18446744073709551615", "10000001", "-3", "2.5", "\"7\""]
        .into_iter()
        .enumerate()
    {
        send(bogus).await;
        let s = settle(proxy.admin_addr, 2.0 + i as f64).await;
        assert_eq!(output(&s), 5.0, "after {bogus}");
        assert_eq!(
            sum(
                &s,
                "tokenmeter_stream_parse_errors_total",
                &[("kind", "implausible_usage")]
            ),
            1.0 + i as f64,
            "after {bogus}"
        );
        // The stream itself was fine: only its count is unknown.
        assert_eq!(
            sum(&s, "llm_requests_total", &[("outcome", "ok")]),
            2.0 + i as f64
        );
    }
    // The cap is a setting; at it, a count is taken.
    send("10000000").await;
    let s = settle(proxy.admin_addr, 7.0).await;
    assert_eq!(output(&s), 10_000_005.0);
    proxy.stop().await;
}

// Blame goes to the right side.

#[tokio::test]
async fn a_malformed_client_body_past_the_read_ahead_is_the_clients_400() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 16;
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
                content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    client.write_all(head.as_bytes()).await.unwrap();
    // More than the read-ahead, so the body is streaming to the upstream
    // when it breaks.
    let good = format!("20\r\n{}\r\n", "{\"model\":\"m1\",\"messages\":[],   }");
    client.write_all(good.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.write_all(b"zz-not-a-size\r\n\r\n").await.unwrap();
    let resp = answer(&mut client).await;
    assert_eq!(resp.status, 400, "{resp:?}");
    assert_eq!(resp.header("x-tokenmeter-error"), Some("request_body"));
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        0.0
    );
    proxy.stop().await;
}

// Header hygiene.

fn echoed_header<'a>(echo: &'a Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0] == name)
        .map(|h| h[1].as_str().unwrap())
        .collect()
}

async fn echo(proxy: SocketAddr, head: &str) -> Value {
    let resp = raw_exchange(proxy, head, b"").await;
    assert_eq!(resp.status, 200);
    serde_json::from_slice(&resp.body()).unwrap()
}

const SPOOFING: &str = "GET /v1/models HTTP/1.1\r\nhost: public.example\r\nx-echo: 1\r\n\
    proxy-authorization: Basic c2VjcmV0\r\nx-forwarded-proto: https\r\n\
    x-forwarded-host: spoofed.example\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn proxy_credentials_stop_here_and_forwarded_headers_are_replaced() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let e = echo(proxy.proxy_addr, SPOOFING).await;
    assert!(echoed_header(&e, "proxy-authorization").is_empty());
    assert_eq!(echoed_header(&e, "x-forwarded-proto"), ["http"]);
    assert_eq!(echoed_header(&e, "x-forwarded-host"), ["public.example"]);
    proxy.stop().await;
}

#[tokio::test]
async fn a_trusted_proxy_in_front_keeps_its_forwarded_headers() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.trusted_proxies = vec![tokenmeter::config::IpNet {
        addr: "127.0.0.0".parse().unwrap(),
        prefix: 8,
    }];
    let proxy = start(config).await;
    let e = echo(proxy.proxy_addr, SPOOFING).await;
    assert!(echoed_header(&e, "proxy-authorization").is_empty());
    assert_eq!(echoed_header(&e, "x-forwarded-proto"), ["https"]);
    assert_eq!(echoed_header(&e, "x-forwarded-host"), ["spoofed.example"]);
    proxy.stop().await;
}

#[tokio::test]
async fn a_request_without_one_host_is_a_400() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    for head in [
        "GET /v1/models HTTP/1.1\r\nx-echo: 1\r\nconnection: close\r\n\r\n",
        "GET /v1/models HTTP/1.1\r\nhost: a.example\r\nhost: b.example\r\nx-echo: 1\r\nconnection: close\r\n\r\n",
    ] {
        let resp = raw_exchange(proxy.proxy_addr, head, b"").await;
        assert_eq!(resp.status, 400, "{head}");
        assert_eq!(resp.header("x-tokenmeter-error"), Some("bad_request"));
    }
    // HTTP/1.0 has no Host requirement.
    let e = echo(
        proxy.proxy_addr,
        "GET /v1/models HTTP/1.0\r\nx-echo: 1\r\n\r\n",
    )
    .await;
    assert_eq!(e["method"], "GET");
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(
            &s,
            "tokenmeter_rejected_requests_total",
            &[("reason", "bad_host")]
        ),
        2.0
    );
    proxy.stop().await;
}

#[test]
fn an_upstream_url_with_a_password_is_refused_without_echoing_it() {
    let text = "routes:\n  - name: r\n    upstream: http://user:hunter2@127.0.0.1:8000/v1\n";
    let errors = tokenmeter::config::Config::parse(
        text,
        "test.yaml",
        &tokenmeter::config::Overrides::default(),
    )
    .unwrap_err();
    let shown = errors.to_string();
    assert!(shown.contains("user info"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("http://***@127.0.0.1:8000/v1"), "{shown}");
}

// The keep-alive race.

/// An upstream that answers the first request on each connection (with a
/// keep-alive hint) and closes the connection, unanswered, when a second
/// request arrives on it: what llama.cpp's server does after every stream,
/// and what any server's idle timer does to a request sent just then.
/// Returns its address and its count of connections.
async fn one_answer_per_connection() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>)
{
    closing_the_second_request_after(Duration::ZERO).await
}

/// [`one_answer_per_connection`], closing the second request `after` it
/// has it whole (an upstream that crashes while working on it).
async fn closing_the_second_request_after(
    after: Duration,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                for answered in [false, true] {
                    let mut buf = [0u8; 4096];
                    let end = loop {
                        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            break end + 4;
                        }
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while got.len() < end + len {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    got.drain(..end + len);
                    if answered {
                        // The second request: closed without a byte.
                        tokio::time::sleep(after).await;
                        return;
                    }
                    let body = if head.starts_with("head ") { "" } else { "{}" };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         keep-alive: timeout=5, max=100\r\ncontent-length: 2\r\n\r\n{body}"
                    );
                    if sock.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, connections)
}

#[tokio::test]
async fn a_request_caught_in_the_keep_alive_race_is_sent_again_once_if_held_whole() {
    use std::sync::atomic::Ordering;
    let (upstream, connections) = one_answer_per_connection().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 64;
    let proxy = start(config).await;
    let get = "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    let head = "HEAD /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    let small = r#"{"model":"m1","messages":[]}"#;
    let post = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{small}",
        small.len()
    );
    // The first request opens the connection the others meet closing.
    assert_eq!(raw_exchange(proxy.proxy_addr, get, b"").await.status, 200);
    for (i, request) in [get, head, post.as_str()].into_iter().enumerate() {
        let resp = raw_exchange(proxy.proxy_addr, request, b"").await;
        assert_eq!(resp.status, 200, "{request}");
        assert_eq!(connections.load(Ordering::SeqCst), i + 2, "{request}");
    }
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(
            &s,
            "tokenmeter_upstream_retries_total",
            &[("reason", "closed")]
        ),
        3.0
    );
    // A body larger than the read-ahead streams from the client: the proxy
    // cannot send it again, so the client gets the failure.
    let large = format!(
        r#"{{"model":"m1","messages":[],"pad":"{}"}}"#,
        "x".repeat(100)
    );
    let streamed = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{large}",
        large.len()
    );
    let resp = raw_exchange(proxy.proxy_addr, &streamed, b"").await;
    assert_eq!(resp.status, 502);
    assert_eq!(connections.load(Ordering::SeqCst), 4);
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "upstream_error")]) >= 1.0
    })
    .await;
    assert_eq!(
        sum(&s, "tokenmeter_upstream_retries_total", &[]),
        3.0,
        "not sent again"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn unmetered_posts_caught_in_the_keep_alive_race_are_sent_again_if_small() {
    use std::sync::atomic::Ordering;
    let (upstream, connections) = one_answer_per_connection().await;
    let mut config = config_for(upstream);
    let mut raw = config.routes[0].clone();
    raw.name = "raw".into();
    raw.matcher.path_prefix = "/raw/".into();
    raw.protocol = tokenmeter::config::Protocol::None;
    config.routes.insert(0, raw);
    let proxy = start(config).await;
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let moderation = post("/v1/moderations", r#"{"model":"m","input":"a"}"#);
    let files = post("/v1/files", r#"{"purpose":"batch"}"#);
    let raw = post("/raw/upload", "0123456789");
    // Every request after the first on a connection meets it closing: each
    // is sent again on a new one, so every one is answered. (Each route has
    // its own upstream connections: the first request of each finds none.)
    let mut statuses = Vec::new();
    for request in [&moderation, &files, &raw] {
        for _ in 0..3 {
            statuses.push(raw_exchange(proxy.proxy_addr, request, b"").await.status);
        }
    }
    assert_eq!(statuses, [200; 9]);
    let (_, s) = scrape(proxy.admin_addr).await;
    let retried = sum(&s, "tokenmeter_upstream_retries_total", &[]);
    assert_eq!(retried, 7.0, "all but the first of each route");
    assert_eq!(connections.load(Ordering::SeqCst), 9);
    // A body past `proxy.max_retry_body` (64 KiB) is streamed to the
    // upstream as it comes: it cannot be sent twice, so the client gets the
    // failure.
    let large = "x".repeat(100 * 1024);
    let resp = raw_exchange(proxy.proxy_addr, &post("/v1/files", &large), b"").await;
    assert_eq!(resp.status, 502);
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(&s, "tokenmeter_upstream_retries_total", &[]),
        retried,
        "not sent again"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 9, "no new connection");
    proxy.stop().await;
}

#[tokio::test]
async fn a_request_the_upstream_closed_on_long_after_taking_it_is_not_sent_again() {
    use std::sync::atomic::Ordering;
    let (upstream, connections) = closing_the_second_request_after(Duration::from_secs(2)).await;
    let proxy = start(config_for(upstream)).await;
    let small = r#"{"model":"m1","messages":[]}"#;
    let post = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{small}",
        small.len()
    );
    assert_eq!(raw_exchange(proxy.proxy_addr, &post, b"").await.status, 200);
    // The second request goes out on the kept connection, whole; the
    // upstream has it for 2 s, then closes without a byte: it may have
    // worked on it, so it is the client's 502, not a second run.
    let resp = raw_exchange(proxy.proxy_addr, &post, b"").await;
    assert_eq!(resp.status, 502);
    assert_eq!(connections.load(Ordering::SeqCst), 1, "no new connection");
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "upstream_error")]) >= 1.0
    })
    .await;
    assert_eq!(sum(&s, "tokenmeter_upstream_retries_total", &[]), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn an_upstreams_keep_alive_timeout_is_honoured() {
    use std::sync::atomic::Ordering;
    let (upstream, connections) = one_answer_per_connection().await;
    let proxy = start(config_for(upstream)).await;
    let get = "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    // `keep-alive: timeout=5`: the pool lets the connection go after 4 s
    // idle. Paused time cannot be used across real sockets, so this waits.
    assert_eq!(raw_exchange(proxy.proxy_addr, get, b"").await.status, 200);
    tokio::time::sleep(Duration::from_millis(4100)).await;
    assert_eq!(raw_exchange(proxy.proxy_addr, get, b"").await.status, 200);
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(&s, "tokenmeter_upstream_retries_total", &[]),
        0.0,
        "evicted before use, not met closing"
    );
    proxy.stop().await;
}

// Stalled clients, and the listeners' limits.

#[tokio::test]
async fn a_stalled_request_body_is_a_408_counted_from_its_head() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.routes[0].timeouts.request_body = Duration::from_millis(300);
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
              content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":",
        )
        .await
        .unwrap();
    // Receiving its body, not in flight: it is no load on the upstream yet.
    let s = scrape_until(proxy.admin_addr, |s| {
        value(
            s,
            "tokenmeter_requests_receiving_body",
            &[("route", "test")],
        ) == 1.0
    })
    .await;
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 0.0);
    let resp = answer(&mut client).await;
    assert_eq!(resp.status, 408);
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("request_body_timeout")
    );
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(
            &s,
            "llm_requests_total",
            &[("outcome", "client_timeout"), ("status_class", "4xx")]
        ),
        1.0
    );
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn a_body_that_stalls_past_the_read_ahead_is_a_408_too() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 16;
    config.routes[0].timeouts.request_body = Duration::from_millis(300);
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
              content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
              20\r\n{\"model\":\"m1\",\"messages\":[],   }\r\n",
        )
        .await
        .unwrap();
    let resp = answer(&mut client).await;
    assert_eq!(resp.status, 408, "{resp:?}");
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_timeout")]),
        1.0
    );
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        0.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_body_still_arriving_past_the_read_ahead_when_the_head_timeout_runs_out_is_the_clients() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 16;
    config.routes[0].timeouts.response_headers = Duration::from_secs(2);
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
              content-type: application/json\r\ncontent-length: 1000\r\n\r\n\
              {\"model\":\"m1\",\"messages\":[],",
        )
        .await
        .unwrap();
    // The rest trickles, a byte every 200 ms: never silent for the 30 s
    // idle timeout, and the echoing upstream answers only once it has it
    // all, so the head timeout (2 s) runs out while it is still arriving.
    let mut buf = Vec::new();
    let resp = loop {
        tokio::select! {
            read = client.read_to_end(&mut buf) => {
                let _ = read;
                break parse_response(&buf);
            }
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                if client.write_all(b" ").await.is_err() {
                    let _ = client.read_to_end(&mut buf).await;
                    break parse_response(&buf);
                }
            }
        }
    };
    assert_eq!(resp.status, 408, "{resp:?}");
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("request_body_timeout")
    );
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_timeout")]),
        1.0
    );
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "timeout")]),
        0.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_whole_body_the_upstream_sits_on_is_the_upstreams_504() {
    let upstream = closing_the_second_request_after(Duration::from_secs(10))
        .await
        .0;
    let mut config = config_for(upstream);
    config.routes[0].timeouts.response_headers = Duration::from_secs(1);
    let proxy = start(config).await;
    let small = r#"{"model":"m1","messages":[]}"#;
    let post = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{small}",
        small.len()
    );
    assert_eq!(raw_exchange(proxy.proxy_addr, &post, b"").await.status, 200);
    let resp = raw_exchange(proxy.proxy_addr, &post, b"").await;
    assert_eq!(resp.status, 504, "{resp:?}");
    let s = settle(proxy.admin_addr, 2.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "timeout")]),
        1.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn bodies_trickling_a_byte_a_second_are_408_within_the_read_ahead_bound() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.routes[0].timeouts.request_body_total = Duration::from_secs(3);
    let proxy = start(config).await;
    let started = std::time::Instant::now();
    let addr = proxy.proxy_addr;
    let trickle = move || async move {
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
                  content-type: application/json\r\ncontent-length: 1000\r\n\r\n",
            )
            .await
            .unwrap();
        // One byte a second, never silent for the 30 s idle timeout.
        let mut buf = Vec::new();
        loop {
            tokio::select! {
                read = client.read_to_end(&mut buf) => {
                    let _ = read;
                    return (parse_response(&buf), started.elapsed());
                }
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if client.write_all(b" ").await.is_err() {
                        let _ = client.read_to_end(&mut buf).await;
                        return (parse_response(&buf), started.elapsed());
                    }
                }
            }
        }
    };
    let clients: Vec<_> = (0..30).map(|_| tokio::spawn(trickle())).collect();
    // Meanwhile they are receiving their bodies, not in flight.
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "tokenmeter_requests_receiving_body", &[]) == 30.0
    })
    .await;
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 0.0);
    for client in clients {
        let (resp, after) = tokio::time::timeout(Duration::from_secs(30), client)
            .await
            .expect("answered")
            .unwrap();
        assert_eq!(resp.status, 408, "{resp:?}");
        assert_eq!(
            resp.header("x-tokenmeter-error"),
            Some("request_body_timeout")
        );
        assert!(after < Duration::from_secs(10), "{after:?}");
    }
    let s = settle(proxy.admin_addr, 30.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_timeout")]),
        30.0
    );
    assert_eq!(sum(&s, "tokenmeter_requests_receiving_body", &[]), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn with_256_files_and_200_stalled_bodies_a_new_request_is_served() {
    let upstream = scripted_upstream().await;
    let served = serve_wrapped(
        &["prlimit", "--nofile=256:256"],
        &["--upstream".as_ref(), format!("http://{upstream}").as_ref()],
        "info",
    );
    let (_, s) = scrape(served.admin).await;
    let max = value(&s, "tokenmeter_max_connections", &[("listener", "proxy")]);
    assert_eq!(max, 64.0, "(256 - 64 - 64) / 2");
    // Each sends a metered request head and 10 bytes of its body, then
    // nothing: more than the listener takes, the rest in its accept queue.
    let started = std::time::Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut c = TcpStream::connect(served.proxy).await.unwrap();
        c.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\
              content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\":",
        )
        .await
        .unwrap();
        stalled.push(c);
    }
    scrape_until(served.admin, |s| {
        value(s, "tokenmeter_open_connections", &[("listener", "proxy")]) == 64.0
    })
    .await;
    let body = r#"{"model":"m1","messages":[]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let resp = tokio::time::timeout(
        Duration::from_secs(15),
        raw_exchange(served.proxy, &request, b""),
    )
    .await
    .expect("a new client is served within 15 s");
    assert_eq!(resp.status, 200);
    let took = started.elapsed();
    let (_, s) = scrape(served.admin).await;
    let shed = sum(
        &s,
        "tokenmeter_shed_connections_total",
        &[("reason", "body")],
    );
    assert!(shed >= 64.0, "{shed}");
    println!("served {took:?} after the stalled bodies began; {shed} of them shed");
    drop(stalled);
}

#[tokio::test]
async fn idle_connections_are_shed_first_when_the_listener_is_overloaded() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_connections = Some(10);
    config.proxy.overload_timeout = Duration::from_secs(60);
    let proxy = start(config).await;
    let get = "GET /v1/models HTTP/1.1\r\nhost: x\r\nx-status: 200\r\n\r\n";
    // Eight connections kept alive after a request each, idle.
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut c = TcpStream::connect(proxy.proxy_addr).await.unwrap();
        c.write_all(get.as_bytes()).await.unwrap();
        read_until(&mut c, b"\r\n\r\n").await;
        idle.push(c);
    }
    // One that has sent nothing: within its (long) overload timeout.
    let silent = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    scrape_until(proxy.admin_addr, |s| {
        value(s, "tokenmeter_open_connections", &[("listener", "proxy")]) == 9.0
    })
    .await;
    // The ninth connection reaches the threshold (90 % of 10): idle ones
    // are closed until fewer than 8 (a tenth of the limit below it) are
    // open; the new one, within its (long) overload timeout, is not.
    let s = scrape_until(proxy.admin_addr, |s| {
        value(s, "tokenmeter_open_connections", &[("listener", "proxy")]) < 8.0
    })
    .await;
    let shed = value(
        &s,
        "tokenmeter_shed_connections_total",
        &[("reason", "idle")],
    );
    assert!(shed >= 2.0, "{shed}");
    assert_eq!(
        value(
            &s,
            "tokenmeter_shed_connections_total",
            &[("reason", "head")]
        ),
        0.0
    );
    let mut closed = 0.0;
    for mut c in idle {
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => closed += 1.0,
            Ok(Ok(n)) => panic!("{n} bytes on an idle connection"),
            Err(_) => {}
        }
    }
    assert_eq!(
        closed, shed,
        "each shed connection is closed, and only they"
    );
    // The silent one is still open.
    let mut buf = [0u8; 1];
    let mut silent = silent;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), silent.read(&mut buf))
            .await
            .is_err()
    );
    drop(silent);
    proxy.stop().await;
}

/// An upstream that answers every request on a connection with a 68,000-byte
/// body: 64,000 bytes, then, a moment later, the last 4,000 (one frame).
async fn two_part_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    // A request head, or the connection's end.
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    seen.clear();
                    let start = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 68000\r\n\r\n";
                    let mut first = start.to_vec();
                    first.extend(std::iter::repeat_n(b'a', 64_000));
                    if sock.write_all(&first).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if sock.write_all(&[b'z'; 4_000]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_idle_connection_shed_under_overload_still_gets_the_end_of_its_response() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let upstream = two_part_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_connections = Some(10);
    config.proxy.overload_timeout = Duration::from_secs(30);
    let proxy = start(config).await;
    // An HTTP/2 client whose windows hold 65,535 bytes and that does not
    // read its body yet: the proxy has the whole response, and its last
    // 2,465 bytes wait in the proxy's connection for the client's window.
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .http2_initial_stream_window_size(65_535)
        .http2_initial_connection_window_size(65_535)
        .build_http();
    let req = hyper::Request::get(format!("http://{}/v1/models", proxy.proxy_addr))
        .body(Empty::new())
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    // The response's end has come from the upstream: the request is over
    // on the proxy's side, and its connection idle.
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Eight more connections, idle after a request each: nine of ten is
    // overloaded, and the idle ones are shed.
    let get = "GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut c = TcpStream::connect(proxy.proxy_addr).await.unwrap();
        c.write_all(get.as_bytes()).await.unwrap();
        read_until(&mut c, b"\r\n\r\n").await;
        idle.push(c);
    }
    scrape_until(proxy.admin_addr, |s| {
        value(
            s,
            "tokenmeter_shed_connections_total",
            &[("reason", "idle")],
        ) >= 2.0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Now the client reads: all of it arrives.
    let body = tokio::time::timeout(Duration::from_secs(20), resp.into_body().collect())
        .await
        .expect("the body ends")
        .expect("the body is whole")
        .to_bytes();
    assert_eq!(body.len(), 68_000);
    assert!(body.ends_with(&[b'z'; 4_000]));
    drop(idle);
    proxy.stop().await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.request_head_timeout = Duration::from_millis(300);
    let proxy = start(config).await;
    for addr in [proxy.proxy_addr] {
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buf))
            .await
            .expect("closed by the proxy")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
    proxy.stop().await;
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_connections = Some(4);
    let proxy = start(config).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(proxy.proxy_addr).await.unwrap());
    }
    // The admin port has its own limit: the gauge can be read.
    scrape_until(proxy.admin_addr, |s| {
        value(s, "tokenmeter_open_connections", &[("listener", "proxy")]) == 4.0
    })
    .await;
    let get = "GET /v1/models HTTP/1.1\r\nhost: x\r\nx-status: 200\r\nconnection: close\r\n\r\n";
    let waiting = tokio::spawn(raw_exchange(proxy.proxy_addr, get, b""));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "served past the limit");
    drop(held.pop());
    let resp = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(resp.status, 200);
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        value(&s, "tokenmeter_max_connections", &[("listener", "proxy")]),
        4.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_flooded_admin_port_does_not_stop_forwarding() {
    let sim = start_sim(sim::SimConfig {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(5),
        tokens: 20,
        ..sim::SimConfig::default()
    })
    .await;
    let mut config = config_for(sim);
    config.admin.max_connections = 8;
    let proxy = start(config).await;
    // More idle connections than the admin port takes (the rest wait in
    // its accept queue, whose length the kernel bounds: past it, connect
    // itself would wait).
    let mut flood = Vec::new();
    for _ in 0..100 {
        flood.push(TcpStream::connect(proxy.admin_addr).await.unwrap());
    }
    for _ in 0..5 {
        let (head, body) = chat_request("m1", true, &[]);
        let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
        assert_eq!(resp.status, 200);
        assert!(!resp.truncated);
        assert!(resp.body().ends_with(b"data: [DONE]\n\n"));
    }
    let text = proxy.metrics.encode(false);
    let s = parse_metrics(&text);
    assert!(value(&s, "tokenmeter_open_connections", &[("listener", "admin")]) <= 8.0);
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 5.0);
    drop(flood);
    proxy.stop().await;
}

#[tokio::test]
async fn the_default_connection_limit_leaves_room_in_the_open_file_limit() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let (_, s) = scrape(proxy.admin_addr).await;
    let max = value(&s, "tokenmeter_max_connections", &[("listener", "proxy")]);
    let fds = value(&s, "process_max_fds", &[]);
    assert!(
        max >= 1.0 && 2.0 * max + 64.0 + 64.0 <= fds,
        "{max} of {fds}"
    );
    assert_eq!(
        value(&s, "tokenmeter_max_connections", &[("listener", "admin")]),
        64.0
    );
    proxy.stop().await;
}

// Label slots cannot be squatted.

#[tokio::test]
async fn made_up_model_names_do_not_take_the_label_slots_of_real_ones() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let request = |model: String, status: u16| async move {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             x-status: {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        raw_exchange(proxy.proxy_addr, &head, body.as_bytes()).await
    };
    // 200 names the upstream does not serve (it answers 404), more than
    // the 100 slots.
    for i in 0..200 {
        let resp = request(format!("made-up-{i}-{}", i * 7919 % 1000), 404).await;
        assert_eq!(resp.status, 404);
    }
    let resp = request("llama-3.1-8b".to_owned(), 200).await;
    assert_eq!(resp.status, 200);
    let s = settle(proxy.admin_addr, 201.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("model", "llama-3.1-8b")]),
        1.0
    );
    assert_eq!(sum(&s, "llm_requests_total", &[("model", "other")]), 200.0);
    assert_eq!(
        value(&s, "tokenmeter_model_label_overflow_total", &[]),
        200.0
    );
    let models: std::collections::BTreeSet<&str> = s
        .iter()
        .filter(|x| x.name == "llm_requests_total")
        .filter_map(|x| x.labels.get("model").map(String::as_str))
        .collect();
    assert_eq!(models, ["llama-3.1-8b", "other"].into());
    // Its first request moved to its label at its response head: no series
    // of `other` holds a part of it.
    let headers = "llm_time_to_response_headers_seconds_count";
    assert_eq!(sum(&s, headers, &[("model", "llama-3.1-8b")]), 1.0);
    assert_eq!(sum(&s, headers, &[("model", "other")]), 200.0);
    // Answered once, the name has its slot from the next request's head.
    let resp = request("llama-3.1-8b".to_owned(), 200).await;
    assert_eq!(resp.status, 200);
    let s = settle(proxy.admin_addr, 202.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("model", "llama-3.1-8b")]),
        2.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_is_a_client_abort_not_an_upstream_error() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 16;
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
              content-type: application/json\r\ncontent-length: 1000\r\n\r\n\
              {\"model\":\"m1\",\"messages\":[",
        )
        .await
        .unwrap();
    // Streaming to the upstream by now (more than the read-ahead): gone.
    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_in_flight", &[]) == 1.0
    })
    .await;
    drop(client);
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        0.0
    );
    proxy.stop().await;
}
