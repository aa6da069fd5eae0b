//! The response body the proxy forwards.
//!
//! [`ResponseBody`] carries the upstream's response to the client frame for
//! frame, never merged, split or held back (a small one in a buffer of its
//! own, see `upstream::FromUpstream`). The upstream's body is wrapped in
//! two small bodies, each in its own file, innermost first:
//!
//! - [`Metered`] reads the clock once per frame (and once more when polled
//!   after one, to tell the meter how long the client held it), shows the
//!   frame to the meter by shared reference and returns it with the same
//!   bytes; it ends
//!   the meter exactly once: at the end of the body, on an upstream error,
//!   when told of the idle timeout, or, when the client goes away and hyper
//!   drops it, as a client abort (the meter's own `Drop`). Dropping it drops
//!   the upstream body, which closes the upstream connection, so the
//!   upstream sees the abort. It holds the request's slot among its
//!   route's requests in flight until the request ends there.
//! - [`IdleTimeout`] fails the body after the route's idle timeout of
//!   silence, from the last frame [`Metered`] stamped, and has the meter
//!   finish as `timeout` at that moment.

mod idle;
mod metered;
#[cfg(test)]
mod testing;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokio::time::Instant;

use super::delegate::delegate_body;
pub use super::upstream::{BoxError, FromUpstream};
use crate::observe::Meter;
use slo::in_flight::Entered;

pub use idle::{Activity, Idle, IdleTimeout};
pub use metered::Metered;

/// The body of every response the proxy sends.
pub enum ResponseBody {
    /// A response the proxy wrote itself (errors, 404).
    Local(Full<Bytes>),
    /// The upstream's body, forwarded (boxed: a local body is small).
    Upstream(Box<ForwardedBody>),
}

/// The upstream's body as the client is sent it: metered and holding the
/// request's slot, failed when idle.
pub type ForwardedBody = IdleTimeout<Metered<FromUpstream>>;

impl ResponseBody {
    pub fn local(bytes: impl Into<Bytes>) -> Self {
        ResponseBody::Local(Full::new(bytes.into()))
    }

    /// The upstream's body `inner`, whose head came at `now`, forwarded
    /// through `meter` (`None` for an unmetered request), failed after
    /// `idle` of silence, holding `slot` until it ends.
    pub(super) fn forwarded(
        inner: FromUpstream,
        meter: Option<Meter>,
        idle: Duration,
        now: Instant,
        slot: Entered,
    ) -> Self {
        let metered = Metered::new(inner, meter, now, Some(slot));
        ResponseBody::Upstream(Box::new(IdleTimeout::new(metered, idle)))
    }
}

delegate_body!(ResponseBody: enum {
    ResponseBody::Local,
    ResponseBody::Upstream,
}, Error = BoxError);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every forwarded stream holds one: within jemalloc's 1,792-byte size
    /// class (the next is 2,048), which the boxed decompressor of the meter
    /// keeps it in.
    #[test]
    fn an_upstream_body_fits_its_size_class() {
        let size = std::mem::size_of::<ForwardedBody>();
        assert!(size <= 1792, "{size} bytes");
    }
}
