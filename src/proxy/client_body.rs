//! The client's request body, as the proxy reads and forwards it.
//!
//! [`Inbound`] is the body as the client's connection hands it over (our
//! own HTTP/1 server's, or hyper's HTTP/2's); [`ClientBody`] is it as it
//! arrives, failed after the route's
//! silence timeout; [`read_ahead`] reads its beginning before the request
//! is sent (to learn `model`, or to hold a small body whole for the
//! keep-alive retry), within a total deadline and, while the listener is
//! overloaded, its overload timeout; [`RequestBody`] is what goes upstream:
//! the frames read ahead, then the rest as it streams in.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::delegate::delegate_body;
use super::overload::Overload;
use h1::server::BoxError;

/// The client's request body as its connection hands it over.
pub enum Inbound {
    /// Over HTTP/1.x (`h1::server`).
    H1(h1::server::RequestBody),
    /// Over HTTP/2 (hyper's server).
    H2(Incoming),
}

impl From<h1::server::RequestBody> for Inbound {
    fn from(body: h1::server::RequestBody) -> Self {
        Inbound::H1(body)
    }
}

impl From<Incoming> for Inbound {
    fn from(body: Incoming) -> Self {
        Inbound::H2(body)
    }
}

delegate_body!(Inbound: enum { Inbound::H1, Inbound::H2 }, Error = BoxError);

/// The client's request body failed: the client's doing, so it is never
/// blamed on the upstream, however far the request had gone. Both
/// upstream protocols report it with this error (`upstream::Error`).
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// A malformed chunked body, a connection cut mid-body: answered `400`.
    #[error("client request body")]
    Failed(#[source] BoxError),
    /// The client's body took too long: answered `408`.
    #[error(transparent)]
    Timeout(BodyTimeout),
}

/// Which of the request body's time limits the client overran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyTimeout {
    /// Nothing of the body came for the route's `timeouts.request_body`.
    #[error("the client sent nothing of its request body for {0:?}")]
    Idle(Duration),
    /// The part read ahead did not all come within the route's
    /// `timeouts.request_body_total` of the request head.
    #[error("the client's request body did not arrive within {0:?}")]
    Total(Duration),
    /// The part read ahead did not all come within `proxy.overload_timeout`
    /// of the request head, while the proxy was overloaded.
    #[error("the proxy is overloaded and the client's request body did not arrive within {0:?}")]
    Overload(Duration),
    /// The rest of a body larger than the read-ahead was still arriving
    /// when the route's `timeouts.response_headers` ran out: the upstream
    /// cannot answer a request it does not have.
    #[error("the client's request body was still arriving after {0:?}")]
    Upload(Duration),
}

/// The client's request body as it arrives, with the route's request-body
/// timeout: waiting longer than it for the client's next frame (or its
/// first) fails the body with [`BodyTimeout::Idle`]. The wait is
/// counted from when the proxy asks, so time the proxy spent not asking
/// (an upstream slow to take the body) is never the client's.
pub struct ClientBody {
    inner: Inbound,
    idle: Duration,
    /// When the proxy began waiting for the next frame, while it waits.
    waiting_since: Option<Instant>,
    /// Armed at the first wait: a body that is all there at once (nearly
    /// every one) never makes a timer.
    timer: Option<Pin<Box<Sleep>>>,
    /// Set when the body has ended, for whoever watches (see
    /// [`RequestBody::watch_end`]).
    ended: Option<Arc<AtomicBool>>,
}

impl ClientBody {
    /// `inner`, timed out after `idle` of waiting for the client.
    pub fn new(inner: Inbound, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            waiting_since: None,
            timer: None,
            ended: None,
        }
    }

    fn mark_ended(&self) {
        if let Some(ended) = &self.ended {
            ended.store(true, Ordering::Relaxed);
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.waiting_since = None;
                if this.inner.is_end_stream() {
                    this.mark_ended();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(ClientBodyError::Failed(e)))),
            Poll::Ready(None) => {
                this.mark_ended();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let since = *this.waiting_since.get_or_insert_with(Instant::now);
                let deadline = since + this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                ready!(timer.as_mut().poll(cx));
                Poll::Ready(Some(Err(ClientBodyError::Timeout(BodyTimeout::Idle(
                    this.idle,
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The request body sent upstream.
///
/// One pointer wide: hyper's HTTP/2 client (HTTPS upstreams that chose
/// `h2`) queues requests in blocks of 32 slots allocated with each
/// connection, so every byte of `Request<RequestBody>` costs 32 per upstream connection
/// (boxed, a block is 8 KiB instead of 10).
pub struct RequestBody(Box<Feed>);

/// Where the body's frames come from.
enum Feed {
    /// Frames read ahead (the whole body, or its beginning), then, if the
    /// body was larger than the read-ahead limit, the rest as it arrives.
    Buffered {
        frames: VecDeque<Frame<Bytes>>,
        rest: Option<ClientBody>,
    },
    /// Forwarded as it streams in, not read ahead.
    Streaming(ClientBody),
}

impl RequestBody {
    /// `frames` read ahead, then `rest` (if the body went on) as it arrives.
    pub fn buffered(frames: VecDeque<Frame<Bytes>>, rest: Option<ClientBody>) -> Self {
        Self(Box::new(Feed::Buffered { frames, rest }))
    }

    /// The client's body, forwarded as it streams in.
    pub fn streaming(body: ClientBody) -> Self {
        Self(Box::new(Feed::Streaming(body)))
    }

    /// Whether the whole body is held here (read ahead to its end, or
    /// empty): nothing of it is still to come from the client.
    pub fn is_whole(&self) -> bool {
        match &*self.0 {
            Feed::Buffered { rest, .. } => rest.as_ref().is_none_or(|r| r.is_end_stream()),
            Feed::Streaming(_) => false,
        }
    }

    /// For a body still to come (partly) from the client, a flag set when
    /// the client's body has ended; `None` when the whole body is held
    /// here.
    pub fn watch_end(&mut self) -> Option<Arc<AtomicBool>> {
        let rest = match &mut *self.0 {
            Feed::Buffered {
                rest: Some(rest), ..
            }
            | Feed::Streaming(rest) => rest,
            Feed::Buffered { rest: None, .. } => return None,
        };
        if rest.is_end_stream() {
            return None;
        }
        Some(rest.ended.get_or_insert_with(Arc::default).clone())
    }

    /// A copy to send again, when the whole body is held here: read ahead
    /// to its end, or empty. A body still (even partly) to come from the
    /// client cannot be sent twice.
    pub fn replay(&self) -> Option<Self> {
        let copy = |frames: &VecDeque<Frame<Bytes>>| {
            frames
                .iter()
                .map(|f| match (f.data_ref(), f.trailers_ref()) {
                    (Some(data), _) => Some(Frame::data(data.clone())),
                    (None, Some(trailers)) => Some(Frame::trailers(trailers.clone())),
                    (None, None) => None,
                })
                .collect::<Option<VecDeque<_>>>()
        };
        match &*self.0 {
            Feed::Buffered { frames, rest } if rest.as_ref().is_none_or(|r| r.is_end_stream()) => {
                Some(Self::buffered(copy(frames)?, None))
            }
            Feed::Streaming(body) if body.is_end_stream() => {
                Some(Self::buffered(VecDeque::new(), None))
            }
            _ => None,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        match &mut *self.get_mut().0 {
            Feed::Buffered { frames, rest } => {
                if let Some(frame) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match rest {
                    Some(rest) => Pin::new(rest).poll_frame(cx),
                    None => Poll::Ready(None),
                }
            }
            Feed::Streaming(inner) => Pin::new(inner).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &*self.0 {
            Feed::Buffered { frames, rest } => {
                frames.is_empty() && rest.as_ref().is_none_or(|r| r.is_end_stream())
            }
            Feed::Streaming(inner) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = match &*self.0 {
            Feed::Buffered { frames, .. } => frames
                .iter()
                .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                .sum(),
            Feed::Streaming(_) => 0,
        };
        let rest = match &*self.0 {
            Feed::Buffered { rest: None, .. } => SizeHint::with_exact(0),
            Feed::Buffered { rest: Some(r), .. } | Feed::Streaming(r) => r.size_hint(),
        };
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + buffered);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}

/// How much of a request body is read ahead, and for how long.
pub struct ReadAhead {
    /// Bytes: a larger body is forwarded as it streams in.
    pub max: usize,
    /// The body's declared length, if any: beyond `max`, nothing is read
    /// ahead.
    pub content_length: Option<u64>,
    /// The API whose request body is read for its `model` and turn, when
    /// it is metered.
    pub learn: Option<meter::Api>,
    /// How long the part read ahead may take, from `since`.
    pub total: std::time::Duration,
    /// When the request head arrived.
    pub since: Instant,
}

/// Reads the request body ahead, up to `limits.max` bytes. Returns the body
/// to forward (the frames read, then the rest) and, when asked, what the
/// body tells (its model and turn) when the whole body fit. `waiting` is called each time the
/// body has nothing ready. The part read ahead fails as
/// [`BodyTimeout::Total`] if it has not all come within `limits.total`, and
/// as [`BodyTimeout::Overload`] if `overload` sheds the wait.
pub async fn read_ahead(
    mut body: ClientBody,
    limits: ReadAhead,
    overload: &Overload,
    mut waiting: impl FnMut(),
) -> Result<(RequestBody, Option<meter::RequestFacts>), ClientBodyError> {
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
    let facts = limits.learn.map(|api| facts_of(api, &frames));
    Ok((RequestBody::buffered(frames, None), facts))
}

/// What a request body of `api` read ahead tells ([`meter::read_request`]).
pub fn facts_of(api: meter::Api, frames: &VecDeque<Frame<Bytes>>) -> meter::RequestFacts {
    let parts: Vec<&Bytes> = frames.iter().filter_map(Frame::data_ref).collect();
    match parts.as_slice() {
        [one] => meter::read_request(api, one),
        _ => {
            let mut all = Vec::with_capacity(parts.iter().map(|b| b.len()).sum());
            for part in &parts {
                all.extend_from_slice(part);
            }
            meter::read_request(api, &all)
        }
    }
}
