//! OpenAI chat completions and legacy completions (and the many servers that
//! speak them: vLLM, SGLang, TGI's and llama.cpp's `/v1`, Ollama's `/v1`,
//! Groq, DeepSeek, OpenRouter...).
//!
//! Each event is walked with the metering reader, which reads only the fields
//! that matter and skips the rest: no JSON tree is built and no string is
//! copied. A *token event* is a chunk in which some choice carries
//! non-empty generated output: `content`, `refusal`, `reasoning_content` /
//! `reasoning`, a tool call's name or argument fragment, a legacy function
//! call, or a legacy completion's `text`. The role-only first chunk, empty
//! deltas, finish chunks and usage-only chunks (`choices: []`) are not.

use super::event::{EventInfo, ParseError, ServerTimings, Usage, millis};
use super::json::{self, Error, Output, Prefix, Reader};
use super::llamacpp;
use super::repeat::{Repeat, Strings};

/// Classifies one SSE event's data (or a whole non-streamed body), alone.
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    read(name, data, None)
}

/// What consecutive chunks of one stream share: the envelope before their
/// `choices` (`"id"`, `"object"`, `"created"`, `"model"`,
/// `"system_fingerprint"`), the same bytes in every chunk of a response
/// from OpenAI, vLLM, SGLang and most servers that speak this API. A
/// chunk that starts with the last envelope is read from where it ends,
/// which skips about a third of a typical chunk's reading; what the
/// envelope said (an `"object": "error"`) is kept with it.
///
/// And the last chunk whose output was one string (a `content`, a
/// `refusal`, some reasoning, a legacy `text`), as a template: a chunk
/// that is the same bytes but for that string and the strings and numbers
/// nobody reads (a `created` that ticks over), as most chunks of a
/// response are, is not read at all; its string decides alone.
#[derive(Debug, Default)]
pub struct Envelope {
    prefix: Prefix,
    /// The prefix held `"object": "error"` or a non-null `"error"`.
    error: bool,
    repeat: Repeat,
}

impl Envelope {
    /// Classifies the stream's next event: [`classify`], with the envelope
    /// of the events before it.
    pub fn classify(&mut self, name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        read(name, data, Some(self))
    }
}

fn read(
    name: &[u8],
    data: &[u8],
    mut envelope: Option<&mut Envelope>,
) -> Result<EventInfo, ParseError> {
    let trimmed = data.trim_ascii();
    if let Some(env) = envelope.as_deref_mut()
        && let Some(info) = env.repeat.info(trimmed)
    {
        return Ok(EventInfo {
            error: info.error || name == b"error",
            ..info
        });
    }
    if trimmed == b"[DONE]" {
        return Ok(EventInfo {
            done: true,
            ..EventInfo::default()
        });
    }
    let mut out = Output::NONE;
    let mut strings = Strings::default();
    let mut usage = Usage::default();
    let mut timings = ServerTimings::default();
    let mut error = false;
    // The last member boundary before `choices` or `usage`, and `error` there.
    let mut boundary = None;
    let mut resumed = false;
    let skipped = json::read(trimmed, |r| {
        match &envelope {
            Some(env) => {
                resumed = r.open_object_after(&env.prefix)?;
                if resumed {
                    error = env.error;
                }
            }
            None => r.open_object()?,
        }
        let mut in_envelope = envelope.is_some();
        loop {
            if in_envelope && let Some(at) = r.boundary() {
                boundary = Some((at, error));
            }
            let Some(key) = r.key()? else {
                break;
            };
            match key {
                b"choices" => {
                    in_envelope = false;
                    if r.open_list_or_null()? {
                        while r.element()? {
                            element(r, &mut out, &mut strings)?;
                        }
                    }
                }
                b"usage" => {
                    in_envelope = false;
                    if r.open_object_or_null()? {
                        while let Some(key) = r.key()? {
                            match key {
                                b"prompt_tokens" => usage.input = r.count()?,
                                b"completion_tokens" => usage.output = r.count()?,
                                b"prompt_tokens_details" => {
                                    usage.cached_input = r.count_in(b"cached_tokens")?;
                                }
                                b"completion_tokens_details" => {
                                    usage.reasoning = r.count_in(b"reasoning_tokens")?;
                                }
                                // Groq's timings, in seconds.
                                b"queue_time" => timings.queue = r.number()?,
                                b"prompt_time" => timings.prefill = r.number()?,
                                b"completion_time" => timings.decode = r.number()?,
                                _ => r.skip()?,
                            }
                        }
                    }
                }
                b"metrics" => {
                    in_envelope = false;
                    vllm_metrics(r, &mut timings)?;
                }
                b"timings" => {
                    in_envelope = false;
                    llamacpp::timings(r, &mut timings)?;
                }
                // `{"error": {...}}`, sent in-stream by OpenAI and vLLM.
                b"error" => error |= r.not_null()?,
                // `"object": "error"`, the bare vLLM error shape.
                b"object" => error |= r.is_string(b"error")?,
                _ => r.skip()?,
            }
        }
        Ok(*r.skipped())
    })?;
    let info = EventInfo {
        token: out.token,
        visible: out.visible,
        usage,
        timings,
        error,
        done: false,
    };
    if let Some(env) = envelope {
        if let Some((at, prefix_error)) = boundary
            && !(resumed && at + 1 == env.prefix.len())
        {
            env.prefix.set(trimmed, at);
            env.error = prefix_error;
        }
        env.repeat.keep(trimmed, &strings, &skipped, info);
    }
    let out = out.or(strings.out);
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        error: error || name == b"error",
        ..info
    })
}

/// vLLM's per-request `metrics` object (`--enable-per-request-metrics`), in
/// milliseconds: `queue_time_ms`; `time_to_first_token_ms`, from
/// scheduling to the first token (prefill); `generation_time_ms`, from the
/// first token to the last (decode). `null` as a whole (`n > 1`) or per
/// field when unknown. The Responses API carries the same object.
pub(crate) fn vllm_metrics(r: &mut Reader<'_>, timings: &mut ServerTimings) -> Result<(), Error> {
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"queue_time_ms" => timings.queue = millis(r.number()?),
                b"time_to_first_token_ms" => timings.prefill = millis(r.number()?),
                b"generation_time_ms" => timings.decode = millis(r.number()?),
                _ => r.skip()?,
            }
        }
    }
    Ok(())
}

/// One element of `choices` or of a delta's `tool_calls`, read as both a
/// choice and a tool call at once: their fields do not overlap
/// (`delta`/`text` versus `function`). Streamed chat carries `delta`,
/// legacy completions carry `text`; a non-streamed `message` is irrelevant
/// to token events.
fn element(r: &mut Reader<'_>, out: &mut Output, strings: &mut Strings) -> Result<(), Error> {
    r.open_object()?;
    while let Some(key) = r.key()? {
        match key {
            b"delta" => {
                if r.open_object_or_null()? {
                    while let Some(key) = r.key()? {
                        let more = match key {
                            b"content" | b"refusal" => strings.read(r, true)?,
                            // `reasoning_content`: DeepSeek, vLLM and SGLang
                            // reasoning parsers; `reasoning`: OpenRouter,
                            // Ollama's `/v1` and newer vLLM.
                            b"reasoning_content" | b"reasoning" => strings.read(r, false)?,
                            b"tool_calls" => {
                                if r.open_list_or_null()? {
                                    while r.element()? {
                                        element(r, out, strings)?;
                                    }
                                }
                                Output::NONE
                            }
                            // The deprecated single `function_call`.
                            b"function_call" => Output::visible(function(r)?),
                            _ => {
                                r.skip()?;
                                Output::NONE
                            }
                        };
                        *out = out.or(more);
                    }
                }
            }
            b"text" => *out = out.or(strings.read(r, true)?),
            b"function" => *out = out.or(Output::visible(function(r)?)),
            _ => r.skip()?,
        }
    }
    Ok(())
}

/// Whether a function (call) object carries a name or argument fragment.
fn function(r: &mut Reader<'_>) -> Result<bool, Error> {
    let mut token = false;
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"name" | b"arguments" => token |= r.nonempty()?,
                _ => r.skip()?,
            }
        }
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::damage::{damaged, damages};
    use proptest::prelude::*;

    /// The `data` of every event of the chat captures, in order (read once).
    fn capture_events() -> &'static [Vec<Vec<u8>>] {
        static EVENTS: std::sync::LazyLock<Vec<Vec<Vec<u8>>>> =
            std::sync::LazyLock::new(read_capture_events);
        &EVENTS
    }

    fn read_capture_events() -> Vec<Vec<Vec<u8>>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/streams");
        [
            "openai-chat-basic-usage.sse",
            "openai-chat-logprobs.sse",
            "openai-chat-n3.sse",
            "openai-chat-parallel-tool-calls.sse",
            "deepseek-chat-text.sse",
            "groq-chat-text.sse",
            "openrouter-chat-text.sse",
        ]
        .iter()
        .map(|name| {
            let text = std::fs::read(dir.join(name)).unwrap();
            text.split(|&b| b == b'\n')
                .filter_map(|line| line.strip_prefix(b"data: "))
                .map(<[u8]>::to_vec)
                .collect()
        })
        .collect()
    }

    /// Each event read through one envelope, as a stream's are, gives what
    /// it gives alone, whatever came before it.
    fn same_as_alone(events: &[Vec<u8>]) -> Result<(), TestCaseError> {
        let mut envelope = Envelope::default();
        for (i, data) in events.iter().enumerate() {
            let alone = classify(b"", data);
            prop_assert_eq!(
                envelope.classify(b"", data),
                alone,
                "event {} {:?}",
                i,
                String::from_utf8_lossy(data)
            );
        }
        Ok(())
    }

    #[test]
    fn the_envelope_is_reused_across_a_streams_chunks() {
        for events in capture_events() {
            same_as_alone(events).unwrap();
        }
        let first = br#"{"id":"c1","object":"chat.completion.chunk","created":17,"model":"m","choices":[{"delta":{"role":"assistant"}}]}"#;
        let mut envelope = Envelope::default();
        envelope.classify(b"", first).unwrap();
        assert_eq!(
            envelope.prefix.len(),
            br#"{"id":"c1","object":"chat.completion.chunk","created":17,"model":"m","#.len()
        );
        // A number the prefix ends is followed by its comma in the prefix:
        // a longer one does not match it.
        let longer = br#"{"id":"c1","object":"chat.completion.chunk","created":170,"model":"m","choices":[{"delta":{"content":"x"}}]}"#;
        assert!(envelope.classify(b"", longer).unwrap().token);
        // What the envelope said stays with it.
        let error = br#"{"object":"error","message":"boom","choices":[]}"#;
        assert!(envelope.classify(b"", error).unwrap().error);
        assert!(envelope.classify(b"", error).unwrap().error);
        assert!(envelope.classify(b"error", error).unwrap().error);
        // The same envelope before a broken rest is still an error.
        assert_eq!(
            envelope.classify(b"", br#"{"object":"error","message":"boom","choices":[}"#),
            Err(ParseError::InvalidJson)
        );
        // Whatever follows, the rest is read.
        let ok =
            br#"{"object":"error","message":"boom","choices":[],"usage":{"completion_tokens":3}}"#;
        assert_eq!(envelope.classify(b"", ok).unwrap().usage.output, Some(3));
        // An envelope longer than a stream may keep is read every time.
        let long = format!(
            r#"{{"id":"{}","choices":[{{"delta":{{"content":"x"}}}}]}}"#,
            "i".repeat(Prefix::MAX_LEN)
        );
        for _ in 0..2 {
            assert!(envelope.classify(b"", long.as_bytes()).unwrap().token);
            assert!(envelope.prefix.is_empty());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// Consecutive chunks of a capture, each damaged at one byte or not
        /// at all (a byte replaced, removed or inserted), classify through
        /// one envelope as they do alone.
        #[test]
        fn damaged_chunks_classify_as_they_do_alone(
            capture in 0usize..7,
            start in 0usize..64,
            damage in damages(),
        ) {
            let events = &capture_events()[capture];
            same_as_alone(&damaged(events, start % events.len(), &damage, None))?;
        }
    }

    /// The capture's events with the value of each string member `key`
    /// replaced by the next of `strings` (raw: any bytes between the
    /// quotes, escapes valid or not).
    fn restrung(events: &[Vec<u8>], key: &str, strings: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let open = format!(r#""{key}":""#);
        let mut strings = strings.iter().cycle();
        events
            .iter()
            .map(|data| {
                let Some(at) = data.windows(open.len()).position(|w| w == open.as_bytes()) else {
                    return data.clone();
                };
                let from = at + open.len();
                let Some(len) = data[from..].iter().position(|&b| b == b'"') else {
                    return data.clone();
                };
                let mut out = data[..from].to_vec();
                out.extend_from_slice(strings.next().unwrap());
                out.extend_from_slice(&data[from + len..]);
                out
            })
            .collect()
    }

    #[test]
    fn a_chunk_like_the_last_but_for_its_string_is_read_from_it() {
        let chunk = |content: &str| {
            format!(
                r#"{{"id":"c1","created":17,"choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":null}}],"usage":{{"completion_tokens":4}}}}"#
            )
        };
        let mut envelope = Envelope::default();
        let first = envelope.classify(b"", chunk("Hi").as_bytes()).unwrap();
        assert!(first.token && first.visible);
        assert_eq!(first.usage.output, Some(4));
        assert!(!envelope.repeat.is_empty());
        for (content, token) in [("", false), (r#"\"\\"#, true), (r#"a\"}]"#, true)] {
            let i = envelope.classify(b"", chunk(content).as_bytes()).unwrap();
            assert_eq!(
                i,
                EventInfo {
                    token,
                    visible: token,
                    ..first
                },
                "{content}"
            );
        }
        // The event's name is its own.
        assert!(
            envelope
                .classify(b"error", chunk("x").as_bytes())
                .unwrap()
                .error
        );
        assert!(!envelope.classify(b"", chunk("x").as_bytes()).unwrap().error);
        // A broken string, or another shape, is read (and fails or not as
        // it does alone).
        for broken in [r#"\x"#, "a\\", "a\nb"] {
            assert_eq!(
                envelope.classify(b"", chunk(broken).as_bytes()),
                Err(ParseError::InvalidJson)
            );
        }
        // Reasoning is not visible; a chunk with two strings keeps none.
        let reasoning = |r: &str| {
            format!(r#"{{"id":"c1","choices":[{{"delta":{{"reasoning_content":"{r}"}}}}]}}"#)
        };
        let mut envelope = Envelope::default();
        for (r, token) in [("hmm", true), ("", false), ("x", true)] {
            let i = envelope.classify(b"", reasoning(r).as_bytes()).unwrap();
            assert_eq!((i.token, i.visible), (token, false));
        }
        let two = br#"{"choices":[{"delta":{"content":"","reasoning":"x"}}]}"#;
        let mut envelope = Envelope::default();
        assert!(envelope.classify(b"", two).unwrap().token);
        assert!(envelope.repeat.is_empty());
    }

    /// Chunks that differ outside their string too (logprobs, an object
    /// skipped whole) are read, and a template is remade only now and
    /// then; once they stop differing, one is made and matched again.
    #[test]
    fn chunks_that_keep_differing_remake_the_template_now_and_then() {
        let chunk = |content: &str, logprob: usize| {
            format!(
                r#"{{"choices":[{{"delta":{{"content":"{content}"}},"logprobs":{{"content":[{{"logprob":-0.{logprob}}}]}}}}]}}"#
            )
        };
        let mut envelope = Envelope::default();
        let events: Vec<String> = (0..40)
            .map(|i| chunk(if i % 3 == 0 { "" } else { "x" }, i))
            .chain((0..40).map(|i| chunk(if i % 3 == 0 { "" } else { "y" }, 99)))
            .collect();
        let mut matched = Vec::new();
        for data in &events {
            let info = envelope.classify(b"", data.as_bytes());
            assert_eq!(info, classify(b"", data.as_bytes()), "{data}");
            matched.push(envelope.repeat.matched());
        }
        assert!(!matched[..40].iter().any(|&m| m));
        // The steady chunks match within one remaking period.
        assert!(matched[40 + 32..].iter().all(|&m| m), "{matched:?}");
    }

    /// Chunks that differ in members nobody reads, strings and numbers
    /// (a timestamp, an obfuscation string, a second that ticks over),
    /// match the template and classify as they do alone.
    #[test]
    fn chunks_that_differ_in_skipped_values_match() {
        let chunk = |created: u64, content: &str, pad: &str, stamp: &str| {
            format!(
                r#"{{"id":"c1","created":{created},"choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":null}}],"obfuscation":"{pad}","sent_ns":{stamp}}}"#
            )
        };
        let mut envelope = Envelope::default();
        let events = [
            chunk(17, "Hi", "ab", "100"),
            chunk(17, "", "abcdef", "1000"),
            chunk(18, " there", "", "1.5e3"),
            chunk(18, r#"\"q\""#, r"\u00e9", "0"),
            chunk(19, "x", "a", "-1"),
            chunk(19, "x", "a", r#""1""#),
            chunk(19, "x", r"a\q", "2"),
        ];
        let mut matched = Vec::new();
        for data in &events {
            let info = envelope.classify(b"", data.as_bytes());
            assert_eq!(info, classify(b"", data.as_bytes()), "{data}");
            matched.push(envelope.repeat.matched());
        }
        // The first makes the template; a number that is not a plain one
        // (`-1`), a string where a number was, and a broken string are read
        // (the last fails alone too).
        assert_eq!(matched, [false, true, true, true, false, false, false]);
        assert!(envelope.classify(b"", events[6].as_bytes()).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// Chunks of a capture whose strings of output are anything
        /// (quotes, backslashes, escapes broken or not, control
        /// characters) classify through one envelope as they do alone.
        #[test]
        fn restrung_chunks_classify_as_they_do_alone(
            capture in 0usize..7,
            key in prop::sample::select(&["content", "reasoning_content", "reasoning", "arguments"][..]),
            strings in prop::collection::vec(
                prop::collection::vec(prop::sample::select(&b"ab\\\"u0e/\n\x01 }],:"[..]), 0..8),
                1..6,
            ),
        ) {
            let events = &capture_events()[capture];
            same_as_alone(&restrung(events, key, &strings))?;
        }
    }

    fn token(data: &str) -> bool {
        classify(b"", data.as_bytes())
            .map(|i| i.token)
            .unwrap_or(false)
    }

    #[test]
    fn token_rule() {
        assert!(!token(
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#
        ));
        assert!(!token(
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":null}}]}"#
        ));
        assert!(!token(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#
        ));
        assert!(!token(
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#
        ));
        assert!(token(
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#
        ));
        assert!(token(r#"{"choices":[{"delta":{"refusal":"no"}}]}"#));
        assert!(token(
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#
        ));
        assert!(token(
            r#"{"choices":[{"delta":{"reasoning":"hmm","content":null}}]}"#
        ));
        assert!(token(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":""}}]}}]}"#
        ));
        assert!(token(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}}]}"#
        ));
        assert!(!token(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}"#
        ));
        assert!(token(
            r#"{"choices":[{"delta":{"function_call":{"arguments":"x"}}}]}"#
        ));
        assert!(token(r#"{"choices":[{"text":" tok","index":0}]}"#));
        assert!(!token(
            r#"{"choices":[{"text":"","index":0,"finish_reason":"length"}]}"#
        ));
        // Key order, padding, escapes and unknown fields do not matter.
        assert!(token(
            "{ \"x\" : {\"delta\":{\"content\":\"no\"}} , \"choices\" : [ { \"delta\" : { \"content\" : \"\\u00e9\" } , \"x\": [1,{}] } ]   }"
        ));
    }

    #[test]
    fn usage_errors_and_done() {
        let i = classify(
            b"",
            br#"{"choices":[],"usage":{"prompt_tokens":14,"completion_tokens":30,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":7}}}"#,
        )
        .unwrap();
        assert_eq!(
            i.usage,
            Usage {
                input: Some(14),
                output: Some(30),
                cached_input: Some(3),
                reasoning: Some(7),
                ..Usage::default()
            }
        );
        assert!(
            classify(b"", br#"{"choices":[],"usage":null}"#)
                .unwrap()
                .usage
                == Usage::default()
        );
        assert!(
            classify(b"", br#"{"error":{"message":"boom","code":500}}"#)
                .unwrap()
                .error
        );
        assert!(
            classify(b"", br#"{"object":"error","message":"boom"}"#)
                .unwrap()
                .error
        );
        assert!(
            !classify(b"", br#"{"object":"chat.completion.chunk","error":null}"#)
                .unwrap()
                .error
        );
        assert!(classify(b"error", br#"{"message":"x"}"#).unwrap().error);
        assert!(classify(b"", b" [DONE] ").unwrap().done);
        assert_eq!(
            classify(b"", b"{\"choices\":[").unwrap_err(),
            ParseError::InvalidJson
        );
        assert_eq!(
            classify(b"", b"not json").unwrap_err(),
            ParseError::InvalidJson
        );
    }
}
