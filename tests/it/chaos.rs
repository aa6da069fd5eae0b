//! The chaos test: the real `tokenmeter serve` binary in front of
//! a `tokenmeter sim` child, 100 concurrent streaming clients, and on a
//! schedule: the upstream killed with SIGKILL and restarted on the same
//! port, the config reloaded with SIGHUP every 200 ms (two valid files and a
//! broken one in turn), a burst of 200 idle and trickling connections
//! pressing `proxy.max_connections`, and one client in ten leaving
//! mid-stream.
//!
//! Afterwards: every metered request sent is counted exactly once in
//! `llm_requests_total` (and has exactly one access-log line), no response
//! carries another request's bytes, each completed stream is byte-identical
//! to what the simulator sends for that request (its per-response `id` and
//! `created` masked), every cut stream is a prefix of it, the proxy is alive
//! with its RSS back near where it started, no counter went down between
//! scrapes, and nothing panicked. The figures are printed at the end (run
//! with `--nocapture` to see them).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{BIN, Child, RawResponse, Sample, parse_metrics, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, sleep_until, timeout};

/// Concurrent streaming clients.
const CLIENTS: u64 = 100;
/// How long the clients keep starting new requests.
const LOAD: Duration = Duration::from_secs(32);
/// Connections of the burst.
const BURST: u64 = 200;
/// The proxy's connection limit: the 100 clients and the burst exceed it.
const MAX_CONNECTIONS: u64 = 128;
/// The proxy's `request_head_timeout`.
const HEAD_TIMEOUT: Duration = Duration::from_secs(4);
/// The whole scenario, start-up to the last check.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(170);
/// How far the proxy's RSS may stay above where it stood after warm-up.
const RSS_SLACK_KIB: u64 = 64 * 1024;
/// Token schedule of the proxied streams.
const TTFT_MS: u64 = 10;
const ITL_MS: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_under_kills_reloads_bursts_and_aborts() {
    let finished = timeout(SCENARIO_TIMEOUT, scenario()).await;
    assert!(
        finished.is_ok(),
        "the chaos scenario did not finish within {SCENARIO_TIMEOUT:?}"
    );
}

// ---------------------------------------------------------------------------
// Processes.

/// The simulator child, restartable on its fixed port.
struct Sim {
    port: u16,
    log: PathBuf,
    child: Mutex<Option<Child>>,
    /// How many times it was started.
    starts: AtomicU64,
}

impl Sim {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn spawn(&self) -> Child {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(BIN)
            .args(["sim", "--listen", &self.addr().to_string()])
            .env("TOKENMETER_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        Child(child)
    }

    /// Starts the simulator and waits until it answers `/health`; a start
    /// that fails (the port not yet free again) is retried, within 15 s.
    async fn start(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        'spawn: loop {
            assert!(Instant::now() < deadline, "the simulator did not start");
            let mut child = self.spawn();
            loop {
                if let Ok(Some(status)) = child.0.try_wait() {
                    eprintln!("sim exited at start ({status}); retrying");
                    sleep(Duration::from_millis(100)).await;
                    continue 'spawn;
                }
                if health(self.addr()).await {
                    *self.child.lock().unwrap() = Some(child);
                    self.starts.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if Instant::now() > deadline {
                    panic!("the simulator did not answer /health within 15 s");
                }
                sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// SIGKILL, and reap it.
    fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            child.0.kill().unwrap();
            child.0.wait().unwrap();
        }
    }
}

/// `GET /health` answers 200, within 1 s.
async fn health(addr: SocketAddr) -> bool {
    let get = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: sim\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        Some(buf.starts_with(b"HTTP/1.1 200"))
    };
    matches!(timeout(Duration::from_secs(1), get).await, Ok(Some(true)))
}

/// A free loopback port (free a moment ago; the simulator binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The config files: two valid ones that differ in a route's idle timeout,
/// and a broken one (YAML cut off inside a mapping).
fn configs(sim_port: u16) -> [String; 3] {
    let valid = |idle: &str| {
        format!(
            "proxy:\n\
             \x20 max_connections: {MAX_CONNECTIONS}\n\
             \x20 request_head_timeout: {}s\n\
             \x20 overload_timeout: 2s\n\
             metrics:\n\
             \x20 models:\n\
             \x20   allow: [sim-model]\n\
             routes:\n\
             \x20 - name: chaos\n\
             \x20   upstream: http://127.0.0.1:{sim_port}\n\
             \x20   timeouts:\n\
             \x20     connect: 2s\n\
             \x20     response_headers: 10s\n\
             \x20     idle: {idle}\n\
             \x20     request_body: 2s\n\
             \x20     request_body_total: 5s\n",
            HEAD_TIMEOUT.as_secs()
        )
    };
    let broken = format!(
        "proxy:\n  max_connections: {MAX_CONNECTIONS}\nroutes:\n  - name: chaos\n    upstream: [http://127.0.0.1:{sim_port}\n    timeouts: {{idle: 10s\n"
    );
    [valid("10s"), valid("11s"), broken]
}

/// Replaces `path` with `text` in one rename, so a reload never reads half
/// a file.
fn install(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The proxy child and where it listens.
struct Proxy {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
}

/// Starts `tokenmeter serve` with its log going to `log`, and waits (10 s)
/// for its start line to learn its ports.
async fn start_proxy(config: &Path, log: &Path) -> Proxy {
    let file = File::create(log).unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .args([
            "--no-watch",
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env("TOKENMETER_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    let mut child = Child(child);
    let pid = child.0.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["fields"]["message"] == "tokenmeter started" {
                let addr = |k: &str| v["fields"][k].as_str().unwrap().parse().unwrap();
                return Proxy {
                    addr: addr("proxy_addr"),
                    admin: addr("admin_addr"),
                    child,
                    pid,
                    log: log.to_owned(),
                };
            }
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("tokenmeter serve exited at start ({status}):\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "no start line within 10 s:\n{text}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// `kill -SIG pid`.
async fn signal(pid: u32, sig: &str) {
    let status = tokio::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// VmRSS and VmHWM in KiB, and the number of open file descriptors.
fn proc_figures(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (kib("VmRSS:"), kib("VmHWM:"), fds)
}

// ---------------------------------------------------------------------------
// Metrics.

/// `GET path` on the admin listener, within 5 s; `None` on any failure.
async fn admin_get(admin: SocketAddr, path: &str) -> Option<RawResponse> {
    let get = async {
        let mut s = TcpStream::connect(admin).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        buf.windows(4)
            .any(|w| w == b"\r\n\r\n")
            .then(|| parse_response(&buf))
    };
    timeout(Duration::from_secs(5), get).await.ok().flatten()
}

async fn scrape(admin: SocketAddr) -> Option<Vec<Sample>> {
    let resp = admin_get(admin, "/metrics").await?;
    if resp.status != 200 || resp.truncated {
        return None;
    }
    Some(parse_metrics(&String::from_utf8(resp.body()).ok()?))
}

fn total(samples: &[Sample], name: &str) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .sum()
}

fn by_label(samples: &[Sample], name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == name) {
        let key = s.labels.get(label).cloned().unwrap_or_default();
        *out.entry(key).or_insert(0.0) += s.value;
    }
    out
}

/// The cumulative series of a scrape (counters, histogram buckets, sums and
/// counts), keyed by name and labels.
fn cumulative(samples: &[Sample]) -> HashMap<String, f64> {
    samples
        .iter()
        .filter(|s| {
            ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .any(|suffix| s.name.ends_with(suffix))
        })
        .map(|s| (format!("{}{:?}", s.name, s.labels), s.value))
        .collect()
}

/// Every series of `before` that went down or disappeared in `after`.
fn decreases(before: &HashMap<String, f64>, after: &HashMap<String, f64>) -> Vec<String> {
    let mut out = Vec::new();
    for (series, &was) in before {
        match after.get(series) {
            None => out.push(format!("{series} disappeared (was {was})")),
            Some(&now) if now < was => out.push(format!("{series} went from {was} to {now}")),
            Some(_) => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Requests.

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
struct Pending {
    n: u64,
    /// The complete chunks received.
    chunks: Vec<Vec<u8>>,
    complete: bool,
}

/// What the load generator saw.
#[derive(Default)]
struct Tally {
    /// Metered requests whose head was written in full, by id.
    sent: Vec<String>,
    /// Connections that failed before the head was written.
    not_sent: u64,
    /// Responses by status and how they ended.
    kinds: BTreeMap<String, u64>,
    /// Ids of streams received complete with status 200.
    completed: Vec<String>,
    left: u64,
    no_head: Vec<String>,
    stalled: Vec<String>,
    /// Responses carrying another request's model name or two response ids.
    crosstalk: Vec<String>,
    /// Streams whose bytes are not (a prefix of) the simulator's.
    mismatches: Vec<String>,
    verified_complete: u64,
    verified_prefix: u64,
    /// Complete streams whose chunks were cut differently from the
    /// simulator's (bytes equal): reported, not a failure.
    reframed: u64,
    deferred: Vec<Pending>,
    /// Burst connections: (kind, closed by the proxy, seconds open, status).
    burst: Vec<(&'static str, bool, f64, Option<u16>)>,
}

/// One streamed request through the proxy, checked.
async fn stream_one(proxy: SocketAddr, sim: SocketAddr, n: u64, tally: &Mutex<Tally>) {
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
async fn verify(sim: SocketAddr, p: Pending, tally: &Mutex<Tally>) -> Option<Pending> {
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
async fn burst_one(proxy: SocketAddr, k: u64, tally: &Mutex<Tally>) {
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

// ---------------------------------------------------------------------------
// The scenario.

async fn scenario() {
    let wall = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let sim = Arc::new(Sim {
        port: free_port(),
        log: dir.path().join("sim.log"),
        child: Mutex::new(None),
        starts: AtomicU64::new(0),
    });
    sim.start().await;
    let sim_addr = sim.addr();

    let [config_a, config_b, broken] = configs(sim.port);
    let config = dir.path().join("tokenmeter.yaml");
    install(&config, &config_a);
    let proxy = start_proxy(&config, &dir.path().join("tokenmeter.log")).await;
    let (addr, admin, pid) = (proxy.addr, proxy.admin, proxy.pid);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(AtomicU64::new(0));

    // Warm-up: one request per client, then the baseline.
    let warm: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (tally, next) = (tally.clone(), next.clone());
            tokio::spawn(async move {
                let n = next.fetch_add(1, Ordering::Relaxed);
                stream_one(addr, sim_addr, n, &tally).await;
            })
        })
        .collect();
    for task in warm {
        task.await.unwrap();
    }
    sleep(Duration::from_millis(500)).await;
    let (rss_start, _, fds_start) = proc_figures(pid);
    let first = scrape(admin).await.expect("first scrape");

    let load_start = Instant::now();
    let load_end = load_start + LOAD;
    let stop = Arc::new(AtomicBool::new(false));

    // The clients.
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (tally, next) = (tally.clone(), next.clone());
            tokio::spawn(async move {
                while Instant::now() < load_end {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    stream_one(addr, sim_addr, n, &tally).await;
                }
            })
        })
        .collect();

    // SIGHUP every 200 ms: valid A, valid B, broken, in turn.
    let reloader = {
        let (stop, config) = (stop.clone(), config.clone());
        let files = [config_a.clone(), config_b, broken];
        tokio::spawn(async move {
            let mut sent = 0u64;
            let mut tick = load_start;
            while !stop.load(Ordering::Relaxed) {
                tick += Duration::from_millis(200);
                sleep_until(tick).await;
                install(&config, &files[(sent % 3) as usize]);
                signal(pid, "-HUP").await;
                sent += 1;
            }
            sent
        })
    };

    // Scrapes every 500 ms: no cumulative series may go down; RSS and fds
    // sampled alongside.
    let scraper = {
        let stop = stop.clone();
        let first = cumulative(&first);
        tokio::spawn(async move {
            let mut before = first;
            let (mut scrapes, mut failed) = (0u64, 0u64);
            let mut violations = Vec::new();
            let (mut rss_peak, mut fds_peak) = (0u64, 0usize);
            let mut tick = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                tick += Duration::from_millis(500);
                sleep_until(tick).await;
                let (rss, _, fds) = proc_figures(pid);
                rss_peak = rss_peak.max(rss);
                fds_peak = fds_peak.max(fds);
                match scrape(admin).await {
                    Some(samples) => {
                        scrapes += 1;
                        let now = cumulative(&samples);
                        violations.extend(decreases(&before, &now));
                        before = now;
                    }
                    None => failed += 1,
                }
            }
            (scrapes, failed, violations, rss_peak, fds_peak, before)
        })
    };

    // The schedule: kills and restarts of the upstream, and the burst.
    let at = |secs: f64| load_start + Duration::from_secs_f64(secs);
    let mut kills = 0;
    let mut burst = Vec::new();
    for (kill_at, restart_at) in [(5.0, 6.5), (12.0, 13.0), (22.0, 22.5)] {
        sleep_until(at(kill_at)).await;
        sim.kill();
        kills += 1;
        eprintln!(
            "t={:.1}s: upstream killed",
            load_start.elapsed().as_secs_f64()
        );
        sleep_until(at(restart_at)).await;
        sim.start().await;
        eprintln!(
            "t={:.1}s: upstream restarted",
            load_start.elapsed().as_secs_f64()
        );
        if kills == 1 {
            sleep_until(at(10.0)).await;
            eprintln!(
                "t={:.1}s: burst of {BURST}",
                load_start.elapsed().as_secs_f64()
            );
            for k in 0..BURST {
                let tally = tally.clone();
                burst.push(tokio::spawn(
                    async move { burst_one(addr, k, &tally).await },
                ));
            }
        }
    }

    for client in clients {
        client.await.unwrap();
    }
    let load_secs = load_start.elapsed().as_secs_f64();
    // Each burst connection ends within 50 s (connect, then its cap).
    for task in burst {
        task.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let hups = reloader.await.unwrap();
    let (scrapes, failed_scrapes, mut violations, mut rss_peak, mut fds_peak, last_seen) =
        scraper.await.unwrap();

    // The streams checked while the upstream was down are checked now.
    let deferred = std::mem::take(&mut tally.lock().unwrap().deferred);
    let deferred_count = deferred.len();
    for p in deferred {
        let n = p.n;
        if verify(sim_addr, p, &tally).await.is_some() {
            tally
                .lock()
                .unwrap()
                .mismatches
                .push(format!("chaos-{n}: the simulator could not be asked"));
        }
    }

    // A last reload to valid A must succeed and be in force.
    let reloads = |s: &[Sample], result: &str| {
        s.iter()
            .filter(|x| {
                x.name == "tokenmeter_config_reload_total"
                    && x.labels.get("result").map(String::as_str) == Some(result)
            })
            .map(|x| x.value)
            .sum::<f64>()
    };
    let before_last = scrape(admin).await.expect("scrape");
    install(&config, &config_a);
    signal(pid, "-HUP").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let after_last = loop {
        let s = scrape(admin).await.expect("scrape");
        if reloads(&s, "success") > reloads(&before_last, "success") || Instant::now() > deadline {
            break s;
        }
        sleep(Duration::from_millis(50)).await;
    };

    // Settle: nothing in flight, every sent request counted.
    let sent = tally.lock().unwrap().sent.len() as f64;
    let deadline = Instant::now() + Duration::from_secs(20);
    let settled = loop {
        let s = scrape(admin).await.expect("scrape");
        let idle = total(&s, "llm_requests_in_flight") == 0.0
            && total(&s, "tokenmeter_requests_receiving_body") == 0.0;
        if (idle && total(&s, "llm_requests_total") >= sent) || Instant::now() > deadline {
            break s;
        }
        sleep(Duration::from_millis(100)).await;
    };
    violations.extend(decreases(&last_seen, &cumulative(&settled)));
    let deadline = Instant::now() + Duration::from_secs(15);
    let open_proxy_connections = loop {
        let s = scrape(admin).await.expect("scrape");
        let open = s
            .iter()
            .filter(|x| {
                x.name == "tokenmeter_open_connections"
                    && x.labels.get("listener").map(String::as_str) == Some("proxy")
            })
            .map(|x| x.value)
            .sum::<f64>();
        if open == 0.0 || Instant::now() > deadline {
            break open;
        }
        sleep(Duration::from_millis(100)).await;
    };
    sleep(Duration::from_secs(2)).await;
    let end = scrape(admin).await.expect("final scrape");
    violations.extend(decreases(&cumulative(&settled), &cumulative(&end)));
    let (rss_end, rss_hwm, fds_end) = proc_figures(pid);
    rss_peak = rss_peak.max(rss_end);
    fds_peak = fds_peak.max(fds_end);
    let mut proxy_child = proxy.child;
    let alive = matches!(proxy_child.0.try_wait(), Ok(None));
    let healthz = admin_get(admin, "/healthz").await.map(|r| r.status);
    let config_now = admin_get(admin, "/config").await.map(|r| r.body());

    // The logs: no panic anywhere; one access line per request sent.
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    let sim_log = std::fs::read_to_string(&sim.log).unwrap_or_default();
    let panics: Vec<&str> = log
        .lines()
        .chain(sim_log.lines())
        .filter(|l| l.to_ascii_lowercase().contains("panic"))
        .collect();
    let mut access: HashMap<String, Vec<String>> = HashMap::new();
    let mut access_lines = 0u64;
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["target"] == "tokenmeter::access" {
            access_lines += 1;
            let id = v["fields"]["request_id"].as_str().unwrap_or("").to_owned();
            let outcome = v["fields"]["outcome"].as_str().unwrap_or("").to_owned();
            access.entry(id).or_default().push(outcome);
        }
    }
    sim.kill();

    // ---- The figures.
    let t = tally.lock().unwrap();
    let outcomes = by_label(&end, "llm_requests_total", "outcome");
    let counted = total(&end, "llm_requests_total");
    let retries = by_label(&end, "tokenmeter_upstream_retries_total", "reason");
    let shed = by_label(&end, "tokenmeter_shed_connections_total", "reason");
    let reload_results = by_label(&end, "tokenmeter_config_reload_total", "result");
    let dropped_log_lines = total(&end, "tokenmeter_log_lines_dropped_total");
    let closed_burst = t.burst.iter().filter(|b| b.1).count();
    let longest_burst = t
        .burst
        .iter()
        .filter(|b| b.0 != "body")
        .map(|b| b.2)
        .fold(0.0, f64::max);
    let mut burst_statuses: BTreeMap<String, u64> = BTreeMap::new();
    for (kind, closed, _, status) in &t.burst {
        let status = status.map_or("none".to_owned(), |s| s.to_string());
        let how = if *closed { "closed" } else { "left" };
        *burst_statuses
            .entry(format!("{kind} {how} status {status}"))
            .or_insert(0) += 1;
    }
    println!("\n==== chaos: figures ====");
    println!(
        "wall time                  {:.1} s (load {load_secs:.1} s)",
        wall.elapsed().as_secs_f64()
    );
    println!("requests sent (metered)    {sent}");
    println!("requests not sent          {}", t.not_sent);
    println!("llm_requests_total (sum)   {counted}");
    for (outcome, v) in &outcomes {
        println!("  outcome {outcome:<17} {v}");
    }
    println!("responses seen by clients");
    for (kind, v) in &t.kinds {
        println!("  {kind:<24} {v}");
    }
    println!("clients that left          {}", t.left);
    println!(
        "streams verified complete  {} ({} cut differently into chunks)",
        t.verified_complete, t.reframed
    );
    println!("streams verified as prefix {}", t.verified_prefix);
    println!("  verified after the run   {deferred_count}");
    println!(
        "upstream kills/starts      {kills}/{}",
        sim.starts.load(Ordering::Relaxed)
    );
    println!("upstream retries           {retries:?}");
    println!(
        "shed connections           {} {shed:?}",
        shed.values().sum::<f64>()
    );
    println!("SIGHUPs sent               {}", hups + 1);
    println!("config reloads             {reload_results:?}");
    println!(
        "burst connections          {} ({closed_burst} closed by the proxy, longest idle/head {longest_burst:.1} s)",
        t.burst.len()
    );
    for (kind, v) in &burst_statuses {
        println!("  {kind:<28} {v}");
    }
    println!("scrapes                    {scrapes} ({failed_scrapes} failed)");
    println!("RSS KiB start/peak/end     {rss_start}/{rss_peak}/{rss_end} (VmHWM {rss_hwm})");
    println!("open fds start/peak/end    {fds_start}/{fds_peak}/{fds_end}");
    println!("access log lines           {access_lines} ({dropped_log_lines} log lines dropped)");
    println!("========================\n");

    // ---- The assertions.
    assert!(alive, "the proxy exited");
    assert_eq!(healthz, Some(200), "/healthz after the run");
    assert!(panics.is_empty(), "panics logged:\n{}", panics.join("\n"));
    assert!(
        violations.is_empty(),
        "counters went down:\n{}",
        violations.join("\n")
    );
    assert!(
        scrapes >= 20,
        "only {scrapes} scrapes succeeded ({failed_scrapes} failed)"
    );
    assert_eq!(
        counted, sent,
        "llm_requests_total {outcomes:?} against {sent} requests sent"
    );
    assert_eq!(total(&end, "llm_requests_in_flight"), 0.0);
    assert_eq!(open_proxy_connections, 0.0, "client connections still open");
    assert!(
        t.crosstalk.is_empty(),
        "responses with another request's bytes:\n{}",
        t.crosstalk.join("\n")
    );
    assert!(
        t.mismatches.is_empty(),
        "{} streams differ from the upstream's:\n{}",
        t.mismatches.len(),
        t.mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        t.stalled.is_empty(),
        "streams stalled 30 s: {:?}",
        t.stalled
    );
    assert!(
        t.no_head.is_empty(),
        "requests answered with no response head: {:?}",
        t.no_head
    );
    // Each request sent has exactly one access line, with outcome `ok` when
    // its client received the whole stream.
    if dropped_log_lines == 0.0 {
        assert_eq!(
            access_lines as f64, sent,
            "access lines against requests sent"
        );
        let mut wrong = Vec::new();
        for id in &t.sent {
            match access.get(id).map(Vec::as_slice) {
                Some([_]) => {}
                other => wrong.push(format!("{id}: {other:?}")),
            }
        }
        for id in &t.completed {
            if access.get(id).is_some_and(|o| o.iter().any(|o| o != "ok")) {
                wrong.push(format!("{id} completed but logged {:?}", access[id]));
            }
        }
        assert!(
            wrong.is_empty(),
            "access log against requests sent:\n{}",
            wrong.join("\n")
        );
    }
    // The burst's idle and trickling heads were all closed by the proxy,
    // well within their 30 s (the head timeout is 4 s once accepted, the
    // overload timeout 1 s); its trickling bodies were all answered `408`
    // within their 20 s (`request_body_total` is 5 s from the head).
    for (kind, closed, open, status) in &t.burst {
        assert!(
            *closed,
            "a burst connection ({kind}) was still open after {open:.1} s"
        );
        if *kind == "body" {
            assert_eq!(*status, Some(408), "a trickled body after {open:.1} s");
        }
    }
    assert_eq!(
        t.burst.len() as u64,
        BURST,
        "burst connections that could not connect"
    );
    // The chaos happened: reloads both ways, failures and aborts metered,
    // and most requests still served.
    assert!(
        reload_results.get("success").copied().unwrap_or(0.0) >= 1.0,
        "{reload_results:?}"
    );
    assert!(
        reload_results.get("failure").copied().unwrap_or(0.0) >= 1.0,
        "{reload_results:?}"
    );
    assert_eq!(
        total(&end, "tokenmeter_config_last_reload_successful"),
        1.0,
        "the last reload (valid A) is in force"
    );
    assert!(
        reloads(&after_last, "success") > reloads(&before_last, "success"),
        "the last reload did not succeed"
    );
    let config_now: serde_json::Value =
        serde_json::from_slice(&config_now.expect("/config")).unwrap();
    assert_eq!(
        config_now["routes"][0]["timeouts"]["idle"], 10.0,
        "valid A's idle timeout in force: {config_now}"
    );
    assert!(
        outcomes.get("client_abort").copied().unwrap_or(0.0) >= 1.0,
        "{outcomes:?}"
    );
    let failed = outcomes.get("upstream_error").copied().unwrap_or(0.0)
        + outcomes.get("proxy_error").copied().unwrap_or(0.0);
    assert!(
        failed >= 1.0,
        "killing the upstream failed no request: {outcomes:?}"
    );
    assert!(
        t.verified_complete as f64 >= sent * 0.4,
        "only {} of {sent} streams completed",
        t.verified_complete
    );
    // The memory of the run was given back.
    assert!(
        rss_end <= rss_start + RSS_SLACK_KIB,
        "RSS {rss_end} KiB at the end against {rss_start} KiB after warm-up"
    );
    assert!(
        fds_end <= fds_start + 2 * CLIENTS as usize,
        "{fds_end} fds at the end against {fds_start} after warm-up"
    );
    drop(t);
    drop(proxy_child);
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

#[test]
fn a_cumulative_series_that_goes_down_or_vanishes_is_reported() {
    let scrape = |text: &str| cumulative(&parse_metrics(text));
    let before = scrape("a_total{x=\"1\"} 5\nb_bucket{le=\"1\"} 3\nc_sum 2\ng 7\n");
    assert!(
        decreases(
            &before,
            &scrape("a_total{x=\"1\"} 6\nb_bucket{le=\"1\"} 3\nc_sum 2\ng 1\n")
        )
        .is_empty()
    );
    assert_eq!(
        decreases(
            &before,
            &scrape("a_total{x=\"1\"} 4\nb_bucket{le=\"1\"} 3\nc_sum 2\n")
        )
        .len(),
        1
    );
    assert_eq!(
        decreases(&before, &scrape("a_total{x=\"1\"} 5\nc_sum 2\n")).len(),
        1
    );
}
