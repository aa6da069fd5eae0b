//! Google Gemini (`:streamGenerateContent`, `:generateContent`): SSE with
//! CRLF (`alt=sse`), or one streamed JSON array whose elements are the same
//! objects, framed by [`jsonarray`](super::jsonarray).
//!
//! A *token event* is a chunk where some candidate's `content.parts[]` has
//! non-empty `text`, a `functionCall`, or `executableCode`. A text part with
//! `thought: true` is reasoning (not visible); the rest is visible. Each
//! chunk carries several tokens.
//!
//! `usageMetadata` is cumulative on every chunk (the last value wins):
//! `promptTokenCount` is the input (it includes `cachedContentTokenCount`),
//! and the output is `candidatesTokenCount + thoughtsTokenCount`, summed
//! within one chunk, because Gemini's candidate count leaves the thinking
//! out while every other API's output count includes it (and it is billed
//! as output). A chunk with an `error` object is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::json::{self, Error, Output, Reader};
use super::{EventInfo, ParseError, Usage};

/// Classifies one event's data, one array element, or a whole body.
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut out = Output::NONE;
    let mut usage = Usage::default();
    let mut error = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"candidates" => {
                    if r.open_list_or_null()? {
                        while r.element()? {
                            candidate(r, &mut out)?;
                        }
                    }
                }
                b"usageMetadata" => usage = metadata(r)?.unwrap_or_default(),
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
        error,
        done: false,
    })
}

/// One candidate: the output of its `content`.
fn candidate(r: &mut Reader<'_>, out: &mut Output) -> Result<(), Error> {
    r.open_object()?;
    while let Some(key) = r.key()? {
        match key {
            b"content" => content(r, out)?,
            _ => r.skip()?,
        }
    }
    Ok(())
}

/// A candidate's content: the output of its `parts`.
fn content(r: &mut Reader<'_>, out: &mut Output) -> Result<(), Error> {
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"parts" => {
                    if r.open_list_or_null()? {
                        while r.element()? {
                            part(r, out)?;
                        }
                    }
                }
                _ => r.skip()?,
            }
        }
    }
    Ok(())
}

/// One part of a candidate's content.
fn part(r: &mut Reader<'_>, out: &mut Output) -> Result<(), Error> {
    let mut text = false;
    let mut thought = false;
    let mut call = false;
    r.open_object()?;
    while let Some(key) = r.key()? {
        match key {
            b"text" => text = r.nonempty()?,
            b"thought" => thought = r.is_true()?,
            b"functionCall" | b"executableCode" => call |= r.present()?,
            _ => r.skip()?,
        }
    }
    *out = out
        .or(Output::visible((text && !thought) || call))
        .or(Output::reasoning(text && thought));
    Ok(())
}

/// A `usageMetadata` object (`None` for `null`). The output is the
/// candidates' count plus the thoughts' (see the module's documentation).
fn metadata(r: &mut Reader<'_>) -> Result<Option<Usage>, Error> {
    if !r.open_object_or_null()? {
        return Ok(None);
    }
    let mut usage = Usage::default();
    let mut candidates = None;
    while let Some(key) = r.key()? {
        match key {
            b"promptTokenCount" => usage.input = r.count()?,
            b"candidatesTokenCount" => candidates = r.count()?,
            b"thoughtsTokenCount" => usage.reasoning = r.count()?,
            b"cachedContentTokenCount" => usage.cached_input = r.count()?,
            _ => r.skip()?,
        }
    }
    usage.output = match (candidates, usage.reasoning) {
        (None, None) => None,
        (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
    };
    Ok(Some(usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(data: &str) -> EventInfo {
        classify(b"", data.as_bytes()).unwrap()
    }

    #[test]
    fn tokens_and_visibility() {
        let i = info(
            r#"{"candidates": [{"content": {"parts": [{"text": "The weather"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 148,"candidatesTokenCount": 4,"totalTokenCount": 152}}"#,
        );
        assert!(i.token && i.visible);
        assert_eq!(i.usage.input, Some(148));
        assert_eq!(i.usage.output, Some(4));
        let i = info(r#"{"candidates":[{"content":{"parts":[{"text":"hmm","thought":true}]}}]}"#);
        assert!(i.token && !i.visible);
        let i = info(
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}}]}}]}"#,
        );
        assert!(i.token && i.visible);
        let i = info(
            r#"{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"abc"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":10,"thoughtsTokenCount":90,"cachedContentTokenCount":2}}"#,
        );
        assert!(!i.token);
        assert_eq!(
            i.usage,
            Usage {
                input: Some(5),
                output: Some(100),
                cached_input: Some(2),
                reasoning: Some(90),
                ..Usage::default()
            }
        );
        assert!(!info(r#"{"candidates":[{"content":{"role":"model"}}]}"#).token);
        assert!(
            info(r#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#).error
        );
    }
}
