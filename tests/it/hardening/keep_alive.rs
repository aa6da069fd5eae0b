//! The keep-alive race: a request sent on a connection the upstream is
//! closing, sent again only when that is safe.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
pub(super) async fn closing_the_second_request_after(
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
    let (upstream, connections) =
        closing_the_second_request_after(Duration::from_millis(1500)).await;
    let proxy = start(config_for(upstream)).await;
    let small = r#"{"model":"m1","messages":[]}"#;
    let post = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{small}",
        small.len()
    );
    assert_eq!(raw_exchange(proxy.proxy_addr, &post, b"").await.status, 200);
    // The second request goes out on the kept connection, whole; the
    // upstream has it for 1.5 s (past the 1 s within which a close is taken
    // for the keep-alive race), then closes without a byte: it may have
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
    // idle. Idle, nothing the test waits for is on its way between the
    // sockets, so the runtime's clock may jump from one timer to the next
    // (paused, it moves only when no task has work) past the 4 s; the
    // requests run on the clock's own pace.
    assert_eq!(raw_exchange(proxy.proxy_addr, get, b"").await.status, 200);
    tokio::time::pause();
    tokio::time::sleep(Duration::from_millis(4100)).await;
    tokio::time::resume();
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
