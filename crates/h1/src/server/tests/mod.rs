//! Tests of the server connection over real sockets: each test binds a
//! listener on the loopback, serves the one connection it accepts in a task
//! of its own, and plays the client with a raw `TcpStream`, writing exact
//! request bytes and reading the exact response bytes (or, in a few, with
//! hyper's HTTP/1 client).
//!
//! This file is the rig: the server's task and its client, response bodies
//! the test feeds frame by frame, and services that tell the test what they
//! were handed. The tests are by subject: how responses are framed
//! (`responses.rs`), how request bodies are handed over (`requests.rs`),
//! refused heads and the head timeout (`heads.rs`), and how a connection
//! ends: the client gone, `Closing`, a failing body (`ends.rs`).

use std::future::{Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt as _, Empty, Full};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::*;

/// A service's future, boxed.
type Answer<B> = Pin<Box<dyn Future<Output = Response<B>> + Send>>;

mod ends;
mod heads;
mod requests;
mod responses;

/// Long enough for anything that is to happen: only a guard against hangs.
const PATIENCE: Duration = Duration::from_secs(5);

/// A head timeout that nothing but a test of it runs into.
fn settings() -> Settings {
    Settings {
        head_timeout: Duration::from_secs(30),
        max_head: 16 * 1024,
    }
}

/// The server's end: the task serving the one connection.
struct Server {
    task: JoinHandle<Result<(), ServeError>>,
    close: Option<oneshot::Sender<oneshot::Sender<()>>>,
}

impl Server {
    /// Has the connection's task call [`Closing::close`] (between its polls
    /// of the connection, as it must), and waits until it has.
    async fn close(&mut self) {
        let (done, called) = oneshot::channel();
        self.close.take().expect("closed once").send(done).unwrap();
        within(called)
            .await
            .expect("the connection's task took the close");
    }

    /// How `serve` ended.
    async fn ended(self) -> Result<(), ServeError> {
        within(self.task)
            .await
            .expect("no panic in the server's task")
    }
}

/// Serves the next connection to a listener of its own with `service`;
/// the client's end, connected.
async fn start<S, F, B>(settings: Settings, service: S) -> (Client, Server)
where
    S: FnMut(Request<RequestBody>) -> F + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (close, close_asked) = oneshot::channel::<oneshot::Sender<()>>();
    let task = tokio::spawn(async move {
        let (io, _) = listener.accept().await.unwrap();
        let closing = Arc::new(Closing::default());
        let mut serving = std::pin::pin!(serve(io, settings, closing.clone(), service));
        tokio::select! {
            ended = &mut serving => return ended,
            Ok(done) = close_asked => {
                closing.close();
                let _ = done.send(());
            }
        }
        serving.await
    });
    let io = TcpStream::connect(addr).await.unwrap();
    let client = Client {
        io,
        buf: Vec::new(),
    };
    let server = Server {
        task,
        close: Some(close),
    };
    (client, server)
}

/// `future`'s output, which must come within [`PATIENCE`].
async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no hang")
}

/// The next of what a service or a test sends on `rx`.
async fn recv<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    within(rx.recv()).await.expect("sent")
}

/// The client's end of the connection, reading through a buffer.
struct Client {
    io: TcpStream,
    /// Read and not yet looked at.
    buf: Vec<u8>,
}

impl Client {
    async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.unwrap();
    }

    /// Reads more into `buf`: false at the end of the connection.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let n = within(self.io.read(&mut chunk))
            .await
            .expect("a clean read");
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// What arrives up to and with `end`.
    async fn until(&mut self, end: &[u8]) -> Vec<u8> {
        loop {
            if let Some(at) = memchr::memmem::find(&self.buf, end) {
                return self.buf.drain(..at + end.len()).collect();
            }
            let more = self.fill().await;
            assert!(
                more,
                "the connection ended before {:?}, after {:?}",
                lossy(end),
                lossy(&self.buf)
            );
        }
    }

    /// A response head, its `date` checked and replaced by `<date>`.
    async fn head(&mut self) -> String {
        let head = self.until(b"\r\n\r\n").await;
        dated(String::from_utf8(head).unwrap())
    }

    /// The next bytes must be `expected`.
    async fn expect(&mut self, expected: &[u8]) {
        while self.buf.len() < expected.len() && self.fill().await {}
        let n = expected.len().min(self.buf.len());
        let got: Vec<u8> = self.buf.drain(..n).collect();
        assert_eq!(lossy(&got), lossy(expected));
    }

    /// Everything until the end of the connection.
    async fn rest(&mut self) -> Vec<u8> {
        while self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// Nothing more comes: the connection ends.
    async fn closed(&mut self) {
        let rest = self.rest().await;
        assert!(rest.is_empty(), "more before the end: {:?}", lossy(&rest));
    }

    /// Nothing has arrived that was not looked at (a look that does not
    /// wait).
    fn nothing_yet(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        match self.io.try_read(&mut chunk) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.buf.is_empty(),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                false
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `head` with the value of its `date` (which must be an HTTP date)
/// replaced by `<date>`.
fn dated(head: String) -> String {
    let Some(at) = head.find("\r\ndate: ") else {
        return head;
    };
    let start = at + "\r\ndate: ".len();
    let end = start + head[start..].find("\r\n").unwrap();
    httpdate::parse_http_date(&head[start..end]).expect("an HTTP date");
    format!("{}<date>{}", &head[..start], &head[end..])
}

fn fields(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|&(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v)))
        .collect()
}

/// Flips its flag when dropped.
struct Guard(Arc<AtomicBool>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn guard() -> (Guard, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    (Guard(dropped.clone()), dropped)
}

/// A response body whose frames the test feeds, when it likes, through
/// its [`Feed`]: it ends when the feed is dropped. Its length is unknown.
struct Chan {
    rx: mpsc::UnboundedReceiver<Result<Frame<Bytes>, BoxError>>,
    _dropped: Guard,
}

impl http_body::Body for Chan {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut().rx.poll_recv(cx)
    }
}

/// The test's end of a [`Chan`].
struct Feed {
    tx: mpsc::UnboundedSender<Result<Frame<Bytes>, BoxError>>,
    dropped: Arc<AtomicBool>,
}

impl Feed {
    fn data(&self, data: &'static str) {
        self.tx
            .send(Ok(Frame::data(Bytes::from_static(data.as_bytes()))))
            .unwrap();
    }

    fn trailers(&self, pairs: &[(&'static str, &'static str)]) {
        self.tx.send(Ok(Frame::trailers(fields(pairs)))).unwrap();
    }

    fn fail(&self, why: &'static str) {
        self.tx.send(Err(why.into())).unwrap();
    }

    /// The body has been dropped.
    fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}

fn chan() -> (Feed, Chan) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (guard, dropped) = guard();
    (
        Feed { tx, dropped },
        Chan {
            rx,
            _dropped: guard,
        },
    )
}

/// A service that answers each request at once with a [`Chan`] body
/// (after `with` has had its say on the response), and hands the test its
/// feed.
fn streamed(
    with: impl Fn(&mut Response<Chan>) + Send + 'static,
) -> (
    impl FnMut(Request<RequestBody>) -> Ready<Response<Chan>> + Send + 'static,
    mpsc::UnboundedReceiver<Feed>,
) {
    let (feeds, fed) = mpsc::unbounded_channel();
    let service = move |_| {
        let (feed, body) = chan();
        feeds.send(feed).unwrap();
        let mut response = Response::new(body);
        with(&mut response);
        ready(response)
    };
    (service, fed)
}

/// A service that answers each request at once with what `answer` makes
/// of it.
fn full(
    answer: impl Fn(&Request<RequestBody>) -> Response<Full<Bytes>> + Send + 'static,
) -> impl FnMut(Request<RequestBody>) -> Ready<Response<Full<Bytes>>> + Send + 'static {
    move |request| ready(answer(&request))
}

/// Answers with the request's path.
fn path(request: &Request<RequestBody>) -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from(request.uri().path().to_owned())))
}

/// A service that must not be called.
fn never(_: Request<RequestBody>) -> Ready<Response<Empty<Bytes>>> {
    panic!("the service was called");
}

/// What a [`recording`] service was handed of a request body.
#[derive(Debug)]
enum Seen {
    /// Its `size_hint`'s exact length, before anything was read.
    Hint(Option<u64>),
    Data(Bytes),
    Trailers(HeaderMap),
    Failed(BodyError),
    /// The end of the body (after its last frame, or its failure).
    End,
}

/// A service that reads each request body to its end, telling the test
/// each frame as it comes, and answers how many bytes it got: with a
/// `200` when the body ended cleanly, else a `400`.
fn recording() -> (
    impl FnMut(Request<RequestBody>) -> Answer<Full<Bytes>> + Send + 'static,
    mpsc::UnboundedReceiver<Seen>,
) {
    let (tx, seen) = mpsc::unbounded_channel();
    let service = move |request: Request<RequestBody>| {
        let tx = tx.clone();
        let read = async move {
            let mut body = request.into_body();
            tx.send(Seen::Hint(body.size_hint().exact())).unwrap();
            let mut got = 0;
            let mut status = StatusCode::OK;
            while let Some(frame) = body.frame().await {
                match frame.map(Frame::into_data) {
                    Ok(Ok(data)) => {
                        got += data.len();
                        tx.send(Seen::Data(data)).unwrap();
                    }
                    Ok(Err(frame)) => {
                        tx.send(Seen::Trailers(frame.into_trailers().unwrap()))
                            .unwrap();
                    }
                    Err(e) => {
                        tx.send(Seen::Failed(e)).unwrap();
                        status = StatusCode::BAD_REQUEST;
                        break;
                    }
                }
            }
            tx.send(Seen::End).unwrap();
            let mut response = Response::new(Full::new(Bytes::from(format!("got {got}"))));
            *response.status_mut() = status;
            response
        };
        Box::pin(read) as Pin<Box<dyn Future<Output = _> + Send>>
    };
    (service, seen)
}
