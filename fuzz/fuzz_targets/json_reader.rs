//! The protocol classifiers and the pull JSON reader they walk events with
//! (`crates/meter/src/json/reader/`), on any bytes:
//!
//! - every `Api`'s `classify` on the body as one event (with an event name
//!   the input picks);
//! - the reader skipping the body accepts exactly what serde_json does
//!   (within the reader's nesting bound);
//! - the input's `Api` metering the body as a 200 response (`StreamMeter`:
//!   head, data in pieces, end) of the content type and encoding the input
//!   picks, with the `Recording` recorder: without an encoding, the pieces
//!   change nothing of what it counts.
//!
//! Input layout: `[api, how, cut, cut, body...]`; `api` modulo 10 picks the
//! `Api`, `how`'s bits 0-1 the content type, bits 2-4 the encoding (4 to 7:
//! gzip, deflate, br, zstd), bits 5-7 the event name.

#![no_main]

use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use meter::json::reader::{self, Reader};
use meter::{Api, Limits, Recording, StreamMeter, Summary};
use tokio::time::Instant;

const APIS: [Api; 10] = [
    Api::OpenAi,
    Api::Responses,
    Api::Anthropic,
    Api::Tgi,
    Api::Ollama,
    Api::LlamaCpp,
    Api::Gemini,
    Api::Sglang,
    Api::Triton,
    Api::Generate,
];

const CONTENT_TYPES: [&[u8]; 4] = [
    b"text/event-stream",
    b"application/x-ndjson",
    b"application/json",
    b"text/plain",
];

const ENCODINGS: [Option<&[u8]>; 8] = [
    None,
    None,
    None,
    None,
    Some(b"gzip"),
    Some(b"deflate"),
    Some(b"br"),
    Some(b"zstd"),
];

const NAMES: [&[u8]; 8] = [
    b"",
    b"message_start",
    b"content_block_delta",
    b"message_delta",
    b"error",
    b"response.output_text.delta",
    b"response.completed",
    b"response.failed",
];

/// What the meter counted, its timings left out (`Some` kept as `Some`).
#[derive(Debug, PartialEq)]
struct Counted {
    summary: Option<Summary>,
    finishes: u32,
    response_headers: bool,
    first_token: bool,
    first_visible_token: bool,
    gaps: usize,
    parse_errors: Vec<meter::ParseError>,
}

fn meter(api: Api, ct: &[u8], encoding: Option<&[u8]>, pieces: &[&[u8]]) -> Counted {
    let limits = Limits {
        // Decoded bodies are capped per frame at this: a smaller cap than
        // the default keeps a decompression bomb cheap.
        body: 1 << 20,
        ..Limits::default()
    };
    let t0 = Instant::now();
    let mut recording = Recording::default();
    {
        let mut m = StreamMeter::new(t0, api, limits, &mut recording);
        m.response_head(t0 + Duration::from_millis(1), 200, Some(ct), encoding);
        for (i, p) in pieces.iter().enumerate() {
            let now = t0 + Duration::from_millis(2 + i as u64);
            m.data(now, &Bytes::copy_from_slice(p));
        }
        m.end(t0 + Duration::from_secs(1));
    }
    let zero = |d: Option<Duration>| d.map(|_| Duration::ZERO);
    Counted {
        summary: recording.summary.map(|s| Summary {
            ttft: zero(s.ttft),
            ttft_visible: zero(s.ttft_visible),
            e2el: zero(s.e2el),
            elapsed: Duration::ZERO,
            tpot: zero(s.tpot),
            ..s
        }),
        finishes: recording.finishes,
        response_headers: recording.response_headers.is_some(),
        first_token: recording.first_token.is_some(),
        first_visible_token: recording.first_visible_token.is_some(),
        gaps: recording.gaps.len(),
        parse_errors: recording.parse_errors,
    }
}

fuzz_target!(|data: &[u8]| {
    let [api, how, c0, c1, body @ ..] = data else {
        return;
    };
    let api = APIS[usize::from(*api) % APIS.len()];
    let ct = CONTENT_TYPES[usize::from(how & 3)];
    let encoding = ENCODINGS[usize::from((how >> 2) & 7)];
    let name = NAMES[usize::from(how >> 5)];

    for a in APIS {
        let _ = a.classify(name, body);
    }

    // serde_json skips without a nesting bound; the reader refuses 128
    // levels (as serde_json's own trees do).
    let opens = body.iter().filter(|&&b| b == b'[' || b == b'{').count();
    if opens < 128 {
        let ours = reader::read(body, Reader::skip).is_ok();
        let theirs = serde_json::from_slice::<IgnoredAny>(body).is_ok();
        assert_eq!(ours, theirs, "the reader and serde_json disagree on JSON");
    }

    let whole = meter(api, ct, encoding, &[body]);
    assert_eq!(whole.finishes, 1, "finished once");
    let pieces = tokenmeter_fuzz::pieces([*c0, *c1], body);
    let cut = meter(api, ct, encoding, &pieces);
    assert_eq!(cut.finishes, 1, "finished once");
    if encoding.is_none() {
        assert_eq!(whole, cut, "the pieces changed what was metered");
    }
});
