//! The two bodies the proxy forwards.
//!
//! [`ResponseBody`] carries the upstream's response to the client frame for
//! frame, never merged, split or held back (a small one in a buffer of its
//! own: [`own_buffer`] for hyper's HTTP/2 client, and `h1`'s own for an
//! HTTP/1.1 connection's). The
//! upstream's body is wrapped in three small bodies, each in its own file,
//! innermost first:
//!
//! - [`Metered`] reads the clock once per frame, shows the frame to the
//!   meter by shared reference and returns it with the same bytes; it ends
//!   the meter exactly once: at the end of the body, on an upstream error,
//!   when told of the idle timeout, or, when the client goes away and hyper
//!   drops it, as a client abort (the meter's own `Drop`). Dropping it drops
//!   the upstream body, which closes the upstream connection, so the
//!   upstream sees the abort.
//! - [`IdleTimeout`] fails the body after the route's idle timeout of
//!   silence, from the last frame [`Metered`] stamped, and has the meter
//!   finish as `timeout` at that moment.
//! - [`Admitted`] holds the request's slot among its route's requests in
//!   flight until the body ends or is dropped.
//!
//! [`RequestBody`] forwards the client's request body: the frames read ahead
//! to learn the model, then the rest as it streams in.

mod admitted;
mod idle;
mod metered;
#[cfg(test)]
mod testing;

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::admission::Slot;
use super::upstream::H1Body;
use h1::OWN_BUFFER_MAX;

pub use admitted::Admitted;
pub use idle::{Activity, Idle, IdleTimeout};
pub use metered::Metered;

/// Errors a forwarded body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's request body failed: the client's doing, so it is never
/// charged to the upstream, however far the request had gone. Both
/// upstream protocols report it with this error (`upstream::Error`).
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// A malformed chunked body, a connection cut mid-body: answered `400`.
    #[error("client request body")]
    Failed(#[source] hyper::Error),
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
}

/// The client's request body as it arrives, with the route's request-body
/// timeout: waiting longer than it for the client's next frame (or its
/// first) fails the body with [`BodyTimeout::Idle`]. The wait is
/// counted from when the proxy asks, so time the proxy spent not asking
/// (an upstream slow to take the body) is never the client's.
pub struct ClientBody {
    inner: Incoming,
    idle: Duration,
    /// When the proxy began waiting for the next frame, while it waits.
    waiting_since: Option<Instant>,
    /// Armed at the first wait: a body that is all there at once (nearly
    /// every one) never makes a timer.
    timer: Option<Pin<Box<Sleep>>>,
}

impl ClientBody {
    /// `inner`, timed out after `idle` of waiting for the client.
    pub fn new(inner: Incoming, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            waiting_since: None,
            timer: None,
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
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(ClientBodyError::Failed(e)))),
            Poll::Ready(None) => Poll::Ready(None),
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

/// The body of every response the proxy sends.
pub enum ResponseBody {
    /// A response the proxy wrote itself (errors, 404).
    Local(Full<Bytes>),
    /// The upstream's body, forwarded (boxed: a local body is small).
    Upstream(Box<Forwarded>),
}

/// The upstream's body as the client is sent it: metered, failed when idle,
/// holding the request's slot.
pub type Forwarded = Admitted<IdleTimeout<Metered<FromUpstream>>>;

impl ResponseBody {
    pub fn local(bytes: impl Into<Bytes>) -> Self {
        ResponseBody::Local(Full::new(bytes.into()))
    }

    /// The upstream's body `inner`, whose head came at `now`, forwarded
    /// through `meter` (`None` for an unmetered request), failed after
    /// `idle` of silence, holding `slot` until it ends.
    pub(super) fn forwarded(
        inner: FromUpstream,
        meter: Option<super::Meter>,
        idle: Duration,
        now: Instant,
        slot: Slot,
    ) -> Self {
        let metered = Metered::new(inner, meter, now);
        ResponseBody::Upstream(Box::new(Admitted::new(
            IdleTimeout::new(metered, idle),
            slot,
        )))
    }
}

/// Where an upstream's response body comes from.
pub enum FromUpstream {
    /// An HTTP/1.1 upstream's connection (TCP or TLS), read as the body is
    /// polled (`h1`); it goes back to its pool at the body's end.
    Pooled(H1Body),
    /// hyper's HTTP/2 client (HTTPS upstreams that chose `h2` by ALPN).
    Client(Incoming),
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

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ResponseBody::Local(full) => Pin::new(full)
                .poll_frame(cx)
                .map_err(|never| match never {}),
            ResponseBody::Upstream(up) => Pin::new(&mut **up).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Local(full) => full.is_end_stream(),
            ResponseBody::Upstream(up) => up.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Local(full) => full.size_hint(),
            ResponseBody::Upstream(up) => up.size_hint(),
        }
    }
}

/// The request body sent upstream.
///
/// One pointer wide: hyper's HTTP/2 client (HTTPS upstreams that chose
/// `h2`) queues requests in blocks of 32 slots allocated with each
/// connection, so every byte of `Request<RequestBody>` costs 32 per upstream connection
/// (boxed, a block is 8 KiB instead of 10).
pub struct RequestBody(Box<Source>);

enum Source {
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
        Self(Box::new(Source::Buffered { frames, rest }))
    }

    /// The client's body, forwarded as it streams in.
    pub fn streaming(body: ClientBody) -> Self {
        Self(Box::new(Source::Streaming(body)))
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
            Source::Buffered { frames, rest }
                if rest.as_ref().is_none_or(|r| r.is_end_stream()) =>
            {
                Some(Self::buffered(copy(frames)?, None))
            }
            Source::Streaming(body) if body.is_end_stream() => {
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
            Source::Buffered { frames, rest } => {
                if let Some(frame) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match rest {
                    Some(rest) => Pin::new(rest).poll_frame(cx),
                    None => Poll::Ready(None),
                }
            }
            Source::Streaming(inner) => Pin::new(inner).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &*self.0 {
            Source::Buffered { frames, rest } => {
                frames.is_empty() && rest.as_ref().is_none_or(|r| r.is_end_stream())
            }
            Source::Streaming(inner) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = match &*self.0 {
            Source::Buffered { frames, .. } => frames
                .iter()
                .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                .sum(),
            Source::Streaming(_) => 0,
        };
        let rest = match &*self.0 {
            Source::Buffered { rest: None, .. } => SizeHint::with_exact(0),
            Source::Buffered { rest: Some(r), .. } | Source::Streaming(r) => r.size_hint(),
        };
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + buffered);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_frames_leave_the_read_buffer_and_large_ones_stay_in_it() {
        let read_buffer = Bytes::from(vec![b'x'; 3 * OWN_BUFFER_MAX]);
        let data = |frame: Frame<Bytes>| frame.into_data().unwrap();

        let small = read_buffer.slice(..OWN_BUFFER_MAX);
        let out = data(own_buffer(Frame::data(small.clone())));
        assert_eq!(out, small);
        assert_ne!(out.as_ptr(), small.as_ptr(), "copied out");
        // The copy holds no reference to the read buffer: it alone owns it
        // again once the frame taken from it is gone.
        drop(small);
        assert!(read_buffer.is_unique());

        let large = read_buffer.slice(..=OWN_BUFFER_MAX);
        let out = data(own_buffer(Frame::data(large.clone())));
        assert_eq!(out.as_ptr(), large.as_ptr(), "passed on as it is");

        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("x-done", "1".parse().unwrap());
        let out = own_buffer(Frame::trailers(trailers.clone()));
        assert_eq!(out.into_trailers().unwrap(), trailers);
    }

    /// Every forwarded stream holds one: within jemalloc's 1,792-byte size
    /// class (the next is 2,048), which the boxed decompressor of the meter
    /// keeps it in.
    #[test]
    fn an_upstream_body_fits_its_size_class() {
        let size = std::mem::size_of::<Forwarded>();
        assert!(size <= 1792, "{size} bytes");
    }
}
