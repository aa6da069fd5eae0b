//! The per-chunk metering path, on captured streams of each OpenAI-compatible
//! server in `tests/data/streams/`: SSE framing, event classification, the
//! clock reading and the Prometheus observations, as the proxy runs them for
//! each frame (`StreamMeter::data` with `Instant::now()`), one event per
//! frame. Criterion reports time per chunk (`Throughput::Elements`).
//!
//! `cargo bench --bench meter` runs it; `cargo bench --bench meter -- --quick`
//! for a short run. The framer and the classifier are also measured alone.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prometheus::Registry;
use tokenmeter::config::MetricsSettings;
use tokenmeter::meter::sse::SseFramer;
use tokenmeter::meter::{Api, Limits, StreamMeter, openai};
use tokenmeter::metrics::Metrics;
use tokio::time::Instant;

/// The OpenAI-compatible captures (the protocols tokenmeter meters today).
const FIXTURES: &[&str] = &[
    "openai-chat-basic-usage.sse",
    "openai-chat-logprobs.sse",
    "openai-chat-n3.sse",
    "openai-chat-parallel-tool-calls.sse",
    "deepseek-chat-text.sse",
    "groq-chat-text.sse",
    "openrouter-chat-text.sse",
    "llamacpp-completion.sse",
];

/// One frame per SSE event, as vLLM and the simulator send them.
fn frames(name: &str) -> Vec<Bytes> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/streams")
        .join(name);
    let bytes = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    while let Some(at) = rest.windows(2).position(|w| w == b"\n\n") {
        out.push(Bytes::copy_from_slice(&rest[..at + 2]));
        rest = &rest[at + 2..];
    }
    if !rest.is_empty() {
        out.push(Bytes::copy_from_slice(rest));
    }
    out
}

fn meter_path(c: &mut Criterion) {
    let metrics = Metrics::new(&MetricsSettings::default(), &[], Registry::new()).unwrap();
    let mut group = c.benchmark_group("meter_data");
    for name in FIXTURES {
        let frames = frames(name);
        group.throughput(Throughput::Elements(frames.len() as u64));
        // One meter for the whole run: the steady state of a long stream,
        // where every frame goes through framing, classification, the clock
        // and (for token events) the ITL histogram.
        let recorder = metrics.request("bench", Some("bench-model"), None, None);
        let mut meter = StreamMeter::new(Instant::now(), Api::OpenAi, Limits::default(), recorder);
        meter.response_head(Instant::now(), 200, Some(b"text/event-stream"), None);
        group.bench_function(*name, |b| {
            b.iter(|| {
                for frame in &frames {
                    meter.data(Instant::now(), black_box(frame));
                }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("sse_framing");
    for name in FIXTURES {
        let frames = frames(name);
        group.throughput(Throughput::Elements(frames.len() as u64));
        let mut framer = SseFramer::new(Limits::default().event);
        group.bench_function(*name, |b| {
            b.iter(|| {
                for frame in &frames {
                    framer.feed(black_box(frame), &mut |ev| {
                        black_box(ev.is_ok());
                    });
                }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("openai_classify");
    for name in FIXTURES {
        let frames = frames(name);
        let datas: Vec<Vec<u8>> = frames
            .iter()
            .filter_map(|f| {
                let line = f.strip_prefix(b"data: ")?;
                Some(line.strip_suffix(b"\n\n").unwrap_or(line).to_vec())
            })
            .collect();
        group.throughput(Throughput::Elements(datas.len() as u64));
        group.bench_function(*name, |b| {
            b.iter(|| {
                for data in &datas {
                    let _ = black_box(openai::classify(b"", black_box(data)));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, meter_path);
criterion_main!(benches);
