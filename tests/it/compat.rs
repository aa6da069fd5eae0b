//! Real server stacks behind the proxy: uvicorn (`--http h11` and
//! `--http httptools`, a plain ASGI app), aiohttp and Node's `http` module,
//! each started from `tests/compat/` as a child process on a loopback port.
//! Each streams the same OpenAI chat completion (`tests/compat/stream.sse`),
//! one write per event, and closes idle keep-alive connections after 1 s.
//!
//! Through the proxy, for each stack:
//! - the stream's bytes are the ones the server sends to a direct client,
//!   in the same chunks (the proxy neither merges nor splits them), and the
//!   request is metered from them (outcome, usage tokens, TTFT, ITL);
//! - sequential requests share one upstream connection;
//! - requests sent as the server's idle timer closes the pooled connection,
//!   or after it did, all succeed (the keep-alive race), with the pool left
//!   at its default idle timeout; where the server announces its timeout
//!   (Node's `Keep-Alive: timeout=1`), the pool lets go of the connection
//!   first and never meets it closing.
//!
//! A missing interpreter or package fails the test with what to install.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The content chunks of `tests/compat/stream.sse`.
const TOKENS: usize = 6;

/// What every server answers `GET /v1/models` with.
const MODELS: &[u8] =
    br#"{"object":"list","data":[{"id":"m1","object":"model","owned_by":"compat"}]}"#;

const GET_MODELS: &str = "GET /v1/models HTTP/1.1\r\nhost: compat\r\nconnection: close\r\n\r\n";
const HEAD_MODELS: &str = "HEAD /v1/models HTTP/1.1\r\nhost: compat\r\nconnection: close\r\n\r\n";

/// Rounds of the keep-alive race.
const ROUNDS: u64 = 20;

fn compat_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/compat")
}

/// The stream every server sends, and its events.
fn expected_stream() -> (Vec<u8>, Vec<Vec<u8>>) {
    let bytes = std::fs::read(compat_dir().join("stream.sse")).unwrap();
    let events = split_events(&bytes);
    let content = events
        .iter()
        .filter(|e| e.windows(10).any(|w| w == br#""content":"#))
        .count();
    assert_eq!(content, TOKENS, "stream.sse has {TOKENS} content chunks");
    (bytes, events)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    UvicornH11,
    UvicornHttptools,
    Aiohttp,
    NodeHttp,
}

impl std::fmt::Display for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stack::UvicornH11 => "uvicorn --http h11",
            Stack::UvicornHttptools => "uvicorn --http httptools",
            Stack::Aiohttp => "aiohttp",
            Stack::NodeHttp => "node http",
        })
    }
}

impl Stack {
    /// The program and its arguments, run in `tests/compat/` (`-B`: no
    /// `__pycache__` left there).
    fn command(self) -> (&'static str, Vec<&'static str>) {
        match self {
            Stack::UvicornH11 => (
                "python3",
                vec!["-B", "uvicorn_server.py", "h11", "stream.sse"],
            ),
            Stack::UvicornHttptools => (
                "python3",
                vec!["-B", "uvicorn_server.py", "httptools", "stream.sse"],
            ),
            Stack::Aiohttp => ("python3", vec!["-B", "aiohttp_server.py", "stream.sse"]),
            Stack::NodeHttp => ("node", vec!["node_server.js", "stream.sse"]),
        }
    }

    fn install(self) -> &'static str {
        match self {
            Stack::NodeHttp => {
                "install Node.js (Debian: `apt-get install nodejs`, as .ci/run does)"
            }
            _ => {
                "install uvicorn, httptools, h11 and aiohttp into a virtual environment \
                 first on PATH (.ci/run's is target/venv)"
            }
        }
    }

    /// The `Keep-Alive` header the server sends on a kept-alive response.
    fn keep_alive_header(self) -> Option<&'static str> {
        match self {
            Stack::NodeHttp => Some("timeout=1"),
            _ => None,
        }
    }
}

/// A server stack running as a child process; killed when dropped. It also
/// exits by itself when its stdin (held here) closes, so it does not outlive
/// a test process that dies.
struct Server {
    stack: Stack,
    addr: SocketAddr,
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(stack: Stack) -> Server {
        let (program, args) = stack.command();
        let mut child = match Command::new(program)
            .args(&args)
            .current_dir(compat_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("{stack}: `{program}` not found: {}", stack.install())
            }
            Err(e) => panic!("{stack}: cannot run `{program}`: {e}"),
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = stderr.clone();
        let stderr_done = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        // The first line on stdout is the port; the rest is drained.
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        std::thread::spawn(move || {
            let _ = port_tx.send(out.next());
            out.map_while(Result::ok).for_each(drop);
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(30))
            .ok()
            .flatten()
            .and_then(Result::ok)
            .and_then(|line| line.trim().parse::<u16>().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let status = child.wait().unwrap();
            let _ = stderr_done.join();
            panic!(
                "{stack}: `{program} {}` did not start ({status}): {}\nstderr:\n{}",
                args.join(" "),
                stack.install(),
                stderr.lock().unwrap()
            );
        };
        Server {
            stack,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
            stderr,
        }
    }

    /// What the server wrote on stderr so far.
    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The connections that made requests other than `/stats`.
    async fn connections(&self) -> u64 {
        let resp = raw_exchange(
            self.addr,
            "GET /stats HTTP/1.1\r\nhost: compat\r\nconnection: close\r\n\r\n",
            b"",
        )
        .await;
        assert_eq!(resp.status, 200, "{}: /stats", self.stack);
        let stats: serde_json::Value = serde_json::from_slice(&resp.body()).unwrap();
        stats["connections"].as_u64().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /v1/models` on a connection left open (as the proxy's pool sends
/// it): the response's `Keep-Alive` header, if any.
async fn keep_alive_header(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost: compat\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = parse_response(&buf[..end + 4]);
            let len: usize = head.header("content-length").unwrap().parse().unwrap();
            if buf.len() >= end + 4 + len {
                assert_eq!(head.status, 200);
                return head.header("keep-alive").map(str::to_owned);
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("a response")
            .unwrap();
        assert!(n > 0, "closed before the response ended");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn stream_passes_unchanged_and_is_metered(stack: Stack) {
    let server = Server::start(stack);
    let proxy = start(config_for(server.addr)).await;
    let (expected, events) = expected_stream();
    let (head, body) = chat_request("m1", true, &[]);

    let direct = raw_exchange(server.addr, &head, &body).await;
    assert_eq!(direct.status, 200, "{stack} direct: {}", server.log());
    assert_eq!(direct.body(), expected, "{stack}: the server's own stream");
    assert_eq!(
        direct.chunks, events,
        "{stack}: one chunk per event, straight from the server"
    );

    let proxied = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(
        proxied.status,
        200,
        "{stack}: {proxied:?}\n{}",
        server.log()
    );
    assert_eq!(proxied.header("content-type"), Some("text/event-stream"));
    assert!(!proxied.truncated, "{stack}: truncated");
    assert_eq!(
        String::from_utf8_lossy(&proxied.body()),
        String::from_utf8_lossy(&direct.body()),
        "{stack}: the bytes a direct client gets"
    );
    assert_eq!(
        proxied.chunks, direct.chunks,
        "{stack}: the server's chunks, none merged or split"
    );

    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) >= 1.0
    })
    .await;
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(sum(&s, "llm_requests_total", &[]), 1.0);
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "usage")]),
        TOKENS as f64,
        "{stack}: completion tokens from the usage chunk"
    );
    assert_eq!(sum(&s, "llm_input_tokens_total", &[]), 3.0);
    assert_eq!(
        sum(&s, "llm_time_to_first_token_seconds_count", &[]),
        1.0,
        "{stack}: TTFT"
    );
    assert_eq!(
        sum(&s, "llm_inter_token_latency_seconds_count", &[]),
        (TOKENS - 1) as f64,
        "{stack}: one ITL per gap between content chunks"
    );
    proxy.stop().await;
}

async fn connections_are_reused_and_idle_closes_cost_no_502(stack: Stack) {
    let server = Server::start(stack);
    assert_eq!(
        keep_alive_header(server.addr).await.as_deref(),
        stack.keep_alive_header(),
        "{stack}: what the server announces of its keep-alive timeout"
    );
    let config = config_for(server.addr);
    // The pool does not know the server's 1 s: only a `Keep-Alive` header
    // can tell it.
    assert_eq!(config.proxy.upstream_idle_timeout, Duration::from_secs(90));
    let proxy = start(config).await;
    let (expected, _) = expected_stream();

    let before = server.connections().await;
    for i in 0..5 {
        let resp = raw_exchange(proxy.proxy_addr, GET_MODELS, b"").await;
        assert_eq!(resp.status, 200, "{stack}: GET {i}: {resp:?}");
        assert_eq!(resp.body(), MODELS);
    }
    assert_eq!(
        server.connections().await - before,
        1,
        "{stack}: sequential requests share one upstream connection"
    );

    let (post_head, post_body) = chat_request("m1", true, &[]);
    let post = format!("{post_head}{}", String::from_utf8(post_body).unwrap());
    let requests = [
        ("GET", GET_MODELS),
        ("HEAD", HEAD_MODELS),
        ("POST", post.as_str()),
    ];
    for round in 0..ROUNDS {
        // Waiting out the server's 1 s keep-alive timeout is the point: the
        // waits sweep from just short of it to half again past it, so the
        // next request meets the pooled connection open, as the server
        // closes it, or closed.
        let idle = Duration::from_millis(960 + 30 * round);
        tokio::time::sleep(idle).await;
        // Each kind of request takes its turn at meeting the idle connection.
        for k in 0..requests.len() {
            let (method, request) = requests[(round as usize + k) % requests.len()];
            let resp = raw_exchange(proxy.proxy_addr, request, b"").await;
            assert_eq!(
                resp.status,
                200,
                "{stack}: round {round}, {method} after {idle:?} idle: {resp:?}\n{}",
                server.log()
            );
            match method {
                "GET" => assert_eq!(resp.body(), MODELS),
                "POST" => assert_eq!(resp.body(), expected, "{stack}: round {round}"),
                _ => assert!(resp.body().is_empty()),
            }
        }
    }

    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        0.0,
        "{stack}"
    );
    let retries = sum(&s, "tokenmeter_upstream_retries_total", &[]);
    let opened = server.connections().await - before;
    eprintln!(
        "{stack}: {ROUNDS} rounds of the keep-alive race: {opened} upstream connections, \
         tokenmeter_upstream_retries_total {retries}",
    );
    if stack.keep_alive_header().is_some() {
        // Announced: the pool lets go of the connection before the server
        // does, so no request meets it closing.
        assert_eq!(retries, 0.0, "{stack}: the Keep-Alive hint is honoured");
    }
    proxy.stop().await;
}

// uvicorn, h11.

#[tokio::test]
async fn uvicorn_h11_stream_passes_unchanged_and_is_metered_needs_tool_uvicorn() {
    stream_passes_unchanged_and_is_metered(Stack::UvicornH11).await;
}

#[tokio::test]
async fn uvicorn_h11_connections_are_reused_and_idle_closes_cost_no_502_needs_tool_uvicorn() {
    connections_are_reused_and_idle_closes_cost_no_502(Stack::UvicornH11).await;
}

// uvicorn, httptools.

#[tokio::test]
async fn uvicorn_httptools_stream_passes_unchanged_and_is_metered_needs_tool_uvicorn() {
    stream_passes_unchanged_and_is_metered(Stack::UvicornHttptools).await;
}

#[tokio::test]
async fn uvicorn_httptools_connections_are_reused_and_idle_closes_cost_no_502_needs_tool_uvicorn() {
    connections_are_reused_and_idle_closes_cost_no_502(Stack::UvicornHttptools).await;
}

// aiohttp.

#[tokio::test]
async fn aiohttp_stream_passes_unchanged_and_is_metered_needs_tool_aiohttp() {
    stream_passes_unchanged_and_is_metered(Stack::Aiohttp).await;
}

#[tokio::test]
async fn aiohttp_connections_are_reused_and_idle_closes_cost_no_502_needs_tool_aiohttp() {
    connections_are_reused_and_idle_closes_cost_no_502(Stack::Aiohttp).await;
}

// Node's `http` module.

#[tokio::test]
async fn node_http_stream_passes_unchanged_and_is_metered_needs_tool_node() {
    stream_passes_unchanged_and_is_metered(Stack::NodeHttp).await;
}

#[tokio::test]
async fn node_http_connections_are_reused_and_idle_closes_cost_no_502_needs_tool_node() {
    connections_are_reused_and_idle_closes_cost_no_502(Stack::NodeHttp).await;
}
