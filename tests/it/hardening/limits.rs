//! The listeners' limits: open files, connection limits, overload and the
//! shedding of idle connections, the admin port on its own.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use tokenmeter::observe::metrics::EngineSources;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    // Eight more connections that send nothing (kept for the overload
    // timeout of opening): nine of ten is overloaded. The one connection
    // idle between requests is the HTTP/2 client's, once the response's
    // end has come from the upstream, and it is shed: the count of idle
    // connections shed says so.
    let mut waiting = Vec::new();
    for _ in 0..8 {
        waiting.push(TcpStream::connect(proxy.proxy_addr).await.unwrap());
    }
    scrape_until(proxy.admin_addr, |s| {
        value(
            s,
            "tokenmeter_shed_connections_total",
            &[("reason", "idle")],
        ) == 1.0
    })
    .await;
    // Now the client reads: all of it arrives.
    let body = tokio::time::timeout(Duration::from_secs(20), resp.into_body().collect())
        .await
        .expect("the body ends")
        .expect("the body is whole")
        .to_bytes();
    assert_eq!(body.len(), 68_000);
    assert!(body.ends_with(&[b'z'; 4_000]));
    drop(waiting);
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
    // Four of four is overloaded: the held connections, which send
    // nothing, are kept for the whole test rather than shed.
    config.proxy.overload_timeout = Duration::from_secs(60);
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
    // A fifth connection, its request sent: the kernel queued it on the
    // listener when the connection was made, for the proxy to take.
    let mut waiting = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    waiting.write_all(get.as_bytes()).await.unwrap();
    // Not taken: no byte of an answer within a second, and the proxy's own
    // count, read after that, still four.
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_secs(1), waiting.read(&mut byte)).await;
    assert!(early.is_err(), "served past the limit: {early:?}");
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        value(&s, "tokenmeter_open_connections", &[("listener", "proxy")]),
        4.0,
        "taken past the limit"
    );
    drop(held.pop());
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), waiting.read_to_end(&mut answer))
        .await
        .expect("served once a connection closed")
        .unwrap();
    let resp = parse_response(&answer);
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
    let text = proxy.metrics.encode(false, EngineSources::default());
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
