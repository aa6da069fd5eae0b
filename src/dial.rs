//! How an HTTP server is reached: its host and port, and for `https` the
//! TLS client and the name its certificate must bear; then TCP
//! (`TCP_NODELAY`) to each of the host's addresses in turn, and TLS over
//! the first that answers.
//!
//! The one description of a connection, which a route's upstream
//! (`proxy::upstream`) and the scrapes of its engine and GPU pages
//! (`scrape`) both use, so that a page is reached exactly as the upstream
//! is. It knows neither: the protocol spoken over the connection, the
//! ALPN offered and the time allowed are the caller's.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::Authority;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Where a server is and how its connections are secured, resolved once.
pub struct Dialer {
    /// The host to resolve (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// For `https`: the TLS client and the name the certificate must bear.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// No TCP connection: the host has no address, nothing listens, or it
    /// cannot be reached.
    #[error("tcp connect")]
    Connect(#[source] std::io::Error),
    /// The TLS handshake failed (a certificate not trusted, no TLS).
    #[error("TLS handshake")]
    Tls(#[source] std::io::Error),
}

/// A host that no TLS certificate can name (SNI needs a DNS name or an IP
/// address).
#[derive(Debug, thiserror::Error)]
#[error("{host:?} is not a TLS server name")]
pub struct InvalidServerName {
    pub host: String,
}

impl Dialer {
    /// The dialer of the server at `authority`, over TLS with the client
    /// `tls` when given (`https`), else over plain TCP; the port is the
    /// scheme's default when `authority` has none.
    pub fn new(
        authority: &Authority,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, InvalidServerName> {
        let written = authority.host();
        let host = written
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(written)
            .to_owned();
        let port = authority
            .port_u16()
            .unwrap_or(if tls.is_some() { 443 } else { 80 });
        let tls = match tls {
            None => None,
            Some(config) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|_| InvalidServerName { host: host.clone() })?;
                Some((TlsConnector::from(config), name))
            }
        };
        Ok(Self { host, port, tls })
    }

    /// Whether connections are made over TLS, the only way a server can be
    /// asked for HTTP/2 (by ALPN).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A TCP connection to the server, and TLS over it for `https`: each of
    /// the host's addresses in turn, until one answers. Unbounded in time:
    /// the caller bounds it.
    pub async fn connect(&self) -> Result<Io, DialError> {
        let addrs = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(DialError::Connect)?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(tcp) => {
                    tcp.set_nodelay(true).map_err(DialError::Connect)?;
                    let Some((tls, name)) = &self.tls else {
                        return Ok(Io::Tcp(tcp));
                    };
                    let stream = tls
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(DialError::Tls)?;
                    return Ok(Io::Tls(Box::new(stream)));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(DialError::Connect(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the host has no address")
        })))
    }
}

/// A TLS client trusting `roots` (DER certificates, such as a route's
/// `tls.ca_file`), or the web PKI's roots when `None`, with no ALPN: each
/// caller offers the protocols it speaks.
pub fn client_config(roots: Option<&[Vec<u8>]>) -> Result<rustls::ClientConfig, rustls::Error> {
    let roots = match roots {
        None => rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
        Some(certificates) => {
            let mut store = rustls::RootCertStore::empty();
            for der in certificates {
                store.add(rustls::pki_types::CertificateDer::from(der.clone()))?;
            }
            store
        }
    };
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// What a connection runs over.
pub enum Io {
    Tcp(TcpStream),
    /// Boxed: a TLS stream holds rustls' connection state, several KiB.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Io {
    /// The TLS stream, when TLS chose HTTP/2 by ALPN; else the transport
    /// itself, back, to speak HTTP/1.1 over.
    pub fn into_h2(self) -> Result<TlsStream<TcpStream>, Io> {
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

/// `h1`'s client connection speaks over it.
impl h1::Transport for Io {}
