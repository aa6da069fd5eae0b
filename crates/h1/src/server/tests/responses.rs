//! How a response goes out: its length or chunked framing, each frame of a
//! streamed body as its own chunk as it comes, no body where there can be
//! none, keep-alive and its end by HTTP version and `Connection`,
//! trailers, the status line; and a real client (hyper's) reading them.

use super::*;

/// A whole body gets its length, and the response a `date`; the
/// connection is kept for the next request.
#[tokio::test]
async fn a_full_response_has_its_length_and_a_date_and_the_connection_is_kept() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(b"GET /one HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/one").await;
    c.send(b"GET /second HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 7\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/second").await;
    drop(c);
    server.ended().await.unwrap();
}

/// Requests sent ahead in one write are answered in order; the last one
/// asks to close, and is answered so.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(
        b"GET /one HTTP/1.1\r\nhost: x\r\n\r\n\
          GET /two HTTP/1.1\r\nhost: x\r\n\r\n\
          GET /three HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    for (length, path) in [(4, "/one"), (4, "/two")] {
        assert_eq!(
            c.head().await,
            format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\ndate: <date>\r\n\r\n")
        );
        c.expect(path.as_bytes()).await;
    }
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/three").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// A client that sends its requests ahead and then closes its side (as
/// `printf ... | nc -N` does) is answered every one of them before the
/// connection closes: its close is not taken for a client gone.
#[tokio::test]
async fn requests_sent_ahead_of_a_half_close_are_all_answered() {
    // The service takes a moment, so that the connection reads the
    // client's close while the first request is in progress.
    let slow = |request: Request<RequestBody>| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        path(&request)
    };
    let (mut c, server) = start(settings(), slow).await;
    c.send(b"GET /one HTTP/1.1\r\nhost: x\r\n\r\nGET /two HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    c.io.shutdown().await.unwrap();
    for path in ["/one", "/two"] {
        assert_eq!(
            c.head().await,
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\ndate: <date>\r\n\r\n"
        );
        c.expect(path.as_bytes()).await;
    }
    c.closed().await;
    server.ended().await.unwrap();
}

/// A body of unknown length is chunked, each frame its own chunk, written
/// as it comes: the client has the first while the body still waits. An
/// empty frame writes nothing (an empty chunk would end the body).
#[tokio::test]
async fn a_streamed_body_is_chunked_frame_by_frame_as_it_comes() {
    let (service, mut feeds) = streamed(|_| {});
    let (mut c, server) = start(settings(), service).await;
    c.send(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    feed.data("hello");
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"5\r\nhello\r\n").await;
    assert!(c.nothing_yet());
    feed.data("");
    feed.data("abcdefghijklmnopqrstuvwxyz");
    c.expect(b"1a\r\nabcdefghijklmnopqrstuvwxyz\r\n").await;
    feed.data("!");
    c.expect(b"1\r\n!\r\n").await;
    assert!(!feed.dropped(), "the body waits for more");
    drop(feed);
    c.expect(b"0\r\n\r\n").await;
    // Kept: the next request is answered.
    c.send(b"GET /again HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    drop(feed);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"0\r\n\r\n").await;
    drop(c);
    server.ended().await.unwrap();
}

/// The service's `Content-Length` is written as it is, and the body
/// unchunked; the connection is kept.
#[tokio::test]
async fn a_content_length_from_the_service_is_written_and_the_body_unchunked() {
    let (service, mut feeds) = streamed(|r| {
        r.headers_mut()
            .insert("content-length", HeaderValue::from_static("10"));
    });
    let (mut c, server) = start(settings(), service).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    feed.data("hello");
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"hello").await;
    feed.data("world");
    drop(feed);
    c.expect(b"world").await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let feed = recv(&mut feeds).await;
    feed.data("0123456789");
    drop(feed);
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"0123456789").await;
    drop(c);
    server.ended().await.unwrap();
}

/// A body longer than its `Content-Length` ends the connection at the
/// frame that overflows it (none of which is written); one shorter ends
/// it at its end. Either way the client has fewer bytes than it was told,
/// then the end of the connection.
#[tokio::test]
async fn a_body_that_breaks_its_content_length_ends_the_connection() {
    for too_long in [true, false] {
        let (service, mut feeds) = streamed(|r| {
            r.headers_mut()
                .insert("content-length", HeaderValue::from_static("10"));
        });
        let (mut c, server) = start(settings(), service).await;
        c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let feed = recv(&mut feeds).await;
        feed.data("hello");
        assert_eq!(
            c.head().await,
            "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ndate: <date>\r\n\r\n"
        );
        c.expect(b"hello").await;
        if too_long {
            feed.data("world!");
        } else {
            drop(feed);
        }
        c.closed().await;
        match server.ended().await {
            Err(ServeError::BodyTooLong) if too_long => {}
            Err(ServeError::BodyTooShort) if !too_long => {}
            other => panic!("too long: {too_long}: {other:?}"),
        }
    }
}

/// `HEAD`: no body is written, nor a length made up from it (the
/// service's own `Content-Length` is written as it is). `204` and `304`:
/// no body and no length. The next request's answer follows each at once:
/// no stray body byte came between.
#[tokio::test]
async fn head_204_and_304_responses_have_no_body() {
    let answer = |request: &Request<RequestBody>| {
        let mut response = Response::new(Full::new(Bytes::from_static(b"a body")));
        match request.uri().path() {
            "/told" => {
                response
                    .headers_mut()
                    .insert("content-length", HeaderValue::from_static("6"));
            }
            "/204" => {
                *response.status_mut() = StatusCode::NO_CONTENT;
                response
                    .headers_mut()
                    .insert("content-length", HeaderValue::from_static("6"));
            }
            "/304" => *response.status_mut() = StatusCode::NOT_MODIFIED,
            _ => {}
        }
        response
    };
    let (mut c, server) = start(settings(), full(answer)).await;
    c.send(b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(c.head().await, "HTTP/1.1 200 OK\r\ndate: <date>\r\n\r\n");
    c.send(b"HEAD /told HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\ndate: <date>\r\n\r\n"
    );
    c.send(b"GET /204 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 204 No Content\r\ndate: <date>\r\n\r\n"
    );
    c.send(b"GET /304 HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 304 Not Modified\r\ndate: <date>\r\n\r\n"
    );
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"a body").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// HTTP/1.0 cannot chunk: a body of unknown length goes until the close,
/// with no `Transfer-Encoding` (nor `Connection: keep-alive`, even when
/// asked for), and the connection closes after it.
#[tokio::test]
async fn an_http_1_0_body_of_unknown_length_is_delimited_by_the_close() {
    for request in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
    ] {
        let (service, mut feeds) = streamed(|_| {});
        let (mut c, server) = start(settings(), service).await;
        c.send(request).await;
        let feed = recv(&mut feeds).await;
        feed.data("hello");
        assert_eq!(c.head().await, "HTTP/1.1 200 OK\r\ndate: <date>\r\n\r\n");
        c.expect(b"hello").await;
        feed.data(" world");
        drop(feed);
        c.expect(b" world").await;
        c.closed().await;
        server.ended().await.unwrap();
    }
}

/// HTTP/1.0 keeps the connection on `Connection: keep-alive` when the
/// length is known, and says so; without it, the connection closes (no
/// `Connection: close` needed).
#[tokio::test]
async fn an_http_1_0_keep_alive_is_kept_and_said() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(b"GET /kept HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        .await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: keep-alive\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/kept").await;
    c.send(b"GET /last HTTP/1.0\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/last").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// The client's `Connection: close` is answered with one, and the
/// connection closes after the response.
#[tokio::test]
async fn a_client_that_asks_to_close_is_answered_so_and_closed() {
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(b"GET /bye HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/bye").await;
    c.closed().await;
    server.ended().await.unwrap();
}

/// Trailers end a chunked body when the client takes them (`TE:
/// trailers`) and the response declared them (`Trailer`), less the fields
/// that cannot be trailers; otherwise the body ends with a bare last chunk.
#[tokio::test]
async fn trailers_are_written_only_to_a_client_that_takes_them() {
    let (service, mut feeds) = streamed(|r| {
        r.headers_mut()
            .insert("trailer", HeaderValue::from_static("x-usage, content-type"));
    });
    let (mut c, server) = start(settings(), service).await;
    for (te, last) in [
        ("te: trailers\r\n", &b"0\r\nx-usage: 42\r\n\r\n"[..]),
        ("", b"0\r\n\r\n"),
    ] {
        c.send(format!("GET / HTTP/1.1\r\nhost: x\r\n{te}\r\n").as_bytes())
            .await;
        let feed = recv(&mut feeds).await;
        feed.data("hi");
        assert_eq!(
            c.head().await,
            "HTTP/1.1 200 OK\r\ntrailer: x-usage, content-type\r\n\
             transfer-encoding: chunked\r\ndate: <date>\r\n\r\n"
        );
        c.expect(b"2\r\nhi\r\n").await;
        feed.trailers(&[
            ("x-usage", "42"),
            ("content-type", "text/plain"),
            ("x-undeclared", "1"),
        ]);
        c.expect(last).await;
        assert!(c.nothing_yet());
    }
    drop(c);
    server.ended().await.unwrap();
}

/// The reason phrase of `hyper::ext::ReasonPhrase` is written in the
/// status line; a status without a reason of its own and none given gets
/// `<none>` (as hyper writes it). A `date` from the service is kept, and
/// not doubled.
#[tokio::test]
async fn the_status_line_has_the_reason_phrase_given() {
    let answer = |request: &Request<RequestBody>| {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::from_u16(499).unwrap();
        if request.uri().path() == "/reason" {
            response
                .extensions_mut()
                .insert(hyper::ext::ReasonPhrase::from_static(
                    b"Client Closed Request",
                ));
            response.headers_mut().insert(
                "date",
                HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
            );
        }
        response
    };
    let (mut c, server) = start(settings(), full(answer)).await;
    c.send(b"GET /reason HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        lossy(&c.until(b"\r\n\r\n").await),
        "HTTP/1.1 499 Client Closed Request\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         content-length: 0\r\n\r\n"
    );
    c.send(b"GET /none HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 499 <none>\r\ncontent-length: 0\r\ndate: <date>\r\n\r\n"
    );
    drop(c);
    server.ended().await.unwrap();
}

/// A service cannot answer with an interim response: a `1xx` goes out
/// as a `500`, without the service's fields.
#[tokio::test]
async fn an_interim_status_from_the_service_is_answered_as_500() {
    let answer = |_: &Request<RequestBody>| {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::CONTINUE;
        response
            .headers_mut()
            .insert("x-from-service", HeaderValue::from_static("1"));
        response
    };
    let (mut c, server) = start(settings(), full(answer)).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\ndate: <date>\r\n\r\n"
    );
    drop(c);
    server.ended().await.unwrap();
}

/// hyper's client reads a whole response, then, on the same connection,
/// a streamed one with its trailers.
#[tokio::test]
async fn a_real_client_reads_whole_and_streamed_responses() {
    use http_body_util::Either;
    let service = |request: Request<RequestBody>| {
        let response = if request.uri().path() == "/whole" {
            Response::new(Either::Left(Full::new(Bytes::from_static(b"whole"))))
        } else {
            let (feed, body) = chan();
            tokio::spawn(async move {
                for part in ["one ", "two ", "three"] {
                    feed.data(part);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                feed.trailers(&[("x-usage", "3")]);
            });
            let mut response = Response::new(Either::Right(body));
            response
                .headers_mut()
                .insert("trailer", HeaderValue::from_static("x-usage"));
            response
        };
        ready(response)
    };
    let (c, server) = start(settings(), service).await;
    let io = hyper_util::rt::TokioIo::new(c.io);
    let (mut sender, conn) = within(hyper::client::conn::http1::handshake(io))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let get = |path: &str| {
        Request::get(path)
            .header("host", "x")
            .header("te", "trailers")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let response = within(sender.send_request(get("/whole"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-length"], "5");
    assert!(response.headers().contains_key("date"));
    let body = within(response.into_body().collect()).await.unwrap();
    assert_eq!(body.to_bytes(), "whole");

    let response = within(sender.send_request(get("/stream"))).await.unwrap();
    assert_eq!(response.headers()["transfer-encoding"], "chunked");
    let body = within(response.into_body().collect()).await.unwrap();
    assert_eq!(body.trailers().cloned(), Some(fields(&[("x-usage", "3")])));
    assert_eq!(body.to_bytes(), "one two three");
    drop(sender);
    within(conn).await.unwrap().unwrap();
    server.ended().await.unwrap();
}

/// hyper's client streams a chunked request body to a service that
/// answers with that body: each frame comes back while the request goes
/// on (the connection serves the request body while it writes the
/// response), and both end cleanly.
#[tokio::test]
async fn a_real_client_gets_its_streamed_body_echoed_frame_by_frame() {
    let echo = |request: Request<RequestBody>| ready(Response::new(request.into_body()));
    let (c, server) = start(settings(), echo).await;
    let io = hyper_util::rt::TokioIo::new(c.io);
    let (mut sender, conn) = within(hyper::client::conn::http1::handshake(io))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let (feed, body) = chan();
    let request = Request::post("/echo")
        .header("host", "x")
        .body(body)
        .unwrap();
    feed.data("first");
    let response = within(sender.send_request(request)).await.unwrap();
    assert_eq!(response.headers()["transfer-encoding"], "chunked");
    let mut body = response.into_body();
    assert_eq!(next_data(&mut body).await.unwrap(), "first");
    feed.data("second");
    assert_eq!(next_data(&mut body).await.unwrap(), "second");
    drop(feed);
    assert_eq!(next_data(&mut body).await, None);
    drop(sender);
    within(conn).await.unwrap().unwrap();
    server.ended().await.unwrap();
}

/// The next data frame of a response hyper's client reads.
async fn next_data(body: &mut hyper::body::Incoming) -> Option<Bytes> {
    let frame = within(body.frame()).await?.unwrap();
    Some(frame.into_data().unwrap())
}
