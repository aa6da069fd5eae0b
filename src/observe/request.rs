//! A metered request as its observers see it: [`Started`] when it begins,
//! [`Finished`] when it ends.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::labels::Labels;
use super::occupancy::Occupancy;
use super::trace::Trace;
use crate::config::Route;
use meter::{Api, Summary};
use slo::{SloClass, Verdict};

/// What the proxy tells of a metered request that starts: where it goes,
/// what it is, and where it came from. Its SLO class, tenant and labels
/// are resolved from this, once, by [`Observers::request`].
///
/// [`Observers::request`]: super::Observers::request
pub struct Started<'a> {
    /// The route it matched, in the configuration it started with.
    pub route: &'a Route,
    pub api: Api,
    /// What its body told (its model and turn), when it was read whole.
    pub body: Option<&'a meter::RequestFacts>,
    /// When its head arrived (`t0`).
    pub at: Instant,
    pub parts: &'a http::request::Parts,
    pub client: SocketAddr,
    /// The trace it belongs to, when it has one.
    pub trace: Option<Trace>,
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

impl Started<'_> {
    /// The model the request body named, if any.
    pub fn model(&self) -> Option<&str> {
        self.body.and_then(|b| b.model.as_deref())
    }
}

/// A request that ended, as each of its observers is handed it (the
/// Prometheus recorder, the live series, the access log, the OTLP export).
pub struct Finished<'a> {
    pub summary: &'a Summary,
    /// Its kind of turn, from its body.
    pub turn: meter::Turn,
    /// Its session's key and its number there, when it is in one.
    pub session: Option<&'a super::sessions::Place>,
    /// Its labels, final.
    pub labels: &'a Labels,
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
    /// The requests and engine figures it met when it was sent.
    pub occupancy: Occupancy,
    /// Its share of its route's GPU time, energy and money, when the route
    /// has GPUs.
    pub charged: Option<Charged>,
}

/// Whether a request that lasted `elapsed` (on the clock that stops while
/// forwarding waits on the client) and waited `client_wait` on its client
/// waited on it for more than `share` of its whole time.
pub fn slow_reader(elapsed: Duration, client_wait: Duration, share: f64) -> bool {
    let whole = (elapsed + client_wait).as_secs_f64();
    whole > 0.0 && client_wait.as_secs_f64() > share * whole
}

/// The first route of a configuration whose `routes` are given (YAML).
/// What a request that ended was charged, as its access line and span
/// show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Charged {
    pub gpu_seconds: f64,
    /// When the route has a GPU page.
    pub joules: Option<f64>,
    /// When the route is priced.
    pub cost: Option<f64>,
}

#[cfg(test)]
pub(crate) fn route(routes: &str) -> Route {
    let text = format!("routes:\n{routes}");
    let overrides = crate::config::Overrides::default();
    let mut config = crate::config::Config::parse(&text, "tokenmeter.yaml", &overrides).unwrap();
    config.routes.remove(0)
}
