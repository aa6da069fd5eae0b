//! What the session table costs: memory per session held, what a flood of
//! unique keys leaves behind at a bound, and the time of one request's
//! start and end in a full table. Printed, not judged: docs/benchmarks.md
//! keeps the figures and this command (`cargo bench --bench sessions`).

use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokenmeter::observe::sessions::{Named, Table, Tally};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A key as agents send them: a UUID.
fn key(i: u64) -> Named {
    Named::Key(Arc::from(format!(
        "{:08x}-4b1c-4e2a-9d3f-{:012x}",
        i as u32, i
    )))
}

fn added() -> Tally {
    Tally {
        input_tokens: 1200,
        cached_tokens: 900,
        output_tokens: 80,
        gpu_seconds: 0.4,
        joules: Some(120.0),
        cost: Some(0.0004),
        good: true,
    }
}

/// Bytes held now by this process's allocations made in `region`.
fn held(region: &Region<'_, System>) -> i64 {
    // A reallocation's growth is in `bytes_allocated` already.
    let stats = region.change();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test` each figure is
    // taken once, small, as criterion's benches run there.
    let full = std::env::args().any(|a| a == "--bench");
    let scale = if full { 1 } else { 100 };
    let route: Arc<str> = "chat".into();
    let tenant: Arc<str> = "team-a".into();
    let t0 = tokio::time::Instant::now();
    let at = |i: u64| t0 + Duration::from_micros(i);

    // Memory per session: 100,000 sessions of one request each.
    let n = 100_000 / scale;
    let region = Region::new(ALLOCATOR);
    let mut table = Table::new(Duration::from_secs(300), n as usize);
    for i in 0..n {
        let (place, _) = table.start(key(i), &route, &tenant, at(i));
        table.finish(&place, at(i), added(), None);
    }
    let per_session = held(&region) as f64 / n as f64;
    println!("memory: {per_session:.0} bytes a session held ({n} sessions, 36-byte keys)");

    // One request's start and end in the full table.
    let rounds = 200_000 / scale;
    let started = Instant::now();
    for i in 0..rounds {
        let (place, evicted) = table.start(key(n + i), &route, &tenant, at(n + i));
        black_box(evicted);
        table.finish(&place, at(n + i), added(), None);
    }
    let each = started.elapsed().as_nanos() as f64 / rounds as f64;
    println!("time: {each:.0} ns a request's start and end, at {n} sessions, each evicting one");
    drop(table);

    // A flood of 1,000,000 unique keys at a bound of 1,000.
    let region = Region::new(ALLOCATOR);
    let mut table = Table::new(Duration::from_secs(300), 1_000);
    let mut peak = 0i64;
    let flood = 1_000_000 / scale;
    for i in 0..flood {
        let (place, evicted) = table.start(key(i), &route, &tenant, at(i));
        drop(evicted);
        table.finish(&place, at(i), added(), None);
        if i % 10_000 == 0 {
            peak = peak.max(held(&region));
        }
    }
    println!(
        "flood: {flood} keys at max_sessions 1000: {} sessions held, {:.0} KiB held at the end, {:.0} KiB at most",
        table.len(),
        held(&region) as f64 / 1024.0,
        peak as f64 / 1024.0
    );
}
