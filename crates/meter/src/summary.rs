//! How a request ended and everything known about it then: the
//! [`Outcome`], where its output token count comes from ([`TokenSource`]),
//! and the [`Summary`] a recorder is handed at the end.

use std::time::Duration;

use super::event::{ServerTimings, Usage};

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
    /// The server's own timings of the request, each part when reported
    /// plausibly.
    pub server: ServerTimings,
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
    /// The model the response says answered (`model`, Gemini's
    /// `modelVersion`...; see [`response_model`](crate::response_model)),
    /// when it names one.
    pub response_model: Option<String>,
    /// How long the proxy waited on the client to take what it was sent
    /// (see [`StreamMeter::client_waited`](crate::StreamMeter::client_waited)),
    /// up to the end: none of the times above include it.
    pub client_wait: Duration,
    /// The proxy's own time on the request's path (see
    /// [`StreamMeter::proxy_time`](crate::StreamMeter::proxy_time)), when
    /// known.
    pub proxy_time: Option<Duration>,
}

impl Summary {
    /// The time outside the engine for the first token, in seconds:
    /// TTFT minus the server's queue and prefill (network, the HTTP
    /// server, tokenization and the proxy), when all three are known.
    /// Negative when the server's parts add up to more than the TTFT the
    /// proxy saw (its clock and the proxy's disagree): the caller counts
    /// that rather than observing it.
    pub fn outside_engine(&self) -> Option<f64> {
        let ttft = self.ttft?.as_secs_f64();
        Some(ttft - self.server.queue? - self.server.prefill?)
    }
}
