//! The per-chunk metering path, on the captured stream of every API in
//! `tests/data/streams/`: framing (SSE or NDJSON), event classification, the
//! clock reading and the Prometheus and live-window observations, as the
//! proxy runs them for each frame (`StreamMeter::data` with `Instant::now()`),
//! one event per frame. Criterion reports time per chunk
//! (`Throughput::Elements`). `meter_data_interleaved` is the same path with
//! a thousand streams' chunks interleaved.
//!
//! `cargo bench --bench meter` runs it; `cargo bench --bench meter -- --quick`
//! for a short run. The framers, the classifiers and the JSON reader
//! skipping each event are also measured alone, and (`request_model`) the
//! read of a request body's `model`, against the `serde_json` parse it
//! replaced.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use meter::json::{Reader, reader};
use meter::ndjson::NdjsonFramer;
use meter::sse::{Event, FrameError, SseFramer};
use meter::{Api, Limits, StreamMeter};
use prometheus::Registry;
use tokenmeter::config::MetricsSettings;
use tokenmeter::observe::metrics::Metrics;
use tokenmeter::observe::{Observers, RequestObserver, Started};
use tokio::time::Instant;

/// Every capture, with the API it is metered as (as in `expected.yaml`).
const FIXTURES: &[(&str, Api)] = &[
    ("openai-chat-basic-usage.sse", Api::OpenAi),
    ("openai-chat-logprobs.sse", Api::OpenAi),
    ("openai-chat-n3.sse", Api::OpenAi),
    ("openai-chat-parallel-tool-calls.sse", Api::OpenAi),
    ("deepseek-chat-text.sse", Api::OpenAi),
    ("groq-chat-text.sse", Api::OpenAi),
    ("openrouter-chat-text.sse", Api::OpenAi),
    ("llamacpp-completion.sse", Api::LlamaCpp),
    ("openai-responses-text.sse", Api::Responses),
    ("openai-responses-error.sse", Api::Responses),
    ("anthropic-messages-text.sse", Api::Anthropic),
    ("anthropic-messages-thinking-refusal.sse", Api::Anthropic),
    ("anthropic-messages-tools.sse", Api::Anthropic),
    ("tgi-generate-stream.sse", Api::Tgi),
    ("gemini-stream-text.sse", Api::Gemini),
    ("ollama-chat.ndjson", Api::Ollama),
    ("ollama-generate.ndjson", Api::Ollama),
];

fn is_sse(name: &str) -> bool {
    name.ends_with(".sse")
}

/// One frame per event (SSE) or line (NDJSON), as servers send them.
fn frames(name: &str) -> Vec<Bytes> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/streams")
        .join(name);
    let bytes = std::fs::read(path).unwrap();
    let ends: &[&[u8]] = if is_sse(name) {
        &[b"\r\n\r\n", b"\n\n"]
    } else {
        &[b"\n"]
    };
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    loop {
        let end = ends
            .iter()
            .filter_map(|e| {
                let at = rest.windows(e.len()).position(|w| w == *e)?;
                Some(at + e.len())
            })
            .min();
        let Some(end) = end else { break };
        out.push(Bytes::copy_from_slice(&rest[..end]));
        rest = &rest[end..];
    }
    if !rest.is_empty() {
        out.push(Bytes::copy_from_slice(rest));
    }
    out
}

/// The (event name, data) of every event of a capture, framed once.
fn events(name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut on = |ev: Result<Event<'_>, FrameError>| {
        if let Ok(ev) = ev {
            out.push((ev.name.to_vec(), ev.data.to_vec()));
        }
    };
    for frame in frames(name) {
        if is_sse(name) {
            SseFramer::new(Limits::default().event).feed(&frame, &mut on);
        } else {
            NdjsonFramer::new(Limits::default().event).feed(&frame, &mut on);
        }
    }
    out
}

/// What the proxy does per frame. Never inlined, so that
/// `benches/instructions.sh` finds its cost and call count under callgrind
/// whatever the compiler inlines inside it.
#[inline(never)]
fn meter_frame<R: meter::Recorder>(meter: &mut StreamMeter<R>, frame: &Bytes) {
    meter.data(Instant::now(), frame);
}

/// A meter of one streamed response of the capture `name`, past its head.
fn streaming_meter(observers: &Observers, name: &str, api: Api) -> StreamMeter<RequestObserver> {
    let (parts, ()) = http::Request::post("/v1/chat/completions")
        .body(())
        .unwrap()
        .into_parts();
    let config = tokenmeter::config::Config::parse(
        "routes:\n  - name: bench\n    upstream: http://127.0.0.1:8000\n",
        "tokenmeter.yaml",
        &tokenmeter::config::Overrides::default(),
    )
    .unwrap();
    let facts = meter::RequestFacts {
        model: Some("bench-model".to_owned()),
        ..Default::default()
    };
    let recorder = observers.request(Started {
        route: &config.routes[0],
        api,
        body: Some(&facts),
        at: Instant::now(),
        parts: &parts,
        client: "127.0.0.1:1".parse().unwrap(),
        trace: None,
    });
    let mut meter = StreamMeter::new(Instant::now(), api, Limits::default(), recorder);
    let content_type: &[u8] = if is_sse(name) {
        b"text/event-stream"
    } else {
        b"application/x-ndjson"
    };
    meter.response_head(Instant::now(), 200, Some(content_type), None);
    meter
}

/// Streams metered at once in `meter_data_interleaved`.
const INTERLEAVED: usize = 1000;

fn meter_path(c: &mut Criterion) {
    let metrics = Metrics::new(&MetricsSettings::default(), &[], Registry::new()).unwrap();
    let observers = Observers::new(Arc::new(metrics), None, None);
    let mut group = c.benchmark_group("meter_data");
    for &(name, api) in FIXTURES {
        let frames = frames(name);
        group.throughput(Throughput::Elements(frames.len() as u64));
        // One meter for the whole run: the steady state of a long stream,
        // where every frame goes through framing, classification, the clock
        // and (for token events) the ITL histogram.
        let mut meter = streaming_meter(&observers, name, api);
        group.bench_function(name, |b| {
            b.iter(|| {
                for frame in &frames {
                    meter_frame(&mut meter, black_box(frame));
                }
            })
        });
    }
    group.finish();

    // The same path with a thousand streams' chunks interleaved, as a proxy
    // meters them at 1,000 concurrent streams: each frame goes to every
    // meter in turn, so each meter's state (framer, protocol state, ITL
    // sketch) has been pushed out of the nearest caches by the other
    // streams' since its last chunk. The difference from `meter_data` is
    // what the cache costs per chunk.
    let mut group = c.benchmark_group("meter_data_interleaved");
    for &(name, api) in FIXTURES {
        let frames = frames(name);
        group.throughput(Throughput::Elements((frames.len() * INTERLEAVED) as u64));
        group.bench_function(name, |b| {
            // Made here, where criterion's filter has chosen this capture,
            // so that a profile of another benchmark does not count them.
            let mut meters: Vec<_> = (0..INTERLEAVED)
                .map(|_| streaming_meter(&observers, name, api))
                .collect();
            b.iter(|| {
                for frame in &frames {
                    for meter in &mut meters {
                        meter_frame(meter, black_box(frame));
                    }
                }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("framing");
    for &(name, _) in FIXTURES {
        let frames = frames(name);
        group.throughput(Throughput::Elements(frames.len() as u64));
        let limit = Limits::default().event;
        let (mut sse, mut ndjson) = (SseFramer::new(limit), NdjsonFramer::new(limit));
        group.bench_function(name, |b| {
            b.iter(|| {
                for frame in &frames {
                    let on = &mut |ev: Result<Event<'_>, FrameError>| {
                        black_box(ev.is_ok());
                    };
                    if is_sse(name) {
                        sse.feed(black_box(frame), on);
                    } else {
                        ndjson.feed(black_box(frame), on);
                    }
                }
            })
        });
    }
    group.finish();

    // The reader skipping each event without looking at it: the floor of any
    // classifier built on it.
    let mut group = c.benchmark_group("skip");
    for &(name, _) in FIXTURES {
        let events = events(name);
        group.throughput(Throughput::Elements(events.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                for (_, data) in &events {
                    let _ = black_box(reader::read(black_box(data), Reader::skip));
                }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("classify");
    for &(name, api) in FIXTURES {
        let events = events(name);
        group.throughput(Throughput::Elements(events.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                for (event, data) in &events {
                    let _ = black_box(api.classify(black_box(event), black_box(data)));
                }
            })
        });
    }
    group.finish();
}

/// A chat completion request whose messages hold `content_bytes` of text
/// (with the quotes and newlines a prompt has), `model` after them.
fn chat_request(content_bytes: usize) -> Vec<u8> {
    let line = r#"Summarise the \"quarterly\" report below.\nRevenue grew 12 % on the year; "#;
    let mut content = String::new();
    while content.len() < content_bytes {
        content.push_str(line);
    }
    format!(
        r#"{{"messages":[{{"role":"system","content":"You are a careful analyst."}},{{"role":"user","content":"{content}"}}],"model":"llama-3.1-70b-instruct","stream":true,"stream_options":{{"include_usage":true}},"max_tokens":512}}"#
    )
    .into_bytes()
}

/// The request body's `model`, read before the request goes upstream (on
/// the TTFT path): the metering reader against the `serde_json` parse it
/// replaced, side by side, on a short prompt and a long one.
fn request_model(c: &mut Criterion) {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        model: Option<std::borrow::Cow<'a, str>>,
    }
    let mut group = c.benchmark_group("request_model");
    for (name, body) in [
        ("short", chat_request(200)),
        ("100k", chat_request(100_000)),
    ] {
        assert_eq!(
            meter::request_model(&body).as_deref(),
            Some("llama-3.1-70b-instruct")
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("reader/{name}"), |b| {
            b.iter(|| black_box(meter::request_model(black_box(&body))))
        });
        group.bench_function(format!("serde_json/{name}"), |b| {
            b.iter(|| {
                let head: Option<Head<'_>> = serde_json::from_slice(black_box(&body)).ok();
                black_box(
                    head.and_then(|h| h.model)
                        .map(|m| m.chars().take(200).collect::<String>()),
                )
            })
        });
    }
    group.finish();
}

/// One pass for a request body's model and turn, against the model alone,
/// on a 1 MB prompt of 500 messages (an agent's long session).
fn read_request(c: &mut Criterion) {
    let text = "x".repeat(2_000);
    let mut body = String::from(r#"{"model":"llama-3.1-70b-instruct","stream":true,"messages":["#);
    for i in 0..500 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            r#"{{"role":"{role}","content":"{text} \"{i}\""}}"#
        ));
    }
    body.push_str(r#",{"role":"tool","tool_call_id":"c","content":"done"}]}"#);
    let body = body.into_bytes();
    assert!(body.len() > 1_000_000);
    let facts = meter::read_request(meter::Api::OpenAi, &body);
    assert_eq!(facts.turn, meter::Turn::ToolResult);
    let mut group = c.benchmark_group("read_request");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("model_and_turn/1MB_500_messages", |b| {
        b.iter(|| black_box(meter::read_request(meter::Api::OpenAi, black_box(&body))))
    });
    group.bench_function("model_only/1MB_500_messages", |b| {
        b.iter(|| black_box(meter::request_model(black_box(&body))))
    });
    group.finish();
}

criterion_group!(benches, meter_path, request_model, read_request);
criterion_main!(benches);
