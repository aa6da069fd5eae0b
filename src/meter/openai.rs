//! OpenAI chat completions and legacy completions (and the many servers that
//! speak them: vLLM, SGLang, TGI's and llama.cpp's `/v1`, Ollama's `/v1`,
//! Groq, DeepSeek, OpenRouter...).
//!
//! Each event is deserialized into borrowed, purpose-built types that visit
//! only the fields that matter and skip the rest: no JSON tree is built and no
//! string is copied. A *token event* is a chunk in which some choice carries
//! non-empty generated output: `content`, `refusal`, `reasoning_content` /
//! `reasoning`, a tool call's name or argument fragment, a legacy function
//! call, or a legacy completion's `text`. The role-only first chunk, empty
//! deltas, finish chunks and usage-only chunks (`choices: []`) are not.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{EventInfo, ParseError, Usage};

/// Declares an enum of the object keys a visitor cares about (plus `Other`),
/// matched as raw bytes. serde_json hands keys read with `deserialize_bytes`
/// over without validating them as UTF-8, which derived field identifiers
/// do for every key of every event. On `openai-chat-basic-usage` this cut
/// the metering path from 6,520 to 5,947 instructions per chunk (callgrind
/// on `benches/meter.rs`). Keys with escapes arrive unescaped, as with
/// derived identifiers.
macro_rules! byte_keys {
    ($name:ident { $($variant:ident = $lit:literal),* $(,)? }) => {
        enum $name {
            $($variant,)*
            Other,
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a key")
                    }
                    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<$name, E> {
                        Ok(match v {
                            $($lit => $name::$variant,)*
                            _ => $name::Other,
                        })
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        self.visit_bytes(v.as_bytes())
                    }
                }
                d.deserialize_bytes(V)
            }
        }
    };
}

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Ok(EventInfo {
            done: true,
            ..EventInfo::default()
        });
    }
    let chunk: Chunk = serde_json::from_slice(trimmed).map_err(|_| ParseError::InvalidJson)?;
    Ok(EventInfo {
        token: chunk.choices.0,
        usage: chunk.usage.map(Usage::from).unwrap_or_default(),
        error: chunk.error.is_some() || chunk.object.is_some_and(|o| o.0) || name == b"error",
        done: false,
    })
}

/// The parts of a `chat.completion(.chunk)` / `text_completion` object that
/// metering needs; every other field is skipped.
struct Chunk {
    choices: AnyToken,
    usage: Option<WireUsage>,
    /// `{"error": {...}}` sent in-stream by OpenAI and vLLM.
    error: Option<IgnoredAny>,
    /// `"object": "error"`, the bare vLLM error shape.
    object: Option<IsError>,
}

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Chunk;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Chunk, A::Error> {
                let mut c = Chunk {
                    choices: AnyToken(false),
                    usage: None,
                    error: None,
                    object: None,
                };
                while let Some(key) = map.next_key::<ChunkKey>()? {
                    match key {
                        ChunkKey::Choices => c.choices = map.next_value()?,
                        ChunkKey::Usage => c.usage = map.next_value()?,
                        ChunkKey::Error => c.error = map.next_value()?,
                        ChunkKey::Object => c.object = map.next_value()?,
                        ChunkKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(c)
            }
        }
        d.deserialize_map(V)
    }
}

byte_keys!(ChunkKey {
    Choices = b"choices",
    Usage = b"usage",
    Error = b"error",
    Object = b"object",
});

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input: u.prompt_tokens,
            output: u.completion_tokens,
            cached_input: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}

/// One choice of a chunk. Streamed chat carries `delta`, legacy completions
/// carry `text`; a non-streamed `message` is irrelevant to token events.
struct Choice {
    delta: Option<Delta>,
    text: Option<NonEmpty>,
}

struct Delta {
    content: Option<NonEmpty>,
    refusal: Option<NonEmpty>,
    /// DeepSeek, vLLM and SGLang reasoning parsers.
    reasoning_content: Option<NonEmpty>,
    /// OpenRouter, Ollama's `/v1` and newer vLLM.
    reasoning: Option<NonEmpty>,
    tool_calls: Option<AnyToken>,
    /// The deprecated single `function_call`.
    function_call: Option<Function>,
}

impl<'de> Deserialize<'de> for Delta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Delta;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delta, A::Error> {
                let mut d = Delta {
                    content: None,
                    refusal: None,
                    reasoning_content: None,
                    reasoning: None,
                    tool_calls: None,
                    function_call: None,
                };
                while let Some(key) = map.next_key::<DeltaKey>()? {
                    match key {
                        DeltaKey::Content => d.content = map.next_value()?,
                        DeltaKey::Refusal => d.refusal = map.next_value()?,
                        DeltaKey::ReasoningContent => d.reasoning_content = map.next_value()?,
                        DeltaKey::Reasoning => d.reasoning = map.next_value()?,
                        DeltaKey::ToolCalls => d.tool_calls = map.next_value()?,
                        DeltaKey::FunctionCall => d.function_call = map.next_value()?,
                        DeltaKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(d)
            }
        }
        d.deserialize_map(V)
    }
}

byte_keys!(DeltaKey {
    Content = b"content",
    Refusal = b"refusal",
    ReasoningContent = b"reasoning_content",
    Reasoning = b"reasoning",
    ToolCalls = b"tool_calls",
    FunctionCall = b"function_call",
});

struct ToolCall {
    function: Option<Function>,
}

#[derive(Deserialize)]
struct Function {
    name: Option<NonEmpty>,
    arguments: Option<NonEmpty>,
}

fn nonempty(v: &Option<NonEmpty>) -> bool {
    matches!(v, Some(NonEmpty(true)))
}

impl Choice {
    fn is_token(&self) -> bool {
        nonempty(&self.text) || self.delta.as_ref().is_some_and(Delta::is_token)
    }
}

impl Delta {
    fn is_token(&self) -> bool {
        nonempty(&self.content)
            || nonempty(&self.refusal)
            || nonempty(&self.reasoning_content)
            || nonempty(&self.reasoning)
            || matches!(self.tool_calls, Some(AnyToken(true)))
            || self.function_call.as_ref().is_some_and(Function::is_token)
    }
}

impl Function {
    fn is_token(&self) -> bool {
        nonempty(&self.name) || nonempty(&self.arguments)
    }
}

impl ToolCall {
    fn is_token(&self) -> bool {
        self.function.as_ref().is_some_and(Function::is_token)
    }
}

/// Whether any element of a list (`choices`, `tool_calls`) carries a token.
/// Visits the elements one by one instead of collecting them into a `Vec`.
/// `null` or a missing list counts as no token.
#[derive(Default)]
struct AnyToken(bool);

impl<'de> Deserialize<'de> for AnyToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // `choices` and `tool_calls` hold different element types, but their
        // fields do not overlap, so one element reader serves both lists.
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyToken;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<AnyToken, E> {
                Ok(AnyToken(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<AnyToken, E> {
                Ok(AnyToken(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyToken, A::Error> {
                let mut any = false;
                while let Some(e) = seq.next_element::<Element>()? {
                    any |= e.choice.is_token() || e.tool_call.is_token();
                }
                Ok(AnyToken(any))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list element read as both a choice and a tool call at once (their
/// fields do not overlap: `delta`/`text` versus `function`).
struct Element {
    choice: Choice,
    tool_call: ToolCall,
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Element;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Element, A::Error> {
                let mut e = Element {
                    choice: Choice {
                        delta: None,
                        text: None,
                    },
                    tool_call: ToolCall { function: None },
                };
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Delta => e.choice.delta = map.next_value()?,
                        Key::Text => e.choice.text = map.next_value()?,
                        Key::Function => e.tool_call.function = map.next_value()?,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

byte_keys!(Key {
    Delta = b"delta",
    Text = b"text",
    Function = b"function",
});

/// Whether a value is a non-empty string (or a non-empty list of content
/// parts). `null`, `""`, numbers and objects are "empty".
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Probe {
            on_str: |s| !s.is_empty(),
            nonempty_list: true,
        })
        .map(NonEmpty)
    }
}

/// Whether a value is the string `"error"`.
struct IsError(bool);

impl<'de> Deserialize<'de> for IsError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Probe {
            on_str: |s| s == "error",
            nonempty_list: false,
        })
        .map(IsError)
    }
}

/// Asks one yes/no question of a value of any JSON type without allocating:
/// strings go to `on_str`, a list answers `nonempty_list` when it has
/// elements, everything else answers no.
struct Probe {
    on_str: fn(&str) -> bool,
    nonempty_list: bool,
}

impl<'de> Visitor<'de> for Probe {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok((self.on_str)(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut any = false;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            any = true;
        }
        Ok(any && self.nonempty_list)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                reasoning: Some(7)
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
