//! Hugging Face TGI native API (`POST /generate_stream`, and the
//! non-streamed `POST /generate`).
//!
//! TGI streams one SSE event per generated token (`data:` without a space
//! after the colon, no `[DONE]`): every event with a `token` object is a
//! *token event*, special tokens included (they were generated and cost a
//! decoding step), and all of them are visible (TGI does not separate
//! reasoning). The last event may carry `details` (only with
//! `details: true`), whose `generated_tokens` is the output count and
//! `input_length` the prompt length; without it the count is the number of
//! token events. A non-streamed body has the same `details`. An event or
//! body with an `error` field is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::json;

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut token = false;
    let mut usage = Usage::default();
    let mut error = false;
    let mut done = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"token" => token = r.present()?,
                b"generated_text" => done = r.not_null()?,
                b"details" => {
                    if r.open_object_or_null()? {
                        while let Some(key) = r.key()? {
                            match key {
                                b"generated_tokens" => usage.output = r.count()?,
                                b"input_length" => usage.input = r.count()?,
                                _ => r.skip()?,
                            }
                        }
                    }
                }
                b"error" => error = r.present()?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })?;
    Ok(EventInfo {
        token,
        visible: token,
        usage,
        error,
        done,
        timings: ServerTimings::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(data: &str) -> EventInfo {
        classify(b"", data.as_bytes()).unwrap()
    }

    #[test]
    fn tokens_usage_and_errors() {
        let i = info(
            r#"{"index":1,"token":{"id":13,"text":"\n","logprob":-0.5,"special":false},"generated_text":null,"details":null}"#,
        );
        assert!(i.token && i.visible);
        assert_eq!(i.usage, Usage::default());
        // Special tokens are generated tokens too.
        let i = info(
            r#"{"index":9,"token":{"id":2,"text":"","logprob":0.0,"special":true},"generated_text":"x","details":{"finish_reason":"eos_token","generated_tokens":9,"input_length":4,"seed":null}}"#,
        );
        assert!(i.token);
        assert_eq!(i.usage.output, Some(9));
        assert_eq!(i.usage.input, Some(4));
        let i = info(r#"{"error":"Input validation error","error_type":"validation"}"#);
        assert!(i.error && !i.token);
        let i = info(r#"{"generated_text":"hi","details":{"generated_tokens":2,"prefill":[]}}"#);
        assert!(!i.token);
        assert_eq!(i.usage.output, Some(2));
    }
}
