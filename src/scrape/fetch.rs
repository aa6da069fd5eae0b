//! One GET of a target's page: TCP, TLS for `https`, one HTTP/1.1 exchange
//! on hyper's client connection, and the body read up to a hard bound.
//!
//! Each scrape opens a connection of its own and closes it (`Connection:
//! close`): a scrape every few seconds gains little from keeping one, and
//! a connection that went wrong is never reused. The timeout is the
//! caller's; dropping the future closes the connection.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CONNECTION, CONTENT_LENGTH, HOST, USER_AGENT};
use http::{HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use super::target::{Error, Failure};

/// What Prometheus asks for: the text format, whichever version.
const ACCEPT_TEXT: &str =
    "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1";

const AGENT: &str = concat!("tokenmeter/", env!("CARGO_PKG_VERSION"));

/// Where a target's page is, resolved once from its URL.
pub(super) struct Endpoint {
    /// The host to resolve (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// The `Host` header: the URL's host and port, without user info.
    host_header: HeaderValue,
    /// The path and query, as written.
    path: Uri,
    /// For `https`: the TLS client and the name the certificate must bear.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Endpoint {
    /// The endpoint of `url`; `route` and `shown` (the redacted URL) name it
    /// in an error.
    pub(super) fn new(
        route: &str,
        url: &Uri,
        shown: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Self, Error> {
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(Error::Scheme {
                    route: route.to_owned(),
                    url: shown.to_owned(),
                });
            }
        };
        let no_host = || Error::NoHost {
            route: route.to_owned(),
            url: shown.to_owned(),
        };
        let authority = url.authority().ok_or_else(no_host)?;
        let written = authority.host();
        if written.is_empty() {
            return Err(no_host());
        }
        let host = written
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(written)
            .to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host_header = match authority.port() {
            Some(port) => format!("{written}:{port}"),
            None => written.to_owned(),
        };
        let host_header = HeaderValue::try_from(host_header).map_err(|_| no_host())?;
        let path = url
            .path_and_query()
            .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
        let tls = if https {
            let name = ServerName::try_from(host.clone()).map_err(|_| Error::ServerName {
                route: route.to_owned(),
                url: shown.to_owned(),
                host: host.clone(),
            })?;
            Some((TlsConnector::from(http1_only(tls)?), name))
        } else {
            None
        };
        Ok(Self {
            host,
            port,
            host_header,
            path,
            tls,
        })
    }

    /// The page's body, at most `max_body` bytes of it.
    pub(super) async fn fetch(&self, max_body: usize) -> Result<Bytes, Failure> {
        let tcp = self.connect().await?;
        let io = match &self.tls {
            None => Either::Left(tcp),
            Some((tls, name)) => {
                Either::Right(tls.connect(name.clone(), tcp).await.map_err(Failure::Tls)?)
            }
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(Failure::Http)?;
        // The connection runs beside the exchange, and ends with it: on
        // return, on failure and when the caller's timeout drops this.
        let _connection = Aborting(tokio::spawn(connection));
        let mut request = Request::new(Empty::<Bytes>::new());
        *request.uri_mut() = self.path.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host_header.clone());
        headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_TEXT));
        headers.insert(USER_AGENT, HeaderValue::from_static(AGENT));
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
        let response = sender.send_request(request).await.map_err(Failure::Http)?;
        if !response.status().is_success() {
            return Err(Failure::Status(response.status()));
        }
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_body as u64) {
            return Err(Failure::TooLarge { max: max_body });
        }
        let mut body = response.into_body();
        let capacity = declared
            .map_or(64 * 1024, |n| usize::try_from(n).unwrap_or(max_body))
            .min(max_body);
        let mut page = BytesMut::with_capacity(capacity);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(Failure::Http)?;
            if let Ok(data) = frame.into_data() {
                if page.len() + data.len() > max_body {
                    return Err(Failure::TooLarge { max: max_body });
                }
                page.extend_from_slice(&data);
            }
        }
        Ok(page.freeze())
    }

    /// A TCP connection to the host: each of its addresses in turn, until
    /// one answers.
    async fn connect(&self) -> Result<TcpStream, Failure> {
        let addrs = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(Failure::Connect)?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => last = Some(e),
            }
        }
        Err(Failure::Connect(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the host has no address")
        })))
    }
}

/// `tls`, or the web PKI's roots, speaking HTTP/1.1 only: a route's client
/// may offer `h2`, which this client does not speak.
fn http1_only(tls: Option<&Arc<rustls::ClientConfig>>) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut config = match tls {
        Some(config) => (**config).clone(),
        None => rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(Error::TlsConfig)?
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A spawned task that is aborted when this is dropped.
struct Aborting<T>(JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
