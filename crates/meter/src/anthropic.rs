//! Anthropic Messages API (`POST /v1/messages`): named SSE events.
//!
//! The event type is the data's `type` field, or the SSE `event:` name when
//! the data has none. A *token event* is a `content_block_delta` whose delta
//! carries non-empty `text` (text_delta), `partial_json` (input_json_delta,
//! a tool call's arguments) or `thinking` (thinking_delta). Thinking is not
//! *visible*; text and tool input are. Empty deltas, `signature_delta`,
//! `citations_delta`, `ping`, `message_start`, `content_block_start/stop`,
//! `message_delta` and `message_stop` are not token events.
//!
//! Usage is provisional in `message_start` (`message.usage`) and cumulative
//! in `message_delta` (`usage`); the last reported value wins. A
//! non-streamed message has `usage` at the top level. Anthropic reports the
//! uncached input (`input_tokens`) separately from cache reads and cache
//! writes; [`Usage::input`] is the whole prompt, so it is their sum within
//! the one usage object that reports `input_tokens` (never a sum across
//! events). `output_tokens_details.thinking_tokens` is the reasoning count;
//! `iterations[]` is skipped (it repeats the totals). An `error` event (sent
//! on a 200 when the API is overloaded mid-stream) is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::json::{self, Error, Output, Reader};
use super::repeat::{Repeat, Strings};

/// Classifies one SSE event's data (or a whole non-streamed body), alone.
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    read(name, data, None)
}

/// What consecutive events of one stream share: the last
/// `content_block_delta` whose output was one string (a `text`, a
/// `partial_json`, some `thinking`), as a template. A delta that is the
/// same bytes but for that string and the strings and numbers nobody reads
/// (its `index`), as most events of a response are, is not read at all;
/// its string decides alone.
#[derive(Debug, Default)]
pub struct Deltas {
    repeat: Repeat,
}

impl Deltas {
    /// Classifies the stream's next event: [`classify`], with the deltas
    /// before it.
    pub fn classify(&mut self, name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        if let Some(info) = self.repeat.info(data) {
            return Ok(info);
        }
        read(name, data, Some(&mut self.repeat))
    }
}

fn read(name: &[u8], data: &[u8], repeat: Option<&mut Repeat>) -> Result<EventInfo, ParseError> {
    let mut strings = Strings::default();
    let mut kind = None;
    let mut delta = Output::NONE;
    // `message_delta`'s usage, or a non-streamed message's.
    let mut usage = None;
    // The usage in `message_start`'s message.
    let mut message_usage = None;
    let skipped = json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"type" => kind = r.string_or_null(Kind::from_name)?,
                b"delta" => {
                    if r.open_object_or_null()? {
                        while let Some(key) = r.key()? {
                            let more = match key {
                                b"text" | b"partial_json" => strings.read(r, true)?,
                                b"thinking" => strings.read(r, false)?,
                                _ => {
                                    r.skip()?;
                                    Output::NONE
                                }
                            };
                            delta = delta.or(more);
                        }
                    }
                }
                b"message" => {
                    if r.open_object_or_null()? {
                        while let Some(key) = r.key()? {
                            match key {
                                b"usage" => message_usage = wire_usage(r)?,
                                _ => r.skip()?,
                            }
                        }
                    }
                }
                b"usage" => usage = wire_usage(r)?,
                _ => r.skip()?,
            }
        }
        Ok(*r.skipped())
    })?;
    // The event's name decides only when its data has no type.
    let named = kind.is_none();
    let kind = kind.unwrap_or_else(|| Kind::from_name(name));
    let info = |out: Output| EventInfo {
        token: out.token,
        visible: out.visible,
        usage: usage.or(message_usage).unwrap_or_default(),
        error: kind == Kind::Error,
        done: kind == Kind::Stop,
        timings: ServerTimings::default(),
    };
    if kind != Kind::ContentBlockDelta {
        return Ok(info(Output::NONE));
    }
    if let Some(repeat) = repeat
        && !named
    {
        repeat.keep(data, &strings, &skipped, info(delta));
    }
    Ok(info(delta.or(strings.out)))
}

/// A usage object (`None` for `null`).
fn wire_usage(r: &mut Reader<'_>) -> Result<Option<Usage>, Error> {
    if !r.open_object_or_null()? {
        return Ok(None);
    }
    let mut input = None;
    let mut read = None;
    let mut creation = None;
    let mut usage = Usage::default();
    while let Some(key) = r.key()? {
        match key {
            b"input_tokens" => input = r.count()?,
            b"output_tokens" => usage.output = r.count()?,
            b"cache_read_input_tokens" => read = r.count()?,
            b"cache_creation_input_tokens" => creation = r.count()?,
            b"output_tokens_details" => usage.reasoning = r.count_in(b"thinking_tokens")?,
            _ => r.skip()?,
        }
    }
    usage.input = input.map(|n: u64| {
        n.saturating_add(read.unwrap_or(0))
            .saturating_add(creation.unwrap_or(0))
    });
    usage.cached_input = read;
    usage.cache_creation_input = creation;
    Ok(Some(usage))
}

/// What an event type means for metering. Unknown types are `Other`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    ContentBlockDelta,
    Error,
    /// `message_stop`, the stream's terminal event.
    Stop,
    Other,
}

impl Kind {
    fn from_name(name: &[u8]) -> Kind {
        match name {
            b"content_block_delta" => Kind::ContentBlockDelta,
            b"error" => Kind::Error,
            b"message_stop" => Kind::Stop,
            _ => Kind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, data: &str) -> EventInfo {
        classify(name.as_bytes(), data.as_bytes()).unwrap()
    }

    #[test]
    fn token_and_visible_rules() {
        let d = |delta: &str| {
            info(
                "",
                &format!(r#"{{"type":"content_block_delta","index":0,"delta":{delta}   }}"#),
            )
        };
        let i = d(r#"{"type":"text_delta","text":"Hi"}"#);
        assert!(i.token && i.visible);
        let i = d(r#"{"type":"input_json_delta","partial_json":"{\"a"}"#);
        assert!(i.token && i.visible);
        assert!(!d(r#"{"type":"input_json_delta","partial_json":""}"#).token);
        let i = d(r#"{"type":"thinking_delta","thinking":"hmm"}"#);
        assert!(i.token && !i.visible);
        assert!(!d(r#"{"type":"thinking_delta","thinking":""}"#).token);
        assert!(!d(r#"{"type":"signature_delta","signature":"abc"}"#).token);
        assert!(!d(r#"{"type":"citations_delta","citation":{"cited_text":"x"}}"#).token);
        assert!(!info("", r#"{"type": "ping"}"#).token);
        assert!(
            !info(
                "",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"x"}}"#
            )
            .token
        );
        // The type from the event name when the data has none.
        assert!(info("content_block_delta", r#"{"delta":{"text":"x"}}"#).token);
    }

    /// Every event of the captures (name, data), in order, each capture's
    /// `text`, `partial_json` and `thinking` strings replaced in turn by
    /// the next of `strings` (raw: any bytes between the quotes).
    fn restrung(strings: &[Vec<u8>]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/streams");
        let mut strings = strings.iter().cycle();
        let mut out = Vec::new();
        for capture in [
            "anthropic-messages-text.sse",
            "anthropic-messages-thinking-refusal.sse",
            "anthropic-messages-tools.sse",
        ] {
            let text = std::fs::read_to_string(dir.join(capture)).unwrap();
            let mut name = Vec::new();
            for line in text.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.as_bytes().to_vec();
                }
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let mut data = data.as_bytes().to_vec();
                for key in [r#""text":""#, r#""partial_json":""#, r#""thinking":""#] {
                    let at = data.windows(key.len()).position(|w| w == key.as_bytes());
                    if let Some(from) = at.map(|at| at + key.len())
                        && let Some(len) = data[from..].iter().position(|&b| b == b'"')
                    {
                        data.splice(from..from + len, strings.next().unwrap().clone());
                    }
                }
                out.push((std::mem::take(&mut name), data));
            }
        }
        out
    }

    /// Each event read through one stream's deltas gives what it gives
    /// alone.
    fn same_as_alone(events: &[(Vec<u8>, Vec<u8>)]) {
        let mut deltas = Deltas::default();
        for (name, data) in events {
            assert_eq!(
                deltas.classify(name, data),
                classify(name, data),
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn a_delta_like_the_last_but_for_its_string_is_read_from_it() {
        same_as_alone(&restrung(&[b"x".to_vec()]));
        let delta = |text: &str| {
            format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}   }}"#
            )
        };
        let mut deltas = Deltas::default();
        assert!(
            deltas
                .classify(b"", delta("Hi").as_bytes())
                .unwrap()
                .visible
        );
        assert!(!deltas.repeat.is_empty());
        for (text, token) in [("", false), (r#"\"\\"#, true), ("a\\u00e9", true)] {
            assert_eq!(
                deltas.classify(b"", delta(text).as_bytes()).unwrap().token,
                token
            );
        }
        assert_eq!(
            deltas.classify(b"", delta("\\x").as_bytes()),
            Err(ParseError::InvalidJson)
        );
        // Without a type in the data, the name decides: no template.
        let mut deltas = Deltas::default();
        let untyped = br#"{"delta":{"text":"x"}}"#;
        assert!(
            deltas
                .classify(b"content_block_delta", untyped)
                .unwrap()
                .token
        );
        assert!(deltas.repeat.is_empty());
        assert!(!deltas.classify(b"ping", untyped).unwrap().token);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

        /// Events whose strings of output are anything (quotes,
        /// backslashes, escapes broken or not, control characters)
        /// classify through one stream's deltas as they do alone.
        #[test]
        fn restrung_deltas_classify_as_they_do_alone(
            strings in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(&b"ab\\\"u0e/\n\x01 }],:"[..]), 0..8),
                1..6,
            ),
        ) {
            same_as_alone(&restrung(&strings));
        }
    }

    #[test]
    fn usage_and_errors() {
        let i = info(
            "",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":18,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":2}}}"#,
        );
        assert_eq!(
            i.usage,
            Usage {
                input: Some(1118),
                output: Some(2),
                cached_input: Some(1000),
                cache_creation_input: Some(100),
                reasoning: None,
            }
        );
        let i = info(
            "",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":65}}"#,
        );
        assert_eq!(
            i.usage,
            Usage {
                output: Some(65),
                ..Usage::default()
            }
        );
        assert!(!i.token);
        let i = info(
            "",
            r#"{"type":"message_delta","usage":{"input_tokens":28,"output_tokens":106,"output_tokens_details":{"thinking_tokens":67},"iterations":[{"input_tokens":28,"output_tokens":106}]}}"#,
        );
        assert_eq!(i.usage.output, Some(106));
        assert_eq!(i.usage.reasoning, Some(67));
        assert!(
            info(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            )
            .error
        );
        // A non-streamed message.
        let i = info(
            "",
            r#"{"id":"m","type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":5,"output_tokens":7}}"#,
        );
        assert!(!i.token && !i.error);
        assert_eq!(i.usage.output, Some(7));
    }
}
