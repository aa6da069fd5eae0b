//! The upstream of a route: its connections, the choice of protocol, and
//! one exchange.
//!
//! A connection is made by `connect.rs`, with the route's `crate::dial`
//! dialer: TCP, then TLS for an `https` upstream, offering `h2` and
//! `http/1.1` by ALPN. The protocol is chosen
//! by what the connection speaks, not by the URL's scheme: HTTP/1.1 (plain
//! TCP, or TLS where ALPN chose `http/1.1` or nothing) is spoken by the
//! client connection of our own (`h1`), whose connections are pooled per
//! upstream ([`h1::Pool`]: keep-alive hints, expiry, and the one retry of a
//! request caught in the keep-alive race). HTTP/2 (TLS where ALPN chose
//! `h2`) is spoken by hyper's HTTP/2 client on one shared connection
//! (`h2.rs`); a request it did not take (it was closing) goes on a new
//! connection. Two requests that find no connection at once may each make
//! one; the last one made is kept, and the other serves its own request
//! and closes.
//!
//! Every failure before a response head, on either protocol, is an
//! [`Error`], which `crate::proxy::error` blames on a side: the client's
//! own body first, wherever it broke, then the connection (refused, timed
//! out, TLS), then the upstream's exchange.

mod body;
mod connect;
mod error;
mod h2;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{HeaderValue, Request, Response};

use super::client_body::{BodyTimeout, ClientBodyError, RequestBody};
use super::rewrite::{origin_form, upstream_host};
use crate::config::Route;
use crate::dial::Io;
use connect::Connector;
use h1::{Conn, Pool, Prepared, Reused};
use h2::H2Failed;

pub use body::{BoxError, FromUpstream, H1Body};
pub use error::{BodyError, Error};
pub use h2::H2Body;

impl h1::SendBody for RequestBody {
    fn replay(&self) -> Option<Self> {
        RequestBody::replay(self)
    }
}

/// A new connection, by the protocol it speaks.
enum Fresh {
    H1(Io),
    H2(h2::Sender),
}

/// One route's upstream: how to connect, its idle HTTP/1.1 connections,
/// and its HTTP/2 connection if it speaks HTTP/2.
pub struct UpstreamClient {
    connector: Connector,
    /// The `Host` header of an HTTP/1.1 request that has none: the
    /// upstream's host, and its port unless it is the scheme's default.
    /// Made once, not per request.
    host: Option<HeaderValue>,
    pool: Arc<Pool<Io>>,
    h2: h2::Shared,
}

impl UpstreamClient {
    /// The upstream of `route`, keeping at most `max_idle` idle HTTP/1.1
    /// connections for `idle_timeout` each. Fails only if TLS cannot be set
    /// up.
    pub fn new(
        route: &Route,
        max_idle: usize,
        idle_timeout: Duration,
        on_retry: h1::OnRetry,
    ) -> Result<Arc<Self>, rustls::Error> {
        Ok(Arc::new(Self {
            connector: Connector::new(route)?,
            host: upstream_host(&route.upstream),
            pool: Pool::new(max_idle, idle_timeout, on_retry),
            h2: h2::Shared::new(idle_timeout),
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
        if self.connector.is_tls()
            && let Some(send) = self.h2.get()
        {
            match h2::send(send, req).await {
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
            Fresh::H2(send) => h2::send(send, req).await.map_err(H2Failed::into_error),
        }
    }

    /// A new connection, speaking what the upstream chose: HTTP/1.1 over
    /// plain TCP, over TLS what ALPN chose; an HTTP/2 one is kept to be
    /// shared. (Boxed: its future would otherwise be part of the request's,
    /// which is moved whole into the timeout.)
    async fn connect(&self) -> Result<Fresh, Error> {
        Box::pin(async {
            let stream = match self.connector.transport().await?.into_h2() {
                Ok(stream) => stream,
                Err(io) => return Ok(Fresh::H1(io)),
            };
            let send = h2::handshake(stream).await?;
            self.h2.keep(&send);
            Ok(Fresh::H2(send))
        })
        .await
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
