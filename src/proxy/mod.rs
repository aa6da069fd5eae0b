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
//!
//! [`Proxy::handle`] is the path of a request, here; beside it, each in its
//! own file: the client's request body and its read-ahead
//! ([`client_body`]), the request rewrite ([`rewrite`]), the upstream's
//! connections and exchange ([`upstream`]), the forwarded response body
//! ([`body`]), the one place failures become responses ([`error`]), the
//! listener's overload ([`overload`]) and `t0` from the kernel's receive
//! stamps ([`arrival`]). A route's requests in flight, for its
//! `max_in_flight`, are the one count of them ([`slo::in_flight`]), kept
//! across reloads by the route's name.
//! None of them uses this file; what happens *about* a request is
//! `crate::observe`'s, reached through its face alone.

pub mod arrival;
mod blame;
pub mod body;
pub mod client_body;
pub(crate) mod delegate;
pub mod error;
mod linger;
pub mod overload;
pub mod rewrite;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response};
use tokio::time::Instant;

use crate::config::{Protocol, ProxySettings, Route};

use crate::observe::{Observers, Occurrence, Rejection, Started, Trace};
use client_body::{ReadAhead, read_ahead};
use meter::{Api, Limits, StreamMeter};
use rewrite::{XForwarded, host_problem, remove_hop_by_hop, request_host, strip_port};
use slo::in_flight::{Entered, InFlight};
use upstream::FromUpstream;

pub use body::ResponseBody;
pub use client_body::{BodyTimeout, ClientBody, ClientBodyError, Inbound, RequestBody};
pub use error::ProxyError;
pub use overload::Overload;
pub use upstream::BoxError;

pub use crate::observe::Meter;

/// A route with its upstream (one per route, since connect timeouts and
/// trusted roots are the route's).
struct RouteState {
    route: Route,
    /// Connections to the upstream, over HTTP/1.1 or HTTP/2 (see
    /// [`upstream`]).
    upstream: Arc<upstream::UpstreamClient>,
    /// The route's requests in flight, kept across reloads (by name).
    in_flight: Arc<InFlight>,
}

/// The forwarding service of one configuration, shared by every
/// connection. A reload builds a new one; each request holds the one it
/// started with (an `Arc`) to its end, so its route, class and limits never
/// change under it.
pub struct Proxy {
    routes: Vec<RouteState>,
    /// How its upstreams keep idle connections: a reload that changes it
    /// builds every upstream anew.
    keepalive: Keepalive,
    /// What each metered request is reported to, and what the proxy
    /// reports of itself, configured for this configuration's requests.
    observers: Observers,
    max_request_body: usize,
    max_retry_body: usize,
    /// The proxy listener's overload state, shared across reloads.
    overload: Arc<Overload>,
    limits: Limits,
    forwarded: XForwarded,
}

/// What a forwarding service is built from: a configuration's routes and
/// proxy settings, and the bound of a usage report's counts.
#[derive(Clone, Copy)]
pub struct Plan<'a> {
    pub routes: &'a [Route],
    pub settings: &'a ProxySettings,
    /// `metrics.max_usage_tokens`: a usage count above it is refused.
    pub max_usage_tokens: u64,
}

/// A request being forwarded, as far as reporting how it ends needs: what
/// the proxy knew of it before its body was read.
struct Context<'a> {
    /// When its head arrived.
    t0: Instant,
    client: SocketAddr,
    route: &'a Route,
    /// Its API, when its route meters it.
    api: Option<Api>,
    /// Its trace, when it is metered and has one.
    trace: Option<Trace>,
}

impl Proxy {
    /// Builds the routes' upstreams. Metered requests are reported to
    /// `observers`; request bodies read ahead are shed as `overload` says.
    /// Fails only if TLS cannot be set up.
    pub fn new(
        plan: Plan<'_>,
        observers: Observers,
        overload: Arc<Overload>,
    ) -> Result<Self, rustls::Error> {
        Self::build(plan, observers, overload, None)
    }

    /// The proxy of a reloaded configuration's `plan`. A route of the
    /// same name whose upstream, connect timeout and trusted roots are
    /// unchanged keeps its upstream, and so its pooled connections. Its
    /// requests are reported to `observers` (configured for the new
    /// configuration, reading its scrapes).
    pub fn reloaded(&self, plan: Plan<'_>, observers: Observers) -> Result<Self, rustls::Error> {
        Self::build(plan, observers, self.overload.clone(), Some(self))
    }

    /// What this proxy's requests are reported to.
    pub fn observers(&self) -> &Observers {
        &self.observers
    }

    fn build(
        plan: Plan<'_>,
        observers: Observers,
        overload: Arc<Overload>,
        previous: Option<&Proxy>,
    ) -> Result<Self, rustls::Error> {
        let settings = plan.settings;
        let keepalive = Keepalive::of(settings);
        let reusable = |route: &Route| {
            let previous = previous?;
            if previous.keepalive != keepalive {
                return None;
            }
            previous.routes.iter().find(|old| {
                old.route.name == route.name
                    && old.route.upstream == route.upstream
                    && old.route.timeouts.connect == route.timeouts.connect
                    && old.route.tls_roots == route.tls_roots
            })
        };
        let routes = plan
            .routes
            .iter()
            .map(|route| {
                let upstream = match reusable(route) {
                    Some(old) => old.upstream.clone(),
                    None => new_upstream(route, keepalive, &observers)?,
                };
                let in_flight = previous
                    .and_then(|p| p.routes.iter().find(|old| old.route.name == route.name))
                    .map_or_else(Default::default, |old| old.in_flight.clone());
                observers.declare_route(route);
                Ok(RouteState {
                    upstream,
                    in_flight,
                    route: route.clone(),
                })
            })
            .collect::<Result<_, rustls::Error>>()?;
        Ok(Self {
            routes,
            keepalive,
            observers,
            max_request_body: settings.max_request_body_bytes,
            max_retry_body: settings.max_retry_body_bytes,
            overload,
            limits: Limits {
                body: settings.max_response_body_bytes,
                usage_tokens: plan.max_usage_tokens,
                ..Limits::default()
            },
            forwarded: XForwarded {
                x_forwarded: settings.x_forwarded,
                trusted_proxies: settings.trusted_proxies.clone(),
            },
        })
    }

    /// Forwards one request whose head was received at `t0`
    /// ([`arrival::Arrival::t0`]). Never fails: problems become responses.
    pub async fn handle(
        &self,
        req: Request<Inbound>,
        t0: Instant,
        client_addr: SocketAddr,
    ) -> Response<ResponseBody> {
        if let Some(problem) = host_problem(&req) {
            self.observers.count(Occurrence::Rejected {
                route: "",
                reason: Rejection::BadHost,
            });
            return ProxyError::BadRequest(problem).response();
        }
        let Some(state) = self.find_route(&req) else {
            self.observers.count(Occurrence::Unrouted);
            return ProxyError::NoRoute.response();
        };
        let route = &state.route;
        let api = match route.protocol {
            Protocol::None => None,
            Protocol::Api(api) => Some(api.on_route(req.method(), req.uri().path())),
            Protocol::Auto => Api::detect(req.method(), req.uri().path()),
        };
        let (mut parts, body) = req.into_parts();
        // The trace is known, and the upstream's headers set, before
        // anything is metered, so every way the request ends names it.
        let trace = api.and_then(|_| self.observers.trace(&mut parts.headers));
        let cx = Context {
            t0,
            client: client_addr,
            route,
            api,
            trace,
        };
        let (body, facts, ready) = match self.read_ahead(&cx, &parts, body).await {
            Ok(read) => read,
            Err(e) => {
                if let ClientBodyError::Timeout(BodyTimeout::Overload(_)) = e {
                    self.overload.shed(overload::Shed::Body);
                }
                let err = ProxyError::from(e);
                self.failed(&cx, &parts, None, &err);
                tracing::debug!(route = %route.name, error = %err.message(), "request body failed");
                return err.response();
            }
        };
        // Only a request about to go to the upstream takes a slot among
        // the route's requests in flight: one whose body is still coming is
        // no load on the upstream yet.
        let Some(admitted) = state
            .in_flight
            .admit(route.max_in_flight.map(|max| max as u64))
        else {
            return self.reject(&cx, &parts, facts.as_ref());
        };
        let Some(mut meter) = self.meter(&cx, &parts, facts.as_ref()) else {
            self.observers
                .count(Occurrence::Passthrough { route: &route.name });
            let req = Request::from_parts(parts, body);
            return match self.send(state, req, client_addr).await {
                Ok(resp) => self.respond(route, resp, None, None, admitted),
                Err(e) => e.response(),
            };
        };
        let req = Request::from_parts(parts, body);
        match self.send(state, req, client_addr).await {
            Ok(resp) => self.respond(route, resp, Some(meter), ready, admitted),
            Err(e) => {
                meter.fail(Instant::now(), e.outcome(), Some(e.status().as_u16()));
                tracing::debug!(route = %route.name, error = %e.message(), "request failed before the response head");
                e.response()
            }
        }
    }

    /// Reads the body of the request `cx` ahead of forwarding it: up to
    /// `proxy.max_request_body` for a metered request, to learn its `model`, else up to `proxy.max_retry_body`,
    /// so that a small body is held whole and can be sent again after the
    /// keep-alive race. The part read ahead must arrive within the route's
    /// `timeouts.request_body_total` of the head (and, while the listener
    /// is overloaded, within `proxy.overload_timeout`); meanwhile the
    /// request is counted as receiving its body.
    ///
    /// With the body and its model comes, when the whole body is held, the
    /// moment the request was all there: its `t0` if its body was there as soon
    /// as it was asked for, else when the last of it was read (the client's
    /// upload is not the proxy's time).
    async fn read_ahead(
        &self,
        cx: &Context<'_>,
        parts: &http::request::Parts,
        body: Inbound,
    ) -> Result<(RequestBody, Option<meter::RequestFacts>, Option<Instant>), ClientBodyError> {
        let (route, t0, metered) = (cx.route, cx.t0, cx.api.is_some());
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
            receiving.get_or_insert_with(|| self.observers.receiving_body(&route.name));
        };
        let limits = ReadAhead {
            max,
            content_length,
            learn: cx.api,
            total: route.timeouts.request_body_total,
            since: t0,
        };
        let (body, facts) = read_ahead(body, limits, &self.overload, waiting).await?;
        let ready = match receiving {
            _ if !body.is_whole() => None,
            None => Some(t0),
            Some(_) => Some(Instant::now()),
        };
        Ok((body, facts, ready))
    }

    /// Answers a request past its route's `max_in_flight` without calling
    /// the upstream. A metered one is counted under `proxy_error`.
    fn reject(
        &self,
        cx: &Context<'_>,
        parts: &http::request::Parts,
        facts: Option<&meter::RequestFacts>,
    ) -> Response<ResponseBody> {
        let route = cx.route;
        let err = ProxyError::Overloaded(route.max_in_flight.unwrap_or_default());
        self.observers.count(Occurrence::Rejected {
            route: &route.name,
            reason: Rejection::MaxInFlight,
        });
        self.failed(cx, parts, facts, &err);
        tracing::debug!(route = %route.name, "request rejected: max_in_flight reached");
        err.response()
    }

    /// Reports a metered request that ended with `err` before it was sent
    /// to the upstream.
    fn failed(
        &self,
        cx: &Context<'_>,
        parts: &http::request::Parts,
        facts: Option<&meter::RequestFacts>,
        err: &ProxyError,
    ) {
        if let Some(mut meter) = self.meter(cx, parts, facts) {
            meter.fail(Instant::now(), err.outcome(), Some(err.status().as_u16()));
        }
    }

    /// The meter of the request `cx` with the head `parts`, whose body
    /// told `facts` (its model and turn) when it was read whole, when its
    /// route meters it. Its observers resolve its SLO class, tenant and
    /// labels.
    fn meter(
        &self,
        cx: &Context<'_>,
        parts: &http::request::Parts,
        facts: Option<&meter::RequestFacts>,
    ) -> Option<Meter> {
        let api = cx.api?;
        let recorder = self.observers.request(Started {
            route: cx.route,
            api,
            body: facts,
            at: cx.t0,
            parts,
            client: cx.client,
            trace: cx.trace,
        });
        Some(StreamMeter::new(cx.t0, api, self.limits, recorder))
    }

    fn find_route<B>(&self, req: &Request<B>) -> Option<&RouteState> {
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
        let req = rewrite::upstream_request(route, req, client_addr, &self.forwarded)
            .map_err(ProxyError::UpstreamUri)?;
        state
            .upstream
            .send(req, route.timeouts.response_headers)
            .await
            .map_err(ProxyError::from)
    }

    /// The client's response for the upstream's `resp`: its head without
    /// hop-by-hop headers, its body forwarded through `meter`, holding the
    /// request's `slot` among its route's requests in flight. `ready` is
    /// when the request was all there, if its body was held whole.
    ///
    /// A response by which a gateway says it shed the request is counted by
    /// its reason and ends the request there, blamed on the gateway
    /// ([`blame::shed_by_gateway`]); it is forwarded as it came.
    fn respond(
        &self,
        route: &Route,
        resp: Response<FromUpstream>,
        mut meter: Option<Meter>,
        ready: Option<Instant>,
        slot: Entered,
    ) -> Response<ResponseBody> {
        // t_headers: the upstream's response head has been received.
        let now = Instant::now();
        let (mut parts, body) = resp.into_parts();
        let shed = blame::shed_by_gateway(parts.status, &parts.headers).map(|reason| {
            self.observers.count(Occurrence::ShedByGateway {
                route: &route.name,
                reason: reason.as_bytes(),
            });
        });
        if let Some(m) = meter.as_mut() {
            // The proxy's own time (docs/metrics.md, "What the proxy adds").
            if let (Some(ready), Some(written)) = (ready, body.request_written()) {
                m.proxy_time(written.saturating_duration_since(ready));
            }
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
            // TGI's time in its queue (docs/metrics.md, "Where the time goes").
            if let Some(queue) = parts.headers.get(QUEUE_TIME) {
                m.queue_time_header(queue.as_bytes());
            }
            if shed.is_some() {
                m.fail(now, blame::Fault::Gateway.outcome(), None);
            }
        }
        remove_hop_by_hop(&mut parts.headers);
        let body = ResponseBody::forwarded(body, meter, route.timeouts.idle, now, slot);
        Response::from_parts(parts, body)
    }
}

/// The response header in which TGI says how long the request waited in
/// its queue, in milliseconds.
const QUEUE_TIME: HeaderName = HeaderName::from_static("x-queue-time");

/// How many idle upstream connections are kept, and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Keepalive {
    max_idle: usize,
    idle_timeout: std::time::Duration,
}

impl Keepalive {
    fn of(settings: &ProxySettings) -> Self {
        Self {
            max_idle: settings.upstream_idle_connections,
            idle_timeout: settings.upstream_idle_timeout,
        }
    }
}

/// The upstream of a route, its retries counted by its observers.
fn new_upstream(
    route: &Route,
    keepalive: Keepalive,
    observers: &Observers,
) -> Result<Arc<upstream::UpstreamClient>, rustls::Error> {
    let observers = observers.clone();
    let name = route.name.clone();
    upstream::UpstreamClient::new(
        route,
        keepalive.max_idle,
        keepalive.idle_timeout,
        Box::new(move |race| observers.count(Occurrence::Retried { route: &name, race })),
    )
}
