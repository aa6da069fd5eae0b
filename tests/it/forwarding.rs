//! Requests reach the upstream as the client sent them, but for the
//! headers a proxy must change; routing and local errors behave.

use crate::common::*;
use serde_json::Value;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn header<'a>(echo: &'a Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0] == name)
        .map(|h| h[1].as_str().unwrap())
        .collect()
}

async fn echo(proxy: std::net::SocketAddr, head: &str, body: &[u8]) -> Value {
    let resp = raw_exchange(proxy, head, body).await;
    assert_eq!(
        resp.status,
        200,
        "{}",
        String::from_utf8_lossy(&resp.body())
    );
    serde_json::from_slice(&resp.body()).unwrap()
}

#[tokio::test]
async fn request_is_forwarded_unchanged_but_for_hop_by_hop_host_and_forwarded_headers() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let body = br#"{"model":"m1","stream":false,"messages":[{"role":"user","content":"h\u00e9"}]}"#;
    let head = format!(
        "POST /v1/chat/completions?a=1&b=%20x HTTP/1.1\r\nhost: public.example\r\nconnection: close, x-conn-only\r\n\
         x-conn-only: 1\r\nkeep-alive: timeout=5\r\nte: trailers\r\nx-echo: 1\r\nx-custom: one\r\nx-custom: two\r\n\
         authorization: Bearer k\r\nx-forwarded-for: 10.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let e = echo(proxy.proxy_addr, &head, body).await;
    assert_eq!(e["method"], "POST");
    assert_eq!(e["uri"], "/v1/chat/completions?a=1&b=%20x");
    assert_eq!(e["body_hex"], hex(body));
    assert_eq!(header(&e, "x-custom"), ["one", "two"]);
    assert_eq!(header(&e, "authorization"), ["Bearer k"]);
    assert_eq!(header(&e, "host"), [upstream.to_string().as_str()]);
    assert_eq!(header(&e, "x-forwarded-for"), ["10.0.0.1, 127.0.0.1"]);
    assert_eq!(header(&e, "x-forwarded-proto"), ["http"]);
    assert_eq!(header(&e, "x-forwarded-host"), ["public.example"]);
    for hop in ["x-conn-only", "keep-alive", "te"] {
        assert!(header(&e, hop).is_empty(), "{hop} forwarded");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn preserve_host_and_strip_prefix_and_base_path() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    let route = &mut config.routes[0];
    route.preserve_host = true;
    route.strip_prefix = true;
    route.matcher.path_prefix = "/team-a/".into();
    route.upstream.base_path = "/base".into();
    config.proxy.x_forwarded = false;
    let proxy = start(config).await;
    let head = "GET /team-a/v1/models HTTP/1.1\r\nhost: public.example:8443\r\nx-echo: 1\r\nconnection: close\r\n\r\n";
    let e = echo(proxy.proxy_addr, head, b"").await;
    assert_eq!(e["uri"], "/base/v1/models");
    assert_eq!(header(&e, "host"), ["public.example:8443"]);
    assert!(header(&e, "x-forwarded-for").is_empty());
    let resp = get(proxy.proxy_addr, "/other").await;
    assert_eq!(resp.status, 404);
    assert_eq!(resp.header("x-tokenmeter-error"), Some("no_route"));
    let err: Value = serde_json::from_slice(&resp.body()).unwrap();
    assert_eq!(err["error"]["code"], "no_route");
    let (_, samples) = scrape(proxy.admin_addr).await;
    assert_eq!(
        value(&samples, "tokenmeter_unrouted_requests_total", &[]),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "tokenmeter_passthrough_requests_total",
            &[("route", "test")]
        ),
        1.0
    );
    proxy.stop().await;
}

#[tokio::test]
async fn bodies_larger_than_the_read_ahead_stream_through_unchanged() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 1024;
    let proxy = start(config).await;
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();

    // Announced as too large by content-length.
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let e = echo(proxy.proxy_addr, &head, &body).await;
    assert_eq!(e["body_hex"], hex(&body));

    // Chunked, found too large while reading ahead.
    let mut chunked = Vec::new();
    for piece in body.chunks(3000) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
    let e = echo(proxy.proxy_addr, head, &chunked).await;
    assert_eq!(e["body_hex"], hex(&body));

    // Small chunked: read ahead whole, forwarded unchanged.
    let small = br#"{"model":"m"}"#;
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
    let e = echo(
        proxy.proxy_addr,
        head,
        b"3\r\n{\"m\r\na\r\nodel\":\"m\"}\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(e["body_hex"], hex(small));
    proxy.stop().await;
}

#[tokio::test]
async fn http2_clients_with_prior_knowledge_are_served() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let sim = start_sim(sim::SimConfig {
        ttft: std::time::Duration::from_millis(5),
        itl: std::time::Duration::from_millis(1),
        tokens: 5,
        ..Default::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let (_, body) = chat_request("m1", true, &[]);
    let req = hyper::Request::post(format!("http://{}/v1/chat/completions", proxy.proxy_addr))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&text).contains("data: [DONE]"));
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "usage")]),
        5.0
    );
    proxy.stop().await;
}

/// A raw HTTP/1.1 upstream answering `ok` to every request, `answer_after`
/// it has the head; it counts the connections it accepted and, with
/// `close_after`, closes each connection that long after answering (without
/// saying so, as a keep-alive timeout does).
async fn counting_upstream(
    answer_after: std::time::Duration,
    close_after: Option<std::time::Duration>,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        tokio::time::sleep(answer_after).await;
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if sock.write_all(answer).await.is_err() {
                            return;
                        }
                        if let Some(after) = close_after {
                            tokio::time::sleep(after).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// One `GET /x` through the proxy, answered `ok`.
async fn get_ok(proxy: std::net::SocketAddr) {
    let resp = get(proxy, "/x").await;
    assert_eq!(
        resp.status,
        200,
        "{}",
        String::from_utf8_lossy(&resp.body())
    );
    assert_eq!(resp.body(), b"ok");
}

fn accepted(count: &std::sync::atomic::AtomicUsize) -> usize {
    count.load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test]
async fn upstream_connections_are_kept_alive_between_requests() {
    let (upstream, count) = counting_upstream(std::time::Duration::ZERO, None).await;
    let proxy = start(config_for(upstream)).await;
    for _ in 0..3 {
        get_ok(proxy.proxy_addr).await;
    }
    assert_eq!(accepted(&count), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn an_idle_upstream_connection_the_upstream_closed_is_not_reused() {
    let after = std::time::Duration::from_millis(20);
    let (upstream, count) = counting_upstream(std::time::Duration::ZERO, Some(after)).await;
    let proxy = start(config_for(upstream)).await;
    for _ in 0..3 {
        get_ok(proxy.proxy_addr).await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(accepted(&count), 3);
    proxy.stop().await;
}

/// After a burst, at most `proxy.upstream_idle_connections` connections stay
/// open for the next requests; the others are closed.
#[tokio::test]
async fn at_most_the_configured_idle_upstream_connections_are_kept() {
    // Three requests at once need three connections (each is held 100 ms).
    let burst = |proxy: std::net::SocketAddr| async move {
        let requests: Vec<_> = (0..3).map(|_| tokio::spawn(get_ok(proxy))).collect();
        for r in requests {
            r.await.unwrap();
        }
    };
    let hold = std::time::Duration::from_millis(100);
    for (kept, expected) in [(None, 3), (Some(1), 5), (Some(0), 6)] {
        let (upstream, count) = counting_upstream(hold, None).await;
        let mut config = config_for(upstream);
        if let Some(kept) = kept {
            config.proxy.upstream_idle_connections = kept;
        }
        let proxy = start(config).await;
        burst(proxy.proxy_addr).await;
        assert_eq!(accepted(&count), 3, "kept {kept:?}");
        burst(proxy.proxy_addr).await;
        assert_eq!(accepted(&count), expected, "kept {kept:?}");
        proxy.stop().await;
    }
}

/// A request head larger than `proxy.max_request_head` is refused with 431
/// and never reaches the upstream; a larger limit lets it through.
#[tokio::test]
async fn request_heads_beyond_the_limit_get_431() {
    let head = format!(
        "GET /x HTTP/1.1\r\nhost: a\r\nx-big: {}\r\nconnection: close\r\n\r\n",
        "a".repeat(9000)
    );
    let (upstream, count) = counting_upstream(std::time::Duration::ZERO, None).await;
    let proxy = start(config_for(upstream)).await;
    let resp = raw_exchange(proxy.proxy_addr, &head, b"").await;
    assert_eq!(resp.status, 431);
    assert_eq!(accepted(&count), 0);
    proxy.stop().await;

    let mut config = config_for(upstream);
    config.proxy.max_request_head_bytes = 64 * 1024;
    let proxy = start(config).await;
    let resp = raw_exchange(proxy.proxy_addr, &head, b"").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body(), b"ok");
    proxy.stop().await;
}

/// A client that stops reading holds the stream back end to end (the proxy
/// takes no more from the upstream than its sockets hold); when it reads
/// again, slowly, every event arrives and the request is metered whole.
#[tokio::test]
async fn a_client_that_stops_reading_slows_the_stream_without_losing_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const TOKENS: u32 = 100_000;
    let sim = start_sim(sim::SimConfig {
        ttft: std::time::Duration::ZERO,
        itl: std::time::Duration::ZERO,
        tokens: TOKENS,
        ..Default::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    let (head, body) = chat_request("m1", true, &[]);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(proxy.proxy_addr).await.unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    // About 15 MB are ready upstream, more than the sockets on the way
    // hold; nothing is read for a while, and the request has not ended.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(sum(&s, "llm_requests_total", &[]), 0.0, "not held back");
    let mut received = Vec::new();
    let mut piece = [0u8; 1024];
    loop {
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(10), client.read(&mut piece))
                .await
                .expect("the stream stalled")
                .unwrap();
        if read == 0 {
            break;
        }
        received.extend_from_slice(&piece[..read]);
        if received.len() % 16 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let resp = parse_response(&received);
    assert!(!resp.truncated);
    assert!(resp.body().ends_with(b"data: [DONE]\n\n"));
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 1.0
    })
    .await;
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("model", "m1")]),
        f64::from(TOKENS)
    );
    proxy.stop().await;
}
