//! Ollama native API (`POST /api/generate`, `POST /api/chat`): NDJSON.
//!
//! Each line is one JSON object. A *token event* is a line with non-empty
//! `response` (generate), `message.content` (chat), `thinking` /
//! `message.thinking` (reasoning, not visible), or a non-empty
//! `message.tool_calls` list (Ollama sends each tool call whole, in one
//! line). The final line has `done: true` and the counts: `eval_count`
//! (output) and `prompt_eval_count` (input; absent when the prompt was fully
//! cached, since Ollama omits zero values), and the server's timings in
//! nanoseconds: `load_duration` (from the request's arrival to its model
//! being ready: the scheduler's queue and loading the model), read as the
//! queue; `prompt_eval_duration`, the prefill; `eval_duration`, the decode.
//! A line with an `error` field is an error. A non-streamed body is the
//! final line's shape.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::json::{self, Output};

/// Classifies one NDJSON line (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut out = Output::NONE;
    let mut usage = Usage::default();
    let mut timings = ServerTimings::default();
    let mut error = false;
    let mut done = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"response" => out = out.or(Output::visible(r.nonempty()?)),
                b"thinking" => out = out.or(Output::reasoning(r.nonempty()?)),
                b"message" => {
                    if r.open_object_or_null()? {
                        while let Some(key) = r.key()? {
                            let more = match key {
                                b"content" | b"tool_calls" => Output::visible(r.nonempty()?),
                                b"thinking" => Output::reasoning(r.nonempty()?),
                                _ => {
                                    r.skip()?;
                                    Output::NONE
                                }
                            };
                            out = out.or(more);
                        }
                    }
                }
                b"done" => done = r.is_true()?,
                b"eval_count" => usage.output = r.count()?,
                b"prompt_eval_count" => usage.input = r.count()?,
                b"load_duration" => timings.queue = nanos(r.number()?),
                b"prompt_eval_duration" => timings.prefill = nanos(r.number()?),
                b"eval_duration" => timings.decode = nanos(r.number()?),
                b"error" => error = r.present()?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })?;
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage,
        timings,
        error,
        done,
    })
}

fn nanos(ns: Option<f64>) -> Option<f64> {
    ns.map(|ns| ns / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(data: &str) -> EventInfo {
        classify(b"", data.as_bytes()).unwrap()
    }

    #[test]
    fn tokens_usage_and_errors() {
        assert!(info(r#"{"model":"m","response":"A","done":false}"#).visible);
        assert!(!info(r#"{"model":"m","response":"","done":false}"#).token);
        let i = info(r#"{"model":"m","response":"","thinking":"hmm","done":false}"#);
        assert!(i.token && !i.visible);
        let i =
            info(r#"{"message":{"role":"assistant","content":"","thinking":"x"},"done":false}"#);
        assert!(i.token && !i.visible);
        let i = info(
            r#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}"#,
        );
        assert!(i.token && i.visible);
        assert!(info(r#"{"message":{"role":"assistant","content":"我"},"done":false}"#).visible);
        let i = info(
            r#"{"response":"","done":true,"context":[1,2],"total_duration":5,"prompt_eval_count":31,"eval_count":32,"eval_duration":1485422000}"#,
        );
        assert!(!i.token);
        assert_eq!(i.usage.input, Some(31));
        assert_eq!(i.usage.output, Some(32));
        let i = info(r#"{"message":{"content":""},"done":true,"eval_count":12}"#);
        assert_eq!(i.usage.input, None);
        assert!(info(r#"{"error":"model 'x' not found"}"#).error);
    }
}
