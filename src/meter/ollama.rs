//! Ollama native API (`POST /api/generate`, `POST /api/chat`): NDJSON.
//!
//! Each line is one JSON object. A *token event* is a line with non-empty
//! `response` (generate), `message.content` (chat), `thinking` /
//! `message.thinking` (reasoning, not visible), or a non-empty
//! `message.tool_calls` list (Ollama sends each tool call whole, in one
//! line). The final line has `done: true` and the counts: `eval_count`
//! (output) and `prompt_eval_count` (input; absent when the prompt was fully
//! cached, since Ollama omits zero values). The nanosecond durations are not
//! read: metering keeps its own clock. A line with an `error` field is an
//! error. A non-streamed body is the final line's shape.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use serde::Deserialize;

use super::json::{self, Count, NonEmpty, Output, Present, nonempty, present};
use super::{EventInfo, ParseError, Usage};

/// Classifies one NDJSON line (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let ev: Wire = json::parse(data)?;
    let mut out =
        Output::visible(nonempty(&ev.response)).or(Output::reasoning(nonempty(&ev.thinking)));
    if let Some(m) = &ev.message {
        out = out
            .or(Output::visible(
                nonempty(&m.content) || nonempty(&m.tool_calls),
            ))
            .or(Output::reasoning(nonempty(&m.thinking)));
    }
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage: Usage {
            input: json::count(ev.prompt_eval_count),
            output: json::count(ev.eval_count),
            ..Usage::default()
        },
        error: present(&ev.error),
        done: false,
    })
}

#[derive(Deserialize)]
struct Wire {
    response: Option<NonEmpty>,
    thinking: Option<NonEmpty>,
    message: Option<Message>,
    eval_count: Option<Count>,
    prompt_eval_count: Option<Count>,
    error: Option<Present>,
}

#[derive(Deserialize)]
struct Message {
    content: Option<NonEmpty>,
    thinking: Option<NonEmpty>,
    tool_calls: Option<NonEmpty>,
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
