//! NVIDIA Triton generate extension (`POST /v2/models/{model}/generate_stream`,
//! and the non-streamed `.../generate`): SSE.
//!
//! A *token event* is an event with a non-empty `text_output` (visible).
//! Triton reports no token counts, so the output count is the number of
//! token events (a lower bound). An event with an `error` field is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use serde::Deserialize;

use super::json::{self, NonEmpty, Present, nonempty, present};
use super::{EventInfo, ParseError};

/// Classifies one SSE event's data (or a whole non-streamed body).
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let ev: Wire = json::parse(data)?;
    let token = nonempty(&ev.text_output);
    Ok(EventInfo {
        token,
        visible: token,
        error: present(&ev.error),
        ..EventInfo::default()
    })
}

#[derive(Deserialize)]
struct Wire {
    text_output: Option<NonEmpty>,
    error: Option<Present>,
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
