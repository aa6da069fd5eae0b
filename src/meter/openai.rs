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

use super::json::{self, Error, Output, Reader};
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
    let mut out = Output::NONE;
    let mut usage = Usage::default();
    let mut error = name == b"error";
    json::read(trimmed, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"choices" => {
                    if r.open_list_or_null()? {
                        while r.element()? {
                            element(r, &mut out)?;
                        }
                    }
                }
                b"usage" => {
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
                                _ => r.skip()?,
                            }
                        }
                    }
                }
                // `{"error": {...}}`, sent in-stream by OpenAI and vLLM.
                b"error" => error |= r.not_null()?,
                // `"object": "error"`, the bare vLLM error shape.
                b"object" => error |= r.is_string(b"error")?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })?;
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage,
        error,
        done: false,
    })
}

/// One element of `choices` or of a delta's `tool_calls`, read as both a
/// choice and a tool call at once: their fields do not overlap
/// (`delta`/`text` versus `function`). Streamed chat carries `delta`,
/// legacy completions carry `text`; a non-streamed `message` is irrelevant
/// to token events.
fn element(r: &mut Reader<'_>, out: &mut Output) -> Result<(), Error> {
    r.open_object()?;
    while let Some(key) = r.key()? {
        match key {
            b"delta" => {
                if r.open_object_or_null()? {
                    while let Some(key) = r.key()? {
                        let more = match key {
                            b"content" | b"refusal" => Output::visible(r.nonempty()?),
                            // `reasoning_content`: DeepSeek, vLLM and SGLang
                            // reasoning parsers; `reasoning`: OpenRouter,
                            // Ollama's `/v1` and newer vLLM.
                            b"reasoning_content" | b"reasoning" => Output::reasoning(r.nonempty()?),
                            b"tool_calls" => {
                                if r.open_list_or_null()? {
                                    while r.element()? {
                                        element(r, out)?;
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
            b"text" => *out = out.or(Output::visible(r.nonempty()?)),
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
