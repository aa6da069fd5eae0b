//! A flood of unique session keys through the binary (docs/metrics.md,
//! "Sessions and turns"): at `max_sessions: 1000` the table evicts, every
//! eviction is counted, and the process's resident memory stays flat
//! however many keys pass.

use std::ffi::OsStr;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::common::*;

/// Keys sent in all (`TOKENMETER_FLOOD_KEYS` sets another count:
/// docs/benchmarks.md gives the run of a million), and after what share
/// of them the memory is first read.
const KEYS: u64 = 100_000;
const WARM_SHARE: u64 = 10;
/// Connections sending at once, each a request at a time.
const CONNECTIONS: u64 = 8;

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Sends the keys `from..to` stepping by `step` on one keep-alive
/// connection, one non-streamed chat request each, reading each answer
/// whole.
async fn send(proxy: SocketAddr, from: u64, to: u64, step: u64) {
    let body = br#"{"model":"m1","messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut request = Vec::with_capacity(512);
    let mut buf = Vec::with_capacity(4096);
    let mut key = from;
    while key < to {
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-session-id: flood-{key:016x}\r\n\r\n",
            body.len()
        );
        // In one write: a body sent apart waits on the head's ACK.
        request.clear();
        request.extend_from_slice(head.as_bytes());
        request.extend_from_slice(body);
        stream.write_all(&request).await.unwrap();
        buf.clear();
        // The head, then its content-length's bytes.
        let (head_end, length) = loop {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the proxy closed the connection");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..end])
                    .unwrap()
                    .to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .expect("a content-length")
                    .trim()
                    .parse()
                    .unwrap();
                break (end + 4, length);
            }
        };
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the proxy closed the connection mid-body");
            buf.extend_from_slice(&chunk[..n]);
        }
        key += step;
    }
}

/// Sends the keys `from..to` over [`CONNECTIONS`] connections at once.
async fn flood(proxy: SocketAddr, from: u64, to: u64) {
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|c| tokio::spawn(send(proxy, from + c, to, CONNECTIONS)))
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unique_keys_keeps_the_table_and_the_memory_flat() {
    let keys: u64 = std::env::var("TOKENMETER_FLOOD_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KEYS)
        .max(10_000);
    let warm_keys = keys / WARM_SHARE;
    let sim = start_sim(schedule(0, 0, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &path,
        format!(
            "sessions: {{max_sessions: 1000}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n"
        ),
    )
    .unwrap();
    // No access lines: a million of them would only be read to be dropped.
    let child = serve_logging(
        &[OsStr::new("--config"), path.as_os_str()],
        "tokenmeter::app=info",
    );
    let pid = child.child.0.id();
    let (proxy, admin) = (child.proxy, child.admin);

    flood(proxy, 0, warm_keys).await;
    let warm = rss(pid);
    flood(proxy, warm_keys, keys).await;
    let after = rss(pid);
    eprintln!("{keys} keys: RSS {warm} bytes after {warm_keys}, {after} after all");

    let s = scrape_until(admin, |s| sum(s, "llm_sessions_active", &[]) == 1000.0).await;
    // Each key is a session of one request; all but the table's last 1000
    // were evicted, each counted once, none idle yet.
    let evicted = sum(
        &s,
        "tokenmeter_sessions_ended_total",
        &[("reason", "evicted")],
    );
    assert_eq!(evicted, (keys - 1000) as f64);
    assert_eq!(
        sum(&s, "tokenmeter_sessions_ended_total", &[("reason", "idle")]),
        0.0
    );
    assert_eq!(
        sum(&s, "llm_session_turns_count", &[("route", "chat")]),
        evicted
    );
    assert_eq!(
        sum(&s, "llm_turns_total", &[("turn", "first")]),
        keys as f64
    );
    // Flat: the keys after the first tenth add less than 8 MB (a table
    // that kept them would hold about 500 bytes each: 45 MB for 90,000).
    let grew = after.saturating_sub(warm);
    assert!(
        grew < 8 << 20,
        "RSS grew {grew} bytes over {} keys (from {warm} to {after})",
        keys - warm_keys
    );
}
