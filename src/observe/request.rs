//! A metered request as its observers see it: [`Started`] when it begins,
//! [`Finished`] when it ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::trace::Trace;
use meter::{Api, Operation, Summary};
use slo::{SloClass, Verdict};

/// What a metered request is observed as: its labels, its SLO class, and
/// the request head and client the access line names.
pub struct Started<'a> {
    pub route: &'a str,
    /// The model the request body named, if any.
    pub model: Option<&'a str>,
    /// The `slo` label.
    pub slo: Option<&'a str>,
    /// The tenant its route found (a name, `unknown` or `other`), when the
    /// route attributes requests to tenants.
    pub tenant: Option<&'a str>,
    /// The class `slo` names, when defined: the request is judged against
    /// it even if a reload changes the classes while it runs.
    pub class: Option<Arc<SloClass>>,
    pub parts: &'a http::request::Parts,
    pub client: SocketAddr,
    /// The trace it belongs to, when it has one.
    pub trace: Option<Trace>,
    /// Its API, what it asks of the model, and the upstream it goes to.
    pub api: Api,
    pub operation: Operation,
    pub upstream: &'a crate::config::Upstream,
    /// The route's `gen_ai.provider.name`, when it sets one.
    pub otel_provider_name: Option<&'a str>,
    /// A gap between its token events longer than this is a stall.
    pub stall_threshold: Duration,
    /// It is a slow reader's when its client held it up for more than this
    /// share of its time.
    pub slow_reader_share: f64,
}

/// The gaps between a request's token events, as far as they are worth
/// reporting on their own: its stalls (gaps longer than the stall
/// threshold), their total length, and its longest gap.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gaps {
    pub stalls: u32,
    pub stalled: Duration,
    pub longest: Option<Duration>,
}

impl Gaps {
    /// One more gap, a stall when longer than `threshold`.
    pub fn add(&mut self, gap: Duration, threshold: Duration) {
        if gap > threshold {
            self.stalls += 1;
            self.stalled += gap;
        }
        if self.longest.is_none_or(|longest| gap > longest) {
            self.longest = Some(gap);
        }
    }
}

/// A request that ended, as each of its observers is handed it (the
/// Prometheus recorder, the live series, the access log, the OTLP export).
pub struct Finished<'a> {
    pub summary: &'a Summary,
    /// The class it was judged against and the verdict, when its `slo`
    /// names a defined class.
    pub judged: Option<(&'a SloClass, Verdict)>,
    /// Its time to response headers, when a head came.
    pub headers: Option<Duration>,
    /// When it ended, read on the forwarding path (the body's last poll or
    /// its drop), like every other timestamp; it places the request in the
    /// live windows.
    pub at: Instant,
    /// The gaps between its token events.
    pub gaps: Gaps,
    /// Its client held it up for more than `metrics.slow_reader_share` of
    /// its time.
    pub slow_reader: bool,
}

/// Whether a request that lasted `elapsed` (on the clock that stops while
/// forwarding waits on the client) and waited `client_wait` on its client
/// waited on it for more than `share` of its whole time.
pub fn slow_reader(elapsed: Duration, client_wait: Duration, share: f64) -> bool {
    let whole = (elapsed + client_wait).as_secs_f64();
    whole > 0.0 && client_wait.as_secs_f64() > share * whole
}
