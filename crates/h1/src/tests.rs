//! Exchanges over mock I/O, no sockets: the client connection over a
//! scripted upstream (each read gets the next piece of its answer) or over
//! a duplex pipe that the test reads and writes as the upstream, with
//! client bodies from a hyper server over another pipe.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream, ReadBuf};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body::{Body as _, Frame};
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

use super::decode::Decoder;
use super::head::tests::{framing, head};
use super::*;

/// Where a connection goes when its exchange ended cleanly.
type Kept<S> = Arc<Mutex<Option<Conn<Mock<S>>>>>;

/// A connection to an in-memory upstream over `S`.
struct Mock<S> {
    io: S,
    kept: Kept<S>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Mock<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Mock<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Transport for Mock<S> {
    fn give_back(conn: Conn<Self>, _: &Weak<dyn Keep<Self>>) {
        let kept = conn.io.kept.clone();
        *kept.lock().unwrap() = Some(conn);
    }
}

/// No pool: a connection that can be kept goes to `Mock`'s `kept`.
fn nowhere<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>() -> Weak<dyn Keep<Mock<S>>> {
    Weak::<Pool<Mock<S>>>::new()
}

fn over<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> (Conn<Mock<S>>, Kept<S>) {
    let kept = Kept::default();
    let conn = Conn::new(Mock {
        io,
        kept: kept.clone(),
    });
    (conn, kept)
}

/// What was written to a scripted upstream.
type Written = Arc<Mutex<Vec<u8>>>;

/// An upstream that answers read by read: a read gets the next of
/// `reads` (the end of the connection after the last); what is
/// written to it is kept in `written`.
struct Script {
    reads: VecDeque<Vec<u8>>,
    written: Written,
}

impl AsyncRead for Script {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(mut piece) = this.reads.pop_front() {
            let n = piece.len().min(buf.remaining());
            buf.put_slice(&piece[..n]);
            if n < piece.len() {
                this.reads.push_front(piece.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Script {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.written.lock().unwrap().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A connection whose upstream answers with `reads`, one per read
/// (empty pieces left out: an empty read is the end), and what was
/// written to it.
fn scripted<'a>(
    reads: impl IntoIterator<Item = &'a [u8]>,
) -> (Conn<Mock<Script>>, Kept<Script>, Written) {
    let written = Written::default();
    let (conn, kept) = over(Script {
        reads: reads
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
        written: written.clone(),
    });
    (conn, kept, written)
}

/// More answers for a scripted connection's next reads.
fn answer(conn: &mut Conn<Mock<Script>>, read: &[u8]) {
    conn.io.io.reads.push_back(read.to_vec());
}

fn request(method: Method, headers: &[(&str, &str)], body: TestBody) -> Prepared<TestBody> {
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = "/up".parse().unwrap();
    for (n, v) in headers {
        req.headers_mut().append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    Prepared::new(req)
}

fn empty() -> TestBody {
    TestBody::held(Default::default())
}

fn trailers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
    fields
        .iter()
        .map(|&(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v)))
        .collect()
}

/// A body's data, and its trailers.
async fn read_all<T: Transport>(
    mut body: Body<T, TestBody>,
) -> Result<(Vec<u8>, Option<HeaderMap>), Error<TestBodyError>> {
    let mut data = Vec::new();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        match frame?.into_data() {
            Ok(d) => data.extend_from_slice(&d),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    Ok((data, trailers))
}

/// A client's request body as hyper's server hands it over, from
/// an in-memory client connection that has sent the head of a
/// chunked request and `first` of its body; the client's end of
/// that connection writes the rest.
pub(super) async fn client_body(first: &[u8]) -> (DuplexStream, hyper::body::Incoming) {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let tx = Mutex::new(Some(tx));
        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(req.into_body());
            }
            // Never answers: the test only takes the body.
            std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>()
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(server), svc)
            .await;
    });
    client
        .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    client.write_all(first).await.unwrap();
    (client, rx.await.unwrap())
}

pub(super) fn streaming(incoming: hyper::body::Incoming, idle: Duration) -> TestBody {
    TestBody::streaming(incoming, idle)
}

/// Reads from the upstream's end of a pipe until what it got
/// (`got`, which it extends) holds `until`.
async fn read_until(up: &mut DuplexStream, got: &mut Vec<u8>, until: &[u8]) {
    let mut buf = [0u8; 1024];
    while memchr::memmem::find(got, until).is_none() {
        let n = up.read(&mut buf).await.unwrap();
        assert!(n > 0, "the request ended before {until:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// The data and trailers of a whole chunked body.
fn dechunk(wire: &[u8]) -> (Vec<u8>, Option<HeaderMap>) {
    let mut decoder = Decoder::CHUNKED;
    let mut buf = BytesMut::from(wire);
    let mut data = Vec::new();
    let mut trailers = None;
    while let Some(frame) = decoder.decode(&mut buf).unwrap() {
        match frame.into_data() {
            Ok(d) => data.extend_from_slice(&d),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    assert!(
        decoder.is_done() && buf.is_empty(),
        "not one whole chunked body"
    );
    (data, trailers)
}

/// RFC 9110 §9.3.2, §15.3.5, §15.4.5 and RFC 9112 §6.3: the answer
/// to a HEAD, a 204 and a 304 have no body, whatever their
/// Content-Length or Transfer-Encoding say (both forwarded as they
/// are), and the connection is kept: the next answer on it is read
/// from its first byte.
#[tokio::test]
async fn heads_204s_and_304s_have_no_body_and_keep_their_connection() {
    let (mut conn, kept, written) = scripted([]);
    for (method, answer_head, status, header) in [
        (
            Method::HEAD,
            "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n",
            StatusCode::OK,
            ("content-length", "10"),
        ),
        (
            Method::HEAD,
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            StatusCode::OK,
            ("transfer-encoding", "chunked"),
        ),
        (
            Method::GET,
            "HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n",
            StatusCode::NO_CONTENT,
            ("content-length", "5"),
        ),
        (
            Method::GET,
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 7\r\n\r\n",
            StatusCode::NOT_MODIFIED,
            ("content-length", "7"),
        ),
        (
            Method::GET,
            "HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
            StatusCode::NOT_MODIFIED,
            ("transfer-encoding", "chunked"),
        ),
    ] {
        answer(&mut conn, answer_head.as_bytes());
        let resp = conn.send(request(method, &[], empty()), nowhere()).await;
        let resp = resp.unwrap_or_else(|e| panic!("{answer_head:?}: {:?}", e.error));
        assert_eq!(resp.status(), status, "{answer_head:?}");
        assert_eq!(resp.headers()[header.0], header.1, "{answer_head:?}");
        let body = resp.into_body();
        assert!(body.is_end_stream(), "{answer_head:?}");
        assert_eq!(body.size_hint().exact(), Some(0));
        assert_eq!(read_all(body).await.unwrap(), (Vec::new(), None));
        conn = kept
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| panic!("{answer_head:?}: not kept"));
    }
    // The next answer on the same connection, read whole.
    answer(&mut conn, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    let resp = conn
        .send(request(Method::GET, &[], empty()), nowhere())
        .await
        .map_err(|e| e.error)
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(read_all(resp.into_body()).await.unwrap().0, b"ok");
    assert!(kept.lock().unwrap().is_some());
    let written = String::from_utf8(written.lock().unwrap().clone()).unwrap();
    assert_eq!(written.matches(" /up HTTP/1.1\r\n\r\n").count(), 6);
}

/// Bytes that follow a bodiless answer are not its body: they are
/// not forwarded, and the connection, whose framing they break, is
/// not kept.
#[tokio::test]
async fn bytes_after_a_bodiless_answer_are_not_its_body() {
    for (method, wire) in [
        (
            Method::HEAD,
            &b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"[..],
        ),
        (
            Method::GET,
            b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\nhello",
        ),
        (
            Method::GET,
            b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ),
    ] {
        let (conn, kept, _) = scripted([wire]);
        let before = tokio::time::Instant::now();
        let resp = conn.send(request(method, &[], empty()), nowhere()).await;
        let body = resp.map_err(|e| e.error).unwrap().into_body();
        let written = body.request_written().expect("written before the answer");
        assert!(written >= before && written <= tokio::time::Instant::now());
        assert_eq!(read_all(body).await.unwrap(), (Vec::new(), None));
        assert!(kept.lock().unwrap().is_none());
    }
}

const INTERIM_THEN_FINAL: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n\
    HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n\
    HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-final: 1\r\n\r\nok";

/// Interim responses (skipped: not forwarded) and the final head
/// that follows them, read at once or cut into reads anywhere, in
/// one or two places: the final head is always found whole, its
/// body read, and the connection kept.
#[tokio::test]
async fn interim_responses_and_the_final_head_in_one_read_or_cut_anywhere() {
    let wire = INTERIM_THEN_FINAL;
    let n = wire.len();
    for a in 0..=n {
        for b in a..=n {
            let (conn, kept, _) = scripted([&wire[..a], &wire[a..b], &wire[b..]]);
            let resp = conn
                .send(request(Method::GET, &[], empty()), nowhere())
                .await
                .unwrap_or_else(|e| panic!("cut at {a}, {b}: {:?}", e.error));
            assert_eq!(resp.status(), StatusCode::OK, "cut at {a}, {b}");
            assert_eq!(resp.headers()["x-final"], "1", "cut at {a}, {b}");
            assert!(!resp.headers().contains_key("link"), "cut at {a}, {b}");
            let (body, _) = read_all(resp.into_body()).await.unwrap();
            assert_eq!(body, b"ok", "cut at {a}, {b}");
            assert!(kept.lock().unwrap().is_some(), "cut at {a}, {b}");
        }
    }
}

/// RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 response is
/// faulty framing. The head is refused (the upstream's error, not
/// the keep-alive race: bytes came), so nothing is forwarded and
/// the connection goes with the failed exchange.
#[tokio::test]
async fn an_http_1_0_response_with_transfer_encoding_is_refused() {
    for wire in [
        &b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"[..],
        b"HTTP/1.0 200 OK\r\ntransfer-encoding: gzip\r\n\r\nabc",
        b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
    ] {
        let what = String::from_utf8_lossy(wire);
        assert!(
            matches!(head(wire), Err(Error::Head(m)) if m.contains("HTTP/1.0")),
            "{what:?}"
        );
        let (conn, kept, _) = scripted([wire]);
        let resp = conn
            .send(request(Method::GET, &[], empty()), nowhere())
            .await;
        let Err(failed) = resp else {
            panic!("{what:?}: accepted");
        };
        assert!(matches!(failed.error, Error::Head(_)), "{what:?}");
        assert!(!failed.silent && failed.keepalive_race().is_none());
        assert!(kept.lock().unwrap().is_none());
    }
    // Without it, an HTTP/1.0 answer is read as before (and its
    // connection is not kept).
    assert_eq!(
        framing("HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n"),
        Decoder::Length(3)
    );
    let (conn, kept, _) = scripted([&b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\nabc"[..]]);
    let resp = conn
        .send(request(Method::GET, &[], empty()), nowhere())
        .await;
    let body = resp.map_err(|e| e.error).unwrap().into_body();
    assert_eq!(read_all(body).await.unwrap().0, b"abc");
    assert!(kept.lock().unwrap().is_none());
}

/// A malformed head is refused with what is wrong with it: obsolete
/// line folding (RFC 9112 §5.2: a proxy may answer 502 to it),
/// whitespace before a colon (§5.1), a version that is not 1.x.
#[test]
fn a_malformed_head_says_what_is_wrong() {
    for (wire, why) in [
        (
            &b"HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\ncontent-length: 0\r\n\r\n"[..],
            "obsolete line folding",
        ),
        (
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\n\tfolded\r\n\r\n",
            "obsolete line folding",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length : 0\r\n\r\n",
            "invalid header name",
        ),
        (b"HTTP/2 200 OK\r\n\r\n", "not HTTP/1.x"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "invalid status code"),
        (
            b"HTTP/1.1 200 OK\r\nx-a: \x01\r\n\r\n",
            "invalid header value",
        ),
    ] {
        let what = String::from_utf8_lossy(wire);
        match head(wire) {
            Err(Error::Head(m)) => assert_eq!(m, why, "{what:?}"),
            Err(e) => panic!("{what:?}: {e}"),
            Ok(_) => panic!("{what:?}: accepted"),
        }
    }
}

/// Full duplex (as hyper's client is): the upstream answers once it
/// has the request's first chunk and goes on reading; the client
/// sends the rest of its body only after the response head has
/// arrived, more than the pipe to the upstream holds. All of it
/// reaches the upstream while the response is read, the response
/// (which the upstream ends once it has the whole request)
/// completes, and the connection is kept.
#[tokio::test]
async fn the_request_body_goes_on_while_the_response_is_read() {
    let (mut client, incoming) = client_body(b"5\r\nhello\r\n").await;
    let (ours, mut up) = tokio::io::duplex(4096);
    let (conn, kept) = over(ours);
    let req = request(
        Method::POST,
        &[],
        streaming(incoming, Duration::from_secs(30)),
    );
    let chunk: Vec<u8> = (0..1024u32).map(|i| b'a' + (i % 26) as u8).collect();
    let upstream = async {
        let mut got = Vec::new();
        read_until(&mut up, &mut got, b"hello\r\n").await;
        up.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7\r\nstarted\r\n")
            .await
            .unwrap();
        read_until(&mut up, &mut got, b"\r\n0\r\n\r\n").await;
        up.write_all(b"8\r\nreceived\r\n0\r\n\r\n").await.unwrap();
        got
    };
    let exchange = async {
        let resp = conn
            .send(req, nowhere())
            .await
            .map_err(|e| e.error)
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        assert_eq!(body.request_written(), None, "the request is not all sent");
        // The response's first chunk, before the request's rest.
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "started");
        let client_sends = async {
            for _ in 0..64 {
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                client.write_all(&framed).await.unwrap();
            }
            client.write_all(b"0\r\n\r\n").await.unwrap();
        };
        let ((), rest) = tokio::join!(client_sends, read_all(body));
        rest
    };
    let guard = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(upstream, exchange)
    });
    let (got, rest) = guard.await.expect("no hang");
    assert_eq!(rest.unwrap(), (b"received".to_vec(), None));
    let head = b"POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
    assert!(got.starts_with(head), "{:?}", String::from_utf8_lossy(&got));
    let (data, trailers) = dechunk(&got[head.len()..]);
    let mut expected = b"hello".to_vec();
    for _ in 0..64 {
        expected.extend_from_slice(&chunk);
    }
    assert_eq!(data.len(), expected.len());
    assert!(data == expected && trailers.is_none());
    assert!(kept.lock().unwrap().is_some(), "a clean exchange is kept");
}

/// The upstream answers early and closes, or answers early and
/// stops reading: the answer is forwarded whole, without waiting
/// for a request body that never ends (nor hanging on a write the
/// upstream never takes), and the connection is not kept.
#[tokio::test]
async fn an_early_final_answer_is_forwarded_without_a_hang() {
    for (answer, close) in [
        (
            &b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!"[..],
            true,
        ),
        (
            b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\n\r\nbig!",
            true,
        ),
        (
            b"HTTP/1.1 413 Payload Too Large\r\ntransfer-encoding: chunked\r\n\r\n4\r\nbig!\r\n0\r\n\r\n",
            false,
        ),
    ] {
        // More of the body than the pipe to the upstream holds is
        // there at once, and the client's body never ends.
        let mut first = Vec::new();
        for _ in 0..8 {
            first.extend_from_slice(b"400\r\n");
            first.extend_from_slice(&[b'x'; 1024]);
            first.extend_from_slice(b"\r\n");
        }
        let (_client, incoming) = client_body(&first).await;
        let (ours, mut up) = tokio::io::duplex(1024);
        let (conn, kept) = over(ours);
        let req = request(
            Method::POST,
            &[],
            streaming(incoming, Duration::from_secs(30)),
        );
        let upstream = async {
            let mut got = Vec::new();
            read_until(&mut up, &mut got, b"\r\n\r\n").await;
            up.write_all(answer).await.unwrap();
            if close {
                drop(up);
                None
            } else {
                // Open, and reads no more.
                Some(up)
            }
        };
        let exchange = async {
            let resp = conn.send(req, nowhere()).await.map_err(|e| e.error)?;
            let status = resp.status();
            read_all(resp.into_body()).await.map(|b| (status, b))
        };
        let guard = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(upstream, exchange)
        });
        let (_up, resp) = guard.await.expect("no hang");
        let what = String::from_utf8_lossy(answer);
        let (status, (body, _)) = resp.unwrap_or_else(|e| panic!("{what:?}: {e}"));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{what:?}");
        assert_eq!(body, b"big!", "{what:?}");
        assert!(kept.lock().unwrap().is_none(), "{what:?}");
    }
}

/// The client's body fails (here: silent past its timeout) after
/// the response head: that is not the upstream's error, so the
/// response is not failed with it (the response body's errors are
/// charged to the upstream). The rest of the request is not sent,
/// the response goes on to its end, and the connection is not
/// kept.
#[tokio::test(start_paused = true)]
async fn a_client_body_failing_after_the_head_stops_the_request_not_the_response() {
    let (_client, incoming) = client_body(b"5\r\nhello\r\n").await;
    let (ours, mut up) = tokio::io::duplex(4096);
    let (conn, kept) = over(ours);
    let req = request(
        Method::POST,
        &[],
        streaming(incoming, Duration::from_secs(5)),
    );
    let upstream = async {
        let mut got = Vec::new();
        read_until(&mut up, &mut got, b"hello\r\n").await;
        up.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nfirst")
            .await
            .unwrap();
        // Past the client's timeout, the rest of the answer.
        tokio::time::sleep(Duration::from_secs(60)).await;
        up.write_all(b"-last").await.unwrap();
        up
    };
    let exchange = async {
        let resp = conn.send(req, nowhere()).await.map_err(|e| e.error)?;
        read_all(resp.into_body()).await
    };
    let (_up, body) = tokio::join!(upstream, exchange);
    assert_eq!(body.unwrap(), (b"first-last".to_vec(), None));
    assert!(kept.lock().unwrap().is_none());
}

/// A chunked request body's trailers end it as its trailer section
/// (less the fields that cannot be trailers); the framing stays
/// whole, and the connection is kept. A body whose length is known
/// goes out chunked when the request declares `Trailer`.
#[tokio::test]
async fn a_chunked_request_body_ends_with_its_trailers() {
    let body = TestBody::held(
        [
            Frame::data(Bytes::from_static(b"hello")),
            Frame::trailers(trailers(&[
                ("x-checksum", "abc"),
                ("content-length", "5"),
                ("x-usage", "1"),
                ("x-usage", "2"),
            ])),
        ]
        .into(),
    );
    let (conn, kept, written) = scripted([&b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..]]);
    let req = request(Method::POST, &[("trailer", "x-checksum, x-usage")], body);
    let resp = conn
        .send(req, nowhere())
        .await
        .map_err(|e| e.error)
        .unwrap();
    assert_eq!(read_all(resp.into_body()).await.unwrap().0, b"");
    let written = written.lock().unwrap().clone();
    assert_eq!(
        String::from_utf8_lossy(&written),
        "POST /up HTTP/1.1\r\ntrailer: x-checksum, x-usage\r\n\
         transfer-encoding: chunked\r\n\r\n\
         5\r\nhello\r\n0\r\nx-checksum: abc\r\nx-usage: 1\r\nx-usage: 2\r\n\r\n"
    );
    assert!(kept.lock().unwrap().is_some());

    // Streamed from a client (hyper's server decodes its trailers),
    // to an upstream that answers once it has the whole request.
    let (_client, incoming) = client_body(b"5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n").await;
    let (ours, mut up) = tokio::io::duplex(4096);
    let (conn, kept) = over(ours);
    let req = request(
        Method::POST,
        &[],
        streaming(incoming, Duration::from_secs(30)),
    );
    let upstream = async {
        let mut got = Vec::new();
        read_until(&mut up, &mut got, b"abc\r\n\r\n").await;
        up.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        got
    };
    let exchange = async {
        let resp = conn.send(req, nowhere()).await.map_err(|e| e.error)?;
        read_all(resp.into_body()).await
    };
    let (got, body) = tokio::join!(upstream, exchange);
    assert_eq!(body.unwrap(), (Vec::new(), None));
    let head = b"POST /up HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
    assert!(got.starts_with(head));
    let (data, trailers) = dechunk(&got[head.len()..]);
    assert_eq!(data, b"hello");
    assert_eq!(trailers.expect("trailers")["x-checksum"], "abc");
    assert!(kept.lock().unwrap().is_some());
}

/// A request body sent with a Content-Length (its own, or the
/// length of a body read ahead) has no room for trailers: they are
/// dropped, and the body is exactly its length.
#[tokio::test]
async fn a_request_sent_with_a_content_length_drops_its_trailers() {
    for headers in [&[][..], &[("content-length", "5")]] {
        let body = TestBody::held(
            [
                Frame::data(Bytes::from_static(b"hel")),
                Frame::data(Bytes::from_static(b"lo")),
                Frame::trailers(trailers(&[("x-checksum", "abc")])),
            ]
            .into(),
        );
        let (conn, kept, written) =
            scripted([&b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"[..]]);
        let req = request(Method::POST, headers, body);
        let resp = conn
            .send(req, nowhere())
            .await
            .map_err(|e| e.error)
            .unwrap();
        assert_eq!(read_all(resp.into_body()).await.unwrap().0, b"ok");
        assert_eq!(
            String::from_utf8_lossy(&written.lock().unwrap()),
            "POST /up HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello"
        );
        assert!(kept.lock().unwrap().is_some(), "{headers:?}");
    }
}

/// A request body for the tests, as the proxy's would be: frames held
/// whole (which can be sent again), or a client's body streaming in from
/// hyper's server, which fails when the client is silent for `idle`.
pub(super) enum TestBody {
    Held(VecDeque<Frame<Bytes>>),
    Streaming {
        inner: hyper::body::Incoming,
        idle: Duration,
        /// Armed while waiting for the client.
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    },
}

/// Why a test body failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum TestBodyError {
    #[error("client request body")]
    Failed(#[source] hyper::Error),
    #[error("the client sent nothing of its request body for {0:?}")]
    Idle(Duration),
}

impl TestBody {
    pub(super) fn held(frames: VecDeque<Frame<Bytes>>) -> Self {
        TestBody::Held(frames)
    }

    fn streaming(inner: hyper::body::Incoming, idle: Duration) -> Self {
        TestBody::Streaming {
            inner,
            idle,
            timer: None,
        }
    }
}

impl http_body::Body for TestBody {
    type Data = Bytes;
    type Error = TestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TestBodyError>>> {
        match self.get_mut() {
            TestBody::Held(frames) => Poll::Ready(frames.pop_front().map(Ok)),
            TestBody::Streaming { inner, idle, timer } => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    *timer = None;
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(TestBodyError::Failed(e)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => {
                    let idle = *idle;
                    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                    std::task::ready!(timer.as_mut().poll(cx));
                    Poll::Ready(Some(Err(TestBodyError::Idle(idle))))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            TestBody::Held(frames) => frames.is_empty(),
            TestBody::Streaming { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            TestBody::Held(frames) => http_body::SizeHint::with_exact(
                frames
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                    .sum(),
            ),
            TestBody::Streaming { inner, .. } => inner.size_hint(),
        }
    }
}

impl SendBody for TestBody {
    fn replay(&self) -> Option<Self> {
        match self {
            TestBody::Held(frames) => frames
                .iter()
                .map(|f| match (f.data_ref(), f.trailers_ref()) {
                    (Some(data), _) => Some(Frame::data(data.clone())),
                    (None, Some(trailers)) => Some(Frame::trailers(trailers.clone())),
                    (None, None) => None,
                })
                .collect::<Option<VecDeque<_>>>()
                .map(TestBody::Held),
            TestBody::Streaming { inner, .. } if inner.is_end_stream() => {
                Some(TestBody::Held(VecDeque::new()))
            }
            TestBody::Streaming { .. } => None,
        }
    }
}

/// A checkout takes the connection given back last, and never one that
/// expired, wherever it lies in the pool; each connection it finds
/// expired is dropped on the way, so the next checkout does not meet it.
#[tokio::test(start_paused = true)]
async fn a_checkout_takes_the_newest_and_drops_the_expired() {
    let pool: Arc<Pool<Mock<DuplexStream>>> =
        Pool::new(256, Duration::from_secs(10), Box::new(|_| {}));
    // The far ends stay open: every connection is alive, only time ends it.
    let mut far = Vec::new();
    let mut give = |pool: &Pool<Mock<DuplexStream>>| {
        let (near, other) = tokio::io::duplex(64);
        far.push(other);
        pool.give_back(over(near).0);
    };
    for _ in 0..200 {
        give(&pool);
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    give(&pool);
    // At 12 s the first 200 expired (at 10 s), the last not (at 15 s).
    tokio::time::advance(Duration::from_secs(7)).await;
    assert!(pool.checkout().is_some(), "the newest is still good");
    // Finding none, it popped and dropped all 200.
    assert!(pool.checkout().is_none(), "every other one expired");
}
