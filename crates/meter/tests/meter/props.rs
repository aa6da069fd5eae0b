//! Property tests of metering, for every protocol:
//! - any sequence of valid events, rendered in the protocol's wire format
//!   and cut into frames at random, yields exactly the metering result of
//!   the same bytes in one frame, and that result is the one the sequence
//!   implies (token events, first token, first visible token, last usage);
//! - arbitrary bytes, under any API and content type, never panic and always
//!   finish the request exactly once.
//!
//! Case counts are kept modest so the suite stays fast in debug builds.

use bytes::Bytes;
use meter::{Api, Limits, Outcome, Recording, StreamMeter, Summary, Usage};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::json;
use tokio::time::Instant;

/// One step of a generated stream.
#[derive(Debug, Clone)]
enum Step {
    /// Visible output (may be empty: then not a token event).
    Text(String),
    /// Reasoning output (visible for protocols without reasoning).
    Reasoning(String),
    /// A cumulative usage report: (input, output).
    Usage(u64, u64),
    /// A keep-alive (SSE comment, Anthropic ping, blank NDJSON line).
    KeepAlive,
}

fn step() -> impl Strategy<Value = Step> {
    // Text with quotes, backslashes, newlines, CR and multi-byte characters.
    let text = prop::collection::vec(
        prop_oneof![
            Just('a'),
            Just(' '),
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('\r'),
            Just('é'),
            Just('日'),
            Just('{'),
            Just(']'),
            any::<char>(),
        ],
        0..6,
    )
    .prop_map(|cs| cs.into_iter().collect::<String>());
    prop_oneof![
        4 => text.clone().prop_map(Step::Text),
        2 => text.prop_map(Step::Reasoning),
        1 => (0u64..100_000, 0u64..100_000).prop_map(|(i, o)| Step::Usage(i, o)),
        1 => Just(Step::KeepAlive),
    ]
}

/// The wire formats under test.
#[derive(Debug, Clone, Copy)]
enum Wire {
    OpenAi,
    Responses,
    Anthropic,
    Tgi,
    Ollama,
    LlamaCpp,
    GeminiSse,
    GeminiArray,
    Sglang,
    Triton,
}

impl Wire {
    const ALL: [Wire; 10] = [
        Wire::OpenAi,
        Wire::Responses,
        Wire::Anthropic,
        Wire::Tgi,
        Wire::Ollama,
        Wire::LlamaCpp,
        Wire::GeminiSse,
        Wire::GeminiArray,
        Wire::Sglang,
        Wire::Triton,
    ];

    fn api(self) -> Api {
        match self {
            Wire::OpenAi => Api::OpenAi,
            Wire::Responses => Api::Responses,
            Wire::Anthropic => Api::Anthropic,
            Wire::Tgi => Api::Tgi,
            Wire::Ollama => Api::Ollama,
            Wire::LlamaCpp => Api::LlamaCpp,
            Wire::GeminiSse | Wire::GeminiArray => Api::Gemini,
            Wire::Sglang => Api::Sglang,
            Wire::Triton => Api::Triton,
        }
    }

    fn content_type(self) -> &'static [u8] {
        match self {
            Wire::Ollama => b"application/x-ndjson",
            Wire::GeminiArray => b"application/json; charset=UTF-8",
            _ => b"text/event-stream",
        }
    }

    /// Whether the protocol tells reasoning from visible output.
    fn has_reasoning(self) -> bool {
        matches!(
            self,
            Wire::OpenAi
                | Wire::Responses
                | Wire::Anthropic
                | Wire::Ollama
                | Wire::GeminiSse
                | Wire::GeminiArray
        )
    }
}

/// What a sequence of steps must yield.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    token_events: u64,
    first_token_event: Option<u64>,
    first_visible_event: Option<u64>,
    usage: Option<(u64, u64)>,
}

/// Renders `steps` in `wire`'s format, and what metering them must yield.
fn render(wire: Wire, steps: &[Step], crlf: bool) -> (Vec<u8>, Expected) {
    let nl = if crlf || matches!(wire, Wire::GeminiSse) {
        "\r\n"
    } else {
        "\n"
    };
    let mut out = String::new();
    let mut elements: Vec<String> = Vec::new();
    let mut exp = Expected::default();
    let mut events = 0u64;
    let mut cumulative = String::new();
    let mut completion = 0u64;
    let mut sse = |out: &mut String, name: Option<&str>, data: &str| {
        if let Some(n) = name {
            out.push_str(&format!("event: {n}{nl}"));
        }
        out.push_str(&format!("data: {data}{nl}{nl}"));
    };
    for s in steps {
        // (the event's data, whether it is a token event, whether visible)
        let (text, reasoning) = match s {
            Step::Text(t) => (Some(t.as_str()), false),
            Step::Reasoning(t) => (Some(t.as_str()), wire.has_reasoning()),
            _ => (None, false),
        };
        let mut token = text.is_some_and(|t| !t.is_empty());
        let ev: Option<(Option<&str>, String)> = match (s, text) {
            (Step::KeepAlive, _) => {
                match wire {
                    Wire::Ollama => out.push_str(nl),
                    Wire::GeminiArray => out.push(' '),
                    Wire::Anthropic => {
                        sse(&mut out, Some("ping"), r#"{"type": "ping"}"#);
                        events += 1;
                    }
                    _ => out.push_str(&format!(": keep-alive{nl}{nl}")),
                }
                None
            }
            (Step::Usage(i, o), _) => {
                exp.usage = Some((*i, *o));
                let data = match wire {
                    Wire::OpenAi => {
                        json!({"choices": [], "usage": {"prompt_tokens": i, "completion_tokens": o}})
                    }
                    Wire::Responses => {
                        json!({"type": "response.in_progress", "response": {"usage": {"input_tokens": i, "output_tokens": o}}})
                    }
                    Wire::Anthropic => {
                        json!({"type": "message_delta", "delta": {}, "usage": {"input_tokens": i, "output_tokens": o}})
                    }
                    Wire::Tgi => {
                        // TGI reports details only with a token.
                        token = true;
                        json!({"token": {"id": 2, "text": "", "special": true}, "details": {"generated_tokens": o, "input_length": i}})
                    }
                    Wire::Ollama => {
                        json!({"response": "", "done": true, "eval_count": o, "prompt_eval_count": i})
                    }
                    Wire::LlamaCpp => {
                        json!({"content": "", "stop": true, "tokens_predicted": o, "tokens_evaluated": i})
                    }
                    Wire::GeminiSse | Wire::GeminiArray => {
                        json!({"candidates": [], "usageMetadata": {"promptTokenCount": i, "candidatesTokenCount": o}})
                    }
                    Wire::Sglang => {
                        completion = *o;
                        json!({"text": cumulative, "meta_info": {"prompt_tokens": i, "completion_tokens": o}})
                    }
                    Wire::Triton => {
                        // Triton reports no usage.
                        exp.usage = None;
                        json!({"model_name": "m", "text_output": ""})
                    }
                };
                Some((None, data.to_string()))
            }
            (_, Some(t)) => {
                let data = match wire {
                    Wire::OpenAi if reasoning => {
                        json!({"choices": [{"index": 0, "delta": {"reasoning_content": t}}]})
                    }
                    Wire::OpenAi => json!({"choices": [{"index": 0, "delta": {"content": t}}]}),
                    Wire::Responses => {
                        let ty = if reasoning {
                            "response.reasoning_text.delta"
                        } else {
                            "response.output_text.delta"
                        };
                        return_named(&mut sse, &mut out, ty, json!({"type": ty, "delta": t}));
                        events += 1;
                        exp_token(&mut exp, token, !reasoning, events - 1);
                        continue;
                    }
                    Wire::Anthropic => {
                        let delta = if reasoning {
                            json!({"type": "thinking_delta", "thinking": t})
                        } else {
                            json!({"type": "text_delta", "text": t})
                        };
                        return_named(
                            &mut sse,
                            &mut out,
                            "content_block_delta",
                            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
                        );
                        events += 1;
                        exp_token(&mut exp, token, !reasoning, events - 1);
                        continue;
                    }
                    Wire::Tgi => {
                        // One event per token: every event is a token event.
                        token = true;
                        json!({"index": 1, "token": {"id": 7, "text": t, "logprob": -0.5, "special": false}, "generated_text": null, "details": null})
                    }
                    Wire::Ollama if reasoning => {
                        json!({"model": "m", "response": "", "thinking": t, "done": false})
                    }
                    Wire::Ollama => json!({"model": "m", "response": t, "done": false}),
                    Wire::LlamaCpp => json!({"content": t, "stop": false, "id_slot": 0}),
                    Wire::GeminiSse | Wire::GeminiArray => {
                        json!({"candidates": [{"content": {"parts": [{"text": t, "thought": reasoning}], "role": "model"}, "index": 0}]})
                    }
                    Wire::Sglang => {
                        cumulative.push_str(t);
                        completion += 1;
                        // Every event reports the cumulative count.
                        if let Some((i, _)) = exp.usage {
                            exp.usage = Some((i, completion));
                        }
                        json!({"text": cumulative, "meta_info": {"completion_tokens": completion}})
                    }
                    Wire::Triton => json!({"model_name": "m", "text_output": t}),
                };
                Some((None, data.to_string()))
            }
            _ => None,
        };
        let Some((name, data)) = ev else { continue };
        match wire {
            Wire::Ollama => {
                out.push_str(&data);
                out.push_str(nl);
            }
            Wire::GeminiArray => elements.push(data),
            _ => sse(&mut out, name, &data),
        }
        events += 1;
        exp_token(&mut exp, token, !reasoning, events - 1);
    }
    if matches!(wire, Wire::OpenAi | Wire::Sglang) {
        sse(&mut out, None, "[DONE]");
    }
    if matches!(wire, Wire::GeminiArray) {
        out = format!("[{}]", elements.join(",\r\n")) + &out;
    }
    (out.into_bytes(), exp)
}

fn return_named(
    sse: &mut impl FnMut(&mut String, Option<&str>, &str),
    out: &mut String,
    name: &str,
    data: serde_json::Value,
) {
    sse(out, Some(name), &data.to_string());
}

fn exp_token(exp: &mut Expected, token: bool, visible: bool, index: u64) {
    if !token {
        return;
    }
    exp.token_events += 1;
    exp.first_token_event.get_or_insert(index);
    if visible {
        exp.first_visible_event.get_or_insert(index);
    }
}

/// Meters `pieces` as the frames of one 200 response of type `ct`.
fn meter(api: Api, ct: &[u8], pieces: &[&[u8]]) -> Recording {
    let mut recording = Recording::default();
    {
        let mut m = StreamMeter::new(Instant::now(), api, Limits::default(), &mut recording);
        m.response_head(Instant::now(), 200, Some(ct), None);
        for p in pieces {
            m.data(Instant::now(), &Bytes::copy_from_slice(p));
        }
        m.end(Instant::now());
    }
    recording
}

/// Everything of a recording that does not depend on the clock.
type Key = (
    u64,
    u64,
    Option<u64>,
    Option<u64>,
    Usage,
    Outcome,
    Option<(u64, meter::TokenSource)>,
    u32,
    usize,
    bool,
    bool,
    bool,
);

fn key(recording: &Recording) -> Key {
    assert_eq!(recording.finishes, 1);
    let s: &Summary = recording.summary.as_ref().unwrap();
    (
        s.events,
        s.token_events,
        s.first_token_event,
        s.first_visible_event,
        s.usage,
        s.outcome,
        s.output_tokens,
        s.parse_errors,
        recording.gaps.len(),
        recording.first_token.is_some(),
        recording.first_visible_token.is_some(),
        s.streamed,
    )
}

/// Splits `bytes` at the given (unsorted, possibly repeated) points.
fn cut<'a>(bytes: &'a [u8], points: &[Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = points.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for p in at {
        pieces.push(&bytes[from..p]);
        from = p;
    }
    pieces.push(&bytes[from..]);
    pieces
}

fn check_wire(wire: Wire, steps: &[Step], crlf: bool, points: &[Index]) {
    let (bytes, exp) = render(wire, steps, crlf);
    let api = wire.api();
    let ct = wire.content_type();
    let whole = meter(api, ct, &[&bytes]);
    let k = key(&whole);
    let s = whole.summary.as_ref().unwrap();
    let ctx = format!("{wire:?} {}", String::from_utf8_lossy(&bytes));
    assert_eq!(s.parse_errors, 0, "{ctx}");
    assert_eq!(s.outcome, Outcome::Ok, "{ctx}");
    assert_eq!(s.token_events, exp.token_events, "{ctx}");
    assert_eq!(s.first_token_event, exp.first_token_event, "{ctx}");
    assert_eq!(s.first_visible_event, exp.first_visible_event, "{ctx}");
    assert_eq!(
        s.usage.input.zip(s.usage.output),
        exp.usage,
        "{ctx}: last usage wins"
    );
    assert_eq!(
        key(&meter(api, ct, &cut(&bytes, points))),
        k,
        "{ctx}: random cut"
    );
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(key(&meter(api, ct, &singles)), k, "{ctx}: byte by byte");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_valid_stream_meters_the_same_however_it_is_framed(
        steps in prop::collection::vec(step(), 0..12),
        crlf in any::<bool>(),
        points in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        for wire in Wire::ALL {
            check_wire(wire, &steps, crlf, &points);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..400),
            // Mostly structure: reaches deeper into framers and parsers.
            prop::collection::vec(
                prop::sample::select(&b"{}[]\":,\\ \n\r:datevnx0123textokn"[..]),
                0..400,
            ),
        ],
        points in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        let apis = [
            Api::OpenAi, Api::Responses, Api::Anthropic, Api::Tgi, Api::Ollama,
            Api::LlamaCpp, Api::Gemini, Api::Sglang, Api::Triton, Api::Generate,
            Api::NonGenerating,
        ];
        let cts: [&[u8]; 4] = [
            b"text/event-stream",
            b"application/x-ndjson",
            b"application/json",
            b"text/plain",
        ];
        for api in apis {
            for ct in cts {
                let whole = meter(api, ct, &[&bytes]);
                let cut = meter(api, ct, &cut(&bytes, &points));
                prop_assert_eq!(key(&whole), key(&cut));
            }
        }
    }
}
