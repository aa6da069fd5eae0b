//! Whose a failure is: the one mapping from what went wrong, before the
//! response head or in the body after it, to the side it is blamed on,
//! and so to the request's outcome (docs/metrics.md, `outcome`).
//!
//! The client's own request body comes first, wherever it broke: read
//! ahead, or still being sent when the upstream failed or answered. Then
//! connecting (refused or TLS: the proxy could not reach the upstream; out
//! of time: a timeout), then the upstream's exchange. Every cause is typed,
//! so blame is read from the types, never searched for in a chain.
//!
//! A response head can name its side too: a gateway in front of the engine
//! that shed the request says so in `x-llm-d-request-dropped-reason`
//! (llm-d's), and the request is the gateway's, not the engine's
//! ([`shed_by_gateway`]).

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use meter::Outcome;

use super::client_body::{BodyTimeout, ClientBodyError};
use super::upstream::{BodyError, Error};

/// The side a failure is blamed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The client's request was unusable: a malformed head, or a body
    /// malformed, cut short, or not matching its `Content-Length`.
    Client,
    /// The client's request body overran one of its time limits.
    ClientTimeout(BodyTimeout),
    /// The upstream could not be reached (refused, no address, TLS).
    Unreachable,
    /// The upstream took too long: to connect to, or to send its head.
    Timeout,
    /// The upstream's exchange failed.
    Upstream,
    /// The proxy refused the request itself: no route, or the route's
    /// `max_in_flight` reached.
    Refused,
    /// A gateway between the proxy and the engine shed the request (llm-d's
    /// flow control: saturated, its queue's deadline passed, shutting
    /// down, evicted) and answered it itself, which the client gets as it
    /// came. Like the proxy's own refusal, a failure of the path to the
    /// engine, not of the engine.
    Gateway,
}

impl Fault {
    /// The outcome of a request that ended with this fault.
    pub fn outcome(self) -> Outcome {
        match self {
            Fault::Client => Outcome::ClientAbort,
            Fault::ClientTimeout(_) => Outcome::ClientTimeout,
            Fault::Unreachable | Fault::Refused | Fault::Gateway => Outcome::ProxyError,
            Fault::Timeout => Outcome::Timeout,
            Fault::Upstream => Outcome::UpstreamError,
        }
    }
}

/// The response header in which llm-d's gateway says why it dropped a
/// request (answered `429` when saturated or evicting, `503` when shutting
/// down).
pub const DROPPED_REASON: HeaderName = HeaderName::from_static("x-llm-d-request-dropped-reason");

/// The reason a gateway gave for shedding the request whose response head
/// has `status` and `headers`, when it shed it: an error status (4xx or
/// 5xx) with the header. The request is then blamed on
/// [`Fault::Gateway`]. A successful answer that carries the header was
/// served, and is metered as any other.
pub fn shed_by_gateway(status: StatusCode, headers: &HeaderMap) -> Option<&HeaderValue> {
    let error = status.is_client_error() || status.is_server_error();
    headers.get(DROPPED_REASON).filter(|_| error)
}

/// A failure whose side is known from its type.
pub trait Blame {
    fn fault(&self) -> Fault;
}

impl Blame for ClientBodyError {
    fn fault(&self) -> Fault {
        match self {
            ClientBodyError::Failed(_) => Fault::Client,
            ClientBodyError::Timeout(timeout) => Fault::ClientTimeout(*timeout),
        }
    }
}

impl<E: Blame> Blame for h1::Error<E> {
    fn fault(&self) -> Fault {
        match self {
            h1::Error::RequestBody(e) => e.fault(),
            h1::Error::RequestLength => Fault::Client,
            h1::Error::Io(_)
            | h1::Error::ClosedBeforeHead
            | h1::Error::ClosedInBody
            | h1::Error::Head(_)
            | h1::Error::Chunked(_) => Fault::Upstream,
        }
    }
}

impl Blame for Error {
    fn fault(&self) -> Fault {
        match self {
            Error::ClientBody(e) => e.fault(),
            Error::H1(e) => e.fault(),
            Error::ConnectTimeout { .. } | Error::HeadTimeout(_) => Fault::Timeout,
            Error::Connect(io) if io.kind() == std::io::ErrorKind::TimedOut => Fault::Timeout,
            Error::Connect(_) | Error::Tls(_) => Fault::Unreachable,
            Error::H2Handshake(_) | Error::H2(_) | Error::SwitchedToH2 => Fault::Upstream,
        }
    }
}

impl Blame for BodyError {
    fn fault(&self) -> Fault {
        match self {
            BodyError::H1(e) => e.fault(),
            BodyError::ClientBody(e) => e.fault(),
            BodyError::H2(_) => Fault::Upstream,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const IDLE: BodyTimeout = BodyTimeout::Idle(Duration::from_millis(300));

    #[test]
    fn the_clients_body_is_blamed_on_the_client_before_and_after_the_head() {
        let sent = h1::Error::RequestBody(ClientBodyError::Timeout(IDLE));
        assert_eq!(sent.fault(), Fault::ClientTimeout(IDLE));
        let before = Error::H1(h1::Error::RequestBody(ClientBodyError::Timeout(IDLE)));
        assert_eq!(before.fault().outcome(), Outcome::ClientTimeout);
        let after = BodyError::H1(h1::Error::RequestBody(ClientBodyError::Timeout(IDLE)));
        assert_eq!(after.fault().outcome(), Outcome::ClientTimeout);
        let after = BodyError::H1(h1::Error::RequestLength);
        assert_eq!(after.fault().outcome(), Outcome::ClientAbort);
        let h2 = Error::ClientBody(ClientBodyError::Timeout(IDLE));
        assert_eq!(h2.fault(), Fault::ClientTimeout(IDLE));
    }

    #[test]
    fn a_request_a_gateway_shed_is_the_gateways() {
        let mut head = HeaderMap::new();
        let saturated = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(shed_by_gateway(saturated, &head), None);
        head.insert(
            "x-llm-d-request-dropped-reason",
            HeaderValue::from_static("rejected-saturated"),
        );
        for status in [saturated, StatusCode::SERVICE_UNAVAILABLE] {
            assert_eq!(
                shed_by_gateway(status, &head).map(HeaderValue::as_bytes),
                Some(&b"rejected-saturated"[..])
            );
        }
        // An answer that was served is not a shed one.
        assert_eq!(shed_by_gateway(StatusCode::OK, &head), None);
        assert_eq!(Fault::Gateway.outcome(), Outcome::ProxyError);
    }

    #[test]
    fn the_upstreams_own_failures_are_the_upstreams() {
        let cut = BodyError::H1(h1::Error::ClosedInBody);
        assert_eq!(cut.fault().outcome(), Outcome::UpstreamError);
        let refused = Error::Connect(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(refused.fault().outcome(), Outcome::ProxyError);
        let slow = Error::HeadTimeout(Duration::from_secs(1));
        assert_eq!(slow.fault().outcome(), Outcome::Timeout);
    }
}
