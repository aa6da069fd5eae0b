//! The upstream of a route: connection set-up (TCP, TLS), the choice of
//! protocol, and the one classification of what went wrong.
//!
//! A connection is made by [`Connector`]: TCP (`TCP_NODELAY`), then, for
//! an `https` upstream, TLS (tokio-rustls), both within the route's
//! connect timeout. TLS is verified against the web PKI roots or the
//! route's `tls.ca_file`, with the upstream's host name as SNI (none for
//! an IP address, whose certificate must name it), offering `h2` and
//! `http/1.1` by ALPN.
//!
//! The protocol is chosen by what the connection speaks, not by the URL's
//! scheme: HTTP/1.1 (plain TCP, or TLS where ALPN chose `http/1.1` or
//! nothing) is spoken by the client connection of our own (`h1`), whose
//! connections are pooled per upstream ([`h1::Pool`]: keep-alive hints,
//! expiry, and the one retry of a request caught in the keep-alive race).
//! HTTP/2 (TLS where ALPN chose `h2`) is spoken by hyper's HTTP/2 client:
//! one connection per upstream, shared by every request (each takes a clone
//! of its handle), made again once it closes or has been idle for the
//! pool's idle timeout; a request it did not take (it was closing) goes
//! on a new connection. Two requests that find no connection at once may
//! each make one; the last one made is kept, and the other serves its own
//! request and closes.
//!
//! Every failure before a response head, on either protocol, is an
//! [`Error`], which `error.rs` charges to a side: the client's own body
//! first, wherever it broke, then the connection (refused, timed out, TLS),
//! then the upstream's exchange.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body::{Frame, SizeHint};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use http_body::Body;
use hyper::body::Incoming;

use super::client_body::{BodyTimeout, ClientBodyError, RequestBody};
use super::rewrite::{fitted, origin_form};
use crate::config::Route;
use h1::{Conn, OWN_BUFFER_MAX, Pool, Prepared, Reused};

/// The response body of an HTTP/1.1 upstream.
pub type H1Body = h1::Body<Io, RequestBody>;

/// What an upstream connection runs over.
pub enum Io {
    Tcp(TcpStream),
    /// Boxed: a TLS stream holds rustls' connection state, several KiB.
    Tls(Box<TlsStream<TcpStream>>),
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

impl h1::SendBody for RequestBody {
    fn replay(&self) -> Option<Self> {
        RequestBody::replay(self)
    }
}

/// Errors a forwarded body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub enum FromUpstream {
    /// An HTTP/1.1 upstream's connection (TCP or TLS), read as the body is
    /// polled (`h1`); it goes back to its pool at the body's end.
    Pooled(H1Body),
    /// hyper's HTTP/2 client (HTTPS upstreams that chose `h2` by ALPN).
    Client(Incoming),
}

impl FromUpstream {
    /// When the request's last byte was written to the upstream, if it was
    /// all written before the response head came; known for HTTP/1.1
    /// upstreams only (hyper's HTTP/2 client sends the body on a task of
    /// its own).
    pub fn request_written(&self) -> Option<tokio::time::Instant> {
        match self {
            FromUpstream::Pooled(body) => body.request_written(),
            FromUpstream::Client(_) => None,
        }
    }
}

impl Body for FromUpstream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            FromUpstream::Pooled(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            FromUpstream::Client(body) => Pin::new(body)
                .poll_frame(cx)
                .map_ok(own_buffer)
                .map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            FromUpstream::Pooled(body) => body.is_end_stream(),
            FromUpstream::Client(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FromUpstream::Pooled(body) => body.size_hint(),
            FromUpstream::Client(body) => body.size_hint(),
        }
    }
}

/// `frame` with the same bytes, a small data frame (up to
/// [`OWN_BUFFER_MAX`], as `h1` does for its connections) moved out of the
/// upstream connection's read buffer into one of its own size.
///
/// hyper's HTTP/2 client hands each frame out as a slice of the
/// connection's read buffer (h2's codec splits a DATA frame's payload off
/// it). A buffer still shared with a frame waiting in the client
/// connection's write queue cannot be reused in place, so the next read
/// takes a new one and the old one is freed after the write. A copy of a
/// chunk of a few hundred bytes costs one small allocation, and the read
/// buffer, no longer shared, is reused. Larger frames (bulk bodies) are
/// passed on as they are.
fn own_buffer(frame: Frame<Bytes>) -> Frame<Bytes> {
    match frame.into_data() {
        Ok(data) if data.len() <= OWN_BUFFER_MAX => Frame::data(Bytes::copy_from_slice(&data)),
        Ok(data) => Frame::data(data),
        Err(frame) => frame,
    }
}

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

/// Makes the connections of one upstream.
struct Connector {
    /// The host to resolve (an IPv6 address without its brackets).
    host: String,
    port: u16,
    timeout: Duration,
    /// For `https`: the TLS client and the name the certificate must bear.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// A new connection, by the protocol it speaks.
enum Fresh {
    H1(Io),
    H2(http2::SendRequest<H2Body>),
}

impl Connector {
    /// The connector of `route`'s upstream. Fails only if the TLS
    /// configuration cannot be made (a certificate of `tls.ca_file`).
    fn new(route: &Route) -> Result<Self, rustls::Error> {
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

    /// A TCP connection to the upstream, and TLS over it for `https`, both
    /// within the connect timeout (as `timeouts.connect` is documented):
    /// each of the host's addresses in turn, until one answers.
    async fn transport(&self) -> Result<Io, Error> {
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
            .unwrap_or(Err(Error::ConnectTimeout))
    }

    /// A new connection, speaking what the upstream chose: HTTP/1.1 over
    /// plain TCP, over TLS what ALPN chose.
    async fn connect(&self) -> Result<Fresh, Error> {
        let stream = match self.transport().await? {
            Io::Tls(stream) if stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]) => stream,
            io => return Ok(Fresh::H1(io)),
        };
        let (send, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(*stream))
            .await
            .map_err(Error::H2Handshake)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
            }
        });
        Ok(Fresh::H2(send))
    }
}

/// The TLS client configuration of `route`: its roots (the route's
/// `tls.ca_file`, or the web PKI's), and ALPN offering `h2` then
/// `http/1.1`.
fn tls_config(route: &Route) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
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

/// The shared HTTP/2 connection of an upstream.
struct Shared {
    send: http2::SendRequest<H2Body>,
    /// When a request last took it.
    used: Instant,
}

/// One route's upstream: how to connect, its idle HTTP/1.1 connections,
/// and its HTTP/2 connection if it speaks HTTP/2.
pub struct Upstream {
    connector: Connector,
    /// The `Host` header of an HTTP/1.1 request that has none: the
    /// upstream's host, and its port unless it is the scheme's default.
    /// Made once, not per request.
    host: Option<HeaderValue>,
    pool: Arc<Pool<Io>>,
    h2: Mutex<Option<Shared>>,
    idle_timeout: Duration,
}

impl Upstream {
    /// The upstream of `route`, keeping at most `max_idle` idle HTTP/1.1
    /// connections for `idle_timeout` each. Fails only if TLS cannot be set
    /// up.
    pub fn new(
        route: &Route,
        max_idle: usize,
        idle_timeout: Duration,
        on_retry: h1::OnRetry,
    ) -> Result<Arc<Self>, rustls::Error> {
        let upstream = &route.upstream;
        let target = Uri::builder()
            .scheme(upstream.scheme.clone())
            .authority(upstream.authority.clone())
            .path_and_query("/")
            .build()
            .ok();
        Ok(Arc::new(Self {
            connector: Connector::new(route)?,
            host: target.as_ref().and_then(host_header),
            pool: Pool::new(max_idle, idle_timeout, on_retry),
            h2: Mutex::new(None),
            idle_timeout,
        }))
    }

    /// Sends `req` (absolute-form URI) and reads the response head within
    /// `head_timeout`; the response's body reads the rest. If the client's
    /// body is still arriving when the time runs out, the client is the
    /// one that was slow ([`BodyTimeout::Upload`]).
    pub async fn send(
        self: &Arc<Self>,
        req: Request<RequestBody>,
        head_timeout: Duration,
    ) -> Result<Response<FromUpstream>, Error> {
        let mut req = req;
        let arriving = req.body_mut().watch_end();
        match tokio::time::timeout(head_timeout, self.exchange(req)).await {
            Ok(sent) => sent,
            Err(_) if arriving.is_some_and(|ended| !ended.load(Ordering::Relaxed)) => Err(
                Error::ClientBody(ClientBodyError::Timeout(BodyTimeout::Upload(head_timeout))),
            ),
            Err(_) => Err(Error::HeadTimeout(head_timeout)),
        }
    }

    /// On the HTTP/2 connection if there is one, else on an idle HTTP/1.1
    /// connection (sent once more on a new one if it was closed under the
    /// request, see [`h1::Pool::send_reused`]), else on a new connection.
    async fn exchange(
        self: &Arc<Self>,
        req: Request<RequestBody>,
    ) -> Result<Response<FromUpstream>, Error> {
        let mut req = req;
        if self.connector.tls.is_some()
            && let Some(send) = self.shared()
        {
            match send_h2(send, req).await {
                // The shared connection closed before it took the request:
                // it goes on a new connection.
                Err(H2Failed::Unsent(back, _)) => req = *back,
                sent => return sent.map_err(H2Failed::into_error),
            }
        }
        if let Some(conn) = self.pool.checkout() {
            let req = Prepared::new(origin_form(req, self.host.as_ref()));
            return match self.pool.send_reused(conn, req).await {
                Reused::Sent(sent) => sent.map(pooled).map_err(Error::H1),
                Reused::Again(req) => match self.connect().await? {
                    Fresh::H1(io) => self.send_h1(io, req).await,
                    Fresh::H2(_) => Err(Error::SwitchedToH2),
                },
            };
        }
        match self.connect().await? {
            Fresh::H1(io) => {
                let req = Prepared::new(origin_form(req, self.host.as_ref()));
                self.send_h1(io, req).await
            }
            Fresh::H2(send) => send_h2(send, req).await.map_err(H2Failed::into_error),
        }
    }

    /// A new connection; an HTTP/2 one is kept to be shared. (Boxed: its
    /// future would otherwise be part of the request's, which is moved
    /// whole into the timeout.)
    async fn connect(&self) -> Result<Fresh, Error> {
        let fresh = Box::pin(self.connector.connect()).await?;
        if let Fresh::H2(send) = &fresh
            && let Ok(mut shared) = self.h2.lock()
        {
            *shared = Some(Shared {
                send: send.clone(),
                used: Instant::now(),
            });
        }
        Ok(fresh)
    }

    /// A handle of the shared HTTP/2 connection, if it is open and has not
    /// been idle for longer than the idle timeout.
    fn shared(&self) -> Option<http2::SendRequest<H2Body>> {
        let mut shared = self.h2.lock().ok()?;
        let now = Instant::now();
        match &mut *shared {
            Some(s) if !s.send.is_closed() && now - s.used < self.idle_timeout => {
                s.used = now;
                Some(s.send.clone())
            }
            Some(_) => {
                *shared = None;
                None
            }
            None => None,
        }
    }

    async fn send_h1(
        self: &Arc<Self>,
        io: Io,
        req: Prepared<RequestBody>,
    ) -> Result<Response<FromUpstream>, Error> {
        self.pool
            .send_new(Conn::new(io), req)
            .await
            .map(pooled)
            .map_err(|failed| Error::H1(failed.error))
    }
}

fn pooled(resp: Response<H1Body>) -> Response<FromUpstream> {
    resp.map(FromUpstream::Pooled)
}

/// Why a request got no response on an HTTP/2 connection.
enum H2Failed {
    /// The connection did not take it (it was closing): the request, whole.
    /// (Boxed: the rare case, kept out of the common one's size.)
    Unsent(Box<Request<RequestBody>>, hyper::Error),
    Failed(Error),
}

impl H2Failed {
    fn into_error(self) -> Error {
        match self {
            H2Failed::Unsent(_, e) => Error::H2(e),
            H2Failed::Failed(e) => e,
        }
    }
}

/// Sends `req` on an HTTP/2 connection.
async fn send_h2(
    mut send: http2::SendRequest<H2Body>,
    req: Request<RequestBody>,
) -> Result<Response<FromUpstream>, H2Failed> {
    let failed = Arc::new(Mutex::new(None));
    let req = req.map(|body| H2Body {
        inner: body,
        failed: failed.clone(),
    });
    match send.try_send_request(req).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            parts.headers = fitted(std::mem::take(&mut parts.headers));
            Ok(Response::from_parts(parts, FromUpstream::Client(body)))
        }
        Err(mut e) => {
            if let Some(back) = e.take_message() {
                return Err(H2Failed::Unsent(
                    Box::new(back.map(|b| b.inner)),
                    e.into_error(),
                ));
            }
            Err(H2Failed::Failed(
                match failed.lock().ok().and_then(|mut f| f.take()) {
                    Some(client) => Error::ClientBody(client),
                    None => Error::H2(e.into_error()),
                },
            ))
        }
    }
}

/// A request body sent by hyper's HTTP/2 client, which keeps the client's
/// error: on a body error hyper resets the stream and reports the reset.
pub struct H2Body {
    inner: RequestBody,
    failed: Arc<Mutex<Option<ClientBodyError>>>,
}

/// The client's request body failed (its error is kept beside).
#[derive(Debug, thiserror::Error)]
#[error("client request body")]
struct ClientBodyFailed;

impl http_body::Body for H2Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                if let Ok(mut failed) = this.failed.lock() {
                    *failed = Some(e);
                }
                Poll::Ready(Some(Err(Box::new(ClientBodyFailed))))
            }
            other => other.map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The `Host` header for `uri`: its host, with the port only when it is not
/// the scheme's default.
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
        443
    } else {
        80
    };
    let value = match uri.port_u16() {
        Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

#[cfg(test)]
mod tests {
    //! Socket-level: a scripted upstream on 127.0.0.1, over plain TCP or
    //! TLS (the test CA's certificate, `tests/data/tls/`, ALPN
    //! `http/1.1`), that answers each request it reads (head, and a body of
    //! its `content-length`) with the next of `answers`, and counts its
    //! connections; an answer of `None` closes the connection instead.
    //! Every test runs over both.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use bytes::Bytes;
    use http::{HeaderValue, Method, Request, StatusCode, header};
    use http_body::Frame;
    use http_body_util::BodyExt as _;
    use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::{Error, Upstream};
    use crate::proxy::client_body::{ClientBody, RequestBody};
    use h1::Race;

    /// Runs the test `$name(tls)` over plain TCP and over TLS.
    macro_rules! both {
        ($name:ident) => {
            mod $name {
                #[tokio::test]
                async fn plain() {
                    super::$name(false).await;
                }
                #[tokio::test]
                async fn tls() {
                    super::$name(true).await;
                }
            }
        };
    }

    struct Scripted {
        upstream: Arc<Upstream>,
        connections: Arc<AtomicUsize>,
        requests: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
        /// The upstream's retries, in order.
        retries: Arc<std::sync::Mutex<Vec<Race>>>,
    }

    fn tls_dir() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
    }

    /// The upstream of a route to `addr`, over TLS trusting the test CA.
    fn upstream_for(
        addr: std::net::SocketAddr,
        tls: bool,
    ) -> (Arc<Upstream>, Arc<std::sync::Mutex<Vec<Race>>>) {
        let text = if tls {
            format!(
                "routes:\n  - name: t\n    upstream: https://localhost:{}\n    tls: {{ca_file: ca.pem}}\n",
                addr.port()
            )
        } else {
            format!("routes:\n  - name: t\n    upstream: http://{addr}\n")
        };
        let file = tls_dir().join("tokenmeter.yaml");
        let config = crate::config::Config::parse(
            &text,
            file.to_str().unwrap(),
            &crate::config::Overrides::default(),
        )
        .unwrap();
        let retries = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = retries.clone();
        let upstream = Upstream::new(
            &config.routes[0],
            8,
            Duration::from_secs(30),
            Box::new(move |race| seen.lock().unwrap().push(race)),
        )
        .unwrap();
        (upstream, retries)
    }

    /// The test CA's server side, offering `http/1.1` by ALPN.
    fn acceptor() -> tokio_rustls::TlsAcceptor {
        use rustls::pki_types::pem::PemObject as _;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(tls_dir().join("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::from_pem_file(tls_dir().join("server.key")).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
    impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

    /// The server's side of an accepted connection: `sock`, or TLS over it.
    async fn server_side(sock: tokio::net::TcpStream, tls: bool) -> Option<Box<dyn Stream>> {
        if !tls {
            return Some(Box::new(sock));
        }
        let tls = acceptor().accept(sock).await.ok()?;
        Some(Box::new(tls))
    }

    async fn upstream(answers: Vec<Option<&'static str>>, tls: bool) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let (tx, requests) = tokio::sync::mpsc::unbounded_channel();
        let counted = connections.clone();
        let answers = Arc::new(std::sync::Mutex::new(answers.into_iter()));
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let (answers, tx) = (answers.clone(), tx.clone());
                tokio::spawn(async move {
                    let Some(mut sock) = server_side(sock, tls).await else {
                        return;
                    };
                    let mut got = Vec::new();
                    loop {
                        let mut buf = [0u8; 4096];
                        // One request: its head, then its body.
                        let end = loop {
                            if let Some(end) = memchr::memmem::find(&got, b"\r\n\r\n") {
                                break end + 4;
                            }
                            match sock.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        while got.len() < end + len {
                            match sock.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                        }
                        let request: Vec<u8> = got.drain(..end + len).collect();
                        let _ = tx.send(request);
                        let answer = answers.lock().unwrap().next().flatten();
                        let Some(answer) = answer else { return };
                        if sock.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        if answer.contains("connection: close") || answer.contains("x-then-close") {
                            // A clean close (over TLS, with its close_notify).
                            let _ = sock.shutdown().await;
                            return;
                        }
                        // Closed without a word (over TLS, no close_notify).
                        if answer.contains("x-then-drop") {
                            return;
                        }
                    }
                });
            }
        });
        let (upstream, retries) = upstream_for(addr, tls);
        Scripted {
            upstream,
            connections,
            requests,
            retries,
        }
    }

    fn post(body: &'static str) -> Request<RequestBody> {
        let mut req = Request::new(RequestBody::buffered(
            [Frame::data(Bytes::from_static(body.as_bytes()))].into(),
            None,
        ));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "/v1/completions".parse().unwrap();
        req.headers_mut()
            .insert(header::HOST, HeaderValue::from_static("up"));
        req
    }

    /// The response's status, and its body's data frames (or error).
    async fn exchange(
        upstream: &Arc<Upstream>,
        req: Request<RequestBody>,
    ) -> (StatusCode, Result<Vec<Bytes>, h1::Error>) {
        let resp = send(upstream, req).await.expect("a response head");
        let status = resp.status();
        let mut body = resp.into_body();
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => frames.extend(f.into_data().ok()),
                Err(e) => return (status, Err(*e.downcast::<h1::Error>().unwrap())),
            }
        }
        (status, Ok(frames))
    }

    async fn send(
        upstream: &Arc<Upstream>,
        req: Request<RequestBody>,
    ) -> Result<http::Response<super::FromUpstream>, Error> {
        upstream.send(req, Duration::from_secs(10)).await
    }

    const CHUNKED: &str =
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";

    both!(a_connection_is_kept_between_clean_exchanges);
    async fn a_connection_is_kept_between_clean_exchanges(tls: bool) {
        let mut up = upstream(
            vec![
                Some(CHUNKED),
                Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
                Some("HTTP/1.1 204 No Content\r\n\r\n"),
            ],
            tls,
        )
        .await;
        let (status, frames) = exchange(&up.upstream, post("{\"a\":1}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(frames.unwrap(), [&b"abc"[..], b"de"]);
        let request = up.requests.recv().await.unwrap();
        assert_eq!(
            String::from_utf8(request).unwrap(),
            "POST /v1/completions HTTP/1.1\r\nhost: up\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
        );
        let (_, frames) = exchange(&up.upstream, post("x")).await;
        assert_eq!(frames.unwrap(), [&b"ok"[..]]);
        let (status, frames) = exchange(&up.upstream, post("y")).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(frames.unwrap().is_empty());
        assert_eq!(up.connections.load(Ordering::SeqCst), 1);
    }

    both!(a_connection_is_not_kept_after_close_a_close_delimited_body_or_ambiguous_framing);
    async fn a_connection_is_not_kept_after_close_a_close_delimited_body_or_ambiguous_framing(
        tls: bool,
    ) {
        let up = upstream(vec![
            Some("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"),
            Some("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"),
            Some("HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
            Some(CHUNKED),
        ], tls)
        .await;
        assert_eq!(
            exchange(&up.upstream, post("1")).await.1.unwrap(),
            [&b"ok"[..]]
        );
        let body = exchange(&up.upstream, post("2")).await.1.unwrap();
        assert_eq!(body.concat(), b"until the end");
        let body = exchange(&up.upstream, post("3")).await.1.unwrap();
        assert_eq!(body.concat(), b"abc");
        let body = exchange(&up.upstream, post("4")).await.1.unwrap();
        assert_eq!(body.concat(), b"abcde");
        assert_eq!(up.connections.load(Ordering::SeqCst), 4);
    }

    both!(bytes_past_the_body_close_the_connection);
    async fn bytes_past_the_body_close_the_connection(tls: bool) {
        let up = upstream(
            vec![
                Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"),
                Some(CHUNKED),
            ],
            tls,
        )
        .await;
        assert_eq!(
            exchange(&up.upstream, post("1")).await.1.unwrap(),
            [&b"ok"[..]]
        );
        assert_eq!(
            exchange(&up.upstream, post("2")).await.1.unwrap().concat(),
            b"abcde"
        );
        assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    }

    both!(a_connection_the_upstream_closed_while_idle_is_not_used);
    /// The upstream closes a kept connection after a while (as servers
    /// do after their keep-alive timeout): the pool finds it closed and
    /// sends the next request on a new one.
    async fn a_connection_the_upstream_closed_while_idle_is_not_used(tls: bool) {
        let then_close = "HTTP/1.1 200 OK\r\nx-then-close: 1\r\ncontent-length: 2\r\n\r\nok";
        let up = upstream(vec![Some(then_close), Some(CHUNKED)], tls).await;
        assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            exchange(&up.upstream, post("2")).await.1.unwrap().concat(),
            b"abcde"
        );
        assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    }

    both!(no_answer_on_a_new_connection_is_an_error_before_the_head);
    /// An upstream that closes a new connection instead of answering:
    /// an error before the head, not sent again, and the connection is
    /// not kept.
    async fn no_answer_on_a_new_connection_is_an_error_before_the_head(tls: bool) {
        let up = upstream(vec![None, Some(CHUNKED)], tls).await;
        let resp = send(&up.upstream, post("1")).await;
        assert!(
            matches!(resp, Err(Error::H1(h1::Error::ClosedBeforeHead))),
            "{:?}",
            resp.map(|_| ())
        );
        assert!(up.retries.lock().unwrap().is_empty());
        assert!(exchange(&up.upstream, post("2")).await.1.is_ok());
        assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    }

    both!(a_request_closed_on_a_reused_connection_is_sent_again_on_a_new_one);
    /// The keep-alive race: the upstream closes a reused connection as
    /// the request arrives, without a byte of an answer. The request,
    /// held whole, is sent once more on a new connection.
    async fn a_request_closed_on_a_reused_connection_is_sent_again_on_a_new_one(tls: bool) {
        let mut up = upstream(vec![Some(CHUNKED), None, Some(CHUNKED)], tls).await;
        assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
        let (status, frames) = exchange(&up.upstream, post("2")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(frames.unwrap().concat(), b"abcde");
        assert_eq!(*up.retries.lock().unwrap(), [Race::Closed]);
        assert_eq!(up.connections.load(Ordering::SeqCst), 2);
        // The same bytes both times.
        let _first = up.requests.recv().await.unwrap();
        let second = up.requests.recv().await.unwrap();
        assert_eq!(second, up.requests.recv().await.unwrap());
    }

    both!(a_response_that_had_begun_is_not_sent_again);
    both!(a_close_without_close_notify_is_read_as_a_cut);
    /// An upstream that closes without TLS's close_notify: a body framed
    /// by chunks is cut short, as over TCP; one delimited by the close may
    /// have been truncated, which only TLS can tell (RFC 9112 §9.8), so
    /// over TLS it is an error.
    async fn a_close_without_close_notify_is_read_as_a_cut(tls: bool) {
        let up = upstream(
            vec![Some(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-then-drop: 1\r\n\r\n3\r\nabc\r\n",
            )],
            tls,
        )
        .await;
        let (_, frames) = exchange(&up.upstream, post("1")).await;
        assert!(matches!(frames, Err(h1::Error::ClosedInBody)), "{frames:?}");
        let up = upstream(
            vec![Some(
                "HTTP/1.1 200 OK\r\nx-then-drop: 1\r\n\r\nuntil the end",
            )],
            tls,
        )
        .await;
        let (_, frames) = exchange(&up.upstream, post("1")).await;
        if tls {
            assert!(
                matches!(&frames, Err(h1::Error::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof),
                "{frames:?}"
            );
        } else {
            assert_eq!(frames.unwrap().concat(), b"until the end");
        }
    }

    /// Once a byte of the response has arrived, the upstream has the
    /// request: never sent twice.
    async fn a_response_that_had_begun_is_not_sent_again(tls: bool) {
        let up = upstream(
            vec![
                Some(CHUNKED),
                Some("HTTP/1.1 200 OK\r\nx-then-close: 1\r\n"),
                Some(CHUNKED),
            ],
            tls,
        )
        .await;
        assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
        let resp = send(&up.upstream, post("2")).await;
        assert!(
            matches!(resp, Err(Error::H1(h1::Error::ClosedBeforeHead))),
            "{:?}",
            resp.map(|_| ())
        );
        assert!(up.retries.lock().unwrap().is_empty());
        assert_eq!(up.connections.load(Ordering::SeqCst), 1);
    }

    both!(a_streamed_request_body_is_not_sent_again);
    /// A request whose body is still coming from the client cannot be
    /// sent again: the race is the client's error to see.
    async fn a_streamed_request_body_is_not_sent_again(tls: bool) {
        let up = upstream(vec![Some(CHUNKED), None, Some(CHUNKED)], tls).await;
        assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
        let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
        let mut req = Request::new(RequestBody::streaming(ClientBody::new(
            incoming,
            Duration::from_secs(30),
        )));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "/up".parse().unwrap();
        let resp = send(&up.upstream, req).await;
        assert!(resp.is_err(), "{:?}", resp.map(|_| ()));
        assert!(up.retries.lock().unwrap().is_empty());
        assert_eq!(up.connections.load(Ordering::SeqCst), 1);
    }

    both!(keep_alive_max_0_is_not_kept);
    /// `Keep-Alive: max=0`: the upstream takes no more requests on the
    /// connection, so it is not kept.
    async fn keep_alive_max_0_is_not_kept(tls: bool) {
        let up = upstream(vec![
            Some("HTTP/1.1 200 OK\r\nkeep-alive: timeout=5, max=0\r\ncontent-length: 2\r\n\r\nok"),
            Some(CHUNKED),
        ], tls)
        .await;
        assert!(exchange(&up.upstream, post("1")).await.1.is_ok());
        assert!(exchange(&up.upstream, post("2")).await.1.is_ok());
        assert_eq!(up.connections.load(Ordering::SeqCst), 2);
        assert!(up.retries.lock().unwrap().is_empty());
    }

    both!(a_body_cut_short_is_an_error);
    async fn a_body_cut_short_is_an_error(tls: bool) {
        let up = upstream(vec![Some(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n5\r\nde",
        )], tls)
        .await;
        let (_, frames) = exchange(&up.upstream, post("1")).await;
        assert!(matches!(frames, Err(h1::Error::ClosedInBody)), "{frames:?}");
    }

    /// A request body streaming in from a client connection (a hyper
    /// server's), which has sent `first` of its chunked body so far;
    /// the socket writes the rest.
    async fn client_body(first: &[u8]) -> (tokio::net::TcpStream, hyper::body::Incoming) {
        let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let caddr = client.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (sock, _) = client.accept().await.unwrap();
            let tx = std::sync::Mutex::new(Some(tx));
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(req.into_body());
                }
                // Never answers: the test only takes the body.
                std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>()
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                .await;
        });
        let mut csock = tokio::net::TcpStream::connect(caddr).await.unwrap();
        csock
            .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        csock.write_all(first).await.unwrap();
        (csock, rx.await.unwrap())
    }

    both!(an_early_answer_ends_the_request);
    /// An upstream that answers before the request body is all there,
    /// and whose answer ends while the client's body goes on: the
    /// answer is forwarded without waiting for the request body, the
    /// rest of the request is not sent, and the connection is not kept.
    async fn an_early_answer_ends_the_request(tls: bool) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let Some(mut sock) = server_side(sock, tls).await else {
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    let _ = sock.read(&mut buf).await;
                    let _ = sock
                        .write_all(
                            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!",
                        )
                        .await;
                    // Reads on (as a server draining the upload would).
                    while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        let (upstream, _) = upstream_for(addr, tls);
        // The client's body never ends.
        let (_csock, incoming) = client_body(b"5\r\nhello\r\n").await;
        let mut req = Request::new(RequestBody::streaming(ClientBody::new(
            incoming,
            Duration::from_secs(30),
        )));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "/up".parse().unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), exchange(&upstream, req))
            .await
            .expect("the early answer, not a wait for the request body");
        assert_eq!(resp.0, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(resp.1.unwrap().concat(), b"big!");
        // Not kept: the next request opens a new connection.
        let next = tokio::time::timeout(Duration::from_secs(5), exchange(&upstream, post("x")));
        assert_eq!(
            next.await.expect("an answer on a new connection").0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    }

    both!(a_streamed_request_body_goes_out_chunked);
    /// A chunked request body, streamed: sent chunked, frame by frame.
    async fn a_streamed_request_body_goes_out_chunked(tls: bool) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            let mut sock = server_side(sock, tls).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"0\r\n\r\n") {
                let n = sock.read(&mut buf).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            got
        });
        // A client connection whose body streams in two frames.
        let (mut csock, incoming) = client_body(b"5\r\nhello\r\n").await;
        let mut req = Request::new(RequestBody::streaming(ClientBody::new(
            incoming,
            Duration::from_secs(30),
        )));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "/up".parse().unwrap();
        req.headers_mut()
            .insert(header::HOST, HeaderValue::from_static("up"));
        let (upstream, _) = upstream_for(addr, tls);
        let send =
            tokio::spawn(async move { send(&upstream, req).await.map_err(|e| e.to_string()) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        csock.write_all(b"6\r\n world\r\n0\r\n\r\n").await.unwrap();
        let resp = send.await.unwrap().unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let got = String::from_utf8(server.await.unwrap()).unwrap();
        assert_eq!(
            got,
            "POST /up HTTP/1.1\r\nhost: up\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        );
    }

    #[test]
    fn small_frames_leave_the_read_buffer_and_large_ones_stay_in_it() {
        let read_buffer = Bytes::from(vec![b'x'; 3 * h1::OWN_BUFFER_MAX]);
        let data = |frame: http_body::Frame<Bytes>| frame.into_data().unwrap();

        let small = read_buffer.slice(..h1::OWN_BUFFER_MAX);
        let out = data(super::own_buffer(http_body::Frame::data(small.clone())));
        assert_eq!(out, small);
        assert_ne!(out.as_ptr(), small.as_ptr(), "copied out");
        // The copy holds no reference to the read buffer: it alone owns it
        // again once the frame taken from it is gone.
        drop(small);
        assert!(read_buffer.is_unique());

        let large = read_buffer.slice(..=h1::OWN_BUFFER_MAX);
        let out = data(super::own_buffer(http_body::Frame::data(large.clone())));
        assert_eq!(out.as_ptr(), large.as_ptr(), "passed on as it is");

        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("x-done", "1".parse().unwrap());
        let out = super::own_buffer(http_body::Frame::trailers(trailers.clone()));
        assert_eq!(out.into_trailers().unwrap(), trailers);
    }
}
