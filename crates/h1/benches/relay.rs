//! The cost of relaying a streamed response through the client
//! connection: an SSE stream of small chunks, one chunk per read, read
//! frame by frame as the client's connection reads it. Prints, per chunk,
//! the allocations made and the time taken.
//!
//! `cargo bench -p tokenmeter-h1 --bench relay` runs both patterns of the
//! client's write queue. Instructions per chunk: run the binary under
//! `valgrind --tool=callgrind` for two numbers of chunks, e.g.
//! `relay queued 10000` and `relay queued 20000`, and divide the
//! difference by the difference of chunks (which leaves out the setup).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::System;
use std::time::Instant;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[path = "relay/rig.rs"]
mod rig;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations and reallocations so far.
fn allocations() -> usize {
    let stats = INSTRUMENTED_SYSTEM.stats();
    stats.allocations + stats.reallocations
}

/// One streamed chunk as an OpenAI-style server sends it (157 bytes of
/// data), framed.
const CHUNK: &[u8] = b"9d\r\ndata: {\"id\":\"chatcmpl-4f1c\",\"object\":\"chat.completion.chunk\",\"created\":1733587200,\"model\":\"llama-3-8b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"}}]}\n\n\r\n";

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let patterns: Vec<bool> = match args.first().map(String::as_str) {
        Some("queued") => vec![true],
        Some("dropped") => vec![false],
        _ => vec![false, true],
    };
    let chunks = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    for queued in patterns {
        let start = Instant::now();
        let seen = rig::relay(CHUNK, chunks, queued, allocations);
        let took = start.elapsed();
        assert_eq!(seen.bytes, chunks * 157, "every data byte relayed");
        assert_eq!(seen.frames, chunks, "one frame a chunk");
        println!(
            "{:<8} {chunks} chunks: {:.3} allocations a chunk, {:.0} ns a chunk",
            if queued { "queued" } else { "dropped" },
            seen.allocations as f64 / chunks as f64,
            took.as_nanos() as f64 / chunks as f64,
        );
    }
}
