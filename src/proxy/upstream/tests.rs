//! Socket-level: a scripted upstream on 127.0.0.1, over plain TCP or
//! TLS (the test CA's certificate, `tests/data/tls/`, ALPN
//! `http/1.1`), that answers each request it reads (head, and a body of
//! its `content-length`) with the next of `answers`, and counts its
//! connections; an answer of `None` closes the connection instead.
//! Every test runs over both.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::{BodyError, Error, UpstreamClient};
use crate::proxy::client_body::{ClientBody, ClientBodyError, RequestBody};
use h1::Race;

/// Runs the test `$name(tls)` over plain TCP and over TLS.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn plain() {
                super::$name(false).await;
            }
            #[tokio::test]
            async fn tls() {
                super::$name(true).await;
            }
        }
    };
}

struct Scripted {
    upstream: Arc<UpstreamClient>,
    connections: Arc<AtomicUsize>,
    requests: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    /// The upstream's retries, in order.
    retries: Arc<std::sync::Mutex<Vec<Race>>>,
}

fn tls_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
}

/// The upstream of a route to `addr`, over TLS trusting the test CA.
fn upstream_for(
    addr: std::net::SocketAddr,
    tls: bool,
) -> (Arc<UpstreamClient>, Arc<std::sync::Mutex<Vec<Race>>>) {
    let text = if tls {
        format!(
            "routes:\n  - name: t\n    upstream: https://localhost:{}\n    tls: {{ca_file: ca.pem}}\n",
            addr.port()
        )
    } else {
        format!("routes:\n  - name: t\n    upstream: http://{addr}\n")
    };
    let file = tls_dir().join("tokenmeter.yaml");
    let config = crate::config::Config::parse(
        &text,
        file.to_str().unwrap(),
        &crate::config::Overrides::default(),
    )
    .unwrap();
    let retries = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = retries.clone();
    let upstream = UpstreamClient::new(
        &config.routes[0],
        8,
        Duration::from_secs(30),
        Box::new(move |race| seen.lock().unwrap().push(race)),
    )
    .unwrap();
    (upstream, retries)
}

/// The test CA's server side, offering `http/1.1` by ALPN.
fn acceptor() -> tokio_rustls::TlsAcceptor {
    acceptor_offering(b"http/1.1")
}

/// The test CA's server side, offering `alpn`.
fn acceptor_offering(alpn: &[u8]) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject as _;
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(tls_dir().join("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_file(tls_dir().join("server.key")).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// The server's side of an accepted connection: `sock`, or TLS over it.
async fn server_side(sock: tokio::net::TcpStream, tls: bool) -> Option<Box<dyn Stream>> {
    if !tls {
        return Some(Box::new(sock));
    }
    let tls = acceptor().accept(sock).await.ok()?;
    Some(Box::new(tls))
}

async fn upstream(answers: Vec<Option<&'static str>>, tls: bool) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let (tx, requests) = tokio::sync::mpsc::unbounded_channel();
    let counted = connections.clone();
    let answers = Arc::new(std::sync::Mutex::new(answers.into_iter()));
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let (answers, tx) = (answers.clone(), tx.clone());
            tokio::spawn(async move {
                let Some(mut sock) = server_side(sock, tls).await else {
                    return;
                };
                let mut got = Vec::new();
                loop {
                    let mut buf = [0u8; 4096];
                    // One request: its head, then its body.
                    let end = loop {
                        if let Some(end) = memchr::memmem::find(&got, b"\r\n\r\n") {
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
                    let request: Vec<u8> = got.drain(..end + len).collect();
                    let _ = tx.send(request);
                    let answer = answers.lock().unwrap().next().flatten();
                    let Some(answer) = answer else { return };
                    if sock.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if answer.contains("connection: close") || answer.contains("x-then-close") {
                        // A clean close (over TLS, with its close_notify).
                        let _ = sock.shutdown().await;
                        return;
                    }
                    // Closed without a word (over TLS, no close_notify).
                    if answer.contains("x-then-drop") {
                        return;
                    }
                }
            });
        }
    });
    let (upstream, retries) = upstream_for(addr, tls);
    Scripted {
        upstream,
        connections,
        requests,
        retries,
    }
}

fn post(body: &'static str) -> Request<RequestBody> {
    let mut req = Request::new(RequestBody::buffered(
        [Frame::data(Bytes::from_static(body.as_bytes()))].into(),
        None,
    ));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = "/v1/completions".parse().unwrap();
    req.headers_mut()
        .insert(header::HOST, HeaderValue::from_static("up"));
    req
}

/// The response's status, and its body's data frames (or error).
async fn exchange(
    upstream: &Arc<UpstreamClient>,
    req: Request<RequestBody>,
) -> (StatusCode, Result<Vec<Bytes>, h1::Error<ClientBodyError>>) {
    let resp = send(upstream, req).await.expect("a response head");
    let status = resp.status();
    let mut body = resp.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => frames.extend(f.into_data().ok()),
            Err(BodyError::H1(e)) => return (status, Err(e)),
            Err(e) => panic!("not an HTTP/1.1 body's error: {e}"),
        }
    }
    (status, Ok(frames))
}

async fn send(
    upstream: &Arc<UpstreamClient>,
    req: Request<RequestBody>,
) -> Result<http::Response<super::FromUpstream>, Error> {
    upstream.send(req, Duration::from_secs(10)).await
}

const CHUNKED: &str =
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";

both!(a_connection_is_kept_between_clean_exchanges);
async fn a_connection_is_kept_between_clean_exchanges(tls: bool) {
    let mut up = upstream(
        vec![
            Some(CHUNKED),
            Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            Some("HTTP/1.1 204 No Content\r\n\r\n"),
        ],
        tls,
    )
    .await;
    let (status, frames) = exchange(&up.upstream, post("{\"a\":1}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(frames.unwrap(), [&b"abc"[..], b"de"]);
    let request = up.requests.recv().await.unwrap();
    assert_eq!(
        String::from_utf8(request).unwrap(),
        "POST /v1/completions HTTP/1.1\r\nhost: up\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
    );
    let (_, frames) = exchange(&up.upstream, post("x")).await;
    assert_eq!(frames.unwrap(), [&b"ok"[..]]);
    let (status, frames) = exchange(&up.upstream, post("y")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(frames.unwrap().is_empty());
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
}

both!(a_connection_is_not_kept_after_close_a_close_delimited_body_or_ambiguous_framing);
async fn a_connection_is_not_kept_after_close_a_close_delimited_body_or_ambiguous_framing(
    tls: bool,
) {
    let up = upstream(vec![
        Some("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"),
        Some("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"),
        Some("HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        Some(CHUNKED),
    ], tls)
    .await;
    assert_eq!(
        exchange(&up.upstream, post("1")).await.1.unwrap(),
        [&b"ok"[..]]
    );
    let body = exchange(&up.upstream, post("2")).await.1.unwrap();
    assert_eq!(body.concat(), b"until the end");
    let body = exchange(&up.upstream, post("3")).await.1.unwrap();
    assert_eq!(body.concat(), b"abc");
    let body = exchange(&up.upstream, post("4")).await.1.unwrap();
    assert_eq!(body.concat(), b"abcde");
    assert_eq!(up.connections.load(Ordering::SeqCst), 4);
}

both!(bytes_past_the_body_close_the_connection);
async fn bytes_past_the_body_close_the_connection(tls: bool) {
    let up = upstream(
        vec![
            Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"),
            Some(CHUNKED),
        ],
        tls,
    )
    .await;
    assert_eq!(
        exchange(&up.upstream, post("1")).await.1.unwrap(),
        [&b"ok"[..]]
    );
    assert_eq!(
        exchange(&up.upstream, post("2")).await.1.unwrap().concat(),
        b"abcde"
    );
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

both!(a_connection_the_upstream_closed_while_idle_is_not_used);
/// The upstream closes a kept connection after a while (as servers
/// do after their keep-alive timeout): the pool finds it closed and
/// sends the next request on a new one.
async fn a_connection_the_upstream_closed_while_idle_is_not_used(tls: bool) {
    let then_close = "HTTP/1.1 200 OK\r\nx-then-close: 1\r\ncontent-length: 2\r\n\r\nok";
    let up = upstream(vec![Some(then_close), Some(CHUNKED)], tls).await;
    assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        exchange(&up.upstream, post("2")).await.1.unwrap().concat(),
        b"abcde"
    );
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

both!(no_answer_on_a_new_connection_is_an_error_before_the_head);
/// An upstream that closes a new connection instead of answering:
/// an error before the head, not sent again, and the connection is
/// not kept.
async fn no_answer_on_a_new_connection_is_an_error_before_the_head(tls: bool) {
    let up = upstream(vec![None, Some(CHUNKED)], tls).await;
    let resp = send(&up.upstream, post("1")).await;
    assert!(
        matches!(resp, Err(Error::H1(h1::Error::ClosedBeforeHead))),
        "{:?}",
        resp.map(|_| ())
    );
    assert!(up.retries.lock().unwrap().is_empty());
    assert!(exchange(&up.upstream, post("2")).await.1.is_ok());
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

both!(a_request_closed_on_a_reused_connection_is_sent_again_on_a_new_one);
/// The keep-alive race: the upstream closes a reused connection as
/// the request arrives, without a byte of an answer. The request,
/// held whole, is sent once more on a new connection.
async fn a_request_closed_on_a_reused_connection_is_sent_again_on_a_new_one(tls: bool) {
    let mut up = upstream(vec![Some(CHUNKED), None, Some(CHUNKED)], tls).await;
    assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
    let (status, frames) = exchange(&up.upstream, post("2")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(frames.unwrap().concat(), b"abcde");
    assert_eq!(*up.retries.lock().unwrap(), [Race::Closed]);
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    // The same bytes both times.
    let _first = up.requests.recv().await.unwrap();
    let second = up.requests.recv().await.unwrap();
    assert_eq!(second, up.requests.recv().await.unwrap());
}

both!(a_response_that_had_begun_is_not_sent_again);
both!(a_close_without_close_notify_is_read_as_a_cut);
/// An upstream that closes without TLS's close_notify: a body framed
/// by chunks is cut short, as over TCP; one delimited by the close may
/// have been truncated, which only TLS can tell (RFC 9112 §9.8), so
/// over TLS it is an error.
async fn a_close_without_close_notify_is_read_as_a_cut(tls: bool) {
    let up = upstream(
        vec![Some(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-then-drop: 1\r\n\r\n3\r\nabc\r\n",
        )],
        tls,
    )
    .await;
    let (_, frames) = exchange(&up.upstream, post("1")).await;
    assert!(matches!(frames, Err(h1::Error::ClosedInBody)), "{frames:?}");
    let up = upstream(
        vec![Some(
            "HTTP/1.1 200 OK\r\nx-then-drop: 1\r\n\r\nuntil the end",
        )],
        tls,
    )
    .await;
    let (_, frames) = exchange(&up.upstream, post("1")).await;
    if tls {
        assert!(
            matches!(&frames, Err(h1::Error::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof),
            "{frames:?}"
        );
    } else {
        assert_eq!(frames.unwrap().concat(), b"until the end");
    }
}

/// Once a byte of the response has arrived, the upstream has the
/// request: never sent twice.
async fn a_response_that_had_begun_is_not_sent_again(tls: bool) {
    let up = upstream(
        vec![
            Some(CHUNKED),
            Some("HTTP/1.1 200 OK\r\nx-then-close: 1\r\n"),
            Some(CHUNKED),
        ],
        tls,
    )
    .await;
    assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
    let resp = send(&up.upstream, post("2")).await;
    assert!(
        matches!(resp, Err(Error::H1(h1::Error::ClosedBeforeHead))),
        "{:?}",
        resp.map(|_| ())
    );
    assert!(up.retries.lock().unwrap().is_empty());
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
}

both!(a_streamed_request_body_is_not_sent_again);
/// A request whose body is still coming from the client cannot be
/// sent again: the race is the client's error to see.
async fn a_streamed_request_body_is_not_sent_again(tls: bool) {
    let up = upstream(vec![Some(CHUNKED), None, Some(CHUNKED)], tls).await;
    assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
    let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
    let mut req = Request::new(RequestBody::streaming(ClientBody::new(
        incoming.into(),
        Duration::from_secs(30),
    )));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = "/up".parse().unwrap();
    let resp = send(&up.upstream, req).await;
    assert!(resp.is_err(), "{:?}", resp.map(|_| ()));
    assert!(up.retries.lock().unwrap().is_empty());
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
}

both!(keep_alive_max_0_is_not_kept);
/// `Keep-Alive: max=0`: the upstream takes no more requests on the
/// connection, so it is not kept.
async fn keep_alive_max_0_is_not_kept(tls: bool) {
    let up = upstream(
        vec![
            Some("HTTP/1.1 200 OK\r\nkeep-alive: timeout=5, max=0\r\ncontent-length: 2\r\n\r\nok"),
            Some(CHUNKED),
        ],
        tls,
    )
    .await;
    assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
    assert!(exchange(&up.upstream, post("2")).await.1.is_ok());
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    assert!(up.retries.lock().unwrap().is_empty());
}

both!(a_body_cut_short_is_an_error);
async fn a_body_cut_short_is_an_error(tls: bool) {
    let up = upstream(vec![Some(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n5\r\nde",
    )], tls)
    .await;
    let (_, frames) = exchange(&up.upstream, post("1")).await;
    assert!(matches!(frames, Err(h1::Error::ClosedInBody)), "{frames:?}");
}

/// A request body streaming in from a client connection (a hyper
/// server's), which has sent `first` of its chunked body so far;
/// the socket writes the rest.
async fn client_body(first: &[u8]) -> (tokio::net::TcpStream, hyper::body::Incoming) {
    let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let caddr = client.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (sock, _) = client.accept().await.unwrap();
        let tx = std::sync::Mutex::new(Some(tx));
        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(req.into_body());
            }
            // Never answers: the test only takes the body.
            std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>()
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
            .await;
    });
    let mut csock = tokio::net::TcpStream::connect(caddr).await.unwrap();
    csock
        .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    csock.write_all(first).await.unwrap();
    (csock, rx.await.unwrap())
}

both!(an_early_answer_ends_the_request);
/// An upstream that answers before the request body is all there,
/// and whose answer ends while the client's body goes on: the
/// answer is forwarded without waiting for the request body, the
/// rest of the request is not sent, and the connection is not kept.
async fn an_early_answer_ends_the_request(tls: bool) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Some(mut sock) = server_side(sock, tls).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!")
                    .await;
                // Reads on (as a server draining the upload would).
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    let (upstream, _) = upstream_for(addr, tls);
    // The client's body never ends.
    let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
    let mut req = Request::new(RequestBody::streaming(ClientBody::new(
        incoming.into(),
        Duration::from_secs(30),
    )));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = "/up".parse().unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), exchange(&upstream, req))
        .await
        .expect("the early answer, not a wait for the request body");
    assert_eq!(resp.0, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(resp.1.unwrap().concat(), b"big!");
    // Not kept: the next request opens a new connection.
    let next = tokio::time::timeout(Duration::from_secs(5), exchange(&upstream, post("x")));
    assert_eq!(
        next.await.expect("an answer on a new connection").0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

both!(a_streamed_request_body_goes_out_chunked);
/// A chunked request body, streamed: sent chunked, frame by frame.
async fn a_streamed_request_body_goes_out_chunked(tls: bool) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let mut sock = server_side(sock, tls).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"0\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        got
    });
    // A client connection whose body streams in two frames.
    let (mut csock, incoming) = client_body(b"5\r\nhello\r\n").await;
    let mut req = Request::new(RequestBody::streaming(ClientBody::new(
        incoming.into(),
        Duration::from_secs(30),
    )));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = "/up".parse().unwrap();
    req.headers_mut()
        .insert(header::HOST, HeaderValue::from_static("up"));
    let (upstream, _) = upstream_for(addr, tls);
    let send = tokio::spawn(async move { send(&upstream, req).await.map_err(|e| e.to_string()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    csock.write_all(b"6\r\n world\r\n0\r\n\r\n").await.unwrap();
    let resp = send.await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let got = String::from_utf8(server.await.unwrap()).unwrap();
    assert_eq!(
        got,
        "POST /up HTTP/1.1\r\nhost: up\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    );
}

/// A response body that never ends, and never sends a frame.
struct Silent;

impl http_body::Body for Silent {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

/// Over HTTP/2, an upstream that answers at once while the client's body
/// is still being sent: when that body stalls, hyper resets the stream, and
/// the response body's failure is the client's, not the upstream's.
#[tokio::test]
async fn over_h2_the_request_body_failing_after_the_head_is_the_clients() {
    use crate::proxy::blame::{Blame, Fault};
    use crate::proxy::client_body::BodyTimeout;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let tls = acceptor_offering(b"h2").accept(sock).await.unwrap();
        let svc = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Silent))
        });
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
            .await;
    });
    let (upstream, _) = upstream_for(addr, true);
    let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
    let idle = Duration::from_millis(200);
    let mut req = Request::new(RequestBody::streaming(ClientBody::new(
        incoming.into(),
        idle,
    )));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = format!("https://localhost:{}/up", addr.port())
        .parse()
        .unwrap();
    let resp = send(&upstream, req).await.expect("a response head");
    assert!(matches!(resp.body(), super::FromUpstream::Client(_)));
    let mut body = resp.into_body();
    let err = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the stream's reset")
        .expect("an error, not the end")
        .unwrap_err();
    assert_eq!(
        err.fault(),
        Fault::ClientTimeout(BodyTimeout::Idle(idle)),
        "{err}"
    );
}
