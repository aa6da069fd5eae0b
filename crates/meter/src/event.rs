//! What a protocol module makes of one event: the [`EventInfo`] with the
//! [`Usage`] it reports, or the [`ParseError`] that degrades the request's
//! metering.

use super::sse;

/// Token usage as reported by the upstream. `None` means "not reported".
///
/// The fields mean the same for every API, whatever the API's own split:
/// `input` is the whole prompt (cached parts included), `output` every
/// generated token (reasoning included). Where an API reports the parts
/// separately (Anthropic's cache reads and writes, Gemini's thoughts), its
/// module adds them up *within one usage report*; reports are never added
/// to each other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input: Option<u64>,
    /// Generated tokens, reasoning included.
    pub output: Option<u64>,
    /// Input tokens served from the prefix (KV) cache (part of `input`).
    pub cached_input: Option<u64>,
    /// Input tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; part of `input`).
    pub cache_creation_input: Option<u64>,
    /// Output tokens spent on reasoning (part of `output`).
    pub reasoning: Option<u64>,
}

impl Usage {
    /// Takes every field `newer` reports. Usage arrives once, twice, or
    /// cumulatively on every chunk: the last reported value is the total,
    /// values are never added up.
    pub fn update(&mut self, newer: Usage) {
        self.input = newer.input.or(self.input);
        self.output = newer.output.or(self.output);
        self.cached_input = newer.cached_input.or(self.cached_input);
        self.cache_creation_input = newer.cache_creation_input.or(self.cache_creation_input);
        self.reasoning = newer.reasoning.or(self.reasoning);
    }
}

/// The server's own account of where a request's time went, in seconds,
/// each part `None` when not reported (docs/metrics.md, "Where the time
/// goes"). Protocol modules fill it as read, in seconds whatever the
/// server's unit; the meter takes a report only if every part in it is
/// plausible, so a [`Summary`](super::Summary)'s are.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerTimings {
    /// Waiting in the server before the engine started on the request.
    pub queue: Option<f64>,
    /// From the engine starting on it to its first output token.
    pub prefill: Option<f64>,
    /// From its first output token to its last.
    pub decode: Option<f64>,
}

impl ServerTimings {
    /// The longest part a report may carry: a day.
    pub const MAX_SECONDS: f64 = 86_400.0;

    /// Takes every part `newer` reports (the last report wins, as for
    /// usage).
    pub fn update(&mut self, newer: ServerTimings) {
        self.queue = newer.queue.or(self.queue);
        self.prefill = newer.prefill.or(self.prefill);
        self.decode = newer.decode.or(self.decode);
    }

    /// Whether every part reported is a duration: finite, not negative,
    /// at most [`MAX_SECONDS`](Self::MAX_SECONDS).
    pub fn plausible(&self) -> bool {
        [self.queue, self.prefill, self.decode]
            .into_iter()
            .flatten()
            .all(|s| (0.0..=Self::MAX_SECONDS).contains(&s))
    }

    /// Whether nothing is reported.
    pub fn is_empty(&self) -> bool {
        self.queue.is_none() && self.prefill.is_none() && self.decode.is_none()
    }
}

/// Milliseconds, as read, in seconds.
pub(crate) fn millis(ms: Option<f64>) -> Option<f64> {
    ms.map(|ms| ms / 1e3)
}

/// What a protocol module found in one event.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EventInfo {
    /// The event carries generated output (a token event).
    pub token: bool,
    /// The output is visible: text, refusal or a tool call, not reasoning.
    /// Only meaningful with `token`.
    pub visible: bool,
    /// Usage reported by this event (fields not reported are `None`).
    pub usage: Usage,
    /// The server's timings of the request, when this event reports them.
    pub timings: ServerTimings,
    /// The event reports an error.
    pub error: bool,
    /// The protocol's terminal event: `[DONE]`, Anthropic's
    /// `message_stop`, Responses' `response.completed` / `incomplete` /
    /// `failed`, Ollama's `done: true`, llama.cpp's `stop: true`, TGI's
    /// event with `generated_text`. The stream has ended there, whatever
    /// comes after it.
    pub done: bool,
}

/// A payload problem. Metering of the request degrades; the bytes flow on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("event data is not valid JSON of the expected shape")]
    InvalidJson,
    #[error("event larger than the framing limit")]
    Oversized,
    #[error("non-streamed body larger than the metering limit")]
    BodyTooLarge,
    #[error("compressed body in an unknown coding, or one that failed to decode")]
    Compressed,
    #[error("usage report with a token count that is not a whole number or is past the limit")]
    ImplausibleUsage,
    #[error("server timings with a duration that is not a number, negative, or past a day")]
    ImplausibleTimings,
}

impl ParseError {
    /// Every kind, for pre-declaring label values.
    pub const ALL: [ParseError; 6] = [
        ParseError::InvalidJson,
        ParseError::Oversized,
        ParseError::BodyTooLarge,
        ParseError::Compressed,
        ParseError::ImplausibleUsage,
        ParseError::ImplausibleTimings,
    ];

    /// A short, bounded name usable as a metric label.
    pub fn kind(self) -> &'static str {
        match self {
            ParseError::InvalidJson => "invalid_json",
            ParseError::Oversized => "oversized_event",
            ParseError::BodyTooLarge => "body_too_large",
            ParseError::Compressed => "compressed",
            ParseError::ImplausibleUsage => "implausible_usage",
            ParseError::ImplausibleTimings => "implausible_timings",
        }
    }
}

impl From<sse::FrameError> for ParseError {
    fn from(e: sse::FrameError) -> Self {
        match e {
            sse::FrameError::Oversized => ParseError::Oversized,
        }
    }
}
