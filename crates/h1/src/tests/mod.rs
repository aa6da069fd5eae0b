//! Exchanges over mock I/O, no sockets: the client connection over a
//! scripted upstream (each read gets the next piece of its answer) or over
//! a duplex pipe that the test reads and writes as the upstream, with
//! client bodies from a hyper server over another pipe.
//!
//! This file is the rig: the mock upstreams, the requests and bodies the
//! tests send, and what reads back what the client connection gives. The
//! tests are by subject: how an answer is read (`response.rs`), a request
//! body that goes on while the answer is read (`request.rs`), and the
//! pool's checkout (`pool.rs`).

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
use super::*;

mod pool;
mod request;
mod response;

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
