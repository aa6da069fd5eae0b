//! The request body as the service reads it ([`RequestBody`]), and the
//! connection's side of it ([`Inbound`]), which decodes its frames out of
//! the connection's read buffer as the body asks for them.
//!
//! A body that was all read with its head (nearly every request an
//! inference API takes: a JSON document of a few KiB) is handed over
//! whole, with nothing shared. A longer one, or a chunked one, is handed
//! over frame by frame through a slot of one frame that both sides share:
//! the body asks (and waits), the connection reads, decodes and fills the
//! slot. The connection reads only when the body has asked, so a client
//! is never read faster than the service takes its body. The service may
//! poll the body from another task (an HTTP/2 upstream's connection sends
//! it), so the slot wakes whichever side waits.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use crate::decode::Decoder;

/// Why a request body failed: the client's doing.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("client connection")]
    Io(#[source] std::io::Error),
    #[error("client closed the connection before the end of its request body")]
    Closed,
    #[error("invalid chunked request body: {0}")]
    Chunked(&'static str),
}

/// A request's body, as the service reads it.
pub struct RequestBody {
    kind: Kind,
}

enum Kind {
    /// All of it, read with the head (`None` once taken, or empty).
    Whole(Option<Bytes>),
    /// Frame by frame from the connection.
    Streamed {
        slot: Arc<Slot>,
        length: Option<u64>,
    },
}

/// What the two sides of a streamed body share.
pub(super) struct Slot(Mutex<State>);

#[derive(Default)]
struct State {
    /// The next frame, or the body's failure, decoded and not yet taken.
    ready: Option<Result<Frame<Bytes>, BodyError>>,
    /// The body has asked for a frame that is not there.
    wanted: bool,
    /// The connection has decoded the body's end.
    ended: bool,
    /// The body has been dropped: nobody will ask again.
    dropped: bool,
    /// Who waits for `ready`.
    body: Option<Waker>,
    /// Who is to fill it (the connection's task).
    conn: Option<Waker>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while held leaves no broken invariant: plain fields.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RequestBody {
    /// A body with nothing in it.
    pub fn empty() -> Self {
        RequestBody {
            kind: Kind::Whole(None),
        }
    }

    pub(super) fn whole(bytes: Bytes) -> Self {
        RequestBody {
            kind: Kind::Whole((!bytes.is_empty()).then_some(bytes)),
        }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match &mut self.get_mut().kind {
            Kind::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Streamed { slot, length } => {
                let mut state = slot.lock();
                if let Some(frame) = state.ready.take() {
                    if let (Ok(frame), Some(left)) = (&frame, length.as_mut()) {
                        let n = frame.data_ref().map_or(0, Bytes::len);
                        *left = left.saturating_sub(n as u64);
                    }
                    return Poll::Ready(Some(frame));
                }
                if state.ended {
                    return Poll::Ready(None);
                }
                state.wanted = true;
                if !state.body.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    state.body = Some(cx.waker().clone());
                }
                let conn = state.conn.take();
                drop(state);
                if let Some(conn) = conn
                    && !conn.will_wake(cx.waker())
                {
                    conn.wake();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Whole(bytes) => bytes.is_none(),
            Kind::Streamed { slot, .. } => {
                let state = slot.lock();
                state.ended && state.ready.is_none()
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Kind::Streamed {
                length: Some(n), ..
            } => SizeHint::with_exact(*n),
            Kind::Streamed { length: None, .. } => SizeHint::default(),
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if let Kind::Streamed { slot, .. } = &self.kind {
            let mut state = slot.lock();
            state.dropped = true;
            if let Some(conn) = state.conn.take() {
                drop(state);
                conn.wake();
            }
        }
    }
}

/// The connection's side of the request body being read.
pub(super) struct Inbound {
    decoder: Decoder,
    slot: Option<Arc<Slot>>,
    /// An interim `100 Continue` is owed before the body is read.
    pub(super) continue_owed: bool,
    /// The body failed (bad framing, the client gone): the connection's
    /// framing is lost.
    failed: bool,
}

/// What the connection is to do for the body now.
#[derive(Debug, PartialEq)]
pub(super) enum Want {
    /// Nothing: the body has not asked, or has ended, or is gone.
    Nothing,
    /// The body has asked and the read buffer has no frame: read more.
    Read,
    /// A frame (or the body's end, or its failure) was handed over.
    Delivered,
}

impl Inbound {
    /// The body of a request framed by `framing`, with `buf` holding what
    /// was read past its head: handed over whole if it is all there.
    pub(super) fn new(
        framing: Decoder,
        buf: &mut BytesMut,
        expect_continue: bool,
    ) -> (RequestBody, Inbound) {
        let done = Inbound {
            decoder: Decoder::Done,
            slot: None,
            continue_owed: false,
            failed: false,
        };
        match framing {
            Decoder::Done => (RequestBody::empty(), done),
            Decoder::Length(n) if (buf.len() as u64) >= n => {
                (RequestBody::whole(buf.split_to(n as usize).freeze()), done)
            }
            _ => {
                let length = match framing {
                    Decoder::Length(n) => Some(n),
                    _ => None,
                };
                let slot = Arc::new(Slot(Mutex::new(State::default())));
                let body = RequestBody {
                    kind: Kind::Streamed {
                        slot: slot.clone(),
                        length,
                    },
                };
                let inbound = Inbound {
                    decoder: framing,
                    slot: Some(slot),
                    continue_owed: expect_continue,
                    failed: false,
                };
                (body, inbound)
            }
        }
    }

    /// Whether all of the body has been read off the connection (or it had
    /// none), cleanly: the next request's head follows in the read buffer.
    pub(super) fn is_read(&self) -> bool {
        self.decoder.is_done() && !self.failed
    }

    /// Whether the body has been dropped before it was all read: nobody will
    /// read the rest.
    pub(super) fn abandoned(&self) -> bool {
        !self.is_read() && self.slot.as_ref().is_none_or(|s| s.lock().dropped)
    }

    /// Serves the body from `buf`: decodes a frame into the slot if the
    /// body asked for one. `Want::Read` when the body waits for bytes the
    /// buffer does not have (the connection's waker is then registered
    /// for when it asks).
    pub(super) fn serve(&mut self, buf: &mut BytesMut, cx: &mut Context<'_>) -> Want {
        let Some(slot) = &self.slot else {
            return Want::Nothing;
        };
        let mut state = slot.lock();
        if state.dropped || state.ready.is_some() || !state.wanted {
            if !state.dropped && !state.conn.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                state.conn = Some(cx.waker().clone());
            }
            return Want::Nothing;
        }
        if self.continue_owed {
            // The connection writes the `100` before it reads: ask it to.
            return Want::Read;
        }
        let frame = match self.decoder.decode(buf) {
            Ok(Some(frame)) => Some(Ok(frame)),
            Ok(None) if self.decoder.is_done() => None,
            Ok(None) => return Want::Read,
            Err(crate::error::Error::Chunked(why)) => Some(Err(BodyError::Chunked(why))),
            Err(_) => Some(Err(BodyError::Chunked("invalid framing"))),
        };
        let failed = frame.as_ref().is_some_and(Result::is_err);
        if failed {
            self.decoder = Decoder::Done;
            self.failed = true;
        }
        state.ended = self.decoder.is_done();
        state.ready = frame;
        state.wanted = false;
        let body = state.body.take();
        drop(state);
        if let Some(body) = body
            && !body.will_wake(cx.waker())
        {
            body.wake();
        }
        if failed {
            self.slot = None;
        }
        Want::Delivered
    }

    /// The connection failed or closed before the body's end: the body
    /// fails with `error`, and nothing more is read for it.
    pub(super) fn fail(&mut self, error: BodyError) {
        if self.decoder.is_done() {
            return;
        }
        self.decoder = Decoder::Done;
        self.failed = true;
        if let Some(slot) = self.slot.take() {
            let mut state = slot.lock();
            state.ready = Some(Err(error));
            state.ended = true;
            let body = state.body.take();
            drop(state);
            if let Some(body) = body {
                body.wake();
            }
        }
    }
}
