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
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::json::{self, Count, Fold, HasOutput, IsError, NonEmpty, Output, nonempty};
use super::{EventInfo, ParseError, Usage};

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let trimmed = data.trim_ascii();
    if trimmed == b"[DONE]" {
        return Ok(EventInfo {
            done: true,
            ..EventInfo::default()
        });
    }
    let chunk: Chunk = json::parse(trimmed)?;
    let out = chunk.choices.0;
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage: chunk.usage.map(Usage::from).unwrap_or_default(),
        error: chunk.error.is_some() || chunk.object.is_some_and(|o| o.0) || name == b"error",
        done: false,
    })
}

/// The parts of a `chat.completion(.chunk)` / `text_completion` object that
/// metering needs; every other field is skipped.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Fold<Element>,
    usage: Option<WireUsage>,
    /// `{"error": {...}}` sent in-stream by OpenAI and vLLM.
    error: Option<IgnoredAny>,
    /// `"object": "error"`, the bare vLLM error shape.
    object: Option<IsError>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<Count>,
    completion_tokens: Option<Count>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<Count>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<Count>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input: json::count(u.prompt_tokens),
            output: json::count(u.completion_tokens),
            cached_input: u
                .prompt_tokens_details
                .and_then(|d| json::count(d.cached_tokens)),
            reasoning: u
                .completion_tokens_details
                .and_then(|d| json::count(d.reasoning_tokens)),
            ..Usage::default()
        }
    }
}

/// One choice of a chunk. Streamed chat carries `delta`, legacy completions
/// carry `text`; a non-streamed `message` is irrelevant to token events.
struct Choice {
    delta: Option<Delta>,
    text: Option<NonEmpty>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<NonEmpty>,
    refusal: Option<NonEmpty>,
    /// DeepSeek, vLLM and SGLang reasoning parsers.
    reasoning_content: Option<NonEmpty>,
    /// OpenRouter, Ollama's `/v1` and newer vLLM.
    reasoning: Option<NonEmpty>,
    tool_calls: Option<Fold<Element>>,
    /// The deprecated single `function_call`.
    function_call: Option<Function>,
}

struct ToolCall {
    function: Option<Function>,
}

#[derive(Deserialize)]
struct Function {
    name: Option<NonEmpty>,
    arguments: Option<NonEmpty>,
}

impl Choice {
    fn output(&self) -> Output {
        Output::visible(nonempty(&self.text))
            .or(self.delta.as_ref().map_or(Output::NONE, Delta::output))
    }
}

impl Delta {
    fn output(&self) -> Output {
        Output::visible(
            nonempty(&self.content)
                || nonempty(&self.refusal)
                || self.function_call.as_ref().is_some_and(Function::is_token),
        )
        .or(Output::reasoning(
            nonempty(&self.reasoning_content) || nonempty(&self.reasoning),
        ))
        .or(self.tool_calls.as_ref().map_or(Output::NONE, |t| t.0))
    }
}

impl Function {
    fn is_token(&self) -> bool {
        nonempty(&self.name) || nonempty(&self.arguments)
    }
}

impl ToolCall {
    fn output(&self) -> Output {
        Output::visible(self.function.as_ref().is_some_and(Function::is_token))
    }
}

/// A list element (of `choices` or `tool_calls`) read as both a choice and a
/// tool call at once: their fields do not overlap (`delta`/`text` versus
/// `function`), so one element reader serves both lists.
struct Element {
    choice: Choice,
    tool_call: ToolCall,
}

impl HasOutput for Element {
    fn output(&self) -> Output {
        self.choice.output().or(self.tool_call.output())
    }
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

/// Keys of a list element that matter; matched on borrowed or escaped
/// strings without allocating.
enum Key {
    Delta,
    Text,
    Function,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
                Ok(match v {
                    b"delta" => Key::Delta,
                    b"text" => Key::Text,
                    b"function" => Key::Function,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
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
