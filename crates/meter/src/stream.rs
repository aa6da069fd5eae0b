//! [`StreamMeter`], the metering state of one request: it frames the
//! response body as its head says, hands each event to the protocol side
//! (`Decoder`), stamps token events, and applies the rules of which
//! number is observed when (docs/metrics.md, in `Tally::finish`), so that
//! every recorder applies them the same way.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::api::Api;
use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::framer::{FrameResult, Framer};
use super::model::{response_id, response_model};
use super::recorder::Recorder;
use super::summary::{Outcome, Summary, TokenSource};
use super::{anthropic, decompress, gemini, jsonarray, ndjson, ollama, openai, sglang, sse};

/// The protocol side of one request: the API, and what it must remember
/// between events.
struct Decoder {
    api: Api,
    /// SGLang's cumulative-text tracking (empty, so free, for other APIs).
    sglang: sglang::Cumulative,
    /// The OpenAI chunks' shared envelope (likewise).
    openai: openai::Envelope,
    /// The Anthropic events' last delta (likewise).
    anthropic: anthropic::Deltas,
    /// Ollama's last line (likewise).
    ollama: ollama::Lines,
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
            Api::Anthropic => self.anthropic.classify(name, data),
            Api::Ollama => self.ollama.classify(name, data),
            Api::Gemini => self.gemini.get_or_insert_default().classify(name, data),
            api => api.classify(name, data),
        }
    }
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
    /// The server's timings, as far as it reported them plausibly.
    server: ServerTimings,
    error_event: bool,
    parse_errors: u32,
    /// Time the proxy waited on the client to take what it was sent, so
    /// far: taken out of every later stamp.
    client_wait: Duration,
    /// The proxy's own time on the request's path, when known.
    proxy_time: Option<Duration>,
    /// The model the response says answered, once read.
    response_model: Option<String>,
    /// A Responses API response's id was told the recorder.
    id_found: bool,
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
                    anthropic: anthropic::Deltas::default(),
                    ollama: ollama::Lines::default(),
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
                server: ServerTimings::default(),
                error_event: false,
                parse_errors: 0,
                client_wait: Duration::ZERO,
                proxy_time: None,
                response_model: None,
                id_found: false,
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

    /// The response head's `x-queue-time` (TGI's time in its queue, in
    /// whole or fractional milliseconds), when it has one.
    pub fn queue_time_header(&mut self, ms: &[u8]) {
        let queue = std::str::from_utf8(ms)
            .ok()
            .and_then(|ms| ms.trim().parse::<f64>().ok())
            .map_or(f64::NAN, |ms| ms / 1e3);
        self.tally.take_timings(ServerTimings {
            queue: Some(queue),
            ..ServerTimings::default()
        });
    }

    /// The proxy waited `wait` on the client to take what it had been
    /// sent (from handing a frame to the client's connection to that
    /// connection asking for the next): while it waits, the proxy reads
    /// nothing from the upstream, so what the upstream sends meanwhile is
    /// read late. Every later stamp is taken on a clock that stopped for
    /// it, so a slow reader does not show as a slow server; the wait is
    /// reported apart ([`Summary::client_wait`]).
    pub fn client_waited(&mut self, wait: Duration) {
        self.tally.client_wait += wait;
    }

    /// The proxy's own time on the request's path: from the request being
    /// all there to its being written to the upstream.
    pub fn proxy_time(&mut self, time: Duration) {
        self.tally.proxy_time = Some(time);
    }

    /// A body frame was read from the upstream at `now`.
    pub fn data(&mut self, now: Instant, frame: &Bytes) {
        let t = &mut self.tally;
        if t.recorder.is_none() {
            return;
        }
        let now = t.server_clock(now);
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
        let now = t.server_clock(now);
        match t.framing {
            Framing::Sse | Framing::Ndjson | Framing::JsonArray => {
                let at = t.t_frame.unwrap_or(now);
                self.framer.finish(&mut |ev| t.on_event(at, ev));
            }
            Framing::Json | Framing::JsonOrArray => {
                if let Some(parts) = t.body.take() {
                    let body = concat(parts);
                    t.found_model(response_model(&body));
                    t.found_id(&body);
                    match t.decoder.classify(b"", &body) {
                        Ok(info) => {
                            t.take_usage(info.usage);
                            t.take_timings(info.timings);
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
        let now = self.tally.server_clock(now);
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
            let now = self.tally.server_clock(Instant::now());
            self.tally.finish(now, Outcome::ClientAbort);
        }
    }
}

impl<R: Recorder> Tally<R> {
    /// `now` on the clock that stops while the proxy waits on the client.
    fn server_clock(&self, now: Instant) -> Instant {
        now.checked_sub(self.client_wait)
            .unwrap_or(now)
            .max(self.t0)
    }

    /// Keeps the model the response named, `model`, when it names one, and
    /// tells the recorder.
    fn found_model(&mut self, model: Option<String>) {
        if let Some(m) = model.as_deref().filter(|m| !m.is_empty())
            && let Some(r) = self.recorder.as_mut()
        {
            r.response_model(m);
        }
        self.response_model = model;
    }

    /// Tells the recorder the id a Responses API response names in
    /// `data` (its first events, or its whole body), once.
    fn found_id(&mut self, data: &[u8]) {
        if self.decoder.api != Api::Responses || self.id_found {
            return;
        }
        if let Some(id) = response_id(data)
            && let Some(r) = self.recorder.as_mut()
        {
            r.response_id(&id);
            self.id_found = true;
        }
    }

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
        // The model is read from the first events and the terminal one (it
        // is on the first with every API that names it but llama.cpp's,
        // which names it at the end), not from every event.
        if self.response_model.is_none() && (index < 3 || info.done) {
            self.found_model(response_model(ev.data));
        }
        if index < 3 {
            self.found_id(ev.data);
        }
        self.take_usage(info.usage);
        if !info.timings.is_empty() {
            self.take_timings(info.timings);
        }
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

    /// Takes the server's timings if every part reported is plausible (see
    /// [`ServerTimings::plausible`]); one implausible part makes the whole
    /// report untrustworthy: none of it is taken, and it is a parse error.
    fn take_timings(&mut self, timings: ServerTimings) {
        if timings.plausible() {
            self.server.update(timings);
        } else {
            self.parse_error(ParseError::ImplausibleTimings);
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
            server: self.server,
            events: self.events,
            token_events: self.token_events,
            first_token_event: self.first_token_event,
            first_visible_event: self.first_visible_event,
            terminal_event: self.t_done.map(|(_, index)| index),
            parse_errors: self.parse_errors,
            client_wait: self.client_wait,
            proxy_time: self.proxy_time,
            response_model: self.response_model.take(),
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
