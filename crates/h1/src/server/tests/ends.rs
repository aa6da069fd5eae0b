//! How a connection ends: the client gone while its request is in
//! progress (the request dropped), [`Closing::close`], and a response body
//! that fails mid-stream.

use super::*;

/// Each request's flag, set when its service future is dropped.
type Dropped = mpsc::UnboundedReceiver<Arc<AtomicBool>>;

/// A service that never answers, holding a guard that tells when its
/// future is dropped; it tells the test when it is called.
fn stuck() -> (
    impl FnMut(Request<RequestBody>) -> Answer<Empty<Bytes>> + Send + 'static,
    Dropped,
) {
    let (tx, called) = mpsc::unbounded_channel();
    let service = move |request: Request<RequestBody>| {
        let (guard, dropped) = guard();
        tx.send(dropped).unwrap();
        let never = async move {
            let _held = (guard, request);
            std::future::pending::<Response<Empty<Bytes>>>().await
        };
        Box::pin(never) as Pin<Box<dyn Future<Output = _> + Send>>
    };
    (service, called)
}

/// The client closes while the service works on its request: `serve`
/// sees it at once, says so, and drops the service's future.
#[tokio::test]
async fn a_client_gone_while_the_service_works_drops_the_service_future() {
    let (service, mut called) = stuck();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let dropped = recv(&mut called).await;
    assert!(!dropped.load(Ordering::SeqCst));
    drop(c);
    assert!(matches!(server.ended().await, Err(ServeError::ClientGone)));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the service future was dropped"
    );
}

/// The client closes while a streamed response body waits for its next
/// frame: the body is dropped.
#[tokio::test]
async fn a_client_gone_while_the_body_waits_drops_the_body() {
    let (service, mut feeds) = streamed(|_| {});
    let (mut c, server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    feed.data("hello");
    c.head().await;
    c.expect(b"5\r\nhello\r\n").await;
    drop(c);
    assert!(matches!(server.ended().await, Err(ServeError::ClientGone)));
    assert!(feed.dropped(), "the response body was dropped");
}

/// The module's promise ("while a request is in progress, the connection
/// is watched for the client's close: the request is then dropped") holds
/// too when the client leaves in the middle of a request body that the
/// service has not asked for yet (it waits on something else: an upstream,
/// a permit).
#[tokio::test]
async fn a_client_gone_mid_body_drops_a_service_that_has_not_read_it() {
    let (service, mut called) = stuck();
    let (mut c, server) = start(settings(), service).await;
    c.send(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhel")
        .await;
    let dropped = recv(&mut called).await;
    drop(c);
    assert!(matches!(server.ended().await, Err(ServeError::ClientGone)));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the service future was dropped"
    );
}

/// `Closing::close` on a connection between requests closes it at once;
/// so on one that has not had a request yet.
#[tokio::test]
async fn closing_an_idle_connection_closes_it() {
    let (mut c, mut server) = start(settings(), full(path)).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    c.head().await;
    c.expect(b"/").await;
    server.close().await;
    c.closed().await;
    server.ended().await.unwrap();

    let (mut c, mut server) = start(settings(), never).await;
    server.close().await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// `Closing::close` while a response streams: the response goes on to its
/// end, then the connection closes (the next request is not answered).
#[tokio::test]
async fn closing_while_a_response_streams_finishes_it_then_closes() {
    let (service, mut feeds) = streamed(|_| {});
    let (mut c, mut server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    feed.data("hello");
    c.head().await;
    c.expect(b"5\r\nhello\r\n").await;
    server.close().await;
    feed.data("world");
    c.expect(b"5\r\nworld\r\n").await;
    drop(feed);
    c.expect(b"0\r\n\r\n").await;
    c.closed().await;
    server.ended().await.unwrap();
    assert!(feeds.try_recv().is_err(), "no other request was served");
}

/// `Closing::close` while the service works: its response, when it comes,
/// says `connection: close`, and the connection closes after it.
#[tokio::test]
async fn closing_before_the_response_says_connection_close() {
    let go = Arc::new(Notify::new());
    let gate = go.clone();
    let (tx, mut called) = mpsc::unbounded_channel();
    let service = move |_| {
        let (gate, tx) = (gate.clone(), tx.clone());
        async move {
            tx.send(()).unwrap();
            gate.notified().await;
            Response::new(Full::new(Bytes::from_static(b"late")))
        }
    };
    let (mut c, mut server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    recv(&mut called).await;
    server.close().await;
    go.notify_one();
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"late").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// A response body that fails mid-stream ends the connection there: the
/// client has the chunks before the failure, no last chunk, then the end
/// of the connection; `serve` returns the body's error.
#[tokio::test]
async fn a_body_failing_mid_stream_leaves_the_chunked_body_unfinished() {
    let (service, mut feeds) = streamed(|_| {});
    let (mut c, server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    feed.data("hello");
    c.head().await;
    c.expect(b"5\r\nhello\r\n").await;
    feed.fail("the upstream broke");
    c.closed().await;
    match server.ended().await {
        Err(ServeError::Body(e)) => assert_eq!(e.to_string(), "the upstream broke"),
        other => panic!("{other:?}"),
    }
}

/// The same when the frames before the failure come with it, in one
/// poll of the body (an upstream's last chunks read with its reset): they
/// are the body's, and reach the client before the connection ends
/// without the last chunk.
#[tokio::test]
async fn frames_ready_with_a_failure_still_reach_the_client() {
    let (service, mut feeds) = streamed(|_| {});
    let (mut c, server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    c.head().await;
    feed.data("a");
    feed.data("b");
    feed.fail("the upstream broke");
    c.expect(b"1\r\na\r\n1\r\nb\r\n").await;
    c.closed().await;
    assert!(matches!(server.ended().await, Err(ServeError::Body(_))));
}
