//! Why a request got no response head from its upstream.

use std::time::Duration;

use crate::proxy::client_body::ClientBodyError;

/// Why a request got no response head from its upstream.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("timed out connecting to the upstream")]
    ConnectTimeout,
    #[error("tcp connect")]
    Connect(#[source] std::io::Error),
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
    #[error("TLS handshake")]
    Tls(#[source] std::io::Error),
    #[error("HTTP/2 handshake")]
    H2Handshake(#[source] hyper::Error),
    #[error(transparent)]
    H1(h1::Error),
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
