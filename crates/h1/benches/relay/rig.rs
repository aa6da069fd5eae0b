//! The relay loop, written against the crate as `h1` (so that the same
//! loop can be built against another copy of it, for a comparison).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use h1::{Conn, Pool, Prepared, SendBody, Transport};
use http_body::{Body as _, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An upstream that answers with a chunked response head, then `left`
/// times `chunk`, then the last chunk. Each read after the head gets one
/// piece, after a read that would wait (as a socket gives a stream whose
/// chunks come one at a time).
pub struct Upstream {
    head: Option<&'static [u8]>,
    chunk: &'static [u8],
    left: usize,
    /// How much of the piece being read was read (when the room was short).
    at: usize,
    ready: bool,
}

impl Upstream {
    pub fn new(chunk: &'static [u8], chunks: usize) -> Self {
        Upstream {
            head: Some(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"),
            chunk,
            left: chunks,
            at: 0,
            ready: false,
        }
    }
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            buf.put_slice(head);
            return Poll::Ready(Ok(()));
        }
        if !this.ready {
            this.ready = true;
            return Poll::Pending;
        }
        let piece: &[u8] = if this.left == 0 {
            b"0\r\n\r\n"
        } else {
            this.chunk
        };
        let n = (piece.len() - this.at).min(buf.remaining());
        buf.put_slice(&piece[this.at..this.at + n]);
        this.at += n;
        if this.at == piece.len() {
            this.at = 0;
            this.ready = false;
            this.left = this.left.saturating_sub(1);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Transport for Upstream {}

/// An empty request body.
pub struct NoBody;

impl http_body::Body for NoBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        true
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(0)
    }
}

impl SendBody for NoBody {
    fn replay(&self) -> Option<Self> {
        Some(NoBody)
    }
}

/// What the relay saw: data bytes, frames, and the allocations made while
/// the body was read (by `allocations`, the harness's counter).
#[derive(Debug, PartialEq)]
pub struct Relayed {
    pub bytes: usize,
    pub frames: usize,
    pub allocations: usize,
}

/// Reads a response of `chunks` times `chunk` through the client
/// connection, as the client's connection would: with `queued`, a frame
/// stays in the write queue until the body's next poll would wait (hyper's
/// server polls the body again before it writes what it queued), else it
/// is dropped at once.
pub fn relay(
    chunk: &'static [u8],
    chunks: usize,
    queued: bool,
    allocations: fn() -> usize,
) -> Relayed {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let pool = Pool::new(1, Duration::from_secs(60), Box::new(|_| {}));
    let req = http::Request::post("/v1/chat/completions")
        .header("host", "upstream")
        .body(NoBody)
        .expect("a request");
    let sent =
        rt.block_on(pool.send_new(Conn::new(Upstream::new(chunk, chunks)), Prepared::new(req)));
    let Ok(resp) = sent else {
        panic!("no response head");
    };
    let mut body = resp.into_body();
    let mut cx = Context::from_waker(Waker::noop());
    let mut queue: Vec<Frame<Bytes>> = Vec::with_capacity(16);
    let mut seen = Relayed {
        bytes: 0,
        frames: 0,
        allocations: allocations(),
    };
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                seen.bytes += frame.data_ref().map_or(0, Bytes::len);
                seen.frames += 1;
                if queued {
                    queue.push(frame);
                }
            }
            Poll::Ready(Some(Err(e))) => panic!("{e}"),
            Poll::Ready(None) => break,
            Poll::Pending => queue.clear(),
        }
    }
    seen.allocations = allocations() - seen.allocations;
    seen
}
