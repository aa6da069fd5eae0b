//! An agent's APIs on real sockets: an upstream that streams Anthropic
//! Messages and Responses API answers as their servers do (the simulator
//! serves chat completions only), and a client that sends one request
//! and keeps its own span and answer.
//!
//! The upstream answers every `POST` to a path ending in `/messages` with
//! a Messages stream, and every other with a Responses stream whose
//! `response.created` and `response.completed` carry a fresh id
//! (`resp_up<N>`). Its first token comes 20 ms after the request (or
//! `x-sim-ttft-ms`) and four more 5 ms apart; its usage reports 10 input tokens besides
//! `x-sim-cached-tokens` read from the prefix cache (Anthropic's
//! `cache_read_input_tokens`, Responses' `input_tokens_details`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Tokens each answer streams.
pub const AGENT_TOKENS: u64 = 5;
/// Input tokens each answer reports besides the cached ones.
pub const AGENT_INPUT: u64 = 10;

/// Starts the upstream; its address. It serves until the test's runtime
/// stops.
pub async fn agent_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let ids = Arc::new(AtomicU64::new(1));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(answer(stream, ids.clone()));
        }
    });
    addr
}

/// Reads one request and streams its answer, then closes.
async fn answer(mut stream: TcpStream, ids: Arc<AtomicU64>) {
    let start = Instant::now();
    let Some((head, _body)) = read_request(&mut stream).await else {
        return;
    };
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_owned();
    let header = |name: &str| -> Option<u64> {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name)
                .then(|| v.trim().parse().ok())?
        })
    };
    let cached = header("x-sim-cached-tokens").unwrap_or(0);
    let ttft = Duration::from_millis(header("x-sim-ttft-ms").unwrap_or(20));
    let n = ids.fetch_add(1, Ordering::Relaxed);
    let events = if path.ends_with("/messages") {
        messages(n, cached, ttft)
    } else {
        responses(n, cached, ttft)
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for (at, event) in events {
        tokio::time::sleep_until(start + at).await;
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            return;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let _ = stream.shutdown().await;
}

/// When each token is due: the first at `ttft`, then every 5 ms.
fn token_at(ttft: Duration, k: u64) -> Duration {
    ttft + Duration::from_millis(5 * k)
}

fn sse(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// An Anthropic Messages stream.
fn messages(n: u64, cached: u64, ttft: Duration) -> Vec<(Duration, String)> {
    use serde_json::json;
    let mut events = vec![(
        Duration::ZERO,
        sse(
            "message_start",
            json!({"type": "message_start", "message": {"id": format!("msg_up{n}"),
                "type": "message", "role": "assistant", "model": "m1", "content": [],
                "usage": {"input_tokens": AGENT_INPUT, "cache_read_input_tokens": cached,
                    "output_tokens": 1}}}),
        ),
    )];
    events.push((
        Duration::ZERO,
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
    ));
    for k in 0..AGENT_TOKENS {
        events.push((
            token_at(ttft, k),
            sse(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": format!(" tok{k}")}}),
            ),
        ));
    }
    let end = token_at(ttft, AGENT_TOKENS - 1);
    events.extend([
        (
            end,
            sse(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
        ),
        (
            end,
            sse(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": AGENT_TOKENS}}),
            ),
        ),
        (end, sse("message_stop", json!({"type": "message_stop"}))),
    ]);
    events
}

/// A Responses API stream of response `resp_up<n>`.
fn responses(n: u64, cached: u64, ttft: Duration) -> Vec<(Duration, String)> {
    use serde_json::json;
    let id = format!("resp_up{n}");
    let mut events = vec![(
        Duration::ZERO,
        sse(
            "response.created",
            json!({"type": "response.created", "response": {"id": id,
                "object": "response", "status": "in_progress", "model": "m1"}}),
        ),
    )];
    for k in 0..AGENT_TOKENS {
        events.push((
            token_at(ttft, k),
            sse(
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "item_id": format!("msg_up{n}"),
                    "output_index": 0, "content_index": 0, "delta": format!(" tok{k}")}),
            ),
        ));
    }
    events.push((
        token_at(ttft, AGENT_TOKENS - 1),
        sse(
            "response.completed",
            json!({"type": "response.completed", "response": {"id": id,
                "object": "response", "status": "completed", "model": "m1",
                "usage": {"input_tokens": AGENT_INPUT + cached,
                    "input_tokens_details": {"cached_tokens": cached},
                    "output_tokens": AGENT_TOKENS,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": AGENT_INPUT + cached + AGENT_TOKENS}}}),
        ),
    ));
    events
}

/// The head (as text) and body of one request read from `stream`.
async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some((head, buf[end..].to_vec()))
}

/// One request as its client saw it: from its head's first byte sent to
/// its answer's last byte read, and the answer.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Its `x-request-id`, unique in the test binary: its access line's
    /// `request_id`.
    pub id: String,
    pub start: Instant,
    pub end: Instant,
    pub answer: String,
}

impl Sent {
    /// The span, for [`super::union`].
    pub fn span(&self) -> (Instant, Instant) {
        (self.start, self.end)
    }

    /// How much longer the client's span was than the proxy's own
    /// (`elapsed_ms` of the access lines `lines`' one of this request):
    /// the time on the wire and in the client's and the proxy's
    /// scheduling, on both sides.
    pub fn widening(&self, lines: &[&Value]) -> f64 {
        let line = lines
            .iter()
            .find(|l| l["request_id"] == self.id.as_str())
            .unwrap_or_else(|| panic!("no access line of {}", self.id));
        let own = line["elapsed_ms"].as_f64().unwrap() / 1e3;
        let client = (self.end - self.start).as_secs_f64();
        assert!(
            client >= own - 1e-4,
            "{}: client {client} s, proxy {own} s",
            self.id
        );
        (client - own).max(0.0)
    }

    /// The id of the Responses API response it was answered with.
    pub fn response_id(&self) -> String {
        let at = self.answer.find("\"id\":\"resp_").expect("a response id") + 6;
        let rest = &self.answer[at..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

/// POSTs `body` as JSON to `path` through `proxy` with `headers`, and
/// reads the whole answer, which must be a 200.
pub async fn send(proxy: SocketAddr, path: &str, body: &Value, headers: &[(&str, &str)]) -> Sent {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!("agent-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let body = body.to_string();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-request-id: {id}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    // From the head's first byte to the body's last (a chunked body's
    // closing chunk, else the connection's end), as the proxy's own span
    // runs from the head's arrival to the response's end.
    let start = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        answer.extend_from_slice(&buf[..n]);
        if n == 0 || answer.ends_with(b"\r\n0\r\n\r\n") {
            break;
        }
    }
    let end = Instant::now();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    Sent {
        id,
        start,
        end,
        answer,
    }
}
