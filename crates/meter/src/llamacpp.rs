//! llama.cpp server native API (`POST /completion`): SSE, no `[DONE]`.
//!
//! A *token event* is a chunk with non-empty `content` (visible). Chunks
//! with `content: ""` are tokens the server held back because they partly
//! matched a stop word: they are not token events, but they are still
//! counted in `tokens_predicted`. The final chunk has `stop: true`,
//! `tokens_predicted` (output), `tokens_evaluated` (the prompt) and
//! `timings` (`cache_n`, where reported, is the cached part of the prompt;
//! `prompt_ms` and `predicted_ms` are the server's prefill and decode).
//! Newer builds send `tokens_predicted` cumulatively on every chunk; the
//! last value wins. A chunk with an `error` field is an error. A
//! non-streamed body has the final chunk's shape.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError, ServerTimings, Usage, millis};
use super::json::{self, Error, Reader};

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut token = false;
    let mut usage = Usage::default();
    let mut timings = ServerTimings::default();
    let mut error = false;
    let mut done = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"content" => token = r.nonempty()?,
                b"stop" => done = r.is_true()?,
                b"tokens_predicted" => usage.output = r.count()?,
                b"tokens_evaluated" => usage.input = r.count()?,
                b"timings" => usage.cached_input = self::timings(r, &mut timings)?,
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
        timings,
        error,
        done,
    })
}

/// The `timings` object, in milliseconds, on the final chunk of the native
/// API and of its `/v1` streams: `prompt_ms` (prefill: the prompt's
/// evaluation, which ends with the first token's sampling) and
/// `predicted_ms` (decode: from the first token to the last). It reports
/// no queue. Returns `cache_n`, the cached part of the prompt, when there.
pub(crate) fn timings(
    r: &mut Reader<'_>,
    timings: &mut ServerTimings,
) -> Result<Option<u64>, Error> {
    let mut cached = None;
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"prompt_ms" => timings.prefill = millis(r.number()?),
                b"predicted_ms" => timings.decode = millis(r.number()?),
                b"cache_n" => cached = r.count()?,
                _ => r.skip()?,
            }
        }
    }
    Ok(cached)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(data: &str) -> EventInfo {
        classify(b"", data.as_bytes()).unwrap()
    }

    #[test]
    fn tokens_usage_and_errors() {
        assert!(
            info(r#"{"content":" Hello","stop":false,"id_slot":0,"multimodal":false}"#).visible
        );
        assert!(!info(r#"{"content":"","stop":false}"#).token);
        let i = info(
            r#"{"content":"","stop":true,"tokens_predicted":12,"tokens_evaluated":47,"timings":{"prompt_n":1,"predicted_n":12,"cache_n":46}}"#,
        );
        assert!(!i.token);
        assert_eq!(i.usage.output, Some(12));
        assert_eq!(i.usage.input, Some(47));
        assert_eq!(i.usage.cached_input, Some(46));
        assert!(info(r#"{"error":{"code":500,"message":"boom","type":"server_error"}}"#).error);
    }
}
