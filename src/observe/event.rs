//! What the forwarding code reports of itself, apart from metered
//! requests: typed events, which `observe` counts.
//!
//! The proxy says what happened (a request matched no route, a connection
//! was shed, a request was sent again...) and never how it is counted:
//! which family, which labels and which series are this module's and the
//! metrics' business, so the proxy names no metrics type.

/// Something the proxy did, or had done to it, that is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
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
