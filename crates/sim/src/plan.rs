//! Turning one request (its `x-sim-*` headers and JSON body) into a [`Plan`]:
//! everything the simulator needs to answer it, decided before any byte is
//! sent, so that the response is a pure function of the request.
//!
//! This module does no I/O and reads no clock; the caller supplies the
//! arrival instant.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use super::config::SimConfig;

/// Upper bound for every `x-sim-*-ms` header: a day. Bounding the values keeps
/// deadline arithmetic far from overflow and rejects obvious typos.
const MAX_MS: u64 = 86_400_000;
/// Upper bound for `x-sim-tokens` and the fault headers.
const MAX_TOKENS: u64 = 1_000_000;
/// Upper bound for `n`; larger requests are capped, not refused, like a
/// lenient server would.
pub(crate) const MAX_CHOICES: u32 = 16;

/// Why a request was refused with `400 Bad Request`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    /// An `x-sim-*` header is not a number in its allowed range.
    #[error("invalid header {name}: {reason}")]
    Header { name: &'static str, reason: String },
    /// The body is not JSON, or a known field has the wrong type.
    #[error("invalid JSON body: {0}")]
    Json(#[from] serde_json::Error),
    /// A known field has a value no server would accept.
    #[error("{0}")]
    Field(&'static str),
    /// The body could not be read (too large, or the client went away).
    #[error("could not read the request body: {0}")]
    Body(String),
}

impl RequestError {
    /// A short, bounded label for logs.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Header { .. } => "header",
            Self::Json(_) => "json",
            Self::Field(_) => "field",
            Self::Body(_) => "body",
        }
    }
}

/// Which OpenAI API a request came in on; it decides the wire shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `POST /v1/chat/completions`
    Chat,
    /// `POST /v1/completions` (legacy text completions)
    Completions,
}

/// What goes wrong in a response on purpose, and after how many tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    /// Tokens (per choice) sent before the fault; already capped at the
    /// response's token count.
    pub(crate) after: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// `x-sim-abort-after`: the body fails, so the connection is reset.
    Abort,
    /// `x-sim-error-after`: an in-stream error event, then a normal end.
    Error,
    /// `x-sim-stall-after`: nothing more is sent until the client leaves.
    Stall,
}

/// The `x-sim-*` headers of one request, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Overrides {
    pub(crate) ttft: Option<Duration>,
    pub(crate) itl: Option<Duration>,
    pub(crate) tokens: Option<u32>,
    pub(crate) status: Option<StatusCode>,
    pub(crate) headers_delay: Duration,
    /// `x-sim-stamp: 1`: stamp each frame with its send time.
    pub(crate) stamp: bool,
    /// `x-sim-queue-ms`: report vLLM's per-request metrics, this long of
    /// the TTFT spent queued.
    pub(crate) queue: Option<Duration>,
    /// The requested fault before capping `after` at the token count.
    pub(crate) fault: Option<Fault>,
    /// `x-sim-model`: the model the answer names, whatever the request
    /// asked for (as a gateway that resolves an alias answers).
    pub(crate) model: Option<String>,
    /// `x-sim-cached-tokens`: prompt tokens found in the prefix cache.
    pub(crate) cached_tokens: Option<u32>,
}

impl Overrides {
    /// Reads and validates every `x-sim-*` header; any bad value refuses the
    /// whole request, because a test that mistyped a header must not pass by
    /// accident on the default schedule.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Self, RequestError> {
        let ms =
            |name| Ok::<_, RequestError>(number(headers, name, MAX_MS)?.map(Duration::from_millis));
        let count = |name| {
            // The bound keeps every count within u32.
            Ok::<_, RequestError>(number(headers, name, MAX_TOKENS)?.map(|v| v as u32))
        };
        let status = match number(headers, "x-sim-status", 599)? {
            None => None,
            Some(code) if code >= 400 => StatusCode::from_u16(code as u16).ok(),
            Some(_) => {
                return Err(RequestError::Header {
                    name: "x-sim-status",
                    reason: "must be an error status (400..=599)".to_owned(),
                });
            }
        };
        let mut fault = None;
        for (name, kind) in [
            ("x-sim-abort-after", FaultKind::Abort),
            ("x-sim-error-after", FaultKind::Error),
            ("x-sim-stall-after", FaultKind::Stall),
        ] {
            if let Some(after) = count(name)? {
                if fault.is_some() {
                    return Err(RequestError::Header {
                        name,
                        reason: "only one of x-sim-abort-after, x-sim-error-after, \
                                 x-sim-stall-after may be given"
                            .to_owned(),
                    });
                }
                fault = Some(Fault { kind, after });
            }
        }
        Ok(Self {
            ttft: ms("x-sim-ttft-ms")?,
            itl: ms("x-sim-itl-ms")?,
            tokens: count("x-sim-tokens")?,
            status,
            headers_delay: ms("x-sim-headers-delay-ms")?.unwrap_or_default(),
            stamp: number(headers, "x-sim-stamp", 1)? == Some(1),
            queue: ms("x-sim-queue-ms")?,
            cached_tokens: count("x-sim-cached-tokens")?,
            fault,
            model: match headers.get("x-sim-model") {
                None => None,
                Some(v) => match v.to_str() {
                    Ok(name)
                        if !name.is_empty()
                            && name.len() <= 200
                            && !name.contains('"')
                            && !name.contains('\\') =>
                    {
                        Some(name.to_owned())
                    }
                    _ => {
                        return Err(RequestError::Header {
                            name: "x-sim-model",
                            reason: "must be 1 to 200 visible ASCII characters, without quotes or backslashes".to_owned(),
                        });
                    }
                },
            },
        })
    }
}

/// Parses a header holding a plain decimal number no larger than `max`.
fn number(headers: &HeaderMap, name: &'static str, max: u64) -> Result<Option<u64>, RequestError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let bad = |reason: String| RequestError::Header { name, reason };
    let text = value
        .to_str()
        .map_err(|_| bad("not visible ASCII".to_owned()))?
        .trim();
    let number: u64 = text
        .parse()
        .map_err(|_| bad(format!("{text:?} is not a non-negative integer")))?;
    if number > max {
        return Err(bad(format!("{number} is larger than {max}")));
    }
    Ok(Some(number))
}

/// The fields of a completion request the simulator looks at. Unknown fields
/// are ignored and missing ones take defaults, as real servers do; a known
/// field of the wrong type is refused.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawRequest {
    model: Option<String>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    n: Option<u32>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    messages: Option<Vec<Value>>,
    prompt: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

/// When each part of a response is due, relative to the request's arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Schedule {
    /// When the request arrived; every deadline is absolute from here, so
    /// lateness of one frame never shifts the next.
    pub(crate) start: Instant,
    pub(crate) ttft: Duration,
    pub(crate) itl: Duration,
    /// Output tokens per choice.
    pub(crate) tokens: u32,
}

impl Schedule {
    /// When token `k` (0-based) is due: `start + ttft + k * itl`.
    pub(crate) fn slot(&self, k: u32) -> Instant {
        let offset = self.ttft.saturating_add(self.itl.saturating_mul(k));
        // Header values are bounded, so this cannot overflow in practice; the
        // fallback only keeps the function total.
        self.start
            .checked_add(offset)
            .unwrap_or_else(|| self.start + Duration::from_secs(86_400 * 365))
    }

    /// When the response is complete: the last token's slot, or the first
    /// slot if there are no tokens at all.
    pub(crate) fn end(&self) -> Instant {
        self.slot(self.tokens.saturating_sub(1))
    }

    /// When a fault placed after `after` tokens fires: at the slot the next
    /// token would have had, or right after the last token.
    pub(crate) fn fault_at(&self, after: u32) -> Instant {
        if after < self.tokens {
            self.slot(after)
        } else {
            self.end()
        }
    }
}

/// Everything needed to answer one completion request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) api: Api,
    /// The model named by the request, or the configured one.
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// Choices per response (`n`), at least 1.
    pub(crate) n: u32,
    pub(crate) schedule: Schedule,
    /// `"length"` when `max_tokens` cut the response short, else `"stop"`.
    pub(crate) finish_reason: &'static str,
    pub(crate) prompt_tokens: u64,
    /// A deliberate failure, with `after` capped at the token count.
    pub(crate) fault: Option<Fault>,
    /// Whether chat streams start with a role-only chunk.
    pub(crate) role_chunk: bool,
    /// Stamp each frame with its send time and fingerprint the body.
    pub(crate) stamp: bool,
    /// Of the TTFT, the part spent queued, when the response reports
    /// vLLM's per-request metrics.
    pub(crate) queue: Option<Duration>,
    /// Prompt tokens found in the prefix cache, at most `prompt_tokens`;
    /// they count only in batch-limited mode's `/metrics`.
    pub(crate) cached_tokens: u64,
}

impl Plan {
    /// Builds the plan from the configured defaults, the validated headers
    /// and the raw body.
    pub(crate) fn new(
        api: Api,
        config: &SimConfig,
        overrides: &Overrides,
        start: Instant,
        body: &[u8],
    ) -> Result<Self, RequestError> {
        let raw: RawRequest = serde_json::from_slice(body)?;
        let n = match raw.n {
            Some(0) => return Err(RequestError::Field("n must be at least 1")),
            Some(n) => n.min(MAX_CHOICES),
            None => 1,
        };
        let wanted = overrides.tokens.unwrap_or(config.tokens);
        // `max_completion_tokens` is the newer name; take it when both are
        // given, as OpenAI does.
        let cap = match raw.max_completion_tokens.or(raw.max_tokens) {
            Some(0) => return Err(RequestError::Field("max_tokens must be at least 1")),
            cap => cap,
        };
        let (tokens, finish_reason) = match cap {
            Some(cap) if cap < wanted => (cap, "length"),
            _ => (wanted, "stop"),
        };
        let prompt_tokens = match api {
            Api::Chat => raw.messages.iter().flatten().map(message_words).sum(),
            Api::Completions => raw.prompt.as_ref().map_or(0, prompt_words),
        }
        .max(1);
        let ttft = overrides.ttft.unwrap_or(config.ttft);
        let fault = overrides.fault.map(|f| Fault {
            after: f.after.min(tokens),
            ..f
        });
        Ok(Self {
            api,
            model: overrides
                .model
                .clone()
                .or(raw.model)
                .unwrap_or_else(|| config.model.clone()),
            stream: raw.stream.unwrap_or(false),
            include_usage: raw
                .stream_options
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            n,
            schedule: Schedule {
                start,
                ttft,
                itl: overrides.itl.unwrap_or(config.itl),
                tokens,
            },
            finish_reason,
            prompt_tokens,
            fault,
            role_chunk: config.role_chunk,
            stamp: overrides.stamp || config.stamp,
            queue: overrides.queue.map(|q| q.min(ttft)),
            cached_tokens: overrides
                .cached_tokens
                .map_or(0, u64::from)
                .min(prompt_tokens),
        })
    }

    /// Output tokens over all choices, as reported in `usage`.
    pub(crate) fn completion_tokens(&self) -> u64 {
        u64::from(self.schedule.tokens) * u64::from(self.n)
    }
}

/// Prompt "tokens" of one chat message: whitespace-separated words of its
/// content, whether a string or an array of text parts.
fn message_words(message: &Value) -> u64 {
    match message.get("content") {
        Some(Value::String(text)) => words(text),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .map(words)
            .sum(),
        _ => 0,
    }
}

/// Prompt "tokens" of a legacy prompt: words of a string, one per token id,
/// summed over arrays of either.
fn prompt_words(prompt: &Value) -> u64 {
    match prompt {
        Value::String(text) => words(text),
        Value::Number(_) => 1,
        Value::Array(items) => items.iter().map(prompt_words).sum(),
        _ => 0,
    }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

#[cfg(test)]
// Panicking on unexpected input is how a test fails.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn plan(api: Api, headers: &[(&'static str, &str)], body: &str) -> Result<Plan, RequestError> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        let overrides = Overrides::from_headers(&map)?;
        Plan::new(
            api,
            &SimConfig::default(),
            &overrides,
            Instant::now(),
            body.as_bytes(),
        )
    }

    #[test]
    fn defaults_come_from_the_config() {
        let p = plan(Api::Chat, &[], "{}").unwrap();
        let config = SimConfig::default();
        assert_eq!(p.schedule.tokens, config.tokens);
        assert_eq!(p.schedule.ttft, config.ttft);
        assert_eq!(p.model, config.model);
        assert_eq!((p.n, p.stream, p.include_usage), (1, false, false));
        assert_eq!(p.prompt_tokens, 1);
        assert_eq!(p.finish_reason, "stop");
    }

    #[test]
    fn max_tokens_caps_and_reports_length() {
        let p = plan(Api::Chat, &[("x-sim-tokens", "10")], r#"{"max_tokens":4}"#).unwrap();
        assert_eq!((p.schedule.tokens, p.finish_reason), (4, "length"));
        let p = plan(
            Api::Chat,
            &[("x-sim-tokens", "10")],
            r#"{"max_completion_tokens":10}"#,
        )
        .unwrap();
        assert_eq!((p.schedule.tokens, p.finish_reason), (10, "stop"));
    }

    #[test]
    fn prompt_tokens_count_words() {
        let body = r#"{"messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hello there world"}]}]}"#;
        assert_eq!(plan(Api::Chat, &[], body).unwrap().prompt_tokens, 5);
        let body = r#"{"prompt":["a b", [1, 2, 3]]}"#;
        assert_eq!(plan(Api::Completions, &[], body).unwrap().prompt_tokens, 5);
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(matches!(
            plan(Api::Chat, &[], "{"),
            Err(RequestError::Json(_))
        ));
        assert!(matches!(
            plan(Api::Chat, &[], r#"{"n":"x"}"#),
            Err(RequestError::Json(_))
        ));
        assert!(matches!(
            plan(Api::Chat, &[], r#"{"n":0}"#),
            Err(RequestError::Field(_))
        ));
        for (name, value) in [
            ("x-sim-ttft-ms", "-1"),
            ("x-sim-itl-ms", "abc"),
            ("x-sim-tokens", "99999999"),
            ("x-sim-status", "200"),
        ] {
            assert!(
                matches!(
                    plan(Api::Chat, &[(name, value)], "{}"),
                    Err(RequestError::Header { .. })
                ),
                "{name}: {value}"
            );
        }
        let two = [("x-sim-abort-after", "1"), ("x-sim-stall-after", "2")];
        assert!(plan(Api::Chat, &two, "{}").is_err());
    }

    #[test]
    fn fault_is_capped_at_the_token_count() {
        let p = plan(
            Api::Chat,
            &[("x-sim-tokens", "3"), ("x-sim-error-after", "9")],
            "{}",
        )
        .unwrap();
        assert_eq!(
            p.fault,
            Some(Fault {
                kind: FaultKind::Error,
                after: 3
            })
        );
        assert_eq!(p.schedule.fault_at(3), p.schedule.end());
    }

    #[test]
    fn slots_are_absolute() {
        let start = Instant::now();
        let s = Schedule {
            start,
            ttft: Duration::from_millis(30),
            itl: Duration::from_millis(5),
            tokens: 10,
        };
        assert_eq!(s.slot(0), start + Duration::from_millis(30));
        assert_eq!(s.slot(9), start + Duration::from_millis(75));
        assert_eq!(s.end(), s.slot(9));
    }
}
