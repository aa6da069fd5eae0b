//! What the forwarding code reports of itself, apart from metered
//! requests: typed occurrences, which `observe` counts. (An event, in this
//! project, is one of a response stream's protocol events: the meter's.)
//!
//! The proxy says what happened (a request matched no route, a connection
//! was shed, a request was sent again...) and never how it is counted:
//! which family, which labels and which series are this module's and the
//! metrics' business, so the proxy names no metrics type.

/// Something the proxy did, or had done to it, that is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurrence<'a> {
    /// A request matched no route.
    Unrouted,
    /// A request of `route` was forwarded without metering.
    Passthrough { route: &'a str },
    /// The proxy answered a request itself, without calling the upstream
    /// (`route` is empty for a request refused before it was routed).
    Rejected { route: &'a str, reason: Rejection },
    /// An objective a client declared for its request on `route` was not a
    /// plausible duration, and was not used.
    DeclarationRefused {
        route: &'a str,
        objective: slo::ObjectiveKind,
    },
    /// A request of `route` was sent again on a new connection after a
    /// reused one failed in the keep-alive race.
    Retried { route: &'a str, race: h1::Race },
    /// A client connection was shed while the proxy listener was
    /// overloaded.
    Shed(Shed),
    /// A TLS handshake on a listener did not complete.
    Handshake(Listener, HandshakeFailure),
    /// A gateway in front of the engine of `route` shed a request, for the
    /// reason its response gave (`x-llm-d-request-dropped-reason`, as
    /// sent: [`GatewayReasons`] bounds it).
    ShedByGateway { route: &'a str, reason: &'a [u8] },
    /// The body of a metered request of `route`, of an API with
    /// conversations, could not be read for its turn.
    TurnUnread { route: &'a str },
}

/// One of the two listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Proxy,
    Admin,
}

impl Listener {
    pub const ALL: [Listener; 2] = [Listener::Proxy, Listener::Admin];

    /// The `listener` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Proxy => "proxy",
            Listener::Admin => "admin",
        }
    }
}

/// Why a TLS handshake did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not done within the request head timeout.
    Timeout,
    /// The client closed or reset the connection.
    Closed,
    /// Not TLS, or nothing in common (version, cipher, ALPN protocol).
    Protocol,
    /// A client certificate missing, refused or not verified.
    Certificate,
    Other,
}

impl HandshakeFailure {
    /// Every reason, in the order of their index.
    pub const ALL: [HandshakeFailure; 5] = [
        HandshakeFailure::Timeout,
        HandshakeFailure::Closed,
        HandshakeFailure::Protocol,
        HandshakeFailure::Certificate,
        HandshakeFailure::Other,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::Protocol => "protocol",
            HandshakeFailure::Certificate => "certificate",
            HandshakeFailure::Other => "other",
        }
    }

    /// The reason of a failed handshake's error, as tokio-rustls gives it
    /// (a rustls error inside an `InvalidData` I/O error).
    pub fn of(error: &std::io::Error) -> Self {
        use std::io::ErrorKind;
        if let Some(tls) = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return match tls {
                rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::InvalidCertRevocationList(_) => Self::Certificate,
                rustls::Error::InappropriateMessage { .. }
                | rustls::Error::InappropriateHandshakeMessage { .. }
                | rustls::Error::InvalidMessage(_)
                | rustls::Error::PeerIncompatible(_)
                | rustls::Error::PeerMisbehaved(_)
                | rustls::Error::NoApplicationProtocol
                | rustls::Error::AlertReceived(_) => Self::Protocol,
                _ => Self::Other,
            };
        }
        match error.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => Self::Closed,
            ErrorKind::InvalidData => Self::Protocol,
            _ => Self::Other,
        }
    }
}

/// Why the proxy answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Its route had `max_in_flight` requests in flight already.
    MaxInFlight,
    /// Its `Host` was missing where HTTP/1.1 needs one, or given twice.
    BadHost,
}

impl Rejection {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::MaxInFlight => "max_in_flight",
            Rejection::BadHost => "bad_host",
        }
    }
}

/// Why a connection was shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// Kept alive between requests.
    Idle,
    /// No complete request head within the overload timeout.
    Head,
    /// A request body read ahead that did not arrive within it.
    Body,
}

impl Shed {
    /// Every reason, in the order of their index (`Shed as usize`).
    pub const ALL: [Shed; 3] = [Shed::Idle, Shed::Head, Shed::Body];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Shed::Idle => "idle",
            Shed::Head => "head",
            Shed::Body => "body",
        }
    }
}

/// The `reason` label of requests a gateway shed: the reason as the
/// gateway sent it while it is a plausible one (1 to 64 visible ASCII
/// characters) among the first [`GatewayReasons::MAX`] distinct ones,
/// else `other`. An upstream may send anything; llm-d sends a handful
/// (`rejected-saturated`, `rejected-ttl-expired`, `evicted`...).
#[derive(Debug, Default)]
pub struct GatewayReasons(std::sync::Mutex<std::collections::HashSet<String>>);

impl GatewayReasons {
    /// The most distinct reasons that are label values.
    pub const MAX: usize = 16;

    /// The label value of `reason`. Shed requests are rare, so a lock
    /// is taken for each (never on a request that was not shed).
    pub fn label(&self, reason: &[u8]) -> String {
        let Some(reason) = std::str::from_utf8(reason)
            .ok()
            .map(str::trim)
            .filter(|r| crate::config::is_tenant_name(r))
        else {
            return super::labels::OTHER.to_owned();
        };
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains(reason) || seen.len() < Self::MAX && seen.insert(reason.to_owned()) {
            reason.to_owned()
        } else {
            super::labels::OTHER.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_reasons_are_bounded_and_plausible() {
        let reasons = GatewayReasons::default();
        assert_eq!(reasons.label(b"rejected-saturated"), "rejected-saturated");
        assert_eq!(reasons.label(b" evicted "), "evicted");
        for bad in [&b""[..], b"two words", b"\xff", &[b'x'; 65]] {
            assert_eq!(reasons.label(bad), "other", "{bad:?}");
        }
        for i in 0..40 {
            reasons.label(format!("r{i}").as_bytes());
        }
        assert_eq!(reasons.label(b"r13"), "r13");
        assert_eq!(reasons.label(b"r14"), "other");
        assert_eq!(reasons.label(b"rejected-saturated"), "rejected-saturated");
    }
}
