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
//! tree. A stream's chunks end their objects with the same bytes (the
//! model version and response id, the prompt's token details, a content's
//! role): [`Tails`] keeps them from one chunk to the next, and what repeats
//! is not read again.

use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::json::{self, Error, Members, Output, Reader, Suffix};

/// Classifies one event's data, one array element, or a whole body, alone.
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    read(data, None)
}

/// What consecutive chunks of one stream repeat at the end of their
/// objects, the same bytes in every chunk of a response: the chunk's
/// `"modelVersion"` and `"responseId"` after its candidates and usage, the
/// usage's `"promptTokensDetails"`, a content's `"role"` after its parts, a
/// candidate's `"index"` after its content. An object that goes on with
/// the last chunk's tail of it is closed where the tail starts, unread
/// (see [`Suffix`]).
#[derive(Debug, Default)]
pub struct Tails {
    chunk: Suffix,
    usage: Suffix,
    content: Suffix,
    candidate: Suffix,
}

impl Tails {
    /// Classifies the stream's next event: [`classify`], with the tails of
    /// the events before it.
    pub fn classify(&mut self, _name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        read(data, Some(self))
    }
}

fn read(data: &[u8], tails: Option<&mut Tails>) -> Result<EventInfo, ParseError> {
    let mut out = Output::NONE;
    let mut usage = Usage::default();
    let mut error = false;
    json::read(data, |r| {
        r.open_object()?;
        let (mut chunk, mut inner) = match tails {
            Some(t) => (
                Members::new(Some(&mut t.chunk)),
                Some((&mut t.usage, &mut t.content, &mut t.candidate)),
            ),
            None => (Members::new(None), None),
        };
        while let Some(key) = chunk.key(r)? {
            match key {
                b"candidates" => {
                    chunk.counted();
                    if r.open_list_or_null()? {
                        while r.element()? {
                            let tails = inner.as_mut().map(|(_, c, d)| (&mut **c, &mut **d));
                            candidate(r, &mut out, tails)?;
                        }
                    }
                }
                b"usageMetadata" => {
                    chunk.counted();
                    let tail = inner.as_mut().map(|(u, _, _)| &mut **u);
                    usage = metadata(r, tail)?.unwrap_or_default();
                }
                b"error" => {
                    chunk.counted();
                    error = r.present()?;
                }
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
        timings: ServerTimings::default(),
    })
}

/// One candidate: the output of its `content`. `tails` are the content's
/// and the candidate's.
fn candidate(
    r: &mut Reader<'_>,
    out: &mut Output,
    tails: Option<(&mut Suffix, &mut Suffix)>,
) -> Result<(), Error> {
    let (mut content_tail, tail) = tails.unzip();
    r.open_object()?;
    let mut members = Members::new(tail);
    while let Some(key) = members.key(r)? {
        match key {
            b"content" => {
                members.counted();
                content(r, out, content_tail.as_deref_mut())?;
            }
            _ => r.skip()?,
        }
    }
    Ok(())
}

/// A candidate's content: the output of its `parts`.
fn content(r: &mut Reader<'_>, out: &mut Output, tail: Option<&mut Suffix>) -> Result<(), Error> {
    if r.open_object_or_null()? {
        let mut members = Members::new(tail);
        while let Some(key) = members.key(r)? {
            match key {
                b"parts" => {
                    members.counted();
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
fn metadata(r: &mut Reader<'_>, tail: Option<&mut Suffix>) -> Result<Option<Usage>, Error> {
    if !r.open_object_or_null()? {
        return Ok(None);
    }
    let mut usage = Usage::default();
    let mut candidates = None;
    let mut members = Members::new(tail);
    while let Some(key) = members.key(r)? {
        match key {
            b"promptTokenCount" => {
                members.counted();
                usage.input = r.count()?;
            }
            b"candidatesTokenCount" => {
                members.counted();
                candidates = r.count()?;
            }
            b"thoughtsTokenCount" => {
                members.counted();
                usage.reasoning = r.count()?;
            }
            b"cachedContentTokenCount" => {
                members.counted();
                usage.cached_input = r.count()?;
            }
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
    use crate::json::damage::{damaged, damages};
    use proptest::prelude::*;

    /// The events of the captured Gemini stream.
    fn capture_events() -> Vec<Vec<u8>> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/data/streams/gemini-stream-text.sse");
        let text = std::fs::read(path).unwrap();
        text.split(|&b| b == b'\n')
            .filter_map(|line| line.strip_prefix(b"data: "))
            .map(|data| data.trim_ascii_end().to_vec())
            .collect()
    }

    /// Each event read through one tail, as a stream's are, gives what it
    /// gives alone, whatever came before it.
    fn same_as_alone(events: &[Vec<u8>]) -> Result<(), TestCaseError> {
        let mut tail = Tails::default();
        for (i, data) in events.iter().enumerate() {
            prop_assert_eq!(
                tail.classify(b"", data),
                classify(b"", data),
                "event {} {:?}",
                i,
                String::from_utf8_lossy(data)
            );
        }
        Ok(())
    }

    #[test]
    fn the_tail_is_reused_across_a_streams_chunks() {
        let events = capture_events();
        assert_eq!(events.len(), 2);
        same_as_alone(&[&events[..], &events[..]].concat()).unwrap();
        let mut tail = Tails::default();
        tail.classify(b"", &events[0]).unwrap();
        assert_eq!(
            tail.chunk.len(),
            br#","modelVersion": "gemini-2.5-flash","responseId": "DLb3acvOCMm4sOIP_4qTgQQ"}"#
                .len()
        );
        // A tail after a member that counts is never skipped: the usage
        // and an error after it are read.
        let usage = br#"{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"modelVersion":"m","usageMetadata":{"candidatesTokenCount":2}}"#;
        for _ in 0..2 {
            assert_eq!(tail.classify(b"", usage).unwrap().usage.output, Some(2));
            assert!(tail.chunk.is_empty());
        }
        let first = br#"{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"modelVersion":"m"}"#;
        tail.classify(b"", first).unwrap();
        assert_eq!(tail.chunk.len(), br#","modelVersion":"m"}"#.len());
        let error = br#"{"candidates":[],"error":{"code":500},"modelVersion":"m"}"#;
        assert!(tail.classify(b"", error).unwrap().error);
        // The same tail after a broken start is still an error, and a
        // broken tail is read.
        tail.classify(b"", first).unwrap();
        let broken = br#"{"candidates":[{"content":{"parts":[{"text":"a"}]}],"modelVersion":"m"}"#;
        assert_eq!(tail.classify(b"", broken), Err(ParseError::InvalidJson));
        let broken = br#"{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"modelVersion":"m"]"#;
        assert_eq!(tail.classify(b"", broken), Err(ParseError::InvalidJson));
        // A longer tail than a stream may keep is read every time.
        let long = format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"text":"a"}}]}}}}],"responseId":"{}"}}"#,
            "r".repeat(Suffix::MAX_LEN)
        );
        for _ in 0..2 {
            assert!(tail.classify(b"", long.as_bytes()).unwrap().token);
            assert!(tail.chunk.is_empty());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// Consecutive chunks of the capture, each damaged at one byte or
        /// not at all (a byte replaced, removed or inserted), classify
        /// through one tail as they do alone.
        #[test]
        fn damaged_chunks_classify_as_they_do_alone(start in 0usize..2, damage in damages()) {
            // Half of the damage aimed at the tails.
            same_as_alone(&damaged(&capture_events(), start, &damage, Some(80)))?;
        }
    }

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
