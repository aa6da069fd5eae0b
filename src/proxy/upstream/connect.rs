//! The transport to a route's upstream: the route's [`Dialer`] (TCP with
//! `TCP_NODELAY`, then TLS for an `https` upstream), within the route's
//! connect timeout.
//!
//! TLS is verified against the web PKI roots or the route's `tls.ca_file`,
//! with the upstream's host name as SNI (none for an IP address, whose
//! certificate must name it), offering `h2` and `http/1.1` by ALPN: what
//! the upstream chose picks the protocol (`super::UpstreamClient`).

use std::sync::Arc;
use std::time::Duration;

use super::error::Error;
use crate::config::Route;
use crate::dial::{DialError, Dialer, Io};

/// Makes the connections of one upstream.
pub(super) struct Connector {
    dialer: Dialer,
    timeout: Duration,
}

impl Connector {
    /// The connector of `route`'s upstream. Fails only if the TLS
    /// configuration cannot be made (a certificate of `tls.ca_file`, a host
    /// that is no TLS server name).
    pub(super) fn new(route: &Route) -> Result<Self, rustls::Error> {
        let upstream = &route.upstream;
        let tls = if upstream.scheme == http::uri::Scheme::HTTPS {
            Some(tls_config(route)?)
        } else {
            None
        };
        let dialer = Dialer::new(&upstream.authority, tls)
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        Ok(Self {
            dialer,
            timeout: route.timeouts.connect,
        })
    }

    /// Whether the upstream is reached over TLS, the only way it can speak
    /// HTTP/2.
    pub(super) fn is_tls(&self) -> bool {
        self.dialer.is_tls()
    }

    /// A connection to the upstream, TCP and TLS together within the
    /// connect timeout (as `timeouts.connect` is documented).
    pub(super) async fn transport(&self) -> Result<Io, Error> {
        match tokio::time::timeout(self.timeout, self.dialer.connect()).await {
            Ok(Ok(io)) => Ok(io),
            Ok(Err(DialError::Connect(e))) => Err(Error::Connect(e)),
            Ok(Err(DialError::Tls(e))) => Err(Error::Tls(e)),
            Err(source) => Err(Error::ConnectTimeout {
                limit: self.timeout,
                source,
            }),
        }
    }
}

/// The TLS client of `route`'s upstream: its roots (the route's
/// `tls.ca_file`, or the web PKI's), and ALPN offering `h2` then
/// `http/1.1`.
fn tls_config(route: &Route) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let roots = route.tls_roots.as_ref().map(|r| r.certificates.as_slice());
    let mut config = crate::dial::client_config(roots)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
