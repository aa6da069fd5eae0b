//! Header hygiene: what a hop must not pass on, and what it must refuse.

use std::net::SocketAddr;

use crate::common::*;
use serde_json::Value;

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
