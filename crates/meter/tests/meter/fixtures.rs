//! Every captured stream in `tests/data/streams` yields what
//! `expected.yaml` says, whole, cut at every byte offset, one byte at a
//! time, and cut at random: framing must never change the result. Each
//! fixture is served with the content type its file name implies
//! (`.sse`: `text/event-stream`, `.ndjson`: `application/x-ndjson`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use meter::{Api, Limits, Outcome, Recording, StreamMeter, Summary, TokenSource};
use serde::Deserialize;
use tokio::time::Instant;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    api: String,
    #[serde(default)]
    response_model: Option<String>,
    events: u64,
    token_events: u64,
    first_token_event: Option<u64>,
    first_visible_event: Option<u64>,
    #[serde(default)]
    terminal_event: Option<u64>,
    input: Option<u64>,
    output: Option<u64>,
    #[serde(default)]
    cached_input: Option<u64>,
    #[serde(default)]
    cache_creation_input: Option<u64>,
    #[serde(default)]
    reasoning: Option<u64>,
    output_source: Option<String>,
    outcome: String,
    #[serde(default)]
    queue_s: Option<f64>,
    #[serde(default)]
    prefill_s: Option<f64>,
    #[serde(default)]
    decode_s: Option<f64>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/streams")
}

fn expectations() -> BTreeMap<String, Expect> {
    let text = std::fs::read_to_string(data_dir().join("expected.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

fn api(name: &str) -> Api {
    match name {
        "openai" => Api::OpenAi,
        "responses" => Api::Responses,
        "anthropic" => Api::Anthropic,
        "tgi" => Api::Tgi,
        "ollama" => Api::Ollama,
        "llamacpp" => Api::LlamaCpp,
        "gemini" => Api::Gemini,
        "sglang" => Api::Sglang,
        "triton" => Api::Triton,
        "generate" => Api::Generate,
        other => panic!("unknown api {other}"),
    }
}

/// The content type a fixture is served with.
fn content_type(file: &str) -> &'static [u8] {
    if file.ends_with(".ndjson") {
        b"application/x-ndjson"
    } else {
        b"text/event-stream; charset=utf-8"
    }
}

/// Meters `pieces` as the frames of one 200 response of type `ct`.
fn meter(api: Api, ct: &[u8], pieces: &[&[u8]]) -> Recording {
    meter_encoded(api, ct, None, pieces)
}

fn meter_encoded(api: Api, ct: &[u8], encoding: Option<&[u8]>, pieces: &[&[u8]]) -> Recording {
    let mut recording = Recording::default();
    {
        let mut m = StreamMeter::new(Instant::now(), api, Limits::default(), &mut recording);
        m.response_head(Instant::now(), 200, Some(ct), encoding);
        for p in pieces {
            m.data(Instant::now(), &Bytes::copy_from_slice(p));
        }
        m.end(Instant::now());
    }
    recording
}

/// The one check every framing of every fixture goes through.
fn check(file: &str, how: &str, expect: &Expect, recording: &Recording) {
    let ctx = format!("{file} ({how})");
    assert_eq!(recording.finishes, 1, "{ctx}: finished once");
    assert!(
        recording.parse_errors.is_empty(),
        "{ctx}: {:?}",
        recording.parse_errors
    );
    let s: &Summary = recording.summary.as_ref().unwrap();
    assert_eq!(s.events, expect.events, "{ctx}: events");
    assert_eq!(s.token_events, expect.token_events, "{ctx}: token events");
    assert_eq!(
        s.first_token_event, expect.first_token_event,
        "{ctx}: first token event"
    );
    assert_eq!(
        s.first_visible_event, expect.first_visible_event,
        "{ctx}: first visible event"
    );
    assert_eq!(
        s.terminal_event, expect.terminal_event,
        "{ctx}: terminal event"
    );
    assert!(s.streamed, "{ctx}: streamed");
    assert_eq!(s.usage.input, expect.input, "{ctx}: input tokens");
    assert_eq!(
        s.response_model, expect.response_model,
        "{ctx}: response model"
    );
    assert_eq!(s.usage.output, expect.output, "{ctx}: output usage");
    assert_eq!(
        s.usage.cached_input, expect.cached_input,
        "{ctx}: cached input"
    );
    assert_eq!(
        s.usage.cache_creation_input, expect.cache_creation_input,
        "{ctx}: cache creation input"
    );
    assert_eq!(s.usage.reasoning, expect.reasoning, "{ctx}: reasoning");
    let source = s.output_tokens.map(|(_, src)| match src {
        TokenSource::Usage => "usage",
        TokenSource::Events => "events",
    });
    assert_eq!(
        source,
        expect.output_source.as_deref(),
        "{ctx}: output source"
    );
    if let Some((n, TokenSource::Usage)) = s.output_tokens {
        assert_eq!(Some(n), expect.output, "{ctx}: N");
    }
    let outcome = match s.outcome {
        Outcome::Ok => "ok",
        Outcome::UpstreamError => "upstream_error",
        other => panic!("{ctx}: unexpected outcome {other:?}"),
    };
    assert_eq!(outcome, expect.outcome, "{ctx}: outcome");
    for (part, got, want) in [
        ("queue", s.server.queue, expect.queue_s),
        ("prefill", s.server.prefill, expect.prefill_s),
        ("decode", s.server.decode, expect.decode_s),
    ] {
        // Read in the server's unit and divided once: within 1 ns.
        let same = match (got, want) {
            (Some(got), Some(want)) => (got - want).abs() < 1e-9,
            (got, want) => got.is_none() && want.is_none(),
        };
        assert!(same, "{ctx}: server {part}: {got:?}, expected {want:?}");
    }
    assert_eq!(
        recording.first_token.is_some(),
        expect.token_events > 0,
        "{ctx}: TTFT observed"
    );
    assert_eq!(
        recording.first_visible_token.is_some(),
        expect.first_visible_event.is_some(),
        "{ctx}: visible TTFT observed"
    );
    assert_eq!(
        s.ttft_visible.is_some(),
        expect.first_visible_event.is_some(),
        "{ctx}: visible TTFT in summary"
    );
    if let Some((n, TokenSource::Events)) = s.output_tokens {
        assert_eq!(n, expect.token_events, "{ctx}: N from events");
    }
    assert_eq!(
        recording.gaps.len() as u64,
        expect.token_events.saturating_sub(1),
        "{ctx}: one ITL per gap"
    );
}

/// A small deterministic generator, so a failing random cut can be replayed.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }
}

#[test]
fn every_fixture_yields_its_expectations_however_it_is_cut() {
    let all = expectations();
    assert!(!all.is_empty());
    for (file, expect) in &all {
        let bytes = std::fs::read(data_dir().join(file)).unwrap();
        let api = api(&expect.api);
        let ct = content_type(file);
        check(file, "whole", expect, &meter(api, ct, &[&bytes]));
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            check(
                file,
                &format!("cut at {cut}"),
                expect,
                &meter(api, ct, &[a, b]),
            );
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        check(
            file,
            "one byte at a time",
            expect,
            &meter(api, ct, &singles),
        );
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ bytes.len() as u64);
        for round in 0..200 {
            let mut pieces = Vec::new();
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let n = 1 + rng.next(rest.len().min(64));
                let (a, b) = rest.split_at(n);
                pieces.push(a);
                rest = b;
            }
            check(
                file,
                &format!("random round {round}"),
                expect,
                &meter(api, ct, &pieces),
            );
        }
    }
}

#[test]
fn every_fixture_file_has_an_expectation_or_is_listed_as_pending() {
    // A fixture whose protocol is not metered yet would be named here, so a
    // new fixture cannot go unchecked. Every protocol is metered now.
    let pending: [&str; 0] = [];
    let all = expectations();
    for entry in std::fs::read_dir(data_dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".sse") || name.ends_with(".ndjson") {
            assert!(
                all.contains_key(&name) || pending.contains(&name.as_str()),
                "{name} has no expectation"
            );
        }
    }
}

/// The fixture compressed as one stream: cuts then fall anywhere in it, so
/// the decoded text arrives in arbitrary pieces too.
fn compress(encoding: &str, bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match encoding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(bytes).unwrap();
            e.finish().unwrap()
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(bytes).unwrap();
            e.finish().unwrap()
        }
        "br" => {
            let mut out = Vec::new();
            {
                let mut e = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                e.write_all(bytes).unwrap();
            }
            out
        }
        "zstd" => zstd::encode_all(bytes, 3).unwrap(),
        other => panic!("{other}"),
    }
}

#[test]
fn compressed_fixtures_yield_the_same_however_they_are_cut() {
    for (file, expect) in &expectations() {
        let bytes = std::fs::read(data_dir().join(file)).unwrap();
        let api = api(&expect.api);
        for encoding in ["gzip", "deflate", "br", "zstd"] {
            let packed = compress(encoding, &bytes);
            let how = format!("{encoding}, whole");
            let recording = meter_encoded(
                api,
                content_type(file),
                Some(encoding.as_bytes()),
                &[&packed],
            );
            check(file, &how, expect, &recording);
            let mut rng = XorShift(0xA076_1D64_78BD_642F ^ packed.len() as u64);
            for round in 0..20 {
                let mut pieces = Vec::new();
                let mut rest = &packed[..];
                while !rest.is_empty() {
                    let n = 1 + rng.next(rest.len().min(40));
                    let (a, b) = rest.split_at(n);
                    pieces.push(a);
                    rest = b;
                }
                let how = format!("{encoding}, random round {round}");
                let recording =
                    meter_encoded(api, content_type(file), Some(encoding.as_bytes()), &pieces);
                check(file, &how, expect, &recording);
            }
        }
    }
}
