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
use tokio::task::JoinHandle;

use super::target::{Error, Failure, Target};
use crate::dial::{DialError, Dialer};

/// What Prometheus asks for: the text format, whichever version.
const ACCEPT_TEXT: &str =
    "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1";

const AGENT: &str = concat!("tokenmeter/", env!("CARGO_PKG_VERSION"));

/// Where a target's page is, resolved once from its URL.
pub(super) struct Endpoint {
    /// How the server is reached, as a route's upstream is.
    dialer: Dialer,
    /// The `Host` header: the URL's host and port, without user info.
    host_header: HeaderValue,
    /// The path and query, as written.
    path: Uri,
}

impl Endpoint {
    /// The endpoint of `target`'s URL, over TLS trusting its roots for
    /// `https`.
    pub(super) fn new(target: &Target) -> Result<Self, Error> {
        let url = &target.url;
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(Error::Scheme {
                    route: target.route.clone(),
                    url: target.shown_url.clone(),
                });
            }
        };
        let no_host = || Error::NoHost {
            route: target.route.clone(),
            url: target.shown_url.clone(),
        };
        let authority = url.authority().ok_or_else(no_host)?;
        let written = authority.host();
        if written.is_empty() {
            return Err(no_host());
        }
        let host_header = match authority.port() {
            Some(port) => format!("{written}:{port}"),
            None => written.to_owned(),
        };
        let host_header = HeaderValue::try_from(host_header).map_err(|_| no_host())?;
        let path = url
            .path_and_query()
            .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
        let tls = if https {
            Some(http1_client(target)?)
        } else {
            None
        };
        let dialer = Dialer::new(authority, tls).map_err(|e| Error::ServerName {
            route: target.route.clone(),
            url: target.shown_url.clone(),
            host: e.host,
        })?;
        Ok(Self {
            dialer,
            host_header,
            path,
        })
    }

    /// The page's body, at most `max_body` bytes of it.
    pub(super) async fn fetch(&self, max_body: usize) -> Result<Bytes, Failure> {
        let io = self.dialer.connect().await.map_err(|e| match e {
            DialError::Connect(e) => Failure::Connect(e),
            DialError::Tls(e) => Failure::Tls(e),
        })?;
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
}

/// The TLS client of `target`: its roots (else the web PKI's), speaking
/// HTTP/1.1 only, the one protocol of this client.
fn http1_client(target: &Target) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut config = crate::dial::client_config(target.tls_roots.as_deref()).map_err(|source| {
        Error::TlsConfig {
            route: target.route.clone(),
            source,
        }
    })?;
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
