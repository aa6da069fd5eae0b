//! The transport to an upstream: TCP (`TCP_NODELAY`), then, for an `https`
//! upstream, TLS (tokio-rustls), both within the route's connect timeout.
//!
//! TLS is verified against the web PKI roots or the route's `tls.ca_file`,
//! with the upstream's host name as SNI (none for an IP address, whose
//! certificate must name it), offering `h2` and `http/1.1` by ALPN: what
//! the upstream chose picks the protocol (`super::UpstreamClient`).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::error::Error;
use crate::config::Route;

/// What an upstream connection runs over.
pub enum Io {
    Tcp(TcpStream),
    /// Boxed: a TLS stream holds rustls' connection state, several KiB.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Io {
    /// The TLS stream, when TLS chose HTTP/2 by ALPN; else the transport
    /// itself, back, to speak HTTP/1.1 over.
    pub(super) fn into_h2(self) -> Result<TlsStream<TcpStream>, Io> {
        match self {
            Io::Tls(stream) if stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]) => {
                Ok(*stream)
            }
            io => Err(io),
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

impl h1::Transport for Io {}

/// Makes the connections of one upstream.
pub(super) struct Connector {
    /// The host to resolve (an IPv6 address without its brackets).
    host: String,
    port: u16,
    timeout: Duration,
    /// For `https`: the TLS client and the name the certificate must bear.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Connector {
    /// The connector of `route`'s upstream. Fails only if the TLS
    /// configuration cannot be made (a certificate of `tls.ca_file`).
    pub(super) fn new(route: &Route) -> Result<Self, rustls::Error> {
        let upstream = &route.upstream;
        let https = upstream.scheme == http::uri::Scheme::HTTPS;
        let host = upstream.authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_owned();
        let port = upstream
            .authority
            .port_u16()
            .unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let name = ServerName::try_from(host.clone())
                .map_err(|_| rustls::Error::General(format!("invalid TLS server name {host:?}")))?;
            Some((TlsConnector::from(tls_config(route)?), name))
        } else {
            None
        };
        Ok(Self {
            host,
            port,
            timeout: route.timeouts.connect,
            tls,
        })
    }

    /// Whether the upstream is reached over TLS, the only way it can speak
    /// HTTP/2.
    pub(super) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A TCP connection to the upstream, and TLS over it for `https`, both
    /// within the connect timeout (as `timeouts.connect` is documented):
    /// each of the host's addresses in turn, until one answers.
    pub(super) async fn transport(&self) -> Result<Io, Error> {
        let connect = async {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
                .await
                .map_err(Error::Connect)?
                .collect();
            let mut last = None;
            for addr in addrs {
                match TcpStream::connect(addr).await {
                    Ok(tcp) => {
                        tcp.set_nodelay(true).map_err(Error::Connect)?;
                        let Some((tls, name)) = &self.tls else {
                            return Ok(Io::Tcp(tcp));
                        };
                        let stream = tls.connect(name.clone(), tcp).await.map_err(Error::Tls)?;
                        return Ok(Io::Tls(Box::new(stream)));
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(Error::Connect(last.unwrap_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the upstream's host has no address",
                )
            })))
        };
        tokio::time::timeout(self.timeout, connect)
            .await
            .unwrap_or_else(|source| {
                Err(Error::ConnectTimeout {
                    limit: self.timeout,
                    source,
                })
            })
    }
}

/// The TLS client configuration of `route`: its roots (the route's
/// `tls.ca_file`, or the web PKI's), and ALPN offering `h2` then
/// `http/1.1`. The route's scrapes use it too (with ALPN of their own), so
/// that its engine and GPU pages are trusted as its upstream is.
pub fn tls_config(route: &Route) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let roots = match &route.tls_roots {
        None => rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
        Some(roots) => {
            let mut store = rustls::RootCertStore::empty();
            for der in &roots.certificates {
                store.add(rustls::pki_types::CertificateDer::from(der.clone()))?;
            }
            store
        }
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
