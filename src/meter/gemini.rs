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

use serde::Deserialize;

use super::json::{self, Count, Fold, HasOutput, IsTrue, NonEmpty, Output, Present, present};
use super::{EventInfo, ParseError, Usage};

/// Classifies one event's data, one array element, or a whole body.
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let ev: Wire = json::parse(data)?;
    let out = ev.candidates.0;
    Ok(EventInfo {
        token: out.token,
        visible: out.visible,
        usage: ev.usage_metadata.map(Usage::from).unwrap_or_default(),
        error: present(&ev.error),
        done: false,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(default)]
    candidates: Fold<Candidate>,
    usage_metadata: Option<Metadata>,
    error: Option<Present>,
}

#[derive(Deserialize)]
struct Candidate {
    content: Option<Content>,
}

impl HasOutput for Candidate {
    fn output(&self) -> Output {
        self.content.as_ref().map_or(Output::NONE, |c| c.parts.0)
    }
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Fold<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    text: Option<NonEmpty>,
    thought: Option<IsTrue>,
    function_call: Option<Present>,
    executable_code: Option<Present>,
}

impl HasOutput for Part {
    fn output(&self) -> Output {
        let text = json::nonempty(&self.text);
        let thought = self.thought.as_ref().is_some_and(|t| t.0);
        Output::visible(
            (text && !thought) || present(&self.function_call) || present(&self.executable_code),
        )
        .or(Output::reasoning(text && thought))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    prompt_token_count: Option<Count>,
    candidates_token_count: Option<Count>,
    thoughts_token_count: Option<Count>,
    cached_content_token_count: Option<Count>,
}

impl From<Metadata> for Usage {
    fn from(m: Metadata) -> Self {
        let candidates = json::count(m.candidates_token_count);
        let thoughts = json::count(m.thoughts_token_count);
        let output = match (candidates, thoughts) {
            (None, None) => None,
            (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        Usage {
            input: json::count(m.prompt_token_count),
            output,
            cached_input: json::count(m.cached_content_token_count),
            reasoning: thoughts,
            ..Usage::default()
        }
    }
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
