//! A request body sent while the answer is read, as hyper's client does:
//! full duplex, an early answer that ends the exchange without a hang, a
//! client's body that fails after the head, and a body's trailers, sent
//! or dropped by its framing.

use super::*;

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
/// blamed on the upstream). The rest of the request is not sent,
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
