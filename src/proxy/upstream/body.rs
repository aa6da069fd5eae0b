//! [`FromUpstream`]: the upstream's response body, by the protocol it came
//! over, before the proxy's wrappers (`crate::proxy::body`).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body::Frame;
use hyper::body::Incoming;

use super::error::BodyError;
use crate::dial::Io;
use crate::proxy::client_body::{ClientBodyError, RequestBody};
use crate::proxy::delegate::delegate_body;

/// The response body of an HTTP/1.1 upstream.
pub type H1Body = h1::Body<Io, RequestBody>;

/// Errors a forwarded body can end with, once past the typed layers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub enum FromUpstream {
    /// An HTTP/1.1 upstream's connection (TCP or TLS), read as the body is
    /// polled (`h1`); it goes back to its pool at the body's end.
    Pooled(H1Body),
    /// hyper's HTTP/2 client (HTTPS upstreams that chose `h2` by ALPN).
    Client(H2Response),
}

/// Where the client's request body's error is kept, when it fails while
/// hyper's HTTP/2 client sends it (`super::h2::H2Body`): hyper resets the
/// stream and reports only the reset.
pub(super) type KeptError = Arc<Mutex<Option<ClientBodyError>>>;

/// The response body of an HTTP/2 exchange. Its request's body may still
/// be being sent: if that fails, the stream's reset ends this body too,
/// and the failure is the client's.
pub struct H2Response {
    body: Incoming,
    request_failed: KeptError,
}

impl H2Response {
    pub(super) fn new(body: Incoming, request_failed: KeptError) -> Self {
        Self {
            body,
            request_failed,
        }
    }

    /// The body's error: the client's request body's, if it failed, else
    /// the upstream's.
    fn blame(&mut self, e: hyper::Error) -> BodyError {
        match self.request_failed.lock().ok().and_then(|mut f| f.take()) {
            Some(client) => BodyError::ClientBody(client),
            None => BodyError::H2(e),
        }
    }
}

delegate_body!(H2Response: struct body, on_error = H2Response::blame, Error = BodyError);

impl FromUpstream {
    /// When the request's last byte was written to the upstream, if it was
    /// all written before the response head came; known for HTTP/1.1
    /// upstreams only (hyper's HTTP/2 client sends the body on a task of
    /// its own).
    pub fn request_written(&self) -> Option<tokio::time::Instant> {
        match self {
            FromUpstream::Pooled(body) => body.request_written(),
            FromUpstream::Client(_) => None,
        }
    }
}

delegate_body!(FromUpstream: enum {
    FromUpstream::Pooled,
    FromUpstream::Client => own_buffer,
}, Error = BodyError);

/// Data frames of an HTTP/2 upstream up to this size are forwarded in a
/// buffer of their own ([`own_buffer`]). `h1`'s frames need none: its read
/// buffer is taken back in place once its frames are gone.
const OWN_BUFFER_MAX: usize = 4096;

/// `frame` with the same bytes, a small data frame (up to
/// [`OWN_BUFFER_MAX`]) moved out of the
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::OWN_BUFFER_MAX;

    #[test]
    fn small_frames_leave_the_read_buffer_and_large_ones_stay_in_it() {
        let read_buffer = Bytes::from(vec![b'x'; 3 * OWN_BUFFER_MAX]);
        let data = |frame: http_body::Frame<Bytes>| frame.into_data().unwrap();

        let small = read_buffer.slice(..OWN_BUFFER_MAX);
        let out = data(super::own_buffer(http_body::Frame::data(small.clone())));
        assert_eq!(out, small);
        assert_ne!(out.as_ptr(), small.as_ptr(), "copied out");
        // The copy holds no reference to the read buffer: it alone owns it
        // again once the frame taken from it is gone.
        drop(small);
        assert!(read_buffer.is_unique());

        let large = read_buffer.slice(..=OWN_BUFFER_MAX);
        let out = data(super::own_buffer(http_body::Frame::data(large.clone())));
        assert_eq!(out.as_ptr(), large.as_ptr(), "passed on as it is");

        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("x-done", "1".parse().unwrap());
        let out = super::own_buffer(http_body::Frame::trailers(trailers.clone()));
        assert_eq!(out.into_trailers().unwrap(), trailers);
    }
}
