//! How a request body is handed to the service: whole when it came with
//! its head, else frame by frame as it arrives (chunked, with its
//! trailers), failing when its framing is bad or the client leaves;
//! `Expect: 100-continue` answered when the service first asks for it; and
//! a body left unread.

use super::*;

/// The next thing the recording service saw must match the pattern.
macro_rules! next_seen {
    ($seen:expr, $($pattern:tt)+) => {{
        let seen = recv(&mut $seen).await;
        assert!(matches!(&seen, $($pattern)+), "{seen:?}");
    }};
}

/// A body all sent with its head is handed over whole: one frame, its
/// exact length known before it is read.
#[tokio::test]
async fn a_body_sent_with_its_head_is_handed_over_whole() {
    let (service, mut seen) = recording();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 11\r\n\r\nhello world")
        .await;
    next_seen!(seen, Seen::Hint(Some(11)));
    next_seen!(seen, Seen::Data(d) if d == "hello world");
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 11").await;
    drop(c);
    server.ended().await.unwrap();
}

/// A `Content-Length` body that arrives in two writes is read as it
/// comes, in order, to its length; the connection is kept.
#[tokio::test]
async fn a_length_body_sent_in_two_writes_is_read_in_order() {
    let (service, mut seen) = recording();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 11\r\n\r\nhello")
        .await;
    next_seen!(seen, Seen::Hint(Some(11)));
    next_seen!(seen, Seen::Data(d) if d == "hello");
    c.send(b" world").await;
    next_seen!(seen, Seen::Data(d) if d == " world");
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 11").await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    next_seen!(seen, Seen::Hint(Some(0)));
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 0").await;
    drop(c);
    server.ended().await.unwrap();
}

/// A chunked body sent chunk by chunk, with pauses, is handed over a
/// frame a chunk as each arrives, then its trailers; the connection is
/// kept after it.
#[tokio::test]
async fn a_chunked_request_body_is_handed_over_frame_by_frame_with_its_trailers() {
    let (service, mut seen) = recording();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await;
    next_seen!(seen, Seen::Hint(None));
    next_seen!(seen, Seen::Data(d) if d == "hello");
    c.send(b"6\r\n world\r\n").await;
    next_seen!(seen, Seen::Data(d) if d == " world");
    c.send(b"0\r\nx-usage: 7\r\n\r\n").await;
    next_seen!(seen, Seen::Trailers(t) if *t == fields(&[("x-usage", "7")]));
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 11").await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    next_seen!(seen, Seen::Hint(Some(0)));
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 0").await;
    drop(c);
    server.ended().await.unwrap();
}

/// A request framed both by `Transfer-Encoding` and `Content-Length` is
/// read chunked (the length is dropped), and, since another hop may have
/// read it otherwise, the connection closes after the response, saying so.
#[tokio::test]
async fn a_request_framed_both_ways_is_read_chunked_and_the_connection_closed() {
    let (service, mut seen) = recording();
    let (mut c, server) = start(settings(), service).await;
    c.send(
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n\
          5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    next_seen!(seen, Seen::Hint(None));
    next_seen!(seen, Seen::Data(d) if d == "hello");
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 5").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// Bad chunk framing fails the service's read of the body; its framing
/// lost, the connection closes after the response, and says so.
#[tokio::test]
async fn a_malformed_chunked_body_fails_the_read_and_closes_the_connection() {
    let (service, mut seen) = recording();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n")
        .await;
    next_seen!(seen, Seen::Hint(None));
    next_seen!(seen, Seen::Failed(BodyError::Chunked(_)));
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 0").await;
    c.closed().await;
    drop(c);
    server.ended().await.unwrap();
}

/// The client closes its side in the middle of the body: the service's
/// read fails with `Closed` (after what came before), and the connection
/// closes after the response, which says so.
#[tokio::test]
async fn a_client_closing_mid_body_fails_the_read_with_closed() {
    let (service, mut seen) = recording();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhel")
        .await;
    next_seen!(seen, Seen::Hint(Some(10)));
    next_seen!(seen, Seen::Data(d) if d == "hel");
    c.io.shutdown().await.unwrap();
    next_seen!(seen, Seen::Failed(BodyError::Closed));
    next_seen!(seen, Seen::End);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"got 3").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// A service that waits for `go` before it reads the request body, and
/// answers with it; it tells the test when it is called.
fn gated(
    go: Arc<Notify>,
) -> (
    impl FnMut(Request<RequestBody>) -> Answer<Full<Bytes>> + Send + 'static,
    mpsc::UnboundedReceiver<()>,
) {
    let (tx, called) = mpsc::unbounded_channel();
    let service = move |request: Request<RequestBody>| {
        let (go, tx) = (go.clone(), tx.clone());
        let answer = async move {
            tx.send(()).unwrap();
            go.notified().await;
            let body = request.into_body().collect().await.unwrap().to_bytes();
            Response::new(Full::new(body))
        };
        Box::pin(answer) as Pin<Box<dyn Future<Output = _> + Send>>
    };
    (service, called)
}

/// `Expect: 100-continue`: the interim `100` goes when the service first
/// asks for the body, not before; the client then sends it, and has the
/// final response.
#[tokio::test]
async fn a_100_continue_goes_when_the_service_first_asks_for_the_body() {
    let go = Arc::new(Notify::new());
    let (service, mut called) = gated(go.clone());
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n")
        .await;
    recv(&mut called).await;
    // The connection has had its chance to write one: it has not.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(c.nothing_yet(), "a 100 before the service asked");
    go.notify_one();
    c.expect(b"HTTP/1.1 100 Continue\r\n\r\n").await;
    c.send(b"hello").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"hello").await;
    drop(c);
    server.ended().await.unwrap();
}

/// A service that answers without asking for the body: no `100`, the
/// final response at once, and the connection closes after it (the body
/// that may follow is not read), saying so.
#[tokio::test]
async fn a_service_answering_without_the_body_sends_no_100_and_closes() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(b"POST /early HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n")
        .await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/early").await;
    c.closed().await;
    drop(c);
    server.ended().await.unwrap();
}

/// RFC 9110 §10.1.1: a server MUST ignore a `100-continue` expectation in
/// an HTTP/1.0 request (hyper's server does): no `100` goes to an
/// HTTP/1.0 client, which does not know interim responses.
#[tokio::test]
async fn an_http_1_0_expectation_is_ignored() {
    let go = Arc::new(Notify::new());
    go.notify_one();
    let (service, mut called) = gated(go);
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.0\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n")
        .await;
    recv(&mut called).await;
    // The service has asked for the body by now.
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.send(b"hello").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"hello").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// A body not all received and left unread by the service: the
/// connection cannot find the next request, so it closes after the
/// response, and says so.
#[tokio::test]
async fn a_request_body_left_unread_closes_the_connection() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(b"POST /unread HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhel")
        .await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/unread").await;
    c.closed().await;
    drop(c);
    server.ended().await.unwrap();
}

/// A body all received with its head, left unread, is no obstacle: the
/// request sent after it is found and answered.
#[tokio::test]
async fn a_whole_body_left_unread_does_not_stop_the_next_request() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello\
          GET /b HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await;
    for path in ["/a", "/b"] {
        assert_eq!(
            c.head().await,
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ndate: <date>\r\n\r\n"
        );
        c.expect(path.as_bytes()).await;
    }
    drop(c);
    server.ended().await.unwrap();
}
