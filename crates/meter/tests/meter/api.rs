//! How a request's API is told from its path, how the response's content
//! type decides the framing, and what non-streamed bodies of every API
//! yield (token counts, no TTFT).

use bytes::Bytes;
use http::Method;
use meter::{Api, Limits, Outcome, ParseError, Recording, StreamMeter, Summary, TokenSource};
use tokio::time::Instant;

fn meter(api: Api, ct: Option<&[u8]>, pieces: &[&[u8]]) -> Recording {
    let mut recording = Recording::default();
    {
        let mut m = StreamMeter::new(Instant::now(), api, Limits::default(), &mut recording);
        m.response_head(Instant::now(), 200, ct, None);
        for p in pieces {
            m.data(Instant::now(), &Bytes::copy_from_slice(p));
        }
        m.end(Instant::now());
    }
    recording
}

fn summary(t: &Recording) -> &Summary {
    assert_eq!(t.finishes, 1);
    t.summary.as_ref().unwrap()
}

#[test]
fn api_is_detected_from_method_and_path() {
    let post = Method::POST;
    for (path, api) in [
        ("/v1/chat/completions", Some(Api::OpenAi)),
        ("/team/v1/completions/", Some(Api::OpenAi)),
        ("/v1/responses", Some(Api::Responses)),
        ("/v1/responses/resp_123", None),
        ("/v1/messages", Some(Api::Anthropic)),
        ("/v1/messages/count_tokens", None),
        ("/generate_stream", Some(Api::Tgi)),
        ("/generate", Some(Api::Generate)),
        ("/api/generate", Some(Api::Ollama)),
        ("/api/chat", Some(Api::Ollama)),
        ("/completion", Some(Api::LlamaCpp)),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            Some(Api::Gemini),
        ),
        (
            "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent",
            Some(Api::Gemini),
        ),
        ("/v2/models/ensemble/generate_stream", Some(Api::Triton)),
        ("/v2/models/ensemble/versions/3/generate", Some(Api::Triton)),
        ("/v1/embeddings", Some(Api::NonGenerating)),
        ("/api/embed", Some(Api::NonGenerating)),
        ("/embedding", Some(Api::NonGenerating)),
        (
            "/v1beta/models/text-embedding-004:embedContent",
            Some(Api::NonGenerating),
        ),
        ("/v2/rerank", Some(Api::NonGenerating)),
        ("/score", Some(Api::NonGenerating)),
        ("/tokenize", Some(Api::NonGenerating)),
        ("/v1/models", None),
        ("/health", None),
        ("/", None),
    ] {
        assert_eq!(Api::detect(&post, path), api, "{path}");
    }
    // A route whose protocol is fixed reads the calls that generate
    // nothing as such, and everything else as its protocol.
    assert_eq!(
        Api::OpenAi.on_route(&post, "/v1/embeddings"),
        Api::NonGenerating
    );
    assert_eq!(
        Api::OpenAi.on_route(&post, "/v1/chat/completions"),
        Api::OpenAi
    );
    assert_eq!(
        Api::OpenAi.on_route(&Method::GET, "/v1/embeddings"),
        Api::OpenAi
    );
    // Only POST is inference: OpenAI's GET /v1/chat/completions lists stored
    // completions.
    assert_eq!(Api::detect(&Method::GET, "/v1/chat/completions"), None);
    assert_eq!(Api::detect(&Method::GET, "/api/chat"), None);
}

#[test]
fn content_type_decides_the_framing() {
    let line = b"{\"response\":\"A\",\"done\":false}\n{\"response\":\"\",\"done\":true,\"eval_count\":3}\n";
    // Ollama's NDJSON is read whatever it is labelled, but JSON is one body.
    for ct in [
        Some(&b"application/x-ndjson"[..]),
        Some(b"text/plain; charset=utf-8"),
        None,
    ] {
        let t = meter(Api::Ollama, ct, &[line]);
        let s = summary(&t);
        assert!(s.streamed, "{ct:?}");
        assert_eq!(s.events, 2);
        assert_eq!(s.token_events, 1);
        assert_eq!(s.output_tokens, Some((3, TokenSource::Usage)));
    }
    // NDJSON is NDJSON for any API.
    let t = meter(
        Api::LlamaCpp,
        Some(b"application/jsonl"),
        &[b"{\"content\":\"x\"}\n"],
    );
    assert_eq!(summary(&t).token_events, 1);
    // Other APIs do not read unknown types.
    let t = meter(Api::OpenAi, Some(b"text/plain"), &[b"data: {}\n\n"]);
    assert!(!summary(&t).streamed);
    assert_eq!(summary(&t).events, 0);
}

#[test]
fn non_streamed_bodies_yield_token_counts_and_no_ttft() {
    let cases: [(Api, &str, Option<u64>, Option<u64>); 10] = [
        (
            Api::OpenAi,
            r#"{"object":"chat.completion","choices":[{"message":{"content":"Hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
            Some(5),
            Some(2),
        ),
        (
            Api::Responses,
            r#"{"object":"response","status":"completed","error":null,"output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":9,"output_tokens":4,"output_tokens_details":{"reasoning_tokens":1}}}"#,
            Some(9),
            Some(4),
        ),
        (
            Api::Anthropic,
            r#"{"type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":6}}"#,
            Some(100),
            Some(6),
        ),
        (
            Api::Tgi,
            r#"{"generated_text":"Hi","details":{"finish_reason":"length","generated_tokens":7,"seed":null,"prefill":[],"tokens":[]}}"#,
            None,
            Some(7),
        ),
        (
            Api::Ollama,
            r#"{"model":"m","response":"Hi","done":true,"prompt_eval_count":11,"eval_count":8}"#,
            Some(11),
            Some(8),
        ),
        (
            Api::LlamaCpp,
            r#"{"content":"Hi","stop":true,"tokens_predicted":3,"tokens_evaluated":12}"#,
            Some(12),
            Some(3),
        ),
        (
            Api::Gemini,
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"thoughtsTokenCount":5}}"#,
            Some(4),
            Some(7),
        ),
        (
            Api::Sglang,
            r#"{"text":"Hi","meta_info":{"prompt_tokens":6,"completion_tokens":2,"cached_tokens":1}}"#,
            Some(6),
            Some(2),
        ),
        (
            Api::Generate,
            r#"{"text":"Hi","meta_info":{"prompt_tokens":6,"completion_tokens":2}}"#,
            Some(6),
            Some(2),
        ),
        (
            Api::Generate,
            r#"{"generated_text":"Hi","details":{"generated_tokens":7}}"#,
            None,
            Some(7),
        ),
    ];
    for (api, body, input, output) in cases {
        let bytes = body.as_bytes();
        let (a, b) = bytes.split_at(bytes.len() / 2);
        let t = meter(api, Some(b"application/json"), &[a, b]);
        let s = summary(&t);
        assert_eq!(s.outcome, Outcome::Ok, "{api:?}");
        assert!(!s.streamed, "{api:?}");
        assert_eq!(s.parse_errors, 0, "{api:?}");
        assert_eq!((s.usage.input, s.usage.output), (input, output), "{api:?}");
        assert_eq!(s.output_tokens.map(|(n, _)| n), output, "{api:?}");
        assert_eq!((s.ttft, s.ttft_visible, s.tpot), (None, None, None));
        assert!(t.first_token.is_none() && t.gaps.is_empty());
    }
    // Triton reports no counts: unknown for a body.
    let t = meter(
        Api::Triton,
        Some(b"application/json"),
        &[br#"{"model_name":"m","text_output":"Hi"}"#],
    );
    assert_eq!(summary(&t).output_tokens, None);
    // A failed Responses body is an upstream error even on a 200.
    let t = meter(
        Api::Responses,
        Some(b"application/json"),
        &[br#"{"object":"response","status":"failed","error":{"code":"server_error"},"usage":null}"#],
    );
    assert_eq!(summary(&t).outcome, Outcome::UpstreamError);
}

#[test]
fn gemini_streamed_json_array_is_framed_element_by_element() {
    let body = concat!(
        "[{\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Let me think\", \"thought\": true}],\"role\": \"model\"}}],",
        "\"usageMetadata\": {\"promptTokenCount\": 8,\"thoughtsTokenCount\": 3}}\r\n,\r\n",
        "{\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"The [answer] is {42}\"}],\"role\": \"model\"},\"finishReason\": \"STOP\"}],",
        "\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": 6,\"thoughtsTokenCount\": 3}}\r\n]"
    )
    .as_bytes();
    let whole = meter(
        Api::Gemini,
        Some(b"application/json; charset=UTF-8"),
        &[body],
    );
    let s = summary(&whole).clone();
    assert!(s.streamed);
    assert_eq!(s.events, 2);
    assert_eq!(s.token_events, 2);
    assert_eq!(s.first_token_event, Some(0));
    assert_eq!(s.first_visible_event, Some(1));
    assert_eq!(s.usage.output, Some(9));
    assert_eq!(s.usage.reasoning, Some(3));
    assert!(s.ttft.is_some() && s.ttft_visible.is_some());
    // Whitespace first, then every cut.
    for cut in 0..=body.len() {
        let (a, b) = body.split_at(cut);
        let t = meter(Api::Gemini, Some(b"application/json"), &[b"  \r\n", a, b]);
        let c = summary(&t);
        assert_eq!(
            (c.events, c.token_events, c.first_visible_event, c.usage),
            (s.events, s.token_events, s.first_visible_event, s.usage),
            "cut {cut}"
        );
    }
}

#[test]
fn generate_is_resolved_by_the_first_payload() {
    // SGLang: cumulative text, ends with [DONE].
    let sglang = b"data: {\"text\":\"He\",\"meta_info\":{\"completion_tokens\":1}}\n\n\
data: {\"text\":\"Hello\",\"meta_info\":{\"completion_tokens\":2}}\n\n\
data: {\"text\":\"Hello\",\"meta_info\":{\"completion_tokens\":3}}\n\n\
data: [DONE]\n\n";
    let t = meter(Api::Generate, Some(b"text/event-stream"), &[sglang]);
    let s = summary(&t);
    assert_eq!((s.events, s.token_events), (4, 2));
    assert_eq!(s.output_tokens, Some((3, TokenSource::Usage)));
    // TGI: one event per token.
    let tgi = b"data:{\"index\":1,\"token\":{\"id\":1,\"text\":\"a\",\"special\":false}}\n\n\
data:{\"index\":2,\"token\":{\"id\":2,\"text\":\"\",\"special\":true},\"generated_text\":\"a\"}\n\n";
    let t = meter(Api::Generate, Some(b"text/event-stream"), &[tgi]);
    let s = summary(&t);
    assert_eq!((s.events, s.token_events), (2, 2));
    assert_eq!(s.output_tokens, Some((2, TokenSource::Events)));
}

#[test]
fn reasoning_delays_the_visible_first_token() {
    use std::time::Duration;
    let events: [&[u8]; 3] = [
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n",
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    ];
    let mut recording = Recording::default();
    let t0 = Instant::now();
    {
        let mut m = StreamMeter::new(t0, Api::Anthropic, Limits::default(), &mut recording);
        m.response_head(t0, 200, Some(b"text/event-stream"), None);
        for (ms, ev) in [10, 20, 50].into_iter().zip(events) {
            m.data(t0 + Duration::from_millis(ms), &Bytes::copy_from_slice(ev));
        }
        m.end(t0 + Duration::from_millis(60));
    }
    let s = recording.summary.as_ref().unwrap();
    assert_eq!(s.first_token_event, Some(1));
    assert_eq!(s.first_visible_event, Some(2));
    assert_eq!(s.ttft, Some(Duration::from_millis(20)));
    assert_eq!(s.ttft_visible, Some(Duration::from_millis(50)));
    assert_eq!(recording.first_token, s.ttft);
    assert_eq!(recording.first_visible_token, s.ttft_visible);
    assert_eq!(recording.gaps, [Duration::from_millis(30)]);
}

/// The server's own timings, from every place servers put them, in their
/// own units; null parts are not reported, and an implausible report is
/// not taken at all.
#[test]
fn server_timings_are_read_in_each_servers_units_and_checked() {
    let json = Some(&b"application/json"[..]);
    let timings = |api: Api, body: &str| {
        let t = meter(api, json, &[body.as_bytes()]);
        let s = summary(&t);
        (s.server, t.parse_errors.clone())
    };
    let close = |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() < 1e-9);

    // vLLM, non-streamed chat and Responses: milliseconds.
    let (s, errors) = timings(
        Api::OpenAi,
        r#"{"object":"chat.completion","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1},"metrics":{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12.3,"mean_itl_ms":null,"tokens_per_second":103.2}}"#,
    );
    assert!(errors.is_empty());
    assert!(close(s.queue, 0.0123) && close(s.prefill, 0.0852) && close(s.decode, 1.2405));
    let (s, _) = timings(
        Api::Responses,
        r#"{"object":"response","error":null,"output":[],"usage":{"input_tokens":3,"output_tokens":5},"metrics":{"queue_time_ms":1.5,"time_to_first_token_ms":null,"generation_time_ms":40}}"#,
    );
    assert!(close(s.queue, 0.0015) && s.prefill.is_none() && close(s.decode, 0.04));
    // `n > 1`: the object is null.
    let (s, errors) = timings(
        Api::OpenAi,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2},"metrics":null}"#,
    );
    assert!(s.is_empty() && errors.is_empty());

    // Ollama: nanoseconds.
    let (s, _) = timings(
        Api::Ollama,
        r#"{"response":"","done":true,"total_duration":5397760600,"load_duration":3691191000,"prompt_eval_count":31,"prompt_eval_duration":220642000,"eval_count":32,"eval_duration":1485422000}"#,
    );
    assert!(close(s.queue, 3.691191) && close(s.prefill, 0.220642) && close(s.decode, 1.485422));

    // llama.cpp's `/completion`: milliseconds, no queue.
    let (s, _) = timings(
        Api::LlamaCpp,
        r#"{"content":"","stop":true,"tokens_predicted":2,"tokens_evaluated":4,"timings":{"prompt_n":4,"prompt_ms":12.5,"predicted_n":2,"predicted_ms":7.25}}"#,
    );
    assert!(s.queue.is_none() && close(s.prefill, 0.0125) && close(s.decode, 0.00725));

    // SGLang: seconds; a prefill needs both of its parts.
    let (s, _) = timings(
        Api::Sglang,
        r#"{"text":"hi","meta_info":{"prompt_tokens":2,"completion_tokens":1,"queue_time":0.5,"prefill_launch_latency":0.25}}"#,
    );
    assert!(close(s.queue, 0.5) && s.prefill.is_none() && s.decode.is_none());

    // Implausible: negative, a string, past a day, a negative part of
    // SGLang's sum. Nothing of the report is taken.
    for (api, body) in [
        (
            Api::OpenAi,
            r#"{"choices":[],"metrics":{"queue_time_ms":5,"time_to_first_token_ms":-1,"generation_time_ms":3}}"#,
        ),
        (
            Api::OpenAi,
            r#"{"choices":[],"usage":{"queue_time":"0.1","prompt_time":0.2}}"#,
        ),
        (
            Api::Ollama,
            r#"{"done":true,"load_duration":1,"eval_duration":86400000000001}"#,
        ),
        (
            Api::Sglang,
            r#"{"text":"x","meta_info":{"queue_time":0.1,"prefill_waiting_latency":-0.5,"prefill_launch_latency":0.75}}"#,
        ),
    ] {
        let (s, errors) = timings(api, body);
        assert!(s.is_empty(), "{body}: {s:?}");
        assert_eq!(errors, [ParseError::ImplausibleTimings], "{body}");
    }
}

/// TGI says its queue time in a response header.
#[test]
fn tgi_queue_time_header_is_read_in_milliseconds() {
    let header = |value: &[u8]| {
        let mut recording = Recording::default();
        {
            let mut m =
                StreamMeter::new(Instant::now(), Api::Tgi, Limits::default(), &mut recording);
            m.response_head(Instant::now(), 200, Some(b"application/json"), None);
            m.queue_time_header(value);
            m.data(
                Instant::now(),
                &Bytes::from_static(br#"{"generated_text":"hi"}"#),
            );
            m.end(Instant::now());
        }
        recording
    };
    let t = header(b"42");
    assert_eq!(summary(&t).server.queue, Some(0.042));
    assert!(t.parse_errors.is_empty());
    for bad in [&b"soon"[..], b"-3", b""] {
        let t = header(bad);
        assert_eq!(summary(&t).server.queue, None);
        assert_eq!(t.parse_errors, [ParseError::ImplausibleTimings]);
    }
}
