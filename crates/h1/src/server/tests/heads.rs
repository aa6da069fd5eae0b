//! Request heads refused (answered with their status, then the connection
//! closed, the service never called), and the head timeout.

use super::*;

/// Each refused head gets its status line, `content-length: 0`,
/// `connection: close` and a date, then the end of the connection; the
/// service is not called, and `serve` says why.
#[tokio::test]
async fn refused_heads_are_answered_with_their_status_and_closed() {
    let mut too_long = b"GET / HTTP/1.1\r\nhost: x\r\nx-long: ".to_vec();
    too_long.extend_from_slice(&[b'a'; 5000]);
    too_long.extend_from_slice(b"\r\n\r\n");
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..101 {
        many.extend_from_slice(format!("x-f{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let mut long_target = b"GET /".to_vec();
    long_target.extend_from_slice(&[b'a'; 70_000]);
    long_target.extend_from_slice(b" HTTP/1.1\r\nhost: x\r\n\r\n");
    let bad = "400 Bad Request";
    let large = "431 Request Header Fields Too Large";
    let cases: [(&str, &[u8], usize, &str); 8] = [
        (
            "a malformed request line",
            b"NOT A REQUEST\r\n\r\n",
            4096,
            bad,
        ),
        ("not HTTP/1.x", b"GET / HTTP/2.0\r\n\r\n", 4096, bad),
        ("a head over max_head", &too_long, 4096, large),
        ("101 fields", &many, 4096, large),
        (
            "a coding other than chunked",
            b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n",
            4096,
            bad,
        ),
        (
            "chunked in HTTP/1.0",
            b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            4096,
            bad,
        ),
        (
            "conflicting lengths",
            b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello",
            4096,
            bad,
        ),
        (
            "a target over 64 KiB",
            &long_target,
            128 * 1024,
            "414 URI Too Long",
        ),
    ];
    for (what, request, max_head, status) in cases {
        let settings = Settings {
            max_head,
            ..settings()
        };
        let (mut c, server) = start(settings, never).await;
        c.send(request).await;
        assert_eq!(
            c.head().await,
            format!(
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\ndate: <date>\r\n\r\n"
            ),
            "{what}"
        );
        c.closed().await;
        drop(c);
        let refused = match server.ended().await {
            Err(ServeError::Refused(refused)) => refused,
            other => panic!("{what}: {other:?}"),
        };
        let expected = match &status[..3] {
            "400" => matches!(refused, Refused::BadRequest(_)),
            "431" => refused == Refused::TooLarge,
            _ => refused == Refused::UriTooLong,
        };
        assert!(expected, "{what}: {refused:?}");
    }
}

/// 100 fields are taken (the limit is on more).
#[tokio::test]
async fn a_head_of_100_fields_is_taken() {
    let mut head = b"GET /many HTTP/1.1\r\n".to_vec();
    for i in 0..100 {
        head.extend_from_slice(format!("x-f{i}: v\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let (mut c, server) = start(settings(), full(path)).await;
    c.send(&head).await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/many").await;
    drop(c);
    server.ended().await.unwrap();
}

fn short_timeout() -> Settings {
    Settings {
        head_timeout: Duration::from_millis(200),
        ..settings()
    }
}

/// A connection that sends half a head and stops is closed without a
/// response once the head timeout has passed.
#[tokio::test]
async fn half_a_head_is_cut_off_at_the_head_timeout() {
    let (mut c, server) = start(short_timeout(), never).await;
    c.send(b"GET / HTTP/1.1\r\nhost:").await;
    c.closed().await;
    assert!(matches!(
        server.ended().await,
        Err(ServeError::HeadTimeout(t)) if t == Duration::from_millis(200)
    ));
}

/// A connection that opens and sends nothing, or stays idle after a
/// response, is closed once the head timeout has passed.
#[tokio::test]
async fn a_silent_or_idle_connection_is_closed_at_the_head_timeout() {
    let (mut c, server) = start(short_timeout(), never).await;
    c.closed().await;
    assert!(matches!(
        server.ended().await,
        Err(ServeError::HeadTimeout(_))
    ));

    let (mut c, server) = start(short_timeout(), full(path)).await;
    c.send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(
        c.head().await,
        "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ndate: <date>\r\n\r\n"
    );
    c.expect(b"/").await;
    c.closed().await;
    assert!(matches!(
        server.ended().await,
        Err(ServeError::HeadTimeout(_))
    ));
}

/// The head timeout is for the whole head, not between its bytes: a head
/// trickled a byte at a time is cut off, long before its end.
#[tokio::test]
async fn a_trickled_head_is_cut_off_at_the_head_timeout() {
    let (mut c, server) = start(short_timeout(), never).await;
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    head.extend_from_slice(&[b'x'; 400]);
    // 400 bytes, 10 ms apart: 4 s, against a timeout of 200 ms.
    let mut sent = 0;
    while !server.task.is_finished() && sent < head.len() {
        if c.io.write_all(&head[sent..sent + 1]).await.is_err() {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(sent < head.len(), "the whole head was taken");
    assert!(matches!(
        server.ended().await,
        Err(ServeError::HeadTimeout(_))
    ));
}
