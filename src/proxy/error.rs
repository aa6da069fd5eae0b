//! Why the proxy answered a request itself, and the one place failures
//! are charged to a side and turned into responses.
//!
//! Every failure keeps its cause as a typed source: the message a client
//! is sent, and the line logged, is the chain ([`ProxyError::message`]).

use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use meter::Outcome;

use super::body::ResponseBody;
use super::client_body::{BodyTimeout, ClientBodyError};
use super::upstream::{self, BoxError};

/// Why the proxy answered a request itself.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no route matches this request")]
    NoRoute,
    #[error("could not connect to the upstream")]
    Connect(#[source] upstream::Error),
    #[error("timed out connecting to the upstream")]
    ConnectTimeout,
    #[error("the upstream sent no response head within {0:?}")]
    HeadersTimeout(std::time::Duration),
    #[error("the upstream failed before its response head")]
    Upstream(#[source] upstream::Error),
    /// The upstream request's URI could not be made from the route's
    /// upstream and the request's path.
    #[error("invalid upstream URI")]
    UpstreamUri(#[source] http::Error),
    /// The client's body was unusable: the client's own error, or the
    /// upstream exchange's that carries it.
    #[error("reading the request body failed")]
    RequestBody(#[source] BoxError),
    #[error(transparent)]
    RequestBodyTimeout(BodyTimeout),
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("this route already has {0} requests in flight, its max_in_flight")]
    Overloaded(usize),
}

impl ProxyError {
    /// The error and its causes on one line: what the client is told and
    /// what is logged.
    pub fn message(&self) -> String {
        chain(self)
    }

    /// A short, bounded name (used in logs and the error body).
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::NoRoute => "no_route",
            ProxyError::Connect(_) => "upstream_unreachable",
            ProxyError::ConnectTimeout => "upstream_connect_timeout",
            ProxyError::HeadersTimeout(_) => "upstream_headers_timeout",
            ProxyError::Upstream(_) | ProxyError::UpstreamUri(_) => "upstream_failed",
            ProxyError::RequestBody(_) => "request_body",
            ProxyError::RequestBodyTimeout(_) => "request_body_timeout",
            ProxyError::BadRequest(_) => "bad_request",
            ProxyError::Overloaded(_) => "overloaded",
        }
    }

    pub(super) fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::Connect(_) | ProxyError::Upstream(_) | ProxyError::UpstreamUri(_) => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::ConnectTimeout | ProxyError::HeadersTimeout(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::RequestBody(_) | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::RequestBodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub(super) fn outcome(&self) -> Outcome {
        match self {
            ProxyError::Connect(_) | ProxyError::NoRoute | ProxyError::Overloaded(_) => {
                Outcome::ProxyError
            }
            ProxyError::ConnectTimeout | ProxyError::HeadersTimeout(_) => Outcome::Timeout,
            ProxyError::Upstream(_) | ProxyError::UpstreamUri(_) => Outcome::UpstreamError,
            ProxyError::RequestBody(_) | ProxyError::BadRequest(_) => Outcome::ClientAbort,
            ProxyError::RequestBodyTimeout(_) => Outcome::ClientTimeout,
        }
    }

    /// The response sent to the client: an OpenAI-style error object, so
    /// SDKs show the message.
    pub(super) fn response(&self) -> Response<ResponseBody> {
        let body = serde_json::json!({
            "error": {
                "message": self.message(),
                "type": "tokenmeter_error",
                "code": self.kind(),
            }
        });
        let mut resp = Response::new(ResponseBody::local(body.to_string()));
        *resp.status_mut() = self.status();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp.headers_mut().insert(
            HeaderName::from_static("x-tokenmeter-error"),
            HeaderValue::from_static(self.kind()),
        );
        if let ProxyError::Overloaded(_) = self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// An error and its causes on one line, `: ` between them.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

impl From<ClientBodyError> for ProxyError {
    /// The client's answer for its own body's failure.
    fn from(e: ClientBodyError) -> Self {
        match e {
            ClientBodyError::Timeout(timeout) => ProxyError::RequestBodyTimeout(timeout),
            e @ ClientBodyError::Failed(_) => ProxyError::RequestBody(Box::new(e)),
        }
    }
}

impl From<upstream::Error> for ProxyError {
    /// The proxy's answer for an upstream exchange that got no response
    /// head, charged to the side that caused it: the client's body, found
    /// first wherever it is in the chain; then connecting (refused, timed
    /// out, TLS refused); then the upstream's exchange.
    fn from(e: upstream::Error) -> Self {
        // Carried as a transparent variant, which its chain skips.
        if let upstream::Error::ClientBody(client) = e {
            return ProxyError::from(client);
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if let Some(client) = s.downcast_ref::<ClientBodyError>() {
                return match client {
                    ClientBodyError::Timeout(timeout) => ProxyError::RequestBodyTimeout(*timeout),
                    ClientBodyError::Failed(_) => ProxyError::RequestBody(Box::new(e)),
                };
            }
            source = s.source();
        }
        match e {
            upstream::Error::H1(h1::Error::RequestLength) => ProxyError::RequestBody(Box::new(e)),
            upstream::Error::ConnectTimeout => ProxyError::ConnectTimeout,
            upstream::Error::Connect(ref io) if io.kind() == std::io::ErrorKind::TimedOut => {
                ProxyError::ConnectTimeout
            }
            upstream::Error::Connect(_)
            | upstream::Error::ServerName(_)
            | upstream::Error::Tls(_) => ProxyError::Connect(e),
            upstream::Error::HeadTimeout(limit) => ProxyError::HeadersTimeout(limit),
            upstream::Error::H2Handshake(_)
            | upstream::Error::H1(_)
            | upstream::Error::H2(_)
            | upstream::Error::ClientBody(_)
            | upstream::Error::SwitchedToH2 => ProxyError::Upstream(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const IDLE: BodyTimeout = BodyTimeout::Idle(Duration::from_millis(300));

    #[test]
    fn the_clients_body_is_found_first_wherever_it_broke() {
        // As hyper's HTTP/2 client reports it.
        let h2 = upstream::Error::ClientBody(ClientBodyError::Timeout(IDLE));
        assert!(matches!(
            ProxyError::from(h2),
            ProxyError::RequestBodyTimeout(t) if t == IDLE
        ));
        // As h1 reports it: the body's own error, boxed, as the source.
        let h1 = upstream::Error::H1(h1::Error::RequestBody(Box::new(ClientBodyError::Timeout(
            IDLE,
        ))));
        let err = ProxyError::from(h1);
        assert!(matches!(err, ProxyError::RequestBodyTimeout(t) if t == IDLE));
        assert_eq!(err.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(err.outcome(), Outcome::ClientTimeout);
    }

    #[test]
    fn connecting_and_exchanging_are_told_apart_and_keep_their_causes() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = ProxyError::from(upstream::Error::Connect(refused));
        assert_eq!(err.kind(), "upstream_unreachable");
        assert_eq!(err.outcome(), Outcome::ProxyError);
        assert!(
            err.message()
                .starts_with("could not connect to the upstream: tcp connect: "),
            "{}",
            err.message()
        );
        let timed_out = std::io::Error::from(std::io::ErrorKind::TimedOut);
        let err = ProxyError::from(upstream::Error::Connect(timed_out));
        assert!(matches!(err, ProxyError::ConnectTimeout));
        let err = ProxyError::from(upstream::Error::HeadTimeout(Duration::from_secs(1)));
        assert_eq!(err.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(err.outcome(), Outcome::Timeout);
        let err = ProxyError::from(upstream::Error::SwitchedToH2);
        assert_eq!(err.kind(), "upstream_failed");
        assert_eq!(err.outcome(), Outcome::UpstreamError);
    }
}
