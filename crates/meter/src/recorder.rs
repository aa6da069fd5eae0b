//! Where the meter's observations go: the [`Recorder`] trait, and
//! [`Recording`], the recorder that keeps everything (for tests and tools).

use std::time::Duration;

use super::event::ParseError;
use super::summary::Summary;

/// Where the meter's observations go. The metrics module implements it with
/// Prometheus handles resolved once per request; tests collect into a
/// [`Recording`].
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
    /// The response named the model that answered (`model`, not empty):
    /// called at most once, when the meter first reads it (from the first
    /// events or the terminal one of a stream, which come before the
    /// tokens they carry are reported; from a whole body at its end), and
    /// before `finish`. A request that named no model takes its label from
    /// it.
    fn response_model(&mut self, model: &str) {
        let _ = model;
    }
    /// A Responses API response named its id (`id`, not empty, at most
    /// [`ID_MAX_BYTES`](crate::ID_MAX_BYTES)): called at most once, before
    /// `finish`; a later request names it as its `previous_response_id`.
    fn response_id(&mut self, id: &str) {
        let _ = id;
    }
    /// A payload problem degraded this request's metering.
    fn parse_error(&mut self, error: ParseError);
    /// The request ended; called exactly once, last.
    fn finish(&mut self, summary: &Summary);
}

/// A [`Recorder`] that keeps everything, for tests and tools.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Recording {
    pub response_headers: Option<Duration>,
    pub first_token: Option<Duration>,
    pub first_visible_token: Option<Duration>,
    pub gaps: Vec<Duration>,
    pub parse_errors: Vec<ParseError>,
    pub summary: Option<Summary>,
    /// How many times `finish` was called (must be exactly one).
    pub finishes: u32,
}

impl Recorder for &mut Recording {
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
