//! HTTPS upstreams verified against the route's own certificate
//! authorities (`routes[i].tls.ca_file`): a TLS upstream on a real socket,
//! with a certificate from a test CA (`tests/data/tls/`), over HTTP/2 (by
//! ALPN) and HTTP/1.1; and the wire-level behaviour of plain-HTTP
//! upstreams, over TLS, against upstreams with a self-signed certificate
//! (made by rcgen) that the route trusts: frames forwarded as they came,
//! connections kept alive, the keep-alive race, a stream cut by the
//! upstream, the client's stalled body, HTTP/2 by ALPN, and an HTTP/2
//! connection closed when idle or when its peer goes silent.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokenmeter::config::{Config, Overrides};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::{self, pki_types};

fn tls_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
}

/// The scripted upstream (see `common`) behind TLS with the test CA's
/// server certificate, offering `alpn` (`h2`, `http/1.1`).
async fn tls_upstream(alpn: &[&[u8]]) -> SocketAddr {
    tls_upstream_counted(acceptor(alpn)).await.0
}

/// The TLS server side with the test CA's server certificate, offering
/// `alpn`.
fn acceptor(alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
    use pki_types::pem::PemObject;
    let certs = pki_types::CertificateDer::pem_file_iter(tls_dir().join("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = pki_types::PrivateKeyDer::from_pem_file(tls_dir().join("server.key")).unwrap();
    acceptor_with(alpn, certs, key)
}

/// A self-signed certificate for `localhost` and `127.0.0.1`, made once
/// per test process with rcgen, and the PEM file that holds it (what a
/// route trusting it names as its `tls.ca_file`).
struct SelfSigned {
    cert: pki_types::CertificateDer<'static>,
    key: Vec<u8>,
    file: PathBuf,
}

fn self_signed() -> &'static SelfSigned {
    static ONE: std::sync::OnceLock<SelfSigned> = std::sync::OnceLock::new();
    ONE.get_or_init(|| {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap();
        let file = tempfile::tempdir().unwrap().keep().join("self-signed.pem");
        std::fs::write(&file, made.cert.pem()).unwrap();
        SelfSigned {
            cert: made.cert.der().clone(),
            key: made.signing_key.serialize_der(),
            file,
        }
    })
}

/// The TLS server side with the self-signed certificate, offering `alpn`.
fn self_signed_acceptor(alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
    let own = self_signed();
    let key = pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(own.key.clone()));
    acceptor_with(alpn, vec![own.cert.clone()], key)
}

/// The route's `tls` that trusts the self-signed certificate.
fn trust_self_signed() -> String {
    format!("    tls: {{ca_file: {}}}\n", self_signed().file.display())
}

fn acceptor_with(
    alpn: &[&[u8]],
    certs: Vec<pki_types::CertificateDer<'static>>,
    key: pki_types::PrivateKeyDer<'static>,
) -> tokio_rustls::TlsAcceptor {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A listener that counts each connection, completes its TLS handshake
/// with `acceptor` (a client that refuses the certificate ends it there)
/// and hands the TLS stream to `serve`. Returns its address and its count
/// of connections.
async fn tls_listener<F, Fut>(
    acceptor: tokio_rustls::TlsAcceptor,
    serve: F,
) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(tokio_rustls::server::TlsStream<TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let (acceptor, serve) = (acceptor.clone(), serve.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    serve(tls).await;
                }
            });
        }
    });
    (addr, connections)
}

/// The scripted upstream behind `acceptor`, and its count of connections.
async fn tls_upstream_counted(
    acceptor: tokio_rustls::TlsAcceptor,
) -> (SocketAddr, Arc<AtomicUsize>) {
    tls_listener(acceptor, |tls| async move {
        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(tls), hyper::service::service_fn(scripted))
            .await;
    })
    .await
}

/// TLS in front of the plain-HTTP upstream at `backend`, offering only
/// `http/1.1`: each connection is relayed byte for byte to a connection of
/// its own to `backend`, and closed when that one closes. Returns its
/// address and its count of connections.
async fn tls_front(backend: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    tls_listener(
        self_signed_acceptor(&[b"http/1.1"]),
        move |mut tls| async move {
            let Ok(mut plain) = TcpStream::connect(backend).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
        },
    )
    .await
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
        ..Default::default()
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

/// The fixture `name` cut after each of its events.
pub(crate) fn stream_request(name: &str) -> (String, Vec<Vec<u8>>) {
    let pieces = split_events(&fixture(name));
    let mut at = 0;
    let cuts: Vec<String> = pieces[..pieces.len() - 1]
        .iter()
        .map(|p| {
            at += p.len();
            at.to_string()
        })
        .collect();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: 2\r\nx-fixture: {name}\r\n\
         x-cuts: {}\r\n\r\n",
        cuts.join(",")
    );
    (head, pieces)
}

/// A chunked SSE stream from an HTTPS upstream that speaks HTTP/1.1 comes
/// out byte for byte with the upstream's chunks, as from a plain one; and
/// the connection is kept for the next requests.
#[tokio::test]
async fn an_http1_stream_over_tls_keeps_its_chunks_and_its_connection() {
    let (upstream, connections) = tls_front(scripted_upstream().await).await;
    let proxy = start(config(upstream, &trust_self_signed())).await;
    let name = "deepseek-chat-text.sse";
    let (head, frames) = stream_request(name);
    for _ in 0..3 {
        let resp = raw_exchange(proxy.proxy_addr, &head, b"{}").await;
        assert_eq!(resp.status, 200);
        assert_eq!(resp.header("x-upstream"), Some("yes"));
        assert_eq!(resp.chunks, frames, "one chunk out for each chunk in");
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "one TLS connection, kept alive"
    );
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) >= 3.0
    })
    .await;
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 3.0);
    proxy.stop().await;
}

/// A streamed response from an HTTPS upstream that chose HTTP/2 is
/// forwarded byte for byte, never two frames in one chunk, and metered;
/// its requests share one connection.
#[tokio::test]
async fn an_h2_stream_is_forwarded_metered_on_one_shared_connection() {
    let (upstream, connections) =
        tls_upstream_counted(self_signed_acceptor(&[b"h2", b"http/1.1"])).await;
    let proxy = start(config(upstream, &trust_self_signed())).await;
    let name = "deepseek-chat-text.sse";
    let (head, frames) = stream_request(name);
    for _ in 0..3 {
        let resp = raw_exchange(proxy.proxy_addr, &head, b"{}").await;
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body(), fixture(name));
        // Each chunk lies within one upstream frame.
        let mut frames_left = frames.iter();
        let mut frame: &[u8] = &[];
        for chunk in &resp.chunks {
            if frame.is_empty() {
                frame = frames_left.next().expect("more chunks than frames");
            }
            assert!(frame.starts_with(chunk), "a chunk across two frames");
            frame = &frame[chunk.len()..];
        }
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "one h2 connection");
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) >= 3.0
    })
    .await;
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 3.0);
    assert!(sum(&s, "llm_output_tokens_total", &[]) > 0.0);
    proxy.stop().await;
}

/// An idle HTTP/2 upstream connection is closed after the idle timeout,
/// though no request comes to find it idle; the next request opens
/// another, and is answered.
#[tokio::test]
async fn an_idle_h2_upstream_connection_is_closed_after_the_idle_timeout() {
    let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
    let (upstream, connections) = tls_listener(self_signed_acceptor(&[b"h2"]), move |tls| {
        let closed = closed_tx.clone();
        async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), hyper::service::service_fn(scripted))
                .await;
            let _ = closed.send(());
        }
    })
    .await;
    let mut config = config(upstream, &trust_self_signed());
    config.proxy.upstream_idle_timeout = Duration::from_secs(1);
    let proxy = start(config).await;
    let (head, _) = stream_request("deepseek-chat-text.sse");
    let resp = raw_exchange(proxy.proxy_addr, &head, b"{}").await;
    assert_eq!(resp.status, 200);
    // While the connection is idle, nothing the test waits for is on its
    // way between the sockets, so the runtime's clock may jump from one
    // timer to the next (paused, it moves only when no task has work):
    // past the idle timeout, not a second of the test's time. Then, on the
    // clock's own pace again, the close reaches the upstream; 10 s is far
    // beyond that on any machine, and without the idle timeout the
    // connection never closes.
    tokio::time::pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::time::resume();
    tokio::time::timeout(Duration::from_secs(10), closed.recv())
        .await
        .expect("the idle connection was not closed")
        .unwrap();
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    let resp = raw_exchange(proxy.proxy_addr, &head, b"{}").await;
    assert_eq!(resp.status, 200);
    assert_eq!(connections.load(Ordering::SeqCst), 2, "a new connection");
    proxy.stop().await;
}

/// A connection that goes silent, as a peer does that died without closing
/// it (a host gone, a NAT entry dropped): once `frozen`, reads and writes
/// never complete.
struct Silent<S> {
    inner: S,
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Silent<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.frozen.load(Ordering::SeqCst) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Silent<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.frozen.load(Ordering::SeqCst) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.frozen.load(Ordering::SeqCst) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.frozen.load(Ordering::SeqCst) {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An HTTP/2 upstream connection whose peer goes silent without closing
/// it is closed when its PING goes unanswered (10 s apart, 10 s to
/// answer), well before the idle timeout: the next request opens another
/// and is answered, rather than waiting on the dead one.
#[tokio::test]
async fn a_silent_h2_upstream_connection_is_closed_by_its_unanswered_ping() {
    let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let first = frozen.clone();
    let (upstream, connections) = tls_listener(self_signed_acceptor(&[b"h2"]), move |tls| {
        // The connection open when `frozen` is set goes silent; one made
        // after that stays live.
        let frozen = if first.load(Ordering::SeqCst) {
            Arc::new(std::sync::atomic::AtomicBool::new(false))
        } else {
            first.clone()
        };
        async move {
            let io = Silent { inner: tls, frozen };
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(io), hyper::service::service_fn(scripted))
                .await;
        }
    })
    .await;
    let mut config = config(upstream, &trust_self_signed());
    config.proxy.upstream_idle_timeout = Duration::from_secs(300);
    config.routes[0].timeouts.response_headers = Duration::from_secs(5);
    let proxy = start(config).await;
    let (head, _) = stream_request("deepseek-chat-text.sse");
    let resp = raw_exchange(proxy.proxy_addr, &head, b"{}").await;
    assert_eq!(resp.status, 200);
    frozen.store(true, Ordering::SeqCst);
    // The next PING is sent within 10 s and given up 10 s later. Nothing
    // the test waits for is on its way between the sockets meanwhile, so
    // the runtime's clock may jump from one timer to the next (paused, it
    // moves only when no task has work: the PING, its timeout, the end of
    // this wait) rather than the test waiting 22 s; the requests before and
    // after run on the clock's own pace.
    tokio::time::pause();
    tokio::time::sleep(Duration::from_secs(22)).await;
    tokio::time::resume();
    let resp = raw_exchange(proxy.proxy_addr, &head, b"{}").await;
    assert_eq!(
        resp.status, 200,
        "the request was sent on the silent connection"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2, "a new connection");
    proxy.stop().await;
}

/// An upstream that answers the first request on each connection (with a
/// keep-alive hint) and closes the connection, unanswered, when a second
/// request arrives on it. Returns its address.
async fn one_answer_per_connection() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                for answered in [false, true] {
                    let end = loop {
                        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            break end + 4;
                        }
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    };
                    got.drain(..end);
                    if answered {
                        return;
                    }
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         keep-alive: timeout=5, max=100\r\ncontent-length: 2\r\n\r\n{}";
                    if sock.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The keep-alive race over TLS: a reused connection the upstream closes
/// as the request arrives gets the request once more on a new one.
#[tokio::test]
async fn a_request_caught_in_the_keep_alive_race_over_tls_is_sent_again() {
    let (upstream, connections) = tls_front(one_answer_per_connection().await).await;
    let proxy = start(config(upstream, &trust_self_signed())).await;
    let get = "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    assert_eq!(raw_exchange(proxy.proxy_addr, get, b"").await.status, 200);
    let resp = raw_exchange(proxy.proxy_addr, get, b"").await;
    assert_eq!(
        resp.status,
        200,
        "{}",
        String::from_utf8_lossy(&resp.body())
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(
            &s,
            "tokenmeter_upstream_retries_total",
            &[("reason", "closed")]
        ),
        1.0
    );
    proxy.stop().await;
}

/// An HTTPS upstream (HTTP/1.1) that sends the head and the first three
/// events of a stream, a moment apart, then closes the connection without
/// a word (no close_notify, no last chunk).
async fn tls_stream_cut_after_three_events() -> SocketAddr {
    let acceptor = self_signed_acceptor(&[b"http/1.1"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let (end, len) = loop {
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        break (end + 4, len);
                    }
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                };
                while got.len() < end + len {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                if tls.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let _ = tls.flush().await;
                for event in split_events(&fixture("deepseek-chat-text.sse"))
                    .iter()
                    .take(3)
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let chunk =
                        [format!("{:x}\r\n", event.len()).as_bytes(), event, b"\r\n"].concat();
                    if tls.write_all(&chunk).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                // Dropped: the TCP connection closes, TLS never says so.
            });
        }
    });
    addr
}

/// An HTTPS upstream that breaks its stream mid-way: the client sees the
/// stream break, and it is the upstream's error.
#[tokio::test]
async fn an_upstream_closing_mid_stream_over_tls_is_an_upstream_error() {
    let upstream = tls_stream_cut_after_three_events().await;
    let proxy = start(config(upstream, &trust_self_signed())).await;
    let (head, body) = chat_request("m1", true, &[]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    assert!(resp.truncated, "the client must see the stream break");
    let events = split_events(&fixture("deepseek-chat-text.sse"));
    assert_eq!(resp.body(), events[..3].concat());
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) >= 1.0
    })
    .await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        1.0
    );
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 1.0);
    proxy.stop().await;
}

/// An HTTP/1.1-only HTTPS upstream whose certificate the route does not
/// trust: a 502 that names the certificate, whatever the protocol.
#[tokio::test]
async fn an_untrusted_http1_upstream_is_a_502_naming_the_certificate() {
    let (upstream, _) = tls_front(scripted_upstream().await).await;
    let proxy = start(config(upstream, "    tls: {ca_file: other-ca.pem}\n")).await;
    let resp = raw_exchange(proxy.proxy_addr, &fixture_request(), b"{}").await;
    assert_eq!(resp.status, 502);
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("upstream_unreachable")
    );
    let body = String::from_utf8_lossy(&resp.body()).into_owned();
    assert!(body.contains("certificate"), "{body}");
    proxy.stop().await;
}

/// A client body that stalls past the read-ahead, while it streams to an
/// HTTPS upstream: a 408 blamed on the client, whether the upstream
/// speaks HTTP/1.1 or HTTP/2.
#[tokio::test]
async fn a_client_body_stalling_on_its_way_to_an_https_upstream_is_the_clients_408() {
    let (http1, _) = tls_front(scripted_upstream().await).await;
    let (h2, _) = tls_upstream_counted(self_signed_acceptor(&[b"h2"])).await;
    for upstream in [http1, h2] {
        let mut config = config(upstream, &trust_self_signed());
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
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            let mut piece = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match client.read(&mut piece).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&piece[..n]),
                }
            }
        });
        read.await.expect("an answer");
        let head = String::from_utf8_lossy(&buf).into_owned();
        assert!(head.starts_with("HTTP/1.1 408"), "{upstream}: {head}");
        let s = scrape_until(proxy.admin_addr, |s| {
            sum(s, "llm_requests_total", &[]) >= 1.0
        })
        .await;
        assert_eq!(
            sum(&s, "llm_requests_total", &[("outcome", "client_timeout")]),
            1.0,
            "{upstream}"
        );
        // Gone, so that the proxy's close does not linger for its body.
        drop(client);
        proxy.stop().await;
    }
}

/// An HTTPS upstream that takes the TCP connection and never answers the
/// TLS handshake: the connect timeout covers TLS too.
#[tokio::test]
async fn a_tls_handshake_that_never_ends_is_a_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let mut config = config(upstream, &trust_self_signed());
    config.routes[0].timeouts.connect = Duration::from_millis(300);
    let proxy = start(config).await;
    let resp = raw_exchange(proxy.proxy_addr, &fixture_request(), b"{}").await;
    assert_eq!(resp.status, 504);
    assert_eq!(
        resp.header("x-tokenmeter-error"),
        Some("upstream_connect_timeout")
    );
    proxy.stop().await;
}
