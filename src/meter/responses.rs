//! OpenAI Responses API (`POST /v1/responses`): named SSE events.
//!
//! The event type is the data's `type` field, or the SSE `event:` name when
//! the data has none. A *token event* is one of the output `*.delta` events
//! with a non-empty `delta`: output text, refusal, reasoning text, reasoning
//! summary text, function / custom tool / MCP tool call arguments, and code
//! interpreter code. Reasoning and reasoning-summary deltas are not
//! *visible*; the rest are. Lifecycle events (`response.created`,
//! `in_progress`, `output_item.*`, `content_part.*`, `*.done`) are not token
//! events, and neither are audio deltas (they carry no text tokens).
//!
//! Usage is on `response.completed` / `response.incomplete` /
//! `response.failed` (`response.usage`), or at the top level of a
//! non-streamed response object. An `error` event, a `response.failed`
//! event, or a non-streamed object with a non-null `error` is an error.
//! There is no `[DONE]`.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use serde::Deserialize;

use super::json::{self, Count, NonEmpty, Output, Present, nonempty, present};
use super::{EventInfo, ParseError, Usage};

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let ev: Wire = json::parse(data)?;
    let kind = match ev.kind {
        Some(k) => k,
        None => Kind::from_name(name),
    };
    let has_delta = nonempty(&ev.delta);
    let out = match kind {
        Kind::Visible => Output::visible(has_delta),
        Kind::Reasoning => Output::reasoning(has_delta),
        _ => Output::NONE,
    };
    let usage = match (ev.response, ev.usage) {
        (Some(r), _) => r.usage.map(Usage::from).unwrap_or_default(),
        (None, Some(u)) => Usage::from(u),
        (None, None) => Usage::default(),
    };
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage,
        error: matches!(kind, Kind::Error | Kind::Failed) || present(&ev.error),
        done: false,
    })
}

#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "type")]
    kind: Option<Kind>,
    delta: Option<NonEmpty>,
    /// The response object of lifecycle events.
    response: Option<Response>,
    /// Usage of a non-streamed response object.
    usage: Option<WireUsage>,
    /// A non-streamed response's `error` (null when it succeeded). On a
    /// streamed `error` event the error is nested here too.
    error: Option<Present>,
}

#[derive(Deserialize)]
struct Response {
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<Count>,
    output_tokens: Option<Count>,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    cached_tokens: Option<Count>,
}

#[derive(Deserialize)]
struct OutputDetails {
    reasoning_tokens: Option<Count>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input: json::count(u.input_tokens),
            output: json::count(u.output_tokens),
            cached_input: u
                .input_tokens_details
                .and_then(|d| json::count(d.cached_tokens)),
            reasoning: u
                .output_tokens_details
                .and_then(|d| json::count(d.reasoning_tokens)),
            ..Usage::default()
        }
    }
}

/// What an event type means for metering. Unknown types are `Other`.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
enum Kind {
    #[serde(
        rename = "response.output_text.delta",
        alias = "response.refusal.delta",
        alias = "response.function_call_arguments.delta",
        alias = "response.custom_tool_call_input.delta",
        alias = "response.mcp_call_arguments.delta",
        alias = "response.mcp_call.arguments.delta",
        alias = "response.code_interpreter_call_code.delta",
        alias = "response.code_interpreter_call.code.delta"
    )]
    Visible,
    #[serde(
        rename = "response.reasoning_text.delta",
        alias = "response.reasoning_summary_text.delta",
        alias = "response.reasoning.delta",
        alias = "response.reasoning_summary.delta"
    )]
    Reasoning,
    #[serde(rename = "error")]
    Error,
    #[serde(rename = "response.failed")]
    Failed,
    #[serde(other)]
    Other,
}

impl Kind {
    /// The kind named by an SSE `event:` field, for data without `type`.
    fn from_name(name: &[u8]) -> Kind {
        match std::str::from_utf8(name) {
            Ok(s) => Kind::deserialize(
                serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s),
            )
            .unwrap_or(Kind::Other),
            Err(_) => Kind::Other,
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
        let i = info(
            "",
            r#"{"type":"response.output_text.delta","delta":"Hi","obfuscation":"x"}"#,
        );
        assert!(i.token && i.visible);
        let i = info("", r#"{"type":"response.output_text.delta","delta":""}"#);
        assert!(!i.token);
        let i = info(
            "",
            r#"{"delta":"x","type":"response.reasoning_summary_text.delta"}"#,
        );
        assert!(i.token && !i.visible);
        let i = info(
            "",
            r#"{"type":"response.function_call_arguments.delta","delta":"{\""}"#,
        );
        assert!(i.token && i.visible);
        let i = info("", r#"{"type":"response.output_text.done","text":"Hi"}"#);
        assert!(!i.token);
        let i = info("", r#"{"type":"response.audio.delta","delta":"AAAA"}"#);
        assert!(!i.token);
        // No `type` in the data: the SSE event name decides.
        let i = info("response.refusal.delta", r#"{"delta":"no"}"#);
        assert!(i.token && i.visible);
        let i = info(
            "",
            r#"{"type":"response.some_future.delta","delta":"x","new":[1]}"#,
        );
        assert!(!i.token);
    }

    #[test]
    fn usage_and_errors() {
        let i = info(
            "",
            r#"{"type":"response.completed","response":{"error":null,"usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":4},"output_tokens":18,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":38}}}"#,
        );
        assert_eq!(
            i.usage,
            Usage {
                input: Some(20),
                output: Some(18),
                cached_input: Some(4),
                reasoning: Some(10),
                ..Usage::default()
            }
        );
        assert!(!i.error);
        let i = info(
            "",
            r#"{"type":"response.created","response":{"usage":null}}"#,
        );
        assert_eq!(i.usage, Usage::default());
        assert!(info("error", r#"{"type":"error","error":{"code":"x"}}"#).error);
        assert!(info("error", r#"{"type":"error","code":"x","message":"m"}"#).error);
        assert!(
            info(
                "",
                r#"{"type":"response.failed","response":{"usage":null}}"#
            )
            .error
        );
        // A non-streamed response object.
        let i = info(
            "",
            r#"{"object":"response","error":null,"output":[],"usage":{"input_tokens":3,"output_tokens":5}}"#,
        );
        assert!(!i.error && !i.token);
        assert_eq!(i.usage.output, Some(5));
        assert!(info("", r#"{"object":"response","error":{"code":"x"}}"#).error);
        assert!(classify(b"", b"{").is_err());
    }
}
