//! Why the proxy answered a request itself, and the one place failures
//! are turned into responses; the side each is blamed on is
//! [`Blame`]'s, the same before the response head and after it.
//!
//! Every failure keeps its cause as a typed source: the message a client
//! is sent, and the line logged, is the chain ([`ProxyError::message`]).

use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use meter::Outcome;

use super::blame::{Blame, Fault};
use super::body::ResponseBody;
use super::client_body::{BodyTimeout, ClientBodyError};
use super::upstream;

/// Why the proxy answered a request itself.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no route matches this request")]
    NoRoute,
    #[error("could not connect to the upstream")]
    Connect(#[source] upstream::Error),
    #[error("timed out connecting to the upstream")]
    ConnectTimeout(#[source] upstream::Error),
    #[error("the upstream sent no response head within {0:?}")]
    HeadersTimeout(std::time::Duration),
    #[error("the upstream failed before its response head")]
    Upstream(#[source] upstream::Error),
    /// The upstream request's URI could not be made from the route's
    /// upstream and the request's path.
    #[error("invalid upstream URI")]
    UpstreamUri(#[source] http::Error),
    #[error("reading the request body failed")]
    RequestBody(#[source] RequestBodyFailure),
    #[error(transparent)]
    RequestBodyTimeout(BodyTimeout),
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("this route already has {0} requests in flight, its max_in_flight")]
    Overloaded(usize),
}

/// The client's request body was unusable: as the proxy read it ahead, or
/// as the exchange that was sending it upstream reports it.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyFailure {
    #[error(transparent)]
    Read(ClientBodyError),
    #[error(transparent)]
    Sending(upstream::Error),
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
            ProxyError::ConnectTimeout(_) => "upstream_connect_timeout",
            ProxyError::HeadersTimeout(_) => "upstream_headers_timeout",
            ProxyError::Upstream(_) | ProxyError::UpstreamUri(_) => "upstream_failed",
            ProxyError::RequestBody(_) => "request_body",
            ProxyError::RequestBodyTimeout(_) => "request_body_timeout",
            ProxyError::BadRequest(_) => "bad_request",
            ProxyError::Overloaded(_) => "overloaded",
        }
    }

    /// The side the failure is blamed on.
    pub(super) fn fault(&self) -> Fault {
        match self {
            ProxyError::NoRoute | ProxyError::Overloaded(_) => Fault::Refused,
            ProxyError::BadRequest(_) => Fault::Client,
            ProxyError::UpstreamUri(_) => Fault::Upstream,
            ProxyError::HeadersTimeout(_) => Fault::Timeout,
            ProxyError::RequestBodyTimeout(timeout) => Fault::ClientTimeout(*timeout),
            ProxyError::RequestBody(RequestBodyFailure::Read(e)) => e.fault(),
            ProxyError::RequestBody(RequestBodyFailure::Sending(e))
            | ProxyError::Connect(e)
            | ProxyError::ConnectTimeout(e)
            | ProxyError::Upstream(e) => e.fault(),
        }
    }

    pub(super) fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => match self.fault() {
                Fault::Client => StatusCode::BAD_REQUEST,
                Fault::ClientTimeout(_) => StatusCode::REQUEST_TIMEOUT,
                Fault::Timeout => StatusCode::GATEWAY_TIMEOUT,
                Fault::Unreachable | Fault::Upstream | Fault::Refused | Fault::Gateway => {
                    StatusCode::BAD_GATEWAY
                }
            },
        }
    }

    pub(super) fn outcome(&self) -> Outcome {
        self.fault().outcome()
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
            e @ ClientBodyError::Failed(_) => ProxyError::RequestBody(RequestBodyFailure::Read(e)),
        }
    }
}

impl From<upstream::Error> for ProxyError {
    /// The proxy's answer for an upstream exchange that got no response
    /// head, by the side it is blamed on ([`Blame`]).
    fn from(e: upstream::Error) -> Self {
        if let upstream::Error::HeadTimeout(limit) = e {
            return ProxyError::HeadersTimeout(limit);
        }
        match e.fault() {
            Fault::ClientTimeout(timeout) => ProxyError::RequestBodyTimeout(timeout),
            Fault::Client => ProxyError::RequestBody(RequestBodyFailure::Sending(e)),
            Fault::Timeout => ProxyError::ConnectTimeout(e),
            Fault::Unreachable => ProxyError::Connect(e),
            Fault::Upstream | Fault::Refused | Fault::Gateway => ProxyError::Upstream(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const IDLE: BodyTimeout = BodyTimeout::Idle(Duration::from_millis(300));

    #[test]
    fn the_clients_body_is_blamed_on_the_client_wherever_it_broke() {
        // As hyper's HTTP/2 client reports it.
        let h2 = upstream::Error::ClientBody(ClientBodyError::Timeout(IDLE));
        assert!(matches!(
            ProxyError::from(h2),
            ProxyError::RequestBodyTimeout(t) if t == IDLE
        ));
        // As h1 reports it: the body's own error, typed.
        let h1 = upstream::Error::H1(h1::Error::RequestBody(ClientBodyError::Timeout(IDLE)));
        let err = ProxyError::from(h1);
        assert!(matches!(err, ProxyError::RequestBodyTimeout(t) if t == IDLE));
        assert_eq!(err.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(err.outcome(), Outcome::ClientTimeout);
        let err = ProxyError::from(upstream::Error::H1(h1::Error::RequestLength));
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        assert_eq!(err.outcome(), Outcome::ClientAbort);
        assert_eq!(
            err.message(),
            "reading the request body failed: request body does not match its Content-Length"
        );
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
        assert!(matches!(err, ProxyError::ConnectTimeout(_)));
        assert_eq!(err.status(), StatusCode::GATEWAY_TIMEOUT);
        let err = ProxyError::from(upstream::Error::HeadTimeout(Duration::from_secs(1)));
        assert_eq!(err.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(err.outcome(), Outcome::Timeout);
        let err = ProxyError::from(upstream::Error::SwitchedToH2);
        assert_eq!(err.kind(), "upstream_failed");
        assert_eq!(err.outcome(), Outcome::UpstreamError);
    }

    #[tokio::test]
    async fn a_connect_timeout_keeps_its_cause() {
        let elapsed = tokio::time::timeout(Duration::ZERO, std::future::pending::<()>())
            .await
            .unwrap_err();
        let err = ProxyError::from(upstream::Error::ConnectTimeout {
            limit: Duration::from_secs(2),
            source: elapsed,
        });
        assert_eq!(err.kind(), "upstream_connect_timeout");
        assert_eq!(err.outcome(), Outcome::Timeout);
        assert_eq!(
            err.message(),
            "timed out connecting to the upstream: no connection within 2s: deadline has elapsed"
        );
    }

    #[test]
    fn the_proxys_own_refusals_and_bad_requests_keep_their_answers() {
        assert_eq!(ProxyError::NoRoute.status(), StatusCode::NOT_FOUND);
        assert_eq!(ProxyError::NoRoute.outcome(), Outcome::ProxyError);
        assert_eq!(
            ProxyError::Overloaded(3).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(ProxyError::Overloaded(3).outcome(), Outcome::ProxyError);
        assert_eq!(
            ProxyError::BadRequest("x").status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(ProxyError::BadRequest("x").outcome(), Outcome::ClientAbort);
    }
}
