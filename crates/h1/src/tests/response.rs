//! How an answer is read: bodiless answers and the connection they keep,
//! interim responses before the final head however the reads cut them,
//! and heads refused, with what is wrong with them.

use super::*;
use crate::head::tests::{framing, head};

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
