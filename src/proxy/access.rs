//! The access log: one structured line per metered request, written when
//! the request ends, with what an operator greps for (route, model, status,
//! outcome, TTFT, TPOT, E2EL, tokens) and the client's `x-request-id`, to
//! find the request in the client's and the upstream's logs. It wraps the
//! metrics recorder, so the meter reports once and both see the same
//! numbers.
//!
//! Lines go to the `tokenmeter::access` tracing target at INFO: turn them
//! off with `TOKENMETER_LOG=info,tokenmeter::access=off`.

use std::time::Duration;

use crate::meter::{ParseError, Recorder, Summary};
use crate::metrics::RequestRecorder;

/// The metrics recorder of a request, plus what its log line needs.
pub struct Logged {
    inner: RequestRecorder,
    route: String,
    /// The model the request named (before label bounding), at most 200
    /// characters.
    model: Option<String>,
    slo: Option<String>,
    method: http::Method,
    path: String,
    /// The request's `x-request-id` header, at most 128 characters.
    request_id: Option<String>,
}

/// The header whose value the access line carries as `request_id` (the
/// name load balancers, Envoy and nginx's `$request_id` setups use). The
/// proxy never adds one: requests are forwarded as they came.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

impl Logged {
    pub fn new(
        inner: RequestRecorder,
        route: &str,
        model: Option<&str>,
        slo: Option<&str>,
        method: &http::Method,
        path: &str,
        headers: &http::HeaderMap,
    ) -> Self {
        let request_id = headers
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|id| truncated(id, 128).to_owned());
        Self {
            inner,
            route: route.to_owned(),
            model: model.map(str::to_owned),
            slo: slo.map(str::to_owned),
            method: method.clone(),
            path: truncated(path, 256).to_owned(),
            request_id,
        }
    }
}

/// The first `max` characters of `s` (a path is rarely longer, and never
/// has more characters than bytes).
fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3)
}

impl Recorder for Logged {
    fn response_headers(&mut self, elapsed: Duration) {
        self.inner.response_headers(elapsed);
    }
    fn first_token(&mut self, ttft: Duration) {
        self.inner.first_token(ttft);
    }
    fn first_visible_token(&mut self, ttft: Duration) {
        self.inner.first_visible_token(ttft);
    }
    fn inter_token(&mut self, gap: Duration) {
        self.inner.inter_token(gap);
    }
    fn parse_error(&mut self, error: ParseError) {
        self.inner.parse_error(error);
    }
    fn finish(&mut self, s: &Summary) {
        self.inner.finish(s);
        let (tokens, source) = match s.output_tokens {
            Some((n, source)) => (Some(n), Some(source.as_str())),
            None => (None, None),
        };
        tracing::info!(
            target: "tokenmeter::access",
            route = %self.route,
            model = self.model.as_deref(),
            slo = self.slo.as_deref(),
            method = %self.method,
            path = %self.path,
            request_id = self.request_id.as_deref(),
            status = s.status,
            outcome = s.outcome.as_str(),
            streamed = s.streamed,
            ttft_ms = ms(s.ttft),
            tpot_ms = ms(s.tpot),
            e2el_ms = ms(s.e2el),
            elapsed_ms = ms(Some(s.elapsed)),
            output_tokens = tokens,
            output_source = source,
            input_tokens = s.usage.input,
            parse_errors = s.parse_errors,
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::truncated;

    #[test]
    fn truncated_keeps_the_first_characters() {
        assert_eq!(truncated("/v1/chat", 256), "/v1/chat");
        assert_eq!(truncated("abcdef", 3), "abc");
        assert_eq!(truncated("abc", 3), "abc");
        // Characters, not bytes: "é" is two bytes.
        assert_eq!(truncated("éééé", 3), "ééé");
        assert_eq!(truncated("ééé", 3), "ééé");
        let long = "/".repeat(300);
        assert_eq!(truncated(&long, 256).len(), 256);
    }
}
