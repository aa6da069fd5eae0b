//! NVIDIA Triton generate extension (`POST /v2/models/{model}/generate_stream`,
//! and the non-streamed `.../generate`): SSE.
//!
//! A *token event* is an event with a non-empty `text_output` (visible).
//! Triton reports no token counts, so the output count is the number of
//! token events (a lower bound). An event with an `error` field is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError};
use super::json;

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut token = false;
    let mut error = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"text_output" => token = r.nonempty()?,
                b"error" => error = r.present()?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })?;
    Ok(EventInfo {
        token,
        visible: token,
        error,
        ..EventInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_errors() {
        let i = classify(
            b"",
            br#"{"model_name":"ensemble","model_version":"1","sequence_end":false,"text_output":" Paris"}"#,
        )
        .unwrap();
        assert!(i.token && i.visible);
        assert!(!classify(b"", br#"{"text_output":""}"#).unwrap().token);
        assert!(
            classify(b"", br#"{"error":"in ensemble 'x': failed"}"#)
                .unwrap()
                .error
        );
    }
}
