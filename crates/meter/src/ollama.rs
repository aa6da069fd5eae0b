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
use super::repeat::{Repeat, Strings};

/// Classifies one NDJSON line (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    read(data, None)
}

/// What a stream keeps of its last line for the next: a line that repeats
/// it but for its one string of output and the values nobody reads (each
/// line's `created_at`) is not read again ([`Repeat`]).
#[derive(Debug, Default)]
pub struct Lines {
    repeat: Repeat,
}

impl Lines {
    /// Classifies the stream's next line: [`classify`], with the line
    /// before it.
    pub fn classify(&mut self, _name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        if let Some(info) = self.repeat.info(data) {
            return Ok(info);
        }
        read(data, Some(&mut self.repeat))
    }
}

fn read(data: &[u8], repeat: Option<&mut Repeat>) -> Result<EventInfo, ParseError> {
    // The output of everything but the strings of output, which `strings`
    // holds.
    let mut out = Output::NONE;
    let mut strings = Strings::default();
    let mut usage = Usage::default();
    let mut timings = ServerTimings::default();
    let mut error = false;
    let mut done = false;
    let skipped = json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"response" => out = out.or(strings.read(r, true)?),
                b"thinking" => out = out.or(strings.read(r, false)?),
                b"message" => {
                    if r.open_object_or_null()? {
                        while let Some(key) = r.key()? {
                            let more = match key {
                                b"content" => strings.read(r, true)?,
                                b"tool_calls" => Output::visible(r.nonempty()?),
                                b"thinking" => strings.read(r, false)?,
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
        Ok(*r.skipped())
    })?;
    let info = |out: Output| EventInfo {
        token: out.token,
        visible: out.visible,
        usage,
        timings,
        error,
        done,
    };
    if let Some(repeat) = repeat {
        repeat.keep(data, &strings, &skipped, info(out));
    }
    Ok(info(out.or(strings.out)))
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

    /// Lines that differ in their `created_at` and their string of output
    /// match the last line and classify as they do alone; the final line,
    /// its counts read, does not.
    #[test]
    fn a_line_like_the_last_but_for_its_time_and_string_is_read_from_it() {
        let line = |at: &str, content: &str| {
            format!(
                r#"{{"model":"m","created_at":"2026-12-07T21:14:{at}Z","message":{{"role":"assistant","content":"{content}"}},"done":false}}"#
            )
        };
        let lines = [
            line("01.1", "Hi"),
            line("01.25", ""),
            line("02.5", r#""x""#),
            line("03", "there"),
            r#"{"model":"m","created_at":"2026-12-07T21:14:04Z","message":{"role":"assistant","content":""},"done":true,"eval_count":4,"eval_duration":2000000}"#.to_owned(),
        ];
        let mut stream = Lines::default();
        let mut matched = Vec::new();
        for data in &lines {
            let i = stream.classify(b"", data.as_bytes());
            assert_eq!(i, classify(b"", data.as_bytes()), "{data}");
            matched.push(stream.repeat.matched());
        }
        assert_eq!(matched, [false, true, true, true, false]);
        let last = stream.classify(b"", lines[4].as_bytes()).unwrap();
        assert!(last.done && !last.token);
        assert_eq!(last.usage.output, Some(4));
        // Tool calls are output beside the string.
        let tools = r#"{"created_at":"a","message":{"content":"","tool_calls":[{"function":{"name":"f"}}]},"done":false}"#;
        let mut stream = Lines::default();
        for _ in 0..2 {
            let i = stream.classify(b"", tools.as_bytes()).unwrap();
            assert!(i.token && i.visible);
        }
        assert!(stream.repeat.matched());
    }
}
