//! Forwarding: routing, the upstream request, timeouts, and errors turned
//! into responses.
//!
//! A request is forwarded as it came (method, path, query, headers, body),
//! except for hop-by-hop headers (RFC 9110 §7.6.1), `Host` (the upstream's,
//! unless the route preserves the client's) and the `X-Forwarded-*` headers.
//! The response comes back with its status, headers and body untouched but
//! for hop-by-hop headers. This module must not parse protocol payloads: it
//! hands frames to the meter ([`meter`]) and forwards them.
//!
//! The one payload it reads is the request body's `model` field, from a
//! bounded read-ahead of the body, so the request can be labelled; the
//! read-ahead frames are forwarded byte for byte.

pub mod access;
mod admission;
pub mod arrival;
pub mod body;
pub mod observe;
pub mod overload;
pub mod tenant;
pub mod trace;
pub mod upstream;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body, Frame};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::config::{Config, Protocol, Route};

use crate::metrics::Metrics;
use body::FromUpstream;
use meter::{Api, Limits, Outcome, StreamMeter};
use slo::SloClass;

pub use body::{BodyTimeout, BoxError, ClientBody, ClientBodyError, RequestBody, ResponseBody};
pub use overload::Overload;

/// The meter of one request, reporting to its observers (the metrics, the
/// live windows and the access log).
pub type Meter = StreamMeter<observe::Observed>;

/// Why the proxy answered a request itself.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no route matches this request")]
    NoRoute,
    #[error("could not connect to the upstream: {0}")]
    Connect(String),
    #[error("timed out connecting to the upstream")]
    ConnectTimeout,
    #[error("the upstream sent no response head within {0:?}")]
    HeadersTimeout(std::time::Duration),
    #[error("the upstream failed before its response head: {0}")]
    Upstream(String),
    #[error("reading the request body failed: {0}")]
    RequestBody(String),
    #[error(transparent)]
    RequestBodyTimeout(BodyTimeout),
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("this route already has {0} requests in flight, its max_in_flight")]
    Overloaded(usize),
}

impl ProxyError {
    /// A short, bounded name (used in logs and the error body).
    pub fn kind(&self) -> &'static str {
        match self {
            ProxyError::NoRoute => "no_route",
            ProxyError::Connect(_) => "upstream_unreachable",
            ProxyError::ConnectTimeout => "upstream_connect_timeout",
            ProxyError::HeadersTimeout(_) => "upstream_headers_timeout",
            ProxyError::Upstream(_) => "upstream_failed",
            ProxyError::RequestBody(_) => "request_body",
            ProxyError::RequestBodyTimeout(_) => "request_body_timeout",
            ProxyError::BadRequest(_) => "bad_request",
            ProxyError::Overloaded(_) => "overloaded",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::Connect(_) | ProxyError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ProxyError::ConnectTimeout | ProxyError::HeadersTimeout(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::RequestBody(_) | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::RequestBodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn outcome(&self) -> Outcome {
        match self {
            ProxyError::Connect(_) | ProxyError::NoRoute | ProxyError::Overloaded(_) => {
                Outcome::ProxyError
            }
            ProxyError::ConnectTimeout | ProxyError::HeadersTimeout(_) => Outcome::Timeout,
            ProxyError::Upstream(_) => Outcome::UpstreamError,
            ProxyError::RequestBody(_) | ProxyError::BadRequest(_) => Outcome::ClientAbort,
            ProxyError::RequestBodyTimeout(_) => Outcome::ClientTimeout,
        }
    }

    /// The response sent to the client: an OpenAI-style error object, so
    /// SDKs show the message.
    fn response(&self) -> Response<ResponseBody> {
        let body = serde_json::json!({
            "error": {
                "message": self.to_string(),
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

/// A route with its upstream (one per route, since connect timeouts and
/// trusted roots are the route's).
struct RouteState {
    route: Route,
    /// Connections to the upstream, over HTTP/1.1 or HTTP/2 (see
    /// [`upstream`]).
    upstream: Arc<upstream::Upstream>,
    /// The route's requests in flight, kept across reloads (by name).
    in_flight: Arc<admission::InFlight>,
}

/// The forwarding service of one configuration, shared by every
/// connection. A reload builds a new one; each request holds the one it
/// started with (an `Arc`) to its end, so its route, class and limits never
/// change under it.
pub struct Proxy {
    /// The configuration this proxy was built from, for `/config`.
    config: Arc<Config>,
    routes: Vec<RouteState>,
    metrics: Arc<Metrics>,
    /// What each finished metered request is handed to.
    observers: observe::Observers,
    /// The defined SLO classes by name: a class a client declares by header
    /// is used only if it is one of these, which bounds the `slo` label.
    classes: HashMap<String, Arc<SloClass>>,
    max_request_body: usize,
    max_retry_body: usize,
    /// The proxy listener's overload state, shared across reloads.
    overload: Arc<Overload>,
    limits: Limits,
    x_forwarded: bool,
    trusted_proxies: Vec<crate::config::IpNet>,
    shutdown_grace: std::time::Duration,
    trace_context: crate::config::TraceSettings,
}

impl Proxy {
    /// Builds the routes' upstreams. Finished metered requests are
    /// recorded in `metrics` and, when given, written to `access` and
    /// exported by `otlp`. Request bodies read ahead are shed as `overload`
    /// says. Fails only if TLS cannot be set up.
    pub fn new(
        config: &Config,
        metrics: Arc<Metrics>,
        access: Option<access::AccessLog>,
        otlp: Option<Arc<crate::otlp::Otlp>>,
        overload: Arc<Overload>,
    ) -> Result<Self, rustls::Error> {
        Self::build(
            config,
            observe::Observers::new(metrics, access, otlp),
            overload,
            None,
        )
    }

    /// The proxy of a reloaded `config`. A route of the same name whose
    /// upstream, connect timeout and trusted roots are unchanged keeps its
    /// upstream, and so its pooled connections.
    pub fn reloaded(&self, config: &Config) -> Result<Self, rustls::Error> {
        Self::build(
            config,
            self.observers.clone(),
            self.overload.clone(),
            Some(self),
        )
    }

    fn build(
        config: &Config,
        observers: observe::Observers,
        overload: Arc<Overload>,
        previous: Option<&Proxy>,
    ) -> Result<Self, rustls::Error> {
        let metrics = observers.metrics().clone();
        let keepalive = Keepalive::of(&config.proxy);
        let reusable = |route: &Route| {
            let previous = previous?;
            if Keepalive::of(&previous.config.proxy) != keepalive {
                return None;
            }
            previous.routes.iter().find(|old| {
                old.route.name == route.name
                    && old.route.upstream == route.upstream
                    && old.route.timeouts.connect == route.timeouts.connect
                    && old.route.tls_roots == route.tls_roots
            })
        };
        let routes = config
            .routes
            .iter()
            .map(|route| {
                let upstream = match reusable(route) {
                    Some(old) => old.upstream.clone(),
                    None => new_upstream(route, keepalive, &metrics)?,
                };
                let in_flight = previous
                    .and_then(|p| p.routes.iter().find(|old| old.route.name == route.name))
                    .map_or_else(Default::default, |old| old.in_flight.clone());
                if route.max_in_flight.is_some() {
                    metrics.limited(&route.name);
                }
                Ok(RouteState {
                    upstream,
                    in_flight,
                    route: route.clone(),
                })
            })
            .collect::<Result<_, rustls::Error>>()?;
        Ok(Self {
            config: Arc::new(config.clone()),
            routes,
            metrics,
            observers,
            classes: config
                .slo_classes
                .iter()
                .map(|c| (c.name.clone(), Arc::new(c.clone())))
                .collect(),
            max_request_body: config.proxy.max_request_body_bytes,
            max_retry_body: config.proxy.max_retry_body_bytes,
            overload,
            limits: Limits {
                body: config.proxy.max_response_body_bytes,
                usage_tokens: config.metrics.max_usage_tokens,
                ..Limits::default()
            },
            x_forwarded: config.proxy.x_forwarded,
            trusted_proxies: config.proxy.trusted_proxies.clone(),
            shutdown_grace: config.proxy.shutdown_grace,
            trace_context: config.trace_context,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How long in-flight requests may take to finish on shutdown.
    pub fn shutdown_grace(&self) -> std::time::Duration {
        self.shutdown_grace
    }

    /// Forwards one request whose head was received at `t0`
    /// ([`arrival::Arrival::t0`]). Never fails: problems become responses.
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        t0: Instant,
        client_addr: SocketAddr,
    ) -> Response<ResponseBody> {
        if let Some(problem) = host_problem(&req) {
            self.metrics.rejected("", "bad_host");
            return ProxyError::BadRequest(problem).response();
        }
        let Some(state) = self.find_route(&req) else {
            self.metrics.unrouted();
            return ProxyError::NoRoute.response();
        };
        let route = &state.route;
        let api = match route.protocol {
            Protocol::None => None,
            Protocol::OpenAi => Some(Api::OpenAi),
            Protocol::Responses => Some(Api::Responses),
            Protocol::Anthropic => Some(Api::Anthropic),
            Protocol::Tgi => Some(Api::Tgi),
            Protocol::Ollama => Some(Api::Ollama),
            Protocol::LlamaCpp => Some(Api::LlamaCpp),
            Protocol::Gemini => Some(Api::Gemini),
            Protocol::Sglang => Some(Api::Sglang),
            Protocol::Triton => Some(Api::Triton),
            Protocol::Auto => Api::detect(req.method(), req.uri().path()),
        };
        let (mut parts, body) = req.into_parts();
        // The trace is known, and the upstream's headers set, before
        // anything is metered, so every way the request ends names it.
        let trace =
            api.and_then(|_| trace::Trace::of_request(self.trace_context, &mut parts.headers));
        let (body, model) = match self
            .read_ahead(route, t0, api.is_some(), &parts, body)
            .await
        {
            Ok(read) => read,
            Err(e) => {
                let err = client_body_error(&e);
                if let ClientBodyError::Timeout(BodyTimeout::Overload(_)) = e {
                    self.overload.shed(overload::Shed::Body);
                }
                if let Some(api) = api {
                    let mut meter = self.meter(t0, client_addr, api, route, &parts, None, trace);
                    meter.fail(Instant::now(), err.outcome(), Some(err.status().as_u16()));
                }
                tracing::debug!(route = %route.name, error = %err, "request body failed");
                return err.response();
            }
        };
        // Only a request about to go to the upstream takes a slot among
        // the route's requests in flight: one whose body is still coming is
        // no load on the upstream yet.
        let Some(admitted) = state.in_flight.admit(route.max_in_flight) else {
            return self.reject(t0, client_addr, api, route, &parts, model.as_deref(), trace);
        };
        let Some(api) = api else {
            self.metrics.passthrough(&route.name);
            let req = Request::from_parts(parts, body);
            return match self.send(state, req, client_addr).await {
                Ok(resp) => Self::respond(route, resp, None, admitted),
                Err(e) => e.response(),
            };
        };
        let mut meter = self.meter(t0, client_addr, api, route, &parts, model.as_deref(), trace);
        let req = Request::from_parts(parts, body);
        match self.send(state, req, client_addr).await {
            Ok(resp) => Self::respond(route, resp, Some(meter), admitted),
            Err(e) => {
                meter.fail(Instant::now(), e.outcome(), Some(e.status().as_u16()));
                tracing::debug!(route = %route.name, error = %e, "request failed before the response head");
                e.response()
            }
        }
    }

    /// Reads the body of a request whose head came at `t0` ahead of
    /// forwarding it: up to `proxy.max_request_body` for a metered request
    /// (`metered`), to learn its `model`, else up to `proxy.max_retry_body`,
    /// so that a small body is held whole and can be sent again after the
    /// keep-alive race. The part read ahead must arrive within the route's
    /// `timeouts.request_body_total` of the head (and, while the listener
    /// is overloaded, within `proxy.overload_timeout`); meanwhile the
    /// request is counted as receiving its body.
    async fn read_ahead(
        &self,
        route: &Route,
        t0: Instant,
        metered: bool,
        parts: &http::request::Parts,
        body: Incoming,
    ) -> Result<(RequestBody, Option<String>), ClientBodyError> {
        let content_length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let body = ClientBody::new(body, route.timeouts.request_body);
        let max = if metered {
            self.max_request_body
        } else {
            self.max_retry_body
        };
        let mut receiving = None;
        let waiting = || {
            receiving.get_or_insert_with(|| self.metrics.receiving_body(&route.name));
        };
        let limits = ReadAhead {
            max,
            content_length,
            learn_model: metered,
            total: route.timeouts.request_body_total,
            since: t0,
        };
        read_ahead(body, limits, &self.overload, waiting).await
    }

    /// Answers a request past its route's `max_in_flight` without calling
    /// the upstream. A metered one is counted under `proxy_error`.
    #[allow(clippy::too_many_arguments)]
    fn reject(
        &self,
        t0: Instant,
        client_addr: SocketAddr,
        api: Option<Api>,
        route: &Route,
        parts: &http::request::Parts,
        model: Option<&str>,
        trace: Option<trace::Trace>,
    ) -> Response<ResponseBody> {
        let err = ProxyError::Overloaded(route.max_in_flight.unwrap_or_default());
        self.metrics.rejected(&route.name, "max_in_flight");
        if let Some(api) = api {
            let mut meter = self.meter(t0, client_addr, api, route, parts, model, trace);
            meter.fail(Instant::now(), err.outcome(), Some(err.status().as_u16()));
        }
        tracing::debug!(route = %route.name, "request rejected: max_in_flight reached");
        err.response()
    }

    /// The SLO class the client declares in the route's `slo_header`, if
    /// it names a defined class.
    fn declared_class(&self, route: &Route, headers: &HeaderMap) -> Option<&str> {
        let value = headers.get(route.slo_header.as_ref()?)?.to_str().ok()?;
        self.classes
            .get_key_value(value.trim())
            .map(|(name, _)| name.as_str())
    }

    /// The meter of a request that arrived at `t0` from `client_addr`, its
    /// SLO class chosen from `model` and the class it declares, in `trace`.
    #[allow(clippy::too_many_arguments)]
    fn meter(
        &self,
        t0: Instant,
        client_addr: SocketAddr,
        api: Api,
        route: &Route,
        parts: &http::request::Parts,
        model: Option<&str>,
        trace: Option<trace::Trace>,
    ) -> Meter {
        let declared = self.declared_class(route, &parts.headers);
        let slo = slo_class(route, model, declared);
        let class = slo.and_then(|name| self.classes.get(name)).cloned();
        let tenant = route
            .tenant
            .as_ref()
            .map(|source| tenant::of_request(source, &parts.headers));
        let recorder = self.observers.request(observe::Started {
            route: &route.name,
            model,
            slo,
            tenant,
            class,
            parts,
            client: client_addr,
            trace,
            api,
            upstream: &route.upstream,
        });
        StreamMeter::new(t0, api, self.limits, recorder)
    }

    fn find_route(&self, req: &Request<Incoming>) -> Option<&RouteState> {
        let path = req.uri().path();
        let host = request_host(req).map(|h| strip_port(h).to_ascii_lowercase());
        self.routes.iter().find(|s| {
            let m = &s.route.matcher;
            path.starts_with(m.path_prefix.as_str())
                && m.host
                    .as_ref()
                    .is_none_or(|h| host.as_deref() == Some(h.as_str()))
                && m.methods
                    .as_ref()
                    .is_none_or(|ms| ms.contains(req.method()))
        })
    }

    /// Sends the request upstream and waits for the response head (within
    /// the route's `response_headers` timeout).
    ///
    /// It takes no meter: the meter stays, once, in
    /// [`handle`](Self::handle)'s future, and the future awaited there is
    /// the upstream exchange alone (an async fn's state can hold a moved
    /// argument twice, and the meter is the largest value a request keeps).
    async fn send(
        &self,
        state: &RouteState,
        req: Request<RequestBody>,
        client_addr: SocketAddr,
    ) -> Result<Response<FromUpstream>, ProxyError> {
        let route = &state.route;
        let req = self.upstream_request(route, req, client_addr)?;
        state
            .upstream
            .send(req, route.timeouts.response_headers)
            .await
            .map_err(|e| e.classify())
    }

    /// The client's response for the upstream's `resp`: its head without
    /// hop-by-hop headers, its body forwarded through `meter`, holding the
    /// request's `slot` among its route's requests in flight.
    fn respond(
        route: &Route,
        resp: Response<FromUpstream>,
        mut meter: Option<Meter>,
        slot: admission::Slot,
    ) -> Response<ResponseBody> {
        // t_headers: the upstream's response head has been received.
        let now = Instant::now();
        let (mut parts, body) = resp.into_parts();
        if let Some(m) = meter.as_mut() {
            m.response_head(
                now,
                parts.status.as_u16(),
                parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .map(HeaderValue::as_bytes),
                parts
                    .headers
                    .get(header::CONTENT_ENCODING)
                    .map(HeaderValue::as_bytes),
            );
        }
        remove_hop_by_hop(&mut parts.headers);
        let body = ResponseBody::forwarded(body, meter, route.timeouts.idle, now, slot);
        Response::from_parts(parts, body)
    }

    /// Rewrites the client's request into the upstream's.
    fn upstream_request(
        &self,
        route: &Route,
        req: Request<RequestBody>,
        client_addr: SocketAddr,
    ) -> Result<Request<RequestBody>, ProxyError> {
        let (mut parts, body) = req.into_parts();
        let original_host = request_host_parts(&parts.uri, &parts.headers).map(str::to_owned);
        let upstream = &route.upstream;
        let mut path = parts.uri.path();
        if route.strip_prefix {
            let prefix = route.matcher.path_prefix.trim_end_matches('/');
            path = path.strip_prefix(prefix).unwrap_or(path);
        }
        let mut target = String::with_capacity(upstream.base_path.len() + path.len() + 64);
        target.push_str(&upstream.base_path);
        if !path.starts_with('/') {
            target.push('/');
        }
        target.push_str(path);
        if let Some(q) = parts.uri.query() {
            target.push('?');
            target.push_str(q);
        }
        parts.uri = Uri::builder()
            .scheme(upstream.scheme.clone())
            .authority(upstream.authority.clone())
            .path_and_query(target)
            .build()
            .map_err(|e| ProxyError::Upstream(format!("invalid upstream URI: {e}")))?;
        parts.version = http::Version::HTTP_11;

        let headers = &mut parts.headers;
        remove_hop_by_hop(headers);
        if route.preserve_host {
            if let Some(host) = original_host
                .as_deref()
                .and_then(|h| HeaderValue::from_str(h).ok())
            {
                headers.insert(header::HOST, host);
            }
        } else {
            // The client sets Host from the URI's authority.
            headers.remove(header::HOST);
        }
        if self.x_forwarded {
            let ip = client_addr.ip().to_string();
            let xff = match headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
                Some(prev) => format!("{prev}, {ip}"),
                None => ip,
            };
            if let Ok(v) = HeaderValue::from_str(&xff) {
                headers.insert(X_FORWARDED_FOR, v);
            }
            // What a client says of the scheme and host it used is taken
            // only from a proxy in front that is trusted to have set it.
            let trusted = self
                .trusted_proxies
                .iter()
                .any(|net| net.contains(client_addr.ip()));
            if !trusted || !headers.contains_key(X_FORWARDED_PROTO) {
                headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
            }
            if !trusted || !headers.contains_key(X_FORWARDED_HOST) {
                match original_host
                    .as_deref()
                    .and_then(|h| HeaderValue::from_str(h).ok())
                {
                    Some(host) => headers.insert(X_FORWARDED_HOST, host),
                    None => headers.remove(X_FORWARDED_HOST),
                };
            }
        }
        Ok(Request::from_parts(parts, body))
    }
}

/// The SLO class of a request: the one the client declared (already checked
/// to be defined), else the one for its model, else the route's.
fn slo_class<'a>(
    route: &'a Route,
    model: Option<&str>,
    declared: Option<&'a str>,
) -> Option<&'a str> {
    declared
        .or_else(|| {
            let model = model?;
            route
                .slo_by_model
                .iter()
                .find(|(name, _)| name == model)
                .map(|(_, class)| class.as_str())
        })
        .or(route.slo.as_deref())
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The hop-by-hop headers (RFC 9110 §7.6.1), `Connection` first, and the
/// credentials of this hop (`Proxy-Authorization`, RFC 9110 §11.7.2, and
/// its challenge `Proxy-Authenticate`), which are never for the next one.
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Hop-by-hop headers (RFC 9110 §7.6.1), plus any the `Connection` header
/// names, are for one connection only and are never forwarded.
///
/// One pass over the names finds which are there; only those are removed
/// (most heads have none, or only `Transfer-Encoding`).
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if present[0] {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for (name, present) in HOP_BY_HOP.iter().zip(present) {
        if present {
            headers.remove(name);
        }
    }
}

/// `headers` in a map of their own size, same order.
///
/// hyper keeps the map of the last head it wrote on a connection, emptied
/// but at its capacity, for the next request it reads there: for the
/// client's connection that is the response's map, held while the body
/// streams. The upstream's response head is parsed into the map the
/// forwarded request used (grown by the `X-Forwarded-*` headers), so it is
/// usually larger than the response needs.
fn fitted(headers: HeaderMap) -> HeaderMap {
    let mut fitted = HeaderMap::with_capacity(headers.len());
    fitted.extend(headers);
    fitted
}

/// What is wrong with a request's `Host` (RFC 9112 §3.2): an HTTP/1.1
/// request must have exactly one, and no request may have two (which one
/// would route it, and which one would the upstream read?).
fn host_problem<B>(req: &Request<B>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("more than one Host header"),
        (None, _) if req.version() == http::Version::HTTP_11 => {
            Some("an HTTP/1.1 request needs a Host header")
        }
        _ => None,
    }
}

fn request_host(req: &Request<Incoming>) -> Option<&str> {
    request_host_parts(req.uri(), req.headers())
}

/// The host the client addressed: the `Host` header (HTTP/1.1) or the
/// URI's authority (HTTP/2, absolute-form).
fn request_host_parts<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // IPv6 literal: "[::1]:8080".
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// How much of a request body is read ahead, and for how long.
struct ReadAhead {
    /// Bytes: a larger body is forwarded as it streams in.
    max: usize,
    /// The body's declared length, if any: beyond `max`, nothing is read
    /// ahead.
    content_length: Option<u64>,
    /// Whether to read the body's `model`.
    learn_model: bool,
    /// How long the part read ahead may take, from `since`.
    total: std::time::Duration,
    /// When the request head arrived.
    since: Instant,
}

/// Reads the request body ahead, up to `limits.max` bytes. Returns the body
/// to forward (the frames read, then the rest) and, when asked, the model
/// when the whole body fit and named one. `waiting` is called each time the
/// body has nothing ready. The part read ahead fails as
/// [`BodyTimeout::Total`] if it has not all come within `limits.total`, and
/// as [`BodyTimeout::Overload`] if `overload` sheds the wait.
async fn read_ahead(
    mut body: ClientBody,
    limits: ReadAhead,
    overload: &Overload,
    mut waiting: impl FnMut(),
) -> Result<(RequestBody, Option<String>), ClientBodyError> {
    if limits.content_length.is_some_and(|n| n > limits.max as u64) {
        return Ok((RequestBody::streaming(body), None));
    }
    let deadline = limits.since + limits.total;
    let mut frames = VecDeque::new();
    let mut len = 0usize;
    loop {
        if body.is_end_stream() {
            break;
        }
        let next = std::future::poll_fn(|cx| {
            let polled = Pin::new(&mut body).poll_frame(cx);
            if polled.is_pending() {
                waiting();
            }
            polled
        });
        // Biased: the timers are only armed when the body has nothing
        // ready, which few do.
        let next = tokio::select! {
            biased;
            next = next => next,
            () = tokio::time::sleep_until(deadline) => {
                return Err(ClientBodyError::Timeout(BodyTimeout::Total(limits.total)));
            }
            () = overload.shed_after(limits.since) => {
                return Err(ClientBodyError::Timeout(BodyTimeout::Overload(overload.timeout())));
            }
        };
        match next {
            None => break,
            Some(frame) => {
                let frame: Frame<Bytes> = frame?;
                if let Some(d) = frame.data_ref() {
                    len += d.len();
                }
                frames.push_back(frame);
                if len > limits.max {
                    return Ok((RequestBody::buffered(frames, Some(body)), None));
                }
            }
        }
    }
    let model = if limits.learn_model {
        model_of(&frames)
    } else {
        None
    };
    Ok((RequestBody::buffered(frames, None), model))
}

/// The `model` of a request body read ahead ([`meter::request_model`]).
fn model_of(frames: &VecDeque<Frame<Bytes>>) -> Option<String> {
    let parts: Vec<&Bytes> = frames.iter().filter_map(Frame::data_ref).collect();
    match parts.as_slice() {
        [one] => meter::request_model(one),
        _ => {
            let mut all = Vec::with_capacity(parts.iter().map(|b| b.len()).sum());
            for part in &parts {
                all.extend_from_slice(part);
            }
            meter::request_model(&all)
        }
    }
}

/// An absolute-form request made origin-form for an HTTP/1.1 connection,
/// with `Host` set to `host` (the upstream's, made once by its pool) unless
/// it has one.
fn origin_form(req: Request<RequestBody>, host: Option<&HeaderValue>) -> Request<RequestBody> {
    let (mut parts, body) = req.into_parts();
    if let Some(host) = host {
        parts
            .headers
            .entry(header::HOST)
            .or_insert_with(|| host.clone());
    }
    parts.uri = match parts.uri.path_and_query() {
        Some(pq) if pq.as_str() != "/" => Uri::from(pq.clone()),
        _ => Uri::default(),
    };
    Request::from_parts(parts, body)
}

/// The client's answer for its own body's failure.
fn client_body_error(e: &ClientBodyError) -> ProxyError {
    match e {
        ClientBodyError::Failed(_) => ProxyError::RequestBody(error_chain(e)),
        ClientBodyError::Timeout(timeout) => ProxyError::RequestBodyTimeout(*timeout),
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// How many idle upstream connections are kept, and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Keepalive {
    max_idle: usize,
    idle_timeout: std::time::Duration,
}

impl Keepalive {
    fn of(settings: &crate::config::ProxySettings) -> Self {
        Self {
            max_idle: settings.upstream_idle_connections,
            idle_timeout: settings.upstream_idle_timeout,
        }
    }
}

/// The upstream of a route, its retries counted in the metrics.
fn new_upstream(
    route: &Route,
    keepalive: Keepalive,
    metrics: &Metrics,
) -> Result<Arc<upstream::Upstream>, rustls::Error> {
    let closed = metrics.upstream_retries(&route.name, h1::Race::Closed.as_str());
    let reset = metrics.upstream_retries(&route.name, h1::Race::Reset.as_str());
    upstream::Upstream::new(
        route,
        keepalive.max_idle,
        keepalive.idle_timeout,
        Box::new(move |race| match race {
            h1::Race::Closed => closed.inc(),
            h1::Race::Reset => reset.inc(),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed_and_only_they() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("content-type", "text/event-stream"),
            ("connection", "keep-alive, x-private"),
            ("connection", "X-Other"),
            ("x-private", "1"),
            ("x-other", "2"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("x-kept", "3"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        remove_hop_by_hop(&mut headers);
        // Removing reorders the map: compare as sets.
        let mut left: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        left.sort();
        let want = [
            ("content-type", "text/event-stream"),
            ("x-kept", "3"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ];
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        assert_eq!(left, want);

        // Each alone, without `Connection`.
        for name in &HOP_BY_HOP[1..] {
            let mut headers = HeaderMap::new();
            headers.insert(name.clone(), HeaderValue::from_static("x"));
            headers.insert("x-kept", HeaderValue::from_static("y"));
            remove_hop_by_hop(&mut headers);
            assert!(!headers.contains_key(name), "{name}");
            assert!(headers.contains_key("x-kept"));
        }
    }

    #[test]
    fn origin_form_keeps_the_path_and_query_and_sets_host_unless_set() {
        let host = HeaderValue::from_static("up:8000");
        let req = Request::builder()
            .uri("http://up:8000/v1/chat?x=1")
            .body(RequestBody::buffered(VecDeque::new(), None))
            .unwrap();
        let req = origin_form(req, Some(&host));
        assert_eq!(req.uri().to_string(), "/v1/chat?x=1");
        assert_eq!(req.headers()[header::HOST], "up:8000");
        let req = Request::builder()
            .uri("http://up:8000/")
            .header(header::HOST, "client.example")
            .body(RequestBody::buffered(VecDeque::new(), None))
            .unwrap();
        let req = origin_form(req, Some(&host));
        assert_eq!(req.uri().to_string(), "/");
        assert_eq!(req.headers()[header::HOST], "client.example");
    }

    #[test]
    fn fitted_keeps_every_value_in_order_in_a_smaller_map() {
        let mut headers = HeaderMap::with_capacity(64);
        for (name, value) in [
            ("content-type", "text/event-stream"),
            ("set-cookie", "a=1"),
            ("x-request-id", "7"),
            ("set-cookie", "b=2"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        let order = |h: &HeaderMap| -> Vec<(String, String)> {
            h.iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
                .collect()
        };
        let before = order(&headers);
        let fitted = fitted(headers);
        assert_eq!(order(&fitted), before);
        assert!(fitted.capacity() < 64, "{}", fitted.capacity());
    }
}
