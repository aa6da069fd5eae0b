//! TLS on the proxy legs (`--tls`): the run's certificate, and the load
//! generator's connector, which opens plain or TLS connections and counts
//! them.
//!
//! The certificate is made when the rig starts (rcgen: ECDSA P-256,
//! self-signed for `127.0.0.1` and `localhost`) and written beside the
//! proxies' configs, where tokenmeter and nginx read the same files; it is
//! the one root the load generator trusts. Made at run time, it needs no
//! file of the repository beside the installed binaries.
//!
//! The client offers ALPN `http/1.1` only, so a leg speaks the same
//! HTTP/1.1 with TLS as without, and rustls's default suites in their
//! default order. Both servers take the client's preference (rustls's
//! default, and nginx's without `ssl_prefer_server_ciphers`), so both
//! proxies negotiate the same version, suite and key exchange; the report
//! names what each leg negotiated. Connections are kept alive as without
//! TLS: a handshake is paid once per connection, as in production, and the
//! report says how many each leg made.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use anyhow::Context as _;
use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The run's certificate and key on disk, and a client configuration that
/// trusts that certificate alone.
#[derive(Debug, Clone)]
pub struct Certificate {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client: Arc<rustls::ClientConfig>,
}

impl Certificate {
    /// Makes a self-signed certificate for `127.0.0.1` and `localhost`,
    /// writes it and its key (PEM, PKCS#8) into `dir`.
    pub fn make(dir: &Path) -> anyhow::Result<Self> {
        let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        let made = rcgen::generate_simple_self_signed(names).context("making a certificate")?;
        std::fs::create_dir_all(dir)?;
        let cert_file = dir.join("cert.pem");
        let key_file = dir.join("key.pem");
        std::fs::write(&cert_file, made.cert.pem())
            .with_context(|| format!("writing {}", cert_file.display()))?;
        std::fs::write(&key_file, made.signing_key.serialize_pem())
            .with_context(|| format!("writing {}", key_file.display()))?;

        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(made.cert.der().clone())
            .context("trusting the run's certificate")?;
        // The provider named, not the process default: this crate enables
        // one, but a default chosen by feature unification is not to be
        // relied on.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("the TLS client's protocol versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            cert_file,
            key_file,
            client: Arc::new(client),
        })
    }
}

/// What one leg's connector did: connections opened, TLS handshakes
/// completed, and what the first handshake negotiated.
#[derive(Debug, Default)]
pub struct ConnectStats {
    pub connections: AtomicU64,
    pub handshakes: AtomicU64,
    /// `<version> <suite> <key exchange>`, e.g.
    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384 X25519`.
    pub negotiated: Mutex<Option<String>>,
}

/// The load generator's connector: TCP (as hyper-util's `HttpConnector`,
/// `TCP_NODELAY` on), then a TLS handshake when the URI is `https`.
#[derive(Clone)]
pub struct Connector {
    tcp: HttpConnector,
    tls: Option<tokio_rustls::TlsConnector>,
    pub stats: Arc<ConnectStats>,
}

impl Connector {
    /// A connector that speaks TLS to `https` URIs with `tls`.
    pub fn new(tls: Option<Arc<rustls::ClientConfig>>) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        // The scheme chooses TLS here, after the TCP connection.
        tcp.enforce_http(false);
        Self {
            tcp,
            tls: tls.map(tokio_rustls::TlsConnector::from),
            stats: Arc::new(ConnectStats::default()),
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<Conn>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.tcp, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = uri.host().unwrap_or_default().to_owned();
        let connecting = tower::Service::call(&mut self.tcp, uri);
        let (tls, stats) = (self.tls.clone(), self.stats.clone());
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            stats.connections.fetch_add(1, Ordering::Relaxed);
            if !https {
                return Ok(TokioIo::new(Conn::Plain(tcp)));
            }
            let tls = tls.ok_or("an https target with no TLS client configured")?;
            let stream = tls.connect(ServerName::try_from(host)?, tcp).await?;
            stats.handshakes.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut negotiated) = stats.negotiated.lock()
                && negotiated.is_none()
            {
                let session = stream.get_ref().1;
                let name = |v: Option<String>| v.unwrap_or_else(|| "?".to_owned());
                *negotiated = Some(format!(
                    "{} {} {}",
                    name(session.protocol_version().map(|v| format!("{v:?}"))),
                    name(
                        session
                            .negotiated_cipher_suite()
                            .map(|s| format!("{:?}", s.suite()))
                    ),
                    name(
                        session
                            .negotiated_key_exchange_group()
                            .map(|g| format!("{:?}", g.name()))
                    ),
                ));
            }
            Ok(TokioIo::new(Conn::Tls(Box::new(stream))))
        })
    }
}

/// A connection of the load generator: plain TCP or TLS over it.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Plain(tcp) => tcp.connected(),
            Conn::Tls(tls) => tls.get_ref().0.connected(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
