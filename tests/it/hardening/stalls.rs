//! Stalled clients: request bodies that stop or trickle are the client's
//! `408`, counted from their head.

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::keep_alive::closing_the_second_request_after;
use super::{answer, settle};

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
    config.routes[0].timeouts.response_headers = Duration::from_secs(1);
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
    // The rest trickles, a byte every 100 ms: never silent for the 30 s
    // idle timeout, and the echoing upstream answers only once it has it
    // all, so the head timeout (1 s) runs out while it is still arriving.
    let mut buf = Vec::new();
    let resp = loop {
        tokio::select! {
            read = client.read_to_end(&mut buf) => {
                let _ = read;
                break parse_response(&buf);
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {
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
async fn bodies_trickling_a_byte_at_a_time_are_408_within_the_read_ahead_bound() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.routes[0].timeouts.request_body_total = Duration::from_secs(1);
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
        // A byte every 250 ms, never silent for the 5 s silence timeout.
        let mut buf = Vec::new();
        loop {
            tokio::select! {
                read = client.read_to_end(&mut buf) => {
                    let _ = read;
                    return (parse_response(&buf), started.elapsed());
                }
                () = tokio::time::sleep(Duration::from_millis(250)) => {
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
