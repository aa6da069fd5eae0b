//! How an exchange with the upstream failed: before its response head
//! ([`Error`]), or in its body ([`BodyError`]). Whose fault each is, is
//! `crate::proxy::blame`'s to say.

use std::time::Duration;

use crate::proxy::client_body::ClientBodyError;

/// Why a request got no response head from its upstream.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Resolving, TCP and TLS together took longer than the route's
    /// connect timeout.
    #[error("no connection within {limit:?}")]
    ConnectTimeout {
        limit: Duration,
        #[source]
        source: tokio::time::error::Elapsed,
    },
    #[error("tcp connect")]
    Connect(#[source] std::io::Error),
    #[error("TLS handshake")]
    Tls(#[source] std::io::Error),
    #[error("HTTP/2 handshake")]
    H2Handshake(#[source] hyper::Error),
    #[error(transparent)]
    H1(h1::Error<ClientBodyError>),
    #[error(transparent)]
    H2(hyper::Error),
    /// The request body failed while hyper's HTTP/2 client sent it (hyper
    /// reports the stream's reset, and the body keeps its own error).
    #[error(transparent)]
    ClientBody(ClientBodyError),
    #[error("the upstream sent no response head within {0:?}")]
    HeadTimeout(Duration),
    #[error("the upstream chose HTTP/2 on the new connection of a request sent again")]
    SwitchedToH2,
}

/// Why the upstream's response body failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// From an HTTP/1.1 connection: the upstream's framing or connection,
    /// or the client's request body, still being sent.
    #[error(transparent)]
    H1(h1::Error<ClientBodyError>),
    #[error(transparent)]
    H2(hyper::Error),
    /// The request body failed while hyper's HTTP/2 client sent it.
    #[error(transparent)]
    ClientBody(ClientBodyError),
}

impl From<h1::Error<ClientBodyError>> for BodyError {
    fn from(e: h1::Error<ClientBodyError>) -> Self {
        BodyError::H1(e)
    }
}
