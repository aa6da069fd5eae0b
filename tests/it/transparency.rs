//! Bytes, frames, status and headers pass through the proxy unchanged.
//!
//! Every fixture is served by a scripted upstream cut into frames whole, at
//! every byte offset, one byte per frame, and at random; the client reads
//! the raw chunked encoding, so a merged, split or altered frame fails.

use std::sync::Arc;

use crate::common::*;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

fn request(name: &str, cuts: &[usize]) -> String {
    let cuts: Vec<String> = cuts.iter().map(|c| c.to_string()).collect();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: 2\r\nx-fixture: {name}\r\nx-cuts: {}\r\n\r\n",
        cuts.join(",")
    )
}

/// Cut plans for one fixture: whole, every offset, one byte per frame, random.
fn plans(len: usize) -> Vec<Vec<usize>> {
    let mut plans = vec![vec![]];
    plans.extend((1..len).map(|c| vec![c]));
    plans.push((1..len).collect());
    let mut seed = 0x2545_F491_4F6C_DD1Du64 ^ len as u64;
    for _ in 0..20 {
        let mut cuts = Vec::new();
        let mut at = 0;
        loop {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            at += 1 + (seed % 300) as usize;
            if at >= len {
                break;
            }
            cuts.push(at);
        }
        plans.push(cuts);
    }
    plans
}

/// Whether `chunks` is `frames` with some frames split, and none joined.
fn never_merged(chunks: &[Vec<u8>], frames: &[Vec<u8>]) -> bool {
    let mut chunks = chunks.iter();
    frames.iter().all(|frame| {
        let mut covered = 0;
        while covered < frame.len() {
            match chunks.next() {
                Some(c)
                    if covered + c.len() <= frame.len()
                        && frame[covered..covered + c.len()] == c[..] =>
                {
                    covered += c.len()
                }
                _ => return false,
            }
        }
        true
    }) && chunks.next().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_passes_byte_identical_with_the_same_frames() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    // The cut plans travel in a request header, up to one offset per byte
    // of the fixture: far beyond the default 8 KiB request head.
    config.proxy.max_request_head_bytes = 1 << 20;
    let proxy = start(config).await;
    let limit = Arc::new(Semaphore::new(16));
    let mut checks = 0usize;
    for name in fixture_names() {
        let bytes = Arc::new(fixture(&name));
        let mut set = JoinSet::new();
        for cuts in plans(bytes.len()) {
            let permit = limit.clone().acquire_owned().await.unwrap();
            let (name, bytes) = (name.clone(), bytes.clone());
            let addr = proxy.proxy_addr;
            set.spawn(async move {
                let head = request(&name, &cuts);
                let direct = raw_exchange(upstream, &head, b"{}").await;
                let proxied = raw_exchange(addr, &head, b"{}").await;
                drop(permit);
                let frames = split_at(&bytes, &cuts);
                assert_eq!(direct.chunks, frames, "{name} {cuts:?}: the rig itself");
                assert_eq!(proxied.status, direct.status, "{name}");
                assert!(
                    proxied.body() == *bytes,
                    "{name} cut at {cuts:?}: bytes differ"
                );
                assert!(
                    never_merged(&proxied.chunks, &frames),
                    "{name} cut at {cuts:?}: a forwarded chunk spans two upstream frames"
                );
                // The upstream sends the whole response at once, so frames
                // queue up on the socket. A response that fits the proxy's
                // first read (8 KiB) must come out frame for frame; in a
                // larger burst a read may end inside a frame, and that part
                // is forwarded at once rather than held back to be rejoined.
                let wire: usize = frames.iter().map(|f| f.len() + 12).sum::<usize>() + 512;
                if wire <= 8192 {
                    assert_eq!(
                        proxied.chunks.len(),
                        frames.len(),
                        "{name} cut at {cuts:?}: frame count"
                    );
                }
                // Same headers in the same order, less the hop-by-hop ones
                // and the per-response date.
                let end_to_end = |r: &RawResponse| -> Vec<(String, String)> {
                    r.headers
                        .iter()
                        .filter(|(k, _)| !["connection", "x-hop", "date"].contains(&k.as_str()))
                        .cloned()
                        .collect()
                };
                assert_eq!(end_to_end(&proxied), end_to_end(&direct), "{name}: headers");
                assert_eq!(proxied.header("x-hop"), None, "hop-by-hop header forwarded");
                assert!(proxied.header("date").is_some());
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
            checks += 1;
        }
    }
    assert!(checks > 60_000, "{checks} checks");
    proxy.stop().await;
}
