//! What is scraped: one endpoint of one route, how often, within what time
//! and size, and the ways a scrape fails.
//!
//! These types are the scraper's own input, built by whoever reads the
//! configuration, so that the scraper knows nothing of the configuration's
//! shape.

use std::time::Duration;

use telemetry::{GpuSelector, ParseError};

/// A reading older than this many of its target's intervals is not served:
/// one missed scrape (a timeout, a restart of the engine) is ridden out,
/// three are not, and the value is removed rather than frozen.
pub const STALE_AFTER_INTERVALS: u32 = 3;

/// One endpoint to scrape for one route. Two equal targets are scraped
/// the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The route the figures are of: the label they are exported under.
    pub route: String,
    /// The other routes whose figures they are too (a GPU page that the
    /// routes of a GPU set share is scraped once, for all of them): its
    /// readings and failures are shown under each.
    pub also: Vec<String>,
    /// Which page the endpoint serves, and so how it is read.
    pub kind: Kind,
    /// `http` or `https`; the path and query are requested as written.
    /// User info in it is not sent.
    pub url: http::Uri,
    /// The URL as logs and errors may show it, redacted by the caller as
    /// the upstream's URL is (user info, query values, fragment), since
    /// the scraper writes no URL of its own.
    pub shown_url: String,
    /// Time between two scrapes (the first one comes after a random part
    /// of a tenth of it, so that targets do not scrape in step).
    pub interval: Duration,
    /// Bound on one scrape, from the connection to the page's last byte:
    /// below `interval`, so that scrapes never overlap.
    pub timeout: Duration,
    /// Bytes of body read at most; a larger page fails as `too_large` and
    /// costs only this much, whatever it would have been.
    pub max_body: usize,
    /// The certificate authorities an `https` URL is verified against
    /// (DER, such as the route's `tls.ca_file`); the web PKI's when `None`.
    /// The scraper's TLS client offers `http/1.1` alone, the only protocol
    /// it speaks.
    pub tls_roots: Option<Vec<Vec<u8>>>,
    /// The ledger of the route's GPU time (`slo::ledger`), when the route
    /// has GPUs: each reading of the target tells it the GPUs and their
    /// power, or the engine's load, as it is stored.
    pub ledger: Option<LedgerLink>,
}

/// The ledger a target's readings feed: two links are equal when they
/// feed the same ledger, so a reload that keeps a route's ledger keeps its
/// scraper.
#[derive(Clone)]
pub struct LedgerLink(pub std::sync::Arc<dyn slo::ledger::Reader>);

impl PartialEq for LedgerLink {
    fn eq(&self, other: &Self) -> bool {
        // The ledgers, not their vtables.
        std::ptr::addr_eq(
            std::sync::Arc::as_ptr(&self.0),
            std::sync::Arc::as_ptr(&other.0),
        )
    }
}

impl std::fmt::Debug for LedgerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LedgerLink")
    }
}

/// A page of a few hundred samples is tens of KiB; a few MiB leaves room
/// for many models or GPUs and bounds what an endpoint gone wrong costs.
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;

/// What an endpoint serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An inference server's own Prometheus page (vLLM, SGLang, TGI,
    /// llama.cpp).
    Engine,
    /// An NVIDIA DCGM exporter's page, of which the selected GPUs serve
    /// the route.
    Gpu(GpuSelector),
}

impl Kind {
    /// The page of this kind, as a label names it.
    pub fn page(&self) -> Page {
        match self {
            Self::Engine => Page::Engine,
            Self::Gpu(_) => Page::Gpu,
        }
    }
}

/// Which page a target serves, as a label names it (`target`): with the
/// route, it names a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Page {
    Engine,
    Gpu,
}

impl Page {
    /// A short, fixed name, usable as a label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Engine => "engine",
            Self::Gpu => "gpu",
        }
    }
}

/// Why a scrape failed: a small fixed set, usable as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// No TCP connection: nothing listening, unreachable, no address.
    Connect,
    /// The TLS handshake failed (a certificate not trusted, no TLS).
    Tls,
    /// The scrape did not end within its timeout (an endpoint that hangs).
    Timeout,
    /// No well-formed HTTP answer: the connection closed before or while
    /// answering, or what came back is not HTTP/1.1.
    Http,
    /// An answer whose status is not 2xx.
    Status,
    /// A body larger than the target's `max_body`.
    TooLarge,
    /// A body that is not a Prometheus text page.
    Parse,
    /// A page that parsed but holds none of the names it is read for: no
    /// known inference server's, or no GPU.
    Unrecognized,
}

impl Reason {
    /// Every reason, in the order `failures` lists them.
    pub const ALL: [Reason; 8] = [
        Self::Connect,
        Self::Tls,
        Self::Timeout,
        Self::Http,
        Self::Status,
        Self::TooLarge,
        Self::Parse,
        Self::Unrecognized,
    ];

    /// A short, fixed name, usable as a label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Timeout => "timeout",
            Self::Http => "http",
            Self::Status => "status",
            Self::TooLarge => "too_large",
            Self::Parse => "parse",
            Self::Unrecognized => "unrecognized",
        }
    }

    /// The reason's place in [`Reason::ALL`].
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Why one scrape failed, with its cause.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("cannot connect")]
    Connect(#[source] std::io::Error),
    #[error("TLS handshake failed")]
    Tls(#[source] std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("no well-formed HTTP answer")]
    Http(#[source] hyper::Error),
    #[error("answered {0}")]
    Status(http::StatusCode),
    #[error("the body is larger than {max} bytes")]
    TooLarge { max: usize },
    #[error("not a Prometheus text page")]
    Parse(#[source] ParseError),
    /// The page was read off the runtime's threads, and that task did not
    /// finish (the runtime shutting down).
    #[error("the page was not read")]
    Reader(#[source] tokio::task::JoinError),
    #[error("the page names no {0}")]
    Unrecognized(&'static str),
}

impl Failure {
    /// The bounded label of this failure.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Connect(_) => Reason::Connect,
            Self::Tls(_) => Reason::Tls,
            Self::Timeout(_) => Reason::Timeout,
            Self::Http(_) => Reason::Http,
            Self::Status(_) => Reason::Status,
            Self::TooLarge { .. } => Reason::TooLarge,
            Self::Parse(_) | Self::Reader(_) => Reason::Parse,
            Self::Unrecognized(_) => Reason::Unrecognized,
        }
    }
}

/// A target that cannot be scraped as given.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("route {route}: {url}: the scheme is neither http nor https")]
    Scheme { route: String, url: String },
    #[error("route {route}: {url}: no host")]
    NoHost { route: String, url: String },
    #[error("route {route}: {url}: {host:?} is not a TLS server name")]
    ServerName {
        route: String,
        url: String,
        host: String,
    },
    #[error("route {route}: the {page} scrape's timeout must be above 0 and below its interval")]
    Timing { route: String, page: &'static str },
    #[error("route {route}: two {page} targets")]
    Duplicate { route: String, page: &'static str },
    #[error("route {route}: the TLS client cannot be made")]
    TlsConfig {
        route: String,
        #[source]
        source: rustls::Error,
    },
}
