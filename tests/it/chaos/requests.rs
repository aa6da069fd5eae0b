//! The requests: the streaming clients, the burst, and the checks of each
//! response against what the simulator sends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use crate::common::{RawResponse, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use super::{ITL_MS, TTFT_MS};

/// A streamed chat request, identified by `n`: its `x-request-id`, its
/// model name and its token count. `direct` asks the simulator for the same
/// body without delays (the schedule only times the frames).
fn request(n: u64, direct: bool) -> (String, Vec<u8>) {
    let body = serde_json::json!({
        "model": format!("chaos-{n}"),
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": format!("chaos request {n} {}", "w ".repeat((n % 7) as usize))}],
    })
    .to_string()
    .into_bytes();
    let (ttft, itl) = if direct { (0, 0) } else { (TTFT_MS, ITL_MS) };
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: chaos\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nx-request-id: chaos-{n}\r\n\
         x-sim-tokens: {}\r\nx-sim-ttft-ms: {ttft}\r\nx-sim-itl-ms: {itl}\r\n\r\n",
        body.len(),
        20 + n % 31,
    );
    (head, body)
}

/// Replaces the digits of each response's `id` and `created`, the only
/// bytes of a simulated body that differ between two sends of one request.
fn mask(body: &[u8]) -> Vec<u8> {
    const KEYS: [&[u8]; 2] = [b"\"created\":", b"\"id\":\"chatcmpl-sim"];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    'bytes: while i < body.len() {
        for key in KEYS {
            if body[i..].starts_with(key) {
                out.extend_from_slice(key);
                i += key.len();
                while i < body.len() && body[i].is_ascii_digit() {
                    i += 1;
                }
                out.push(b'#');
                continue 'bytes;
            }
        }
        out.push(body[i]);
        i += 1;
    }
    out
}

/// The numbers after each occurrence of `prefix` in `bytes`.
fn numbers_after(bytes: &[u8], prefix: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(pos) = bytes[at..].windows(prefix.len()).position(|w| w == prefix) {
        let start = at + pos + prefix.len();
        let digits: Vec<u8> = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .copied()
            .collect();
        if let Ok(v) = std::str::from_utf8(&digits).unwrap_or("").parse() {
            out.push(v);
        }
        at = start;
    }
    out
}

fn count(bytes: &[u8], needle: &[u8]) -> usize {
    bytes.windows(needle.len()).filter(|w| *w == needle).count()
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// How a client's reading ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The proxy closed the connection (or reset it).
    Closed,
    /// The client left after `leave_after` events.
    Left,
    /// Nothing came for too long: a hung stream.
    Stalled,
}

/// Reads until the proxy closes, or until `leave_after` SSE events of the
/// body have arrived, or 30 s of silence.
async fn read_response(stream: &mut TcpStream, leave_after: Option<usize>) -> (Vec<u8>, End) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match timeout(Duration::from_secs(30), stream.read(&mut chunk)).await {
            Err(_) => return (buf, End::Stalled),
            Ok(Ok(0) | Err(_)) => return (buf, End::Closed),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        if let (Some(k), Some(end)) = (leave_after, head_end(&buf))
            && buf.starts_with(b"HTTP/1.1 200")
            && count(&buf[end..], b"data: ") >= k
        {
            return (buf, End::Left);
        }
    }
}

/// A stream to check against the simulator once it is up.
pub(super) struct Pending {
    pub(super) n: u64,
    /// The complete chunks received.
    pub(super) chunks: Vec<Vec<u8>>,
    pub(super) complete: bool,
}

/// What the load generator saw.
#[derive(Default)]
pub(super) struct Tally {
    /// Metered requests whose head was written in full, by id.
    pub(super) sent: Vec<String>,
    /// Connections that failed before the head was written.
    pub(super) not_sent: u64,
    /// Responses by status and how they ended.
    pub(super) kinds: BTreeMap<String, u64>,
    /// Ids of streams received complete with status 200.
    pub(super) completed: Vec<String>,
    pub(super) left: u64,
    pub(super) no_head: Vec<String>,
    pub(super) stalled: Vec<String>,
    /// Responses carrying another request's model name or two response ids.
    pub(super) crosstalk: Vec<String>,
    /// Streams whose bytes are not (a prefix of) the simulator's.
    pub(super) mismatches: Vec<String>,
    pub(super) verified_complete: u64,
    pub(super) verified_prefix: u64,
    /// Complete streams whose chunks were cut differently from the
    /// simulator's (bytes equal): reported, not a failure.
    pub(super) reframed: u64,
    pub(super) deferred: Vec<Pending>,
    /// Burst connections: (kind, closed by the proxy, seconds open, status).
    pub(super) burst: Vec<(&'static str, bool, f64, Option<u16>)>,
}

/// One streamed request through the proxy, checked.
pub(super) async fn stream_one(proxy: SocketAddr, sim: SocketAddr, n: u64, tally: &Mutex<Tally>) {
    let (head, body) = request(n, false);
    let id = format!("chaos-{n}");
    let connected = timeout(Duration::from_secs(20), TcpStream::connect(proxy)).await;
    let Ok(Ok(mut stream)) = connected else {
        tally.lock().unwrap().not_sent += 1;
        return;
    };
    // A request counts as sent once its head is written in full.
    let wrote = timeout(Duration::from_secs(20), stream.write_all(head.as_bytes())).await;
    if !matches!(wrote, Ok(Ok(()))) {
        tally.lock().unwrap().not_sent += 1;
        return;
    }
    tally.lock().unwrap().sent.push(id.clone());
    let _ = timeout(Duration::from_secs(20), stream.write_all(&body)).await;
    // One client in ten leaves after a few events (the first is the role
    // chunk, then tokens).
    let leave_after = (n % 10 == 7).then_some(3 + (n % 4) as usize);
    let (buf, end) = read_response(&mut stream, leave_after).await;
    drop(stream);

    let Some(resp) = record(n, &buf, end, &mut tally.lock().unwrap()) else {
        return;
    };
    if resp.status != 200 {
        // A client backs off after an error, as SDKs do, rather than
        // spinning on an upstream that is down.
        sleep(Duration::from_millis(200)).await;
        return;
    }
    {
        let pending = Pending {
            n,
            complete: !resp.truncated,
            chunks: resp.chunks,
        };
        if let Some(pending) = verify(sim, pending, tally).await {
            tally.lock().unwrap().deferred.push(pending);
        }
    }
}

/// Tallies one response and checks it carries no other request's bytes;
/// gives back the parsed response, if it has a head.
fn record(n: u64, buf: &[u8], end: End, t: &mut Tally) -> Option<RawResponse> {
    let id = format!("chaos-{n}");
    // No byte of another request: every model name in the response is this
    // request's, and all its chunks carry one response id.
    let models = numbers_after(buf, b"chaos-");
    let ids = numbers_after(buf, b"\"id\":\"chatcmpl-sim");
    if models.iter().any(|&m| m != n) || ids.windows(2).any(|w| w[0] != w[1]) {
        t.crosstalk.push(format!(
            "{id}: models {models:?}, ids {ids:?}: {}",
            String::from_utf8_lossy(&buf[..buf.len().min(600)])
        ));
    }
    if end == End::Stalled {
        t.stalled.push(id.clone());
    }
    if end == End::Left {
        t.left += 1;
    }
    if head_end(buf).is_none() {
        if end != End::Left {
            t.no_head
                .push(format!("{id} ({end:?}, {} bytes)", buf.len()));
        }
        return None;
    }
    let resp = parse_response(buf);
    let complete = resp.status == 200 && !resp.truncated;
    let kind = match (resp.status, complete, end) {
        (200, true, _) => "200 complete".to_owned(),
        (200, false, End::Left) => "200 left by the client".to_owned(),
        (200, false, _) => "200 cut".to_owned(),
        (status, _, _) => format!(
            "{status} {}",
            resp.header("x-tokenmeter-error").unwrap_or("-")
        ),
    };
    *t.kinds.entry(kind).or_insert(0) += 1;
    if complete {
        t.completed.push(id.clone());
    }
    Some(resp)
}

/// Compares a proxied stream with what the simulator sends for the same
/// request; gives it back when the simulator cannot be asked now.
pub(super) async fn verify(sim: SocketAddr, p: Pending, tally: &Mutex<Tally>) -> Option<Pending> {
    let Some(reference) = direct(sim, p.n).await else {
        return Some(p);
    };
    let got = mask(&p.chunks.concat());
    let want = mask(&reference.body());
    let mut t = tally.lock().unwrap();
    let same = if p.complete {
        got == want
    } else {
        want.starts_with(&got)
    };
    if !same {
        t.mismatches.push(format!(
            "chaos-{} (complete: {}):\n  proxied: {}\n  direct:  {}",
            p.n,
            p.complete,
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        ));
    } else if p.complete {
        t.verified_complete += 1;
        let framed = |chunks: &[Vec<u8>]| chunks.iter().map(|c| mask(c)).collect::<Vec<_>>();
        if framed(&p.chunks) != framed(&reference.chunks) {
            t.reframed += 1;
        }
    } else {
        t.verified_prefix += 1;
    }
    None
}

/// The same request sent straight to the simulator, without delays; `None`
/// when it is down.
async fn direct(sim: SocketAddr, n: u64) -> Option<RawResponse> {
    let (head, body) = request(n, true);
    let exchange = async {
        let mut s = TcpStream::connect(sim).await.ok()?;
        s.write_all(head.as_bytes()).await.ok()?;
        s.write_all(&body).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        head_end(&buf)?;
        let resp = parse_response(&buf);
        (resp.status == 200 && !resp.truncated).then_some(resp)
    };
    timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

/// One connection of the burst: `idle` sends nothing, `head` trickles a
/// request head that never ends (one byte every 100 ms), `body` sends a
/// metered request head and trickles its body. Each waits for the proxy to
/// close the connection, at most 30 s (`body`: 20 s, then leaves).
pub(super) async fn burst_one(proxy: SocketAddr, k: u64, tally: &Mutex<Tally>) {
    let kind = ["idle", "head", "body"][(k % 3) as usize];
    let started = Instant::now();
    let Ok(Ok(mut stream)) = timeout(Duration::from_secs(20), TcpStream::connect(proxy)).await
    else {
        tally.lock().unwrap().not_sent += 1;
        return;
    };
    let id = format!("chaos-burst-{k}");
    match kind {
        "head" => {
            let _ = stream
                .write_all(b"GET /v1/models HTTP/1.1\r\nhost: chaos\r\nx-pad: ")
                .await;
        }
        "body" => {
            let head = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: chaos\r\nconnection: close\r\n\
                 content-type: application/json\r\ncontent-length: 4000\r\nx-request-id: {id}\r\n\r\n"
            );
            match timeout(Duration::from_secs(20), stream.write_all(head.as_bytes())).await {
                Ok(Ok(())) => tally.lock().unwrap().sent.push(id.clone()),
                _ => {
                    tally.lock().unwrap().not_sent += 1;
                    return;
                }
            }
            let _ = stream.write_all(b"{\"model\":\"chaos-burst\",").await;
        }
        _ => {}
    }
    let cap = if kind == "body" { 20 } else { 30 };
    let deadline = started + Duration::from_secs(cap);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut next_byte = Instant::now() + Duration::from_millis(100);
    let closed = loop {
        tokio::select! {
            read = stream.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break true,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
            () = sleep_until(next_byte), if kind != "idle" => {
                next_byte += Duration::from_millis(100);
                if stream.write_all(b" ").await.is_err() {
                    break true;
                }
            }
            () = sleep_until(deadline) => break false,
        }
    };
    let status = head_end(&buf).map(|_| parse_response(&buf).status);
    let open = started.elapsed().as_secs_f64();
    tally
        .lock()
        .unwrap()
        .burst
        .push((kind, closed, open, status));
}

// The checks' own helpers, so that the scenario's assertions can fail.

#[test]
fn mask_hides_the_response_id_and_time_only() {
    let a = br#"data: {"created":1700000000,"id":"chatcmpl-sim12","model":"chaos-3","object":"x"}"#;
    let b = br#"data: {"created":1700000001,"id":"chatcmpl-sim9","model":"chaos-3","object":"x"}"#;
    let c = br#"data: {"created":1700000001,"id":"chatcmpl-sim9","model":"chaos-4","object":"x"}"#;
    assert_eq!(mask(a), mask(b));
    assert_ne!(mask(a), mask(c));
    assert!(mask(a).starts_with(&mask(&a[..40])));
}

#[test]
fn model_names_and_ids_are_found_in_a_response() {
    let body = br#"data: {"id":"chatcmpl-sim5","model":"chaos-17"} data: {"id":"chatcmpl-sim6","model":"chaos-18"}"#;
    assert_eq!(numbers_after(body, b"chaos-"), [17, 18]);
    assert_eq!(numbers_after(body, b"\"id\":\"chatcmpl-sim"), [5, 6]);
}
