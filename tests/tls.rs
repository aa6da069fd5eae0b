//! HTTPS upstreams verified against the route's own certificate
//! authorities (`routes[i].tls.ca_file`): a TLS upstream on a real socket,
//! with a certificate from a test CA (`tests/data/tls/`), over HTTP/2 (by
//! ALPN) and HTTP/1.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokenmeter::config::{Config, Overrides};
use tokio::net::TcpListener;
use tokio_rustls::rustls::{self, pki_types};

fn tls_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
}

/// The scripted upstream (see `common`) behind TLS with the test CA's
/// server certificate, offering `alpn` (`h2`, `http/1.1`).
async fn tls_upstream(alpn: &[&[u8]]) -> SocketAddr {
    use pki_types::pem::PemObject;
    let certs = pki_types::CertificateDer::pem_file_iter(tls_dir().join("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = pki_types::PrivateKeyDer::from_pem_file(tls_dir().join("server.key")).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake.
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), hyper::service::service_fn(scripted))
                    .await;
            });
        }
    });
    addr
}

/// The proxy's config for one route to `https://127.0.0.1:PORT`, read from
/// YAML as if from a file in `tests/data/tls/`, so `ca_file` is resolved
/// against that directory.
fn config(upstream: SocketAddr, tls: &str) -> Config {
    let text = format!("routes:\n  - name: tls\n    upstream: https://{upstream}\n{tls}");
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        upstream: None,
    };
    let file = tls_dir().join("tokenmeter.yaml");
    Config::parse(&text, file.to_str().unwrap(), &overrides).unwrap()
}

fn fixture_request() -> String {
    "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\nconnection: close\r\nx-fixture: openai-chat-basic-usage.sse\r\ncontent-length: 2\r\n\r\n".to_owned()
}

#[tokio::test]
async fn an_upstream_signed_by_the_routes_ca_is_reached_over_h2_and_http1() {
    let both: &[&[u8]] = &[b"h2", b"http/1.1"];
    let http1: &[&[u8]] = &[b"http/1.1"];
    for (alpn, version) in [(both, "HTTP/2.0"), (http1, "HTTP/1.1")] {
        let upstream = tls_upstream(alpn).await;
        let proxy = start(config(upstream, "    tls: {ca_file: ca.pem}\n")).await;
        let echo = raw_exchange(
            proxy.proxy_addr,
            "GET /v1/models HTTP/1.1\r\nhost: test\r\nconnection: close\r\nx-echo: 1\r\n\r\n",
            b"",
        )
        .await;
        let echo: serde_json::Value = serde_json::from_slice(&echo.body()).unwrap();
        assert_eq!(echo["version"], version);
        // `/config` shows what the route trusts.
        let shown = admin_json(proxy.admin_addr, "/config").await;
        let tls = &shown["routes"][0]["tls"];
        assert!(
            tls["ca_file"].as_str().unwrap().ends_with("ca.pem"),
            "{tls}"
        );
        assert_eq!(tls["certificates"], 1);
        let resp = raw_exchange(proxy.proxy_addr, &fixture_request(), b"{}").await;
        assert_eq!(
            resp.status,
            200,
            "{}",
            String::from_utf8_lossy(&resp.body())
        );
        assert_eq!(resp.header("x-upstream"), Some("yes"));
        assert_eq!(resp.body(), fixture("openai-chat-basic-usage.sse"));
        let s = scrape_until(proxy.admin_addr, |s| {
            sum(s, "llm_requests_total", &[("outcome", "ok")]) >= 1.0
        })
        .await;
        assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 1.0);
        assert_eq!(
            sum(&s, "llm_time_to_first_token_seconds_count", &[]),
            1.0,
            "metered as a stream"
        );
        proxy.stop().await;
    }
}

#[tokio::test]
async fn an_upstream_the_route_does_not_trust_is_a_502() {
    let upstream = tls_upstream(&[b"h2", b"http/1.1"]).await;
    // Another CA, and the web PKI roots: neither signed the certificate.
    for tls in ["    tls: {ca_file: other-ca.pem}\n", ""] {
        let proxy = start(config(upstream, tls)).await;
        let resp = raw_exchange(proxy.proxy_addr, &fixture_request(), b"{}").await;
        assert_eq!(resp.status, 502, "with {tls:?}");
        assert_eq!(
            resp.header("x-tokenmeter-error"),
            Some("upstream_unreachable")
        );
        let body = String::from_utf8_lossy(&resp.body()).into_owned();
        assert!(body.contains("certificate"), "{body}");
        proxy.stop().await;
    }
}

#[test]
fn a_bad_ca_file_is_reported_at_its_key() {
    let check = |tls: &str| {
        let text = format!("routes:\n  - name: tls\n    upstream: https://127.0.0.1:1\n{tls}");
        let file = tls_dir().join("tokenmeter.yaml");
        let errors = Config::parse(&text, file.to_str().unwrap(), &Overrides::default())
            .unwrap_err()
            .0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        (
            errors[0].line,
            errors[0].key.clone(),
            errors[0].message.clone(),
        )
    };
    let (line, key, message) = check("    tls: {ca_file: missing.pem}\n");
    assert_eq!((line, key.as_str()), (Some(4), "routes[0].tls.ca_file"));
    assert!(message.contains("cannot read"), "{message}");
    // A key file holds no certificate.
    let (_, key, message) = check("    tls: {ca_file: server.key}\n");
    assert_eq!(key, "routes[0].tls.ca_file");
    assert!(message.contains("no certificate"), "{message}");
    // README.md is not PEM at all: no certificate either.
    let (_, _, message) = check("    tls: {ca_file: README.md}\n");
    assert!(message.contains("no certificate"), "{message}");
    // Plain HTTP has no certificate to verify.
    let text =
        "routes:\n  - name: tls\n    upstream: http://127.0.0.1:1\n    tls: {ca_file: ca.pem}\n";
    let errors = Config::parse(text, "x.yaml", &Overrides::default())
        .unwrap_err()
        .0;
    assert_eq!(errors[0].key, "routes[0].tls");
    assert!(errors[0].message.contains("https"), "{}", errors[0].message);
}
