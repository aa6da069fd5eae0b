//! Metering: from the bytes of one response to the numbers of docs/metrics.md.
//!
//! [`StreamMeter`] is the state of one request, fed on the forwarding path
//! with the clock readings of the proxy: the response head, each body frame
//! as it is read from the upstream, and how the body ended. It frames the
//! bytes ([`sse`], [`ndjson`] or [`jsonarray`], chosen by the response's
//! content type), asks the protocol module of the request's [`Api`] what
//! each event is, stamps token events, and reports through a [`Recorder`].
//!
//! Every protocol module (`openai`, `responses`, `anthropic`, `tgi`,
//! `ollama`, `llamacpp`, `gemini`, `sglang`, `triton`) has the same shape: a
//! `classify(name, data)` that reads one framed event (or a whole
//! non-streamed body) into an [`EventInfo`], walking it with the pull reader
//! of [`json`]: keys matched as bytes, the rest skipped, never a JSON tree.
//!
//! It must not know about Prometheus, axum or config files, and it never
//! sees the forwarded bytes mutably: it reads a shared reference to each
//! frame, and a problem in the payload is reported as a [`ParseError`] and
//! degrades this request's numbers, never the stream.
//!
//! The rules of which number is observed when (docs/metrics.md) live here, in
//! `Tally::finish`, so that every recorder applies them the same way.

pub mod anthropic;
pub mod decompress;
pub mod gemini;
pub mod json;
pub mod jsonarray;
pub mod llamacpp;
pub mod ndjson;
pub mod ollama;
pub mod openai;
pub mod responses;
pub mod sglang;
pub mod sse;
pub mod tgi;
pub mod triton;

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

/// How a request ended. Each request ends exactly once with one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// 2xx status and the body ended normally without an error event.
    Ok,
    /// Non-2xx status, an error event in the stream, or the upstream body
    /// failing mid-stream.
    UpstreamError,
    /// A configured timeout fired (connect, response headers, idle gap).
    Timeout,
    /// The client went away before the end, or sent an unusable request
    /// (a malformed body).
    ClientAbort,
    /// The client stalled: it sent nothing of its request body for the
    /// route's request-body timeout.
    ClientTimeout,
    /// The upstream could not be reached at all.
    ProxyError,
}

impl Outcome {
    /// Every outcome, for pre-declaring label values.
    pub const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::UpstreamError,
        Outcome::Timeout,
        Outcome::ClientAbort,
        Outcome::ClientTimeout,
        Outcome::ProxyError,
    ];

    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
            Outcome::ClientAbort => "client_abort",
            Outcome::ClientTimeout => "client_timeout",
            Outcome::ProxyError => "proxy_error",
        }
    }
}

/// Where an output token count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenSource {
    /// The upstream's own usage report (exact, billable).
    Usage,
    /// Counted token events: a lower bound, since one event may carry
    /// several tokens.
    Events,
}

impl TokenSource {
    /// The `source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::Events => "events",
        }
    }
}

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

/// What a protocol module found in one event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventInfo {
    /// The event carries generated output (a token event).
    pub token: bool,
    /// The output is visible: text, refusal or a tool call, not reasoning.
    /// Only meaningful with `token`.
    pub visible: bool,
    /// Usage reported by this event (fields not reported are `None`).
    pub usage: Usage,
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
}

impl ParseError {
    /// Every kind, for pre-declaring label values.
    pub const ALL: [ParseError; 5] = [
        ParseError::InvalidJson,
        ParseError::Oversized,
        ParseError::BodyTooLarge,
        ParseError::Compressed,
        ParseError::ImplausibleUsage,
    ];

    /// A short, bounded name usable as a metric label.
    pub fn kind(self) -> &'static str {
        match self {
            ParseError::InvalidJson => "invalid_json",
            ParseError::Oversized => "oversized_event",
            ParseError::BodyTooLarge => "body_too_large",
            ParseError::Compressed => "compressed",
            ParseError::ImplausibleUsage => "implausible_usage",
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

/// Longest `model` kept from a request body, in characters.
pub const MODEL_MAX_CHARS: usize = 200;

/// The `model` a JSON request body names at its top level (every API that
/// has one there: OpenAI's, Anthropic's, Ollama's, TGI's `/v1`...), cut to
/// [`MODEL_MAX_CHARS`]; `None` when the body is not one JSON object, has no
/// `model`, or its `model` is not a string of valid UTF-8.
///
/// Read with the metering reader, which skips the rest (the messages,
/// usually nearly all of the body) scanning sixteen bytes at a time and
/// without checking their UTF-8; a `model` key repeated is read each time,
/// the last one kept.
pub fn request_model(body: &[u8]) -> Option<String> {
    let mut model = None;
    json::read(body, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"model" => {
                    model = r
                        .string_or_null(|s| {
                            let s = std::str::from_utf8(s).ok()?;
                            Some(s.chars().take(MODEL_MAX_CHARS).collect::<String>())
                        })?
                        .flatten();
                }
                _ => r.skip()?,
            }
        }
        Ok(())
    })
    .ok()?;
    model
}

/// The API family of a metered request: which protocol module reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions or legacy completions.
    OpenAi,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// Hugging Face TGI native (`/generate_stream`, `/generate`).
    Tgi,
    /// Ollama native (`/api/generate`, `/api/chat`), NDJSON.
    Ollama,
    /// llama.cpp server native (`/completion`).
    LlamaCpp,
    /// Google Gemini (`:streamGenerateContent`, `:generateContent`).
    Gemini,
    /// SGLang native (`/generate`).
    Sglang,
    /// Triton generate extension (`/v2/models/{model}/generate[_stream]`).
    Triton,
    /// `POST /generate`, served by both TGI and SGLang: resolved to one of
    /// them by the first payload that tells (SGLang's have `text` /
    /// `meta_info`, TGI's `token` / `generated_text` / `details`).
    Generate,
}

impl Api {
    /// The APIs a route can name as its `protocol`, by those names: the
    /// one place they are spelled.
    pub const NAMED: [(&'static str, Api); 9] = [
        ("openai", Api::OpenAi),
        ("responses", Api::Responses),
        ("anthropic", Api::Anthropic),
        ("tgi", Api::Tgi),
        ("ollama", Api::Ollama),
        ("llamacpp", Api::LlamaCpp),
        ("gemini", Api::Gemini),
        ("sglang", Api::Sglang),
        ("triton", Api::Triton),
    ];

    /// The API a route's `protocol` names, if it names one.
    pub fn from_name(name: &str) -> Option<Api> {
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, api)| *api)
    }

    /// Its name in a route's `protocol` (`generate`, which no route names,
    /// for `POST /generate` before its payload tells TGI from SGLang).
    pub fn name(self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(_, api)| *api == self)
            .map_or("generate", |(name, _)| name)
    }

    /// Guesses the API from a request, for routes with `protocol: auto`.
    /// Only `POST` requests to inference endpoints are metered; `GET
    /// /v1/models`, health checks, OpenAI's `GET /v1/chat/completions`
    /// (stored completions) and the like pass through unmetered.
    ///
    /// Paths are matched by their end, so any prefix (`/v1`, `/openai/v1`,
    /// a gateway's `/team-a`) works. `/completions` stays OpenAI's (llama.cpp
    /// also serves its native API there; set the route's protocol for that).
    pub fn detect(method: &http::Method, path: &str) -> Option<Api> {
        if method != http::Method::POST {
            return None;
        }
        let path = path.trim_end_matches('/');
        let last = path.rsplit('/').next().unwrap_or_default();
        if last.contains(":streamGenerateContent") || last.contains(":generateContent") {
            return Some(Api::Gemini);
        }
        if path.contains("/v2/models/") && (last == "generate" || last == "generate_stream") {
            return Some(Api::Triton);
        }
        let ends = |suffix: &str| path.ends_with(suffix);
        if ends("/chat/completions") || ends("/completions") {
            Some(Api::OpenAi)
        } else if ends("/responses") {
            Some(Api::Responses)
        } else if ends("/messages") {
            Some(Api::Anthropic)
        } else if ends("/api/generate") || ends("/api/chat") {
            Some(Api::Ollama)
        } else if ends("/generate_stream") {
            Some(Api::Tgi)
        } else if ends("/generate") {
            Some(Api::Generate)
        } else if ends("/completion") {
            Some(Api::LlamaCpp)
        } else {
            None
        }
    }

    /// Reads one event (or a whole non-streamed body) on its own, without
    /// the state a stream keeps between events (see [`sglang::Cumulative`]).
    pub fn classify(self, name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        match self {
            Api::OpenAi => openai::classify(name, data),
            Api::Responses => responses::classify(name, data),
            Api::Anthropic => anthropic::classify(name, data),
            Api::Tgi => tgi::classify(name, data),
            Api::Ollama => ollama::classify(name, data),
            Api::LlamaCpp => llamacpp::classify(name, data),
            Api::Gemini => gemini::classify(name, data),
            Api::Sglang => sglang::classify(name, data),
            Api::Triton => triton::classify(name, data),
            Api::Generate => match sglang::sniff(data) {
                Some(false) => tgi::classify(name, data),
                _ => sglang::classify(name, data),
            },
        }
    }
}

/// The protocol side of one request: the API, and what it must remember
/// between events.
struct Decoder {
    api: Api,
    /// SGLang's cumulative-text tracking (empty, so free, for other APIs).
    sglang: sglang::Cumulative,
    /// The OpenAI chunks' shared envelope (likewise).
    openai: openai::Envelope,
    /// The Gemini chunks' shared tails, made at a stream's first Gemini
    /// event (a few hundred bytes no other stream needs).
    gemini: Option<Box<gemini::Tails>>,
}

impl Decoder {
    fn classify(&mut self, name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        if self.api == Api::Generate {
            match sglang::sniff(data) {
                Some(true) => self.api = Api::Sglang,
                Some(false) => self.api = Api::Tgi,
                None => {}
            }
        }
        match self.api {
            Api::Sglang => self.sglang.classify(name, data),
            Api::OpenAi => self.openai.classify(name, data),
            Api::Gemini => self.gemini.get_or_insert_default().classify(name, data),
            api => api.classify(name, data),
        }
    }
}

/// Where the meter's observations go. The metrics module implements it with
/// Prometheus handles resolved once per request; tests collect into a
/// [`Trace`].
pub trait Recorder {
    /// The response head, with `status`, arrived `elapsed` after the
    /// request head.
    fn response_headers(&mut self, elapsed: Duration, status: u16);
    /// The first token event arrived `ttft` after the request head.
    fn first_token(&mut self, ttft: Duration);
    /// The first *visible* token event (text, refusal or tool call, not
    /// reasoning) arrived `ttft` after the request head. Called at most once,
    /// after `first_token` (or with it, when the first token is visible).
    fn first_visible_token(&mut self, ttft: Duration) {
        let _ = ttft;
    }
    /// A token event arrived `gap` after the previous one.
    fn inter_token(&mut self, gap: Duration);
    /// A payload problem degraded this request's metering.
    fn parse_error(&mut self, error: ParseError);
    /// The request ended; called exactly once, last.
    fn finish(&mut self, summary: &Summary);
}

/// Everything known about a request when it ends. `Option` fields are
/// `Some` exactly when docs/metrics.md says the number is observed.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub outcome: Outcome,
    /// The HTTP status the client received (`None` when it received none).
    pub status: Option<u16>,
    /// The response was a token stream (SSE, NDJSON or a streamed JSON
    /// array), not one body.
    pub streamed: bool,
    /// `t_first - t0`, when a first token event arrived (any outcome).
    pub ttft: Option<Duration>,
    /// Time from `t0` to the first *visible* token event (text, refusal or
    /// tool call, not reasoning), when one arrived (any outcome). Equal to
    /// `ttft` for models that do not stream reasoning.
    pub ttft_visible: Option<Duration>,
    /// `t_end - t0`, for requests that completed with outcome `ok`.
    pub e2el: Option<Duration>,
    /// `t_end - t0` whatever the outcome (for a failed or aborted request,
    /// how long it had lasted): SLO judging needs it to tell whether a
    /// threshold had passed before the request ended.
    pub elapsed: Duration,
    /// `(t_last - t_first) / (N - 1)`, for completed streams with `N >= 2`.
    pub tpot: Option<Duration>,
    /// Output tokens `N` and where the count comes from; `None` when unknown
    /// (no usage and no countable stream, or metering degraded).
    pub output_tokens: Option<(u64, TokenSource)>,
    /// Everything the upstream reported.
    pub usage: Usage,
    /// Events dispatched (SSE events including `[DONE]`, NDJSON lines, or
    /// array elements).
    pub events: u64,
    /// Token events among them.
    pub token_events: u64,
    /// 0-based index among `events` of the first token event.
    pub first_token_event: Option<u64>,
    /// 0-based index among `events` of the first visible token event.
    pub first_visible_event: Option<u64>,
    /// 0-based index among `events` of the protocol's terminal event
    /// (`[DONE]`, `message_stop`...), where the stream ended.
    pub terminal_event: Option<u64>,
    /// Payload problems met.
    pub parse_errors: u32,
}

/// How the response body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Not yet known (before the response head).
    Pending,
    /// A token stream of SSE events.
    Sse,
    /// A token stream of JSON lines.
    Ndjson,
    /// A token stream of the elements of one JSON array.
    JsonArray,
    /// A JSON response of an API that may stream it as an array (Gemini):
    /// the first non-blank byte decides between `JsonArray` (`[`) and
    /// `Json`.
    JsonOrArray,
    /// One JSON body, read at the end for its usage.
    Json,
    /// Not read at all (error statuses, unknown or compressed content).
    Opaque,
}

/// Size limits of what the meter keeps while reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest SSE line or event, NDJSON line or array element.
    pub event: usize,
    /// Largest non-streamed body kept to read its usage.
    pub body: usize,
    /// Largest token count a usage report may carry (in any field): a
    /// larger one is not plausible, and the report is not taken.
    pub usage_tokens: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            event: sse::DEFAULT_LIMIT,
            body: 16 << 20,
            usage_tokens: 10_000_000,
        }
    }
}

/// The metering state of one request.
///
/// Fed from the forwarding path with the proxy's own clock readings. It is
/// finished exactly once: by [`end`](Self::end), [`fail`](Self::fail), or,
/// when dropped unfinished (the client went away and the response future or
/// body was dropped), as [`Outcome::ClientAbort`].
pub struct StreamMeter<R: Recorder> {
    /// Everything but the framer, so the framer's callback can borrow it.
    tally: Tally<R>,
    framer: Framer,
    /// Decodes a copy of a compressed body (`content-encoding`); boxed, as
    /// few bodies are, so every other meter is smaller.
    codec: Option<Box<decompress::Decompressor>>,
}

/// The framer of the response body, chosen with the response head.
enum Framer {
    None,
    Sse(sse::SseFramer),
    Ndjson(ndjson::NdjsonFramer),
    JsonArray(jsonarray::JsonArrayFramer),
}

impl Framer {
    fn feed(&mut self, chunk: &[u8], on: &mut impl FnMut(FrameResult<'_>)) {
        match self {
            Framer::None => {}
            Framer::Sse(f) => f.feed(chunk, on),
            Framer::Ndjson(f) => f.feed(chunk, on),
            Framer::JsonArray(f) => f.feed(chunk, on),
        }
    }

    fn finish(&mut self, on: &mut impl FnMut(FrameResult<'_>)) {
        match self {
            Framer::None => {}
            Framer::Sse(f) => f.finish(on),
            Framer::Ndjson(f) => f.finish(on),
            Framer::JsonArray(f) => f.finish(on),
        }
    }
}

type FrameResult<'a> = Result<sse::Event<'a>, sse::FrameError>;

#[cfg(test)]
mod request_model_tests {
    use super::{MODEL_MAX_CHARS, request_model};

    #[test]
    fn reads_the_top_level_model_only() {
        let chat = br#"{"messages":[{"role":"user","content":"say \"model\": \"x\"","model":"inner"}],"model":"gpt-4o","stream":true}"#;
        assert_eq!(request_model(chat).as_deref(), Some("gpt-4o"));
        assert_eq!(
            request_model(b" \n{\"model\" : \"m\"}\n").as_deref(),
            Some("m")
        );
        assert_eq!(request_model(br#"{"messages":[{"model":"inner"}]}"#), None);
        // Escapes in the key and the value.
        assert_eq!(
            request_model(br#"{"mod\u0065l":"caf\u00e9\/1"}"#).as_deref(),
            Some("café/1")
        );
        // The last of repeated keys.
        assert_eq!(
            request_model(br#"{"model":"a","model":"b"}"#).as_deref(),
            Some("b")
        );
    }

    #[test]
    fn anything_else_names_no_model() {
        for body in [
            &br#"{"model":null}"#[..],
            br#"{"model":5}"#,
            br#"{"model":["a"]}"#,
            br#"["gpt-4o"]"#,
            br#""gpt-4o""#,
            br#"{"model":"gpt-4o","#,
            br#"{"model":"gpt-4o"} x"#,
            b"",
            b"model=gpt-4o",
            b"{\"model\":\"\xff\xfe\"}",
        ] {
            assert_eq!(
                request_model(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn invalid_utf8_elsewhere_does_not_hide_the_model() {
        assert_eq!(
            request_model(b"{\"messages\":[\"\xff\"],\"model\":\"m\"}").as_deref(),
            Some("m")
        );
    }

    #[test]
    fn long_models_are_cut() {
        let long = "é".repeat(MODEL_MAX_CHARS + 50);
        let body = format!(r#"{{"model":"{long}"}}"#);
        let got = request_model(body.as_bytes()).unwrap();
        assert_eq!(got.chars().count(), MODEL_MAX_CHARS);
        assert!(long.starts_with(&got));
    }

    /// On well-formed bodies it agrees with what the proxy used before, a
    /// `serde_json` parse into a struct with one `model` field.
    #[test]
    fn agrees_with_serde_json_on_request_bodies() {
        #[derive(serde::Deserialize)]
        struct Head {
            model: Option<String>,
        }
        let bodies = [
            r#"{"model":"llama-3.1-8b","messages":[{"role":"system","content":"You are \"helpful\"\n"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":64,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true}}"#,
            r#"{"model":"claude-sonnet-4","max_tokens":1024,"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"héllo ☃"}]}"#,
            r#"{"prompt":"once upon","model":"qwen2.5","options":{"num_predict":-1,"stop":["\n\n"]},"stream":false}"#,
            r#"{"inputs":"x","parameters":{"max_new_tokens":20}}"#,
            r#"{"model":"","messages":[]}"#,
            "{\n  \"model\": \"pretty\",\n  \"messages\": []\n}",
        ];
        for body in bodies {
            let serde = serde_json::from_str::<Head>(body)
                .ok()
                .and_then(|h| h.model);
            assert_eq!(request_model(body.as_bytes()), serde, "{body}");
        }
    }
}

/// What the framers' unit tests share.
#[cfg(test)]
mod framing_tests {
    use super::{FrameResult, Framer, sse::FrameError};

    /// One event as text: `(name, data)`.
    pub(super) type Text = Result<(String, String), FrameError>;

    /// The events `framer` yields for `chunks`, fed one at a time, then at
    /// `finish`.
    pub(super) fn frame_all(mut framer: Framer, chunks: &[&[u8]]) -> Vec<Text> {
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut out = Vec::new();
        let mut on = |r: FrameResult<'_>| out.push(r.map(|e| (lossy(e.name), lossy(e.data))));
        for c in chunks {
            framer.feed(c, &mut on);
        }
        framer.finish(&mut on);
        out
    }

    /// An unnamed event (NDJSON lines and JSON array elements have no name).
    pub(super) fn ok(data: &str) -> Text {
        Ok((String::new(), data.to_owned()))
    }
}

struct Tally<R: Recorder> {
    /// `None` once finished: the recorder is taken exactly once.
    recorder: Option<R>,
    decoder: Decoder,
    limits: Limits,
    framing: Framing,
    /// Request head received: the anchor of every latency.
    t0: Instant,
    status: Option<u16>,
    t_first: Option<Instant>,
    /// The first visible token event (TTFT excluding reasoning).
    t_first_visible: Option<Instant>,
    t_last: Option<Instant>,
    /// When the last body frame arrived; events flushed at end of stream
    /// (no terminating blank line) are stamped with it, not the end time.
    t_frame: Option<Instant>,
    /// When the protocol's terminal event arrived, and its index: the end
    /// of the stream, even if the body goes on, fails, or the client leaves
    /// after it.
    t_done: Option<(Instant, u64)>,
    events: u64,
    token_events: u64,
    first_token_event: Option<u64>,
    first_visible_event: Option<u64>,
    usage: Usage,
    error_event: bool,
    parse_errors: u32,
    /// Non-streamed body frames, kept as shared references to the forwarded
    /// bytes (no copy) until the end; `None` once over the limit.
    body: Option<Vec<Bytes>>,
    body_len: usize,
}

impl<R: Recorder> StreamMeter<R> {
    /// Starts metering a request whose head arrived at `t0`.
    pub fn new(t0: Instant, api: Api, limits: Limits, recorder: R) -> Self {
        Self {
            tally: Tally {
                recorder: Some(recorder),
                decoder: Decoder {
                    api,
                    sglang: sglang::Cumulative::default(),
                    openai: openai::Envelope::default(),
                    gemini: None,
                },
                limits,
                framing: Framing::Pending,
                t0,
                status: None,
                t_first: None,
                t_first_visible: None,
                t_last: None,
                t_frame: None,
                t_done: None,
                events: 0,
                token_events: 0,
                first_token_event: None,
                first_visible_event: None,
                usage: Usage::default(),
                error_event: false,
                parse_errors: 0,
                body: Some(Vec::new()),
                body_len: 0,
            },
            framer: Framer::None,
            codec: None,
        }
    }

    /// The response head arrived. `content_type` and `content_encoding` are
    /// the raw header values, when present.
    ///
    /// The content type decides how the body is read: `text/event-stream`
    /// is SSE; `application/x-ndjson` (and `application/ndjson`, `jsonl`,
    /// `jsonlines`) is NDJSON; JSON is one body, except for Gemini, whose
    /// streamed JSON array is framed element by element; anything else is
    /// not read, except for Ollama, which is read as NDJSON whatever the
    /// type (its streams are NDJSON, and some servers and proxies in front
    /// of it label them `text/plain` or not at all).
    pub fn response_head(
        &mut self,
        now: Instant,
        status: u16,
        content_type: Option<&[u8]>,
        content_encoding: Option<&[u8]>,
    ) {
        let t = &mut self.tally;
        t.status = Some(status);
        if let Some(r) = t.recorder.as_mut() {
            r.response_headers(now.saturating_duration_since(t.t0), status);
        }
        let ct = content_type.unwrap_or_default();
        let api = t.decoder.api;
        // Error bodies are not read; a compressed body is read through a
        // decoder, or not at all when its coding is unknown.
        self.codec = None;
        let readable = (200..300).contains(&status)
            && match decompress::Encoding::parse(content_encoding) {
                Ok(None) => true,
                Ok(Some(enc)) => match decompress::Decompressor::new(enc, t.limits.body) {
                    Ok(d) => {
                        self.codec = Some(Box::new(d));
                        true
                    }
                    Err(e) => {
                        t.parse_error(e);
                        false
                    }
                },
                Err(e) => {
                    t.parse_error(e);
                    false
                }
            };
        t.framing = if !readable {
            Framing::Opaque
        } else if starts_with_ignore_case(ct, b"text/event-stream") {
            Framing::Sse
        } else if is_ndjson(ct) {
            Framing::Ndjson
        } else if is_json(ct) {
            if api == Api::Gemini {
                Framing::JsonOrArray
            } else {
                Framing::Json
            }
        } else if api == Api::Ollama {
            Framing::Ndjson
        } else {
            Framing::Opaque
        };
        self.framer = match t.framing {
            Framing::Sse => Framer::Sse(sse::SseFramer::new(t.limits.event)),
            Framing::Ndjson => Framer::Ndjson(ndjson::NdjsonFramer::new(t.limits.event)),
            _ => Framer::None,
        };
    }

    /// A body frame was read from the upstream at `now`.
    pub fn data(&mut self, now: Instant, frame: &Bytes) {
        let t = &mut self.tally;
        if t.recorder.is_none() {
            return;
        }
        t.t_frame = Some(now);
        if matches!(t.framing, Framing::Pending | Framing::Opaque) {
            return;
        }
        let decoded = match self.codec.as_mut().map(|c| c.decode(frame)) {
            None => None,
            Some(Ok(text)) => Some(text),
            Some(Err(e)) => {
                // Undecodable from here on: stop reading, keep forwarding.
                self.codec = None;
                t.framing = Framing::Opaque;
                t.body = None;
                return t.parse_error(e);
            }
        };
        let bytes: &[u8] = decoded.unwrap_or(frame);
        if t.framing == Framing::JsonOrArray {
            match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
                None => return,
                Some(b'[') => {
                    t.framing = Framing::JsonArray;
                    self.framer =
                        Framer::JsonArray(jsonarray::JsonArrayFramer::new(t.limits.event));
                }
                Some(_) => t.framing = Framing::Json,
            }
        }
        match t.framing {
            Framing::Sse | Framing::Ndjson | Framing::JsonArray => {
                self.framer.feed(bytes, &mut |ev| t.on_event(now, ev))
            }
            // A decoded copy is owned; a plain frame is kept by reference.
            Framing::Json => t.keep_body(match decoded {
                Some(text) => Bytes::copy_from_slice(text),
                None => frame.clone(),
            }),
            Framing::Pending | Framing::JsonOrArray | Framing::Opaque => {}
        }
    }

    /// The upstream body ended normally at `now`.
    pub fn end(&mut self, now: Instant) {
        let t = &mut self.tally;
        if t.recorder.is_none() {
            return;
        }
        match t.framing {
            Framing::Sse | Framing::Ndjson | Framing::JsonArray => {
                let at = t.t_frame.unwrap_or(now);
                self.framer.finish(&mut |ev| t.on_event(at, ev));
            }
            Framing::Json | Framing::JsonOrArray => {
                if let Some(parts) = t.body.take() {
                    match t.decoder.classify(b"", &concat(parts)) {
                        Ok(info) => {
                            t.take_usage(info.usage);
                            t.error_event |= info.error;
                        }
                        Err(e) => t.parse_error(e),
                    }
                }
            }
            Framing::Pending | Framing::Opaque => {}
        }
        let outcome = t.completed();
        t.finish(now, outcome);
    }

    /// The request failed at `now` with `outcome`, before or during the
    /// body. `status` is what the proxy answered the client itself (502,
    /// 504) when the failure came before any upstream response head.
    pub fn fail(&mut self, now: Instant, outcome: Outcome, status: Option<u16>) {
        if status.is_some() && self.tally.status.is_none() {
            self.tally.status = status;
        }
        self.tally.finish(now, outcome);
    }

    /// Whether the request has ended.
    pub fn is_finished(&self) -> bool {
        self.tally.recorder.is_none()
    }
}

impl<R: Recorder> Drop for StreamMeter<R> {
    fn drop(&mut self) {
        if !self.is_finished() {
            self.tally.finish(Instant::now(), Outcome::ClientAbort);
        }
    }
}

impl<R: Recorder> Tally<R> {
    fn on_event(&mut self, now: Instant, ev: FrameResult<'_>) {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => return self.parse_error(e.into()),
        };
        let index = self.events;
        self.events += 1;
        let info = match self.decoder.classify(ev.name, ev.data) {
            Ok(info) => info,
            Err(e) => return self.parse_error(e),
        };
        self.take_usage(info.usage);
        self.error_event |= info.error;
        if info.done && self.t_done.is_none() {
            self.t_done = Some((now, index));
        }
        if !info.token {
            return;
        }
        self.token_events += 1;
        let Some(r) = self.recorder.as_mut() else {
            return;
        };
        match self.t_last {
            None => {
                self.t_first = Some(now);
                self.first_token_event = Some(index);
                r.first_token(now.saturating_duration_since(self.t0));
            }
            Some(prev) => r.inter_token(now.saturating_duration_since(prev)),
        }
        if info.visible && self.t_first_visible.is_none() {
            self.t_first_visible = Some(now);
            self.first_visible_event = Some(index);
            r.first_visible_token(now.saturating_duration_since(self.t0));
        }
        self.t_last = Some(now);
    }

    /// Takes what a usage report says, if every count in it is plausible:
    /// a whole number within the limit. One implausible count makes the
    /// whole report untrustworthy: none of it is taken, and it is a parse
    /// error (so the count falls back to nothing rather than to events).
    fn take_usage(&mut self, usage: Usage) {
        let max = self.limits.usage_tokens;
        let plausible = [
            usage.input,
            usage.output,
            usage.cached_input,
            usage.cache_creation_input,
            usage.reasoning,
        ]
        .into_iter()
        .all(|n| n.is_none_or(|n| n <= max));
        if plausible {
            self.usage.update(usage);
        } else {
            self.parse_error(ParseError::ImplausibleUsage);
        }
    }

    /// Keeps a frame of a non-streamed body, within the limit.
    fn keep_body(&mut self, frame: Bytes) {
        let fits = self.body_len + frame.len() <= self.limits.body;
        match (&mut self.body, fits) {
            (Some(parts), true) => {
                self.body_len += frame.len();
                parts.push(frame);
            }
            (Some(_), false) => {
                self.body = None;
                self.parse_error(ParseError::BodyTooLarge);
            }
            (None, _) => {}
        }
    }

    fn parse_error(&mut self, e: ParseError) {
        self.parse_errors += 1;
        tracing::debug!(error = %e, kind = e.kind(), "metering degraded");
        if let Some(r) = self.recorder.as_mut() {
            r.parse_error(e);
        }
    }

    /// The outcome of a response that came to its end: `ok` for a 2xx
    /// without an error event, else `upstream_error`.
    fn completed(&self) -> Outcome {
        if self.status.is_some_and(|s| (200..300).contains(&s)) && !self.error_event {
            Outcome::Ok
        } else {
            Outcome::UpstreamError
        }
    }

    fn finish(&mut self, now: Instant, outcome: Outcome) {
        let Some(mut recorder) = self.recorder.take() else {
            return;
        };
        // A stream ends at its terminal event: what happens after it (the
        // body's end coming later, a client that leaves as soon as it has
        // `[DONE]`, a connection cut afterwards) does not change how, or
        // when, it ended.
        let (now, outcome) = match self.t_done {
            Some((done, _)) => (done, self.completed()),
            None => (now, outcome),
        };
        let streamed = matches!(
            self.framing,
            Framing::Sse | Framing::Ndjson | Framing::JsonArray
        );
        let output_tokens = match self.usage.output {
            Some(n) => Some((n, TokenSource::Usage)),
            None if streamed && self.parse_errors == 0 => {
                Some((self.token_events, TokenSource::Events))
            }
            None => None,
        };
        let completed = outcome == Outcome::Ok;
        let tpot = match (self.t_first, self.t_last, output_tokens) {
            (Some(first), Some(last), Some((n, _))) if completed && n >= 2 => {
                Some(last.saturating_duration_since(first) / (n - 1).min(u32::MAX as u64) as u32)
            }
            _ => None,
        };
        let elapsed = now.saturating_duration_since(self.t0);
        let summary = Summary {
            outcome,
            status: self.status,
            streamed,
            ttft: self.t_first.map(|t| t.saturating_duration_since(self.t0)),
            ttft_visible: self
                .t_first_visible
                .map(|t| t.saturating_duration_since(self.t0)),
            e2el: completed.then_some(elapsed),
            elapsed,
            tpot,
            output_tokens,
            usage: self.usage,
            events: self.events,
            token_events: self.token_events,
            first_token_event: self.first_token_event,
            first_visible_event: self.first_visible_event,
            terminal_event: self.t_done.map(|(_, index)| index),
            parse_errors: self.parse_errors,
        };
        recorder.finish(&summary);
    }
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// The media type without parameters.
fn essence(ct: &[u8]) -> &[u8] {
    ct.split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii()
}

/// NDJSON under any of its names (`application/x-ndjson` is Ollama's).
fn is_ndjson(ct: &[u8]) -> bool {
    let e = essence(ct);
    [
        &b"application/x-ndjson"[..],
        b"application/ndjson",
        b"application/jsonl",
        b"application/x-jsonlines",
        b"application/jsonlines",
    ]
    .iter()
    .any(|t| e.eq_ignore_ascii_case(t))
}

/// `application/json`, `application/*+json`, with or without parameters.
fn is_json(ct: &[u8]) -> bool {
    let essence = essence(ct);
    essence.eq_ignore_ascii_case(b"application/json")
        || (starts_with_ignore_case(essence, b"application/")
            && essence.len() > 5
            && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json"))
}

fn concat(parts: Vec<Bytes>) -> Bytes {
    match parts.len() {
        0 => Bytes::new(),
        1 => parts.into_iter().next().unwrap_or_default(),
        _ => parts.concat().into(),
    }
}

/// A [`Recorder`] that keeps everything, for tests and tools.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Trace {
    pub response_headers: Option<Duration>,
    pub first_token: Option<Duration>,
    pub first_visible_token: Option<Duration>,
    pub gaps: Vec<Duration>,
    pub parse_errors: Vec<ParseError>,
    pub summary: Option<Summary>,
    /// How many times `finish` was called (must be exactly one).
    pub finishes: u32,
}

impl Recorder for &mut Trace {
    fn response_headers(&mut self, elapsed: Duration, _status: u16) {
        self.response_headers = Some(elapsed);
    }
    fn first_token(&mut self, ttft: Duration) {
        self.first_token = Some(ttft);
    }
    fn first_visible_token(&mut self, ttft: Duration) {
        self.first_visible_token = Some(ttft);
    }
    fn inter_token(&mut self, gap: Duration) {
        self.gaps.push(gap);
    }
    fn parse_error(&mut self, error: ParseError) {
        self.parse_errors.push(error);
    }
    fn finish(&mut self, summary: &Summary) {
        self.finishes += 1;
        self.summary = Some(summary.clone());
    }
}
