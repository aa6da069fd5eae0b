//! Shared test rig: a scriptable upstream, a raw HTTP/1.1 client that sees
//! chunk boundaries on the wire, a tokenmeter instance on ephemeral ports,
//! a Prometheus text parser, Prometheus pages the test writes (`page.rs`),
//! and the SLO class the latency–load tests judge by.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokenmeter::app::Running;
use tokenmeter::config::{Config, MetricsSettings, ProxySettings, Route, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub mod agent;
mod bill;
pub mod dcgm;
mod gated;
mod page;
mod process;
pub mod promrate;
mod spans;

pub use bill::{assert_near, parts_and_total};
pub use gated::GatedStream;
pub use page::{Page, read_head, serve_made, serve_recorded, staleness, vllm_page};
pub use process::{
    BIN, Child, Served, end, serve, serve_env, serve_logging, serve_wrapped, sessions_config,
    signal,
};
pub use spans::{Bracketed, access_lines, union, widening};

/// The SLO file of class `chat`, TTFT p95 within 500 ms
/// (`tests/data/slo/chat.yaml`): the class the latency–load tests judge by.
pub const CHAT_CLASS: &str = include_str!("../../data/slo/chat.yaml");

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/streams")
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_dir().join(name)).unwrap()
}

/// Every fixture file name.
pub fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sse") || n.ends_with(".ndjson"))
        .collect();
    names.sort();
    names
}

/// Splits `bytes` at `cuts` (sorted offsets), dropping empty pieces.
pub fn split_at(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
        if c > start {
            out.push(bytes[start..c].to_vec());
            start = c;
        }
    }
    out
}

/// A scriptable upstream. Each request says what to answer with headers:
/// - `x-fixture: NAME` and `x-cuts: 3,10,...`: a 200 `text/event-stream`
///   (or `application/x-ndjson`) whose body is the fixture cut into one
///   frame per piece; `x-body-hex: HEX` serves those bytes instead;
///   `x-pace-ms: D` sends one event per frame instead, event k at
///   `(k + 1) × D` after the request (a known schedule);
///   `x-content-encoding: E` labels the body with that coding;
///   `x-content-type: T` with that type (else SSE, or NDJSON for a
///   `.ndjson` fixture);
///   `x-send-queue-time: MS` adds TGI's `x-queue-time: MS` header;
/// - `x-echo: 1`: a JSON description of the request as received
///   (method, URI, HTTP version, headers, body in hex), to check request
///   transparency;
/// - `x-status: N`: that status with a small JSON body.
///
/// Responses carry `x-upstream: yes` and a `connection` header that names a
/// custom hop-by-hop header, to check that those are removed.
pub async fn scripted_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(scripted);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

type ScriptBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;
type ScriptStream = std::pin::Pin<
    Box<dyn futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + Sync>,
>;

/// Splits a stream body after each event: after every blank line (any line
/// ending) for SSE, after every line for NDJSON. A tail without its
/// terminator is the last piece.
pub fn split_events(bytes: &[u8]) -> Vec<Vec<u8>> {
    let ndjson = !bytes.windows(5).any(|w| w == b"data:");
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut line_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' || b == b'\r' {
            let mut end = i + 1;
            if b == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                end += 1;
            }
            let blank = i == line_start;
            if ndjson || (blank && i > start) {
                pieces.push(bytes[start..end].to_vec());
                start = end;
            }
            line_start = end;
            i = end;
        } else {
            i += 1;
        }
    }
    if start < bytes.len() {
        pieces.push(bytes[start..].to_vec());
    }
    pieces
}

/// Sends piece k at `(k + 1) × every` after the request, on absolute
/// deadlines.
fn paced(
    pieces: Vec<Vec<u8>>,
    every: Duration,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + Sync {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let start = tokio::time::Instant::now();
    tokio::spawn(async move {
        for (k, piece) in pieces.into_iter().enumerate() {
            tokio::time::sleep_until(start + every * (k as u32 + 1)).await;
            if tx.send(Ok(Frame::data(Bytes::from(piece)))).await.is_err() {
                return;
            }
        }
    });
    ChannelStream(rx)
}

pub struct ChannelStream(pub tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>);

impl futures_core::Stream for ChannelStream {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

pub async fn scripted(req: Request<Incoming>) -> Result<Response<ScriptBody>, Infallible> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let inline = header("x-body-hex").map(|hex| {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
    });
    if let Some(name) = header("x-fixture").or(inline.as_ref().map(|_| "inline.sse".to_owned())) {
        let bytes = inline.unwrap_or_else(|| fixture(&name));
        let cuts: Vec<usize> = header("x-cuts")
            .filter(|s| !s.is_empty())
            .map(|s| s.split(',').map(|c| c.parse().unwrap()).collect())
            .unwrap_or_default();
        let pace: Option<u64> = header("x-pace-ms").map(|s| s.parse().unwrap());
        let stream: ScriptStream = match pace {
            None => Box::pin(futures_iter(split_at(&bytes, &cuts))),
            Some(ms) => Box::pin(paced(split_events(&bytes), Duration::from_millis(ms))),
        };
        let ct = match header("x-content-type") {
            Some(ct) => ct,
            None if name.ends_with(".ndjson") => "application/x-ndjson".to_owned(),
            None => "text/event-stream".to_owned(),
        };
        let mut builder = Response::builder();
        if let Some(encoding) = header("x-content-encoding") {
            builder = builder.header("content-encoding", encoding);
        }
        if let Some(ms) = header("x-send-queue-time") {
            builder = builder.header("x-queue-time", ms);
        }
        return Ok(builder
            .header("content-type", ct)
            .header("x-upstream", "yes")
            .header("cache-control", "no-cache")
            .header("connection", "x-hop")
            .header("x-hop", "must not be forwarded")
            .header("x-multi", "a")
            .header("x-multi", "b")
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .unwrap());
    }
    if header("x-echo").is_some() {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let version = format!("{:?}", req.version());
        let headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
        let json = serde_json::json!({"method": method, "uri": uri, "version": version, "headers": headers, "body_hex": hex});
        return Ok(Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(json.to_string())).boxed())
            .unwrap());
    }
    let status: u16 = header("x-status")
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"error":{"message":"scripted"}}"#)).boxed())
        .unwrap())
}

fn futures_iter(
    frames: Vec<Vec<u8>>,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + Sync + 'static {
    IterStream(frames.into_iter())
}

struct IterStream(std::vec::IntoIter<Vec<u8>>);

impl futures_core::Stream for IterStream {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.0.next().map(|f| Ok(Frame::data(Bytes::from(f)))))
    }
}

/// A response as seen on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body as the chunks of the chunked encoding (one element for a
    /// content-length body).
    pub chunks: Vec<Vec<u8>>,
    /// The connection ended before the body was complete.
    pub truncated: bool,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn body(&self) -> Vec<u8> {
        self.chunks.concat()
    }
}

/// Sends `head` (and `body`) on a new connection and reads the response
/// until the server closes it. Add `connection: close` to `head`.
pub async fn raw_exchange(addr: SocketAddr, head: &str, body: &[u8]) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut buf)).await;
    match read {
        Ok(Ok(_)) => {}
        // A reset after (part of) the response: parse what arrived.
        Ok(Err(e)) => assert!(!buf.is_empty(), "no response: {e}"),
        Err(_) => panic!("no response within 30 s"),
    }
    parse_response(&buf)
}

pub fn parse_response(buf: &[u8]) -> RawResponse {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("complete head");
    let head = std::str::from_utf8(&buf[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    let mut rest = &buf[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let mut chunks = Vec::new();
    let mut truncated = false;
    if chunked {
        loop {
            let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                truncated = true;
                break;
            };
            let size_text = std::str::from_utf8(&rest[..eol]).unwrap();
            let size =
                usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            if rest.len() < size + 2 {
                truncated = true;
                break;
            }
            chunks.push(rest[..size].to_vec());
            rest = &rest[size + 2..];
        }
    } else if !rest.is_empty() {
        if let Some(len) = headers.iter().find(|(k, _)| k == "content-length") {
            truncated = rest.len() < len.1.parse::<usize>().unwrap();
        }
        chunks.push(rest.to_vec());
    }
    RawResponse {
        status,
        headers,
        chunks,
        truncated,
    }
}

/// A loopback port held for as long as the socket lives: bound, not
/// listening, and without `SO_REUSEADDR`, so no other socket can bind it
/// and a connection to it is refused. A peer that is down, at an address
/// no test running beside this one can take over (which a port bound and
/// released at once cannot promise).
pub fn closed_port() -> (SocketAddr, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    (socket.local_addr().unwrap(), socket)
}

/// Reads from `stream` until what arrived contains `needle`, each read
/// within 10 s; what arrived.
pub async fn read_until(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    read_while(stream, |seen| {
        !seen.windows(needle.len()).any(|w| w == needle)
    })
    .await
}

/// Reads from `stream` as long as `more` says of what arrived, each read
/// within 10 s; what arrived. Fails the test if the stream stalls or ends
/// first.
pub async fn read_while(stream: &mut TcpStream, more: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while more(&seen) {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("stream stalled")
            .unwrap();
        assert!(n > 0, "stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    seen
}

/// A one-route config on ephemeral loopback ports.
pub fn config_for(upstream: SocketAddr) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: tokenmeter::config::AdminSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        },
        proxy: ProxySettings::default(),
        metrics: MetricsSettings::default(),
        routes: vec![Route {
            slo: Some("chat".into()),
            ..Route::with_defaults(
                "test",
                Upstream {
                    scheme: http::uri::Scheme::HTTP,
                    authority: upstream.to_string().parse().unwrap(),
                    base_path: String::new(),
                },
            )
            .unwrap()
        }],
        slo_classes: Vec::new(),
        trace_context: Default::default(),
        otlp: None,
        tls: None,
        scrape: Default::default(),
        cost: Default::default(),
        sessions: Default::default(),
        sources: Default::default(),
    }
}

/// A config loaded as a user's would be: `main` written to `dir/main.yaml`
/// and each `(name, text)` of `slo_files` to `dir/slo/name`, on ephemeral
/// loopback ports in front of `upstream`.
pub fn config_from_files(
    dir: &std::path::Path,
    main: &str,
    slo_files: &[(&str, &str)],
    upstream: SocketAddr,
) -> Config {
    std::fs::create_dir_all(dir.join("slo")).unwrap();
    for (name, text) in slo_files {
        std::fs::write(dir.join("slo").join(name), text).unwrap();
    }
    std::fs::write(dir.join("main.yaml"), main).unwrap();
    let overrides = tokenmeter::config::Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        upstream: Some(format!("http://{upstream}")),
        ..Default::default()
    };
    Config::load(&dir.join("main.yaml"), &overrides).unwrap()
}

pub async fn start(config: Config) -> Running {
    tokenmeter::app::start(config).await.unwrap()
}

/// One sample of the Prometheus text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// `GET path` on its own connection.
pub async fn get(addr: SocketAddr, path: &str) -> RawResponse {
    raw_exchange(
        addr,
        &format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"),
        b"",
    )
    .await
}

pub async fn scrape(admin: SocketAddr) -> (String, Vec<Sample>) {
    let resp = get(admin, "/metrics").await;
    assert_eq!(resp.status, 200);
    let text = String::from_utf8(resp.body()).unwrap();
    let samples = parse_metrics(&text);
    (text, samples)
}

pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap(),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap();
                let mut labels = BTreeMap::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                    assert_eq!(chars.next(), Some('"'));
                    let mut val = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => val.push(chars.next().unwrap()),
                            '"' => break,
                            c => val.push(c),
                        }
                    }
                    if chars.peek() == Some(&',') {
                        chars.next();
                    }
                    labels.insert(key.trim().to_owned(), val);
                }
                (name.to_owned(), labels)
            }
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

/// The value of the one sample named `name` whose labels include `labels`;
/// 0 when there is none.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {} series",
        matching.len()
    );
    matching.first().map_or(0.0, |s| s.value)
}

/// Sums every sample named `name` whose labels include `labels`.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// Polls the admin endpoint until `done(samples)` or a 10 s deadline: the
/// meter finishes a request when the body ends, which races the client
/// reading the last byte.
pub async fn scrape_until(admin: SocketAddr, done: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, samples) = scrape(admin).await;
        if done(&samples) || tokio::time::Instant::now() > deadline {
            return samples;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The simulator and the proxy in front of it, on ephemeral loopback ports:
/// where most end-to-end tests start.
pub struct Stack {
    /// The simulator's address.
    pub sim: SocketAddr,
    pub proxy: Running,
}

impl Stack {
    /// Starts the simulator with `sim`, then the proxy with the config that
    /// `config` makes for the simulator's address.
    pub async fn start(sim: sim::SimConfig, config: impl FnOnce(SocketAddr) -> Config) -> Self {
        let sim = start_sim(sim).await;
        let proxy = start(config(sim)).await;
        Stack { sim, proxy }
    }
}

/// The simulator's schedule: the first token after `ttft_ms`, then one every
/// `itl_ms`, `tokens` in all.
pub fn schedule(ttft_ms: u64, itl_ms: u64, tokens: u32) -> sim::SimConfig {
    sim::SimConfig {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(itl_ms),
        tokens,
        ..Default::default()
    }
}

/// Starts the simulator on an ephemeral port; it stops with the test's runtime.
pub async fn start_sim(config: sim::SimConfig) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(sim::serve(listener, config, std::future::pending()));
    addr
}

/// Opens a streamed chat request through `proxy` and returns the socket once
/// the response head and `events` SSE events of its body have arrived (the
/// first is the simulator's role chunk, not a token).
pub async fn open_stream(proxy: SocketAddr, events: usize, extra: &[(&str, &str)]) -> TcpStream {
    let (head, body) = chat_request("m1", true, extra);
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    read_while(&mut stream, |seen| {
        seen.windows(6).filter(|w| w == b"data: ").count() < events
    })
    .await;
    stream
}

/// A chat completion request head and body for the simulator.
pub fn chat_request(
    model: &str,
    stream: bool,
    extra_headers: &[(&str, &str)],
) -> (String, Vec<u8>) {
    let body = serde_json::json!({
        "model": model,
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "one two three"}],
    })
    .to_string()
    .into_bytes();
    let mut head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in extra_headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    (head, body)
}

/// The simulator's `/sim/stats` counters.
pub async fn sim_stats(sim: SocketAddr) -> serde_json::Value {
    let resp = get(sim, "/sim/stats").await;
    serde_json::from_slice(&resp.body()).unwrap()
}

/// Histogram `_sum` / `_count` for one series.
pub fn mean(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> (f64, f64) {
    let count = value(samples, &format!("{name}_count"), labels);
    let sum = value(samples, &format!("{name}_sum"), labels);
    (count, if count > 0.0 { sum / count } else { f64::NAN })
}

/// The sending half of one gated response body: each `send` is one frame.
pub type Gate = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

/// An upstream whose streamed responses the test writes frame by frame:
/// each request is read whole (as an inference server reads its prompt)
/// and answered at once with a 200 `text/event-stream` head, and the
/// body's sending half is handed to the test through the returned
/// receiver (in request order). Dropping it ends the body. Nothing is timed:
/// a stream stays open exactly as long as the test wants.
pub async fn gated_upstream() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Gate>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (gates_tx, gates_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let gates_tx = gates_tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (tx, rx) = tokio::sync::mpsc::channel(64);
                    let _ = gates_tx.send(tx);
                    async move {
                        // Left unread, what had not yet come of the body
                        // would be in the socket when hyper closes it after
                        // the response: a reset.
                        let _ = req.into_body().collect().await;
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(StreamBody::new(ChannelStream(rx)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, gates_rx)
}

/// GETs `path` from the admin listener and parses the JSON body.
pub async fn admin_json(admin: SocketAddr, path: &str) -> serde_json::Value {
    let resp = get(admin, path).await;
    assert_eq!(resp.status, 200);
    serde_json::from_slice(&resp.body()).unwrap()
}
