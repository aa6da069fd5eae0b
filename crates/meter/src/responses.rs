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
//! non-streamed response object; so are vLLM's per-request timings
//! (`metrics`, read as for chat completions). The other lifecycle events
//! (`response.created`, `in_progress`, `output_item.*`, `content_part.*`,
//! the `*.done` of text and arguments) carry nothing metered, and an
//! `error` event nothing but its type: their data is read up to its `type`
//! and no further (OpenAI writes it first), so the response object and
//! output items they repeat are not scanned (nor checked: a malformed rest
//! of such an event is not a parse error). An `error` event, a `response.failed`
//! event, or a non-streamed object with a non-null `error` is an error.
//! There is no `[DONE]`.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::json::{self, Error, Output, Reader};
use super::openai;

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut kind = None;
    let mut has_delta = false;
    // The response object of lifecycle events: its usage.
    let mut response = None;
    // Usage of a non-streamed response object.
    let mut usage = None;
    // vLLM's timings, of either.
    let mut timings = ServerTimings::default();
    // A non-streamed response's `error` (null when it succeeded). On a
    // streamed `error` event the error is nested here too.
    let mut error = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"type" => {
                    kind = r.string_or_null(Kind::from_name)?;
                    if matches!(kind, Some(Kind::Lifecycle | Kind::Error)) {
                        r.leave_the_rest();
                        break;
                    }
                }
                b"delta" => has_delta = r.nonempty()?,
                b"response" => {
                    if r.open_object_or_null()? {
                        let mut inner = None;
                        while let Some(key) = r.key()? {
                            match key {
                                b"usage" => inner = wire_usage(r)?,
                                b"metrics" => openai::vllm_metrics(r, &mut timings)?,
                                _ => r.skip()?,
                            }
                        }
                        response = Some(inner);
                    }
                }
                b"usage" => usage = wire_usage(r)?,
                b"metrics" => openai::vllm_metrics(r, &mut timings)?,
                b"error" => error = r.present()?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })?;
    let kind = kind.unwrap_or_else(|| Kind::from_name(name));
    let out = match kind {
        Kind::Visible => Output::visible(has_delta),
        Kind::Reasoning => Output::reasoning(has_delta),
        _ => Output::NONE,
    };
    let usage = match response {
        Some(inner) => inner,
        None => usage,
    };
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage: usage.unwrap_or_default(),
        timings,
        error: matches!(kind, Kind::Error | Kind::Failed) || error,
        done: matches!(kind, Kind::Failed | Kind::Completed),
    })
}

/// A usage object (`None` for `null`).
fn wire_usage(r: &mut Reader<'_>) -> Result<Option<Usage>, Error> {
    if !r.open_object_or_null()? {
        return Ok(None);
    }
    let mut usage = Usage::default();
    while let Some(key) = r.key()? {
        match key {
            b"input_tokens" => usage.input = r.count()?,
            b"output_tokens" => usage.output = r.count()?,
            b"input_tokens_details" => usage.cached_input = r.count_in(b"cached_tokens")?,
            b"output_tokens_details" => usage.reasoning = r.count_in(b"reasoning_tokens")?,
            _ => r.skip()?,
        }
    }
    Ok(Some(usage))
}

/// What an event type means for metering. Unknown types are `Other`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Visible,
    Reasoning,
    Error,
    Failed,
    /// `response.completed` or `response.incomplete`: the stream's terminal
    /// event (as `response.failed` is), carrying the final usage.
    Completed,
    /// A lifecycle event that carries no usage (see the module's doc).
    Lifecycle,
    Other,
}

impl Kind {
    /// The kind of an event type, from the data's `type` or the SSE
    /// `event:` name.
    fn from_name(name: &[u8]) -> Kind {
        match name {
            b"response.output_text.delta"
            | b"response.refusal.delta"
            | b"response.function_call_arguments.delta"
            | b"response.custom_tool_call_input.delta"
            | b"response.mcp_call_arguments.delta"
            | b"response.mcp_call.arguments.delta"
            | b"response.code_interpreter_call_code.delta"
            | b"response.code_interpreter_call.code.delta" => Kind::Visible,
            b"response.reasoning_text.delta"
            | b"response.reasoning_summary_text.delta"
            | b"response.reasoning.delta"
            | b"response.reasoning_summary.delta" => Kind::Reasoning,
            b"error" => Kind::Error,
            b"response.failed" => Kind::Failed,
            b"response.completed" | b"response.incomplete" => Kind::Completed,
            b"response.created"
            | b"response.in_progress"
            | b"response.queued"
            | b"response.output_item.added"
            | b"response.output_item.done"
            | b"response.content_part.added"
            | b"response.content_part.done"
            | b"response.output_text.done"
            | b"response.output_text.annotation.added"
            | b"response.refusal.done"
            | b"response.function_call_arguments.done"
            | b"response.reasoning_summary_part.added"
            | b"response.reasoning_summary_part.done"
            | b"response.reasoning_summary_text.done"
            | b"response.reasoning_text.done" => Kind::Lifecycle,
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

    #[test]
    fn lifecycle_events_are_read_up_to_their_type() {
        // What follows the type is not read: not even a broken rest.
        let i = info(
            "response.output_item.added",
            r#"{"type":"response.output_item.added","item":{"content":[{"text":"x"#,
        );
        assert!(!i.token && !i.error);
        assert_eq!(i.usage, Usage::default());
        assert!(info("error", r#"{"type":"error","error":{"code":"#).error);
        // The events that carry usage or a token are read whole.
        for data in [
            r#"{"type":"response.completed","response":{"usage":{"#,
            r#"{"type":"response.output_text.delta","delta":"#,
            r#"{"type":"response.failed","response":"#,
        ] {
            assert!(classify(b"", data.as_bytes()).is_err(), "{data}");
        }
        // A type after other keys: what came before it was read.
        let i = info(
            "",
            r#"{"response":{"usage":{"output_tokens":4}},"type":"response.in_progress","x":1}"#,
        );
        assert_eq!(i.usage.output, Some(4));
        // Without a `type`, the event name does not cut the read short.
        assert!(classify(b"response.created", br#"{"response":"#).is_err());
    }
}
