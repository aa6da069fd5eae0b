//! Writing a request: its head, with the framing of its body, then its
//! body's frames (those that are ready at once gathered into one write)
//! and, for a chunked body, its trailers.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{Method, Request};
use tokio::io::AsyncWrite;

use super::error::Error;
use super::head::content_length;
use super::limits::WRITE_GATHER;

/// A request body to send: its frames (data, then maybe trailers), and a
/// copy of it when it can be sent again.
pub trait SendBody:
    http_body::Body<Data = Bytes, Error: std::error::Error + Send + Sync + 'static> + Unpin + Sized
{
    /// The same body again, if it can be sent again whole: all of it is
    /// held here, none still to come from elsewhere.
    fn replay(&self) -> Option<Self>;
}

/// A request ready to be written: its head's bytes, its body and how that
/// is framed.
pub struct Prepared<B> {
    pub(super) head: Vec<u8>,
    pub(super) framing: RequestFraming,
    pub(super) method: Method,
    pub(super) body: B,
}

impl<B: SendBody> Prepared<B> {
    /// `req` (origin-form target, `Host` set) made ready to be written.
    pub fn new(req: Request<B>) -> Self {
        let (parts, body) = req.into_parts();
        let (head, framing) = request_head(&parts, &body);
        Prepared {
            head,
            framing,
            method: parts.method,
            body,
        }
    }

    /// The same request again, if it can be sent again whole: its body is
    /// empty or all held by the proxy (read ahead), none of it still to
    /// come from the client.
    pub fn replay(&self) -> Option<Prepared<B>> {
        Some(Prepared {
            head: self.head.clone(),
            framing: self.framing,
            method: self.method.clone(),
            body: self.body.replay()?,
        })
    }
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum RequestFraming {
    /// Exactly this many bytes (`Content-Length`; 0 for no body).
    Length(u64),
    Chunked,
}

/// The request's head, ready to be written, and its body's framing: the
/// request's own `Content-Length` if it has one, else the body's exact
/// length when it is known (none for an empty body of a method that has
/// no body semantics, as hyper does) and the request declares no
/// `Trailer` (trailers can only follow a chunked body), else chunked.
fn request_head(parts: &http::request::Parts, body: &impl SendBody) -> (Vec<u8>, RequestFraming) {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // hyper's server has checked it (one valid length).
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| content_length(v.as_bytes()).ok());
    let framing = match declared {
        Some(n) => RequestFraming::Length(n),
        None => match body.size_hint().exact() {
            Some(0) if !has_body_semantics(&parts.method) => RequestFraming::Length(0),
            Some(n) if !parts.headers.contains_key(header::TRAILER) => {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
                RequestFraming::Length(n)
            }
            _ => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                RequestFraming::Chunked
            }
        },
    };
    out.extend_from_slice(b"\r\n");
    (out, framing)
}

/// Methods whose requests are expected to carry a body.
fn has_body_semantics(method: &Method) -> bool {
    *method == Method::POST || *method == Method::PUT || *method == Method::PATCH
}

/// The request as it goes out: its head, then its body, the frames that
/// are ready at once gathered into one write, the first of them into the
/// head's. The request's future drives it until the response head arrives;
/// if the request is not all sent by then, the response body drives the
/// rest as it is polled.
///
/// A body read ahead (nearly every request the proxy forwards) thus goes
/// out with its head in one write, and the upstream reads the request
/// whole. Written apart, the upstream may read the head alone and answer
/// before the body comes: a server that then closes with the body unread
/// (hyper's, when its handler drops the request) resets the connection,
/// and its kernel throws away what it had not yet sent of the answer.
pub(super) struct Sending<B> {
    body: B,
    /// Bytes to write: the head, then the frames gathered, framed.
    out: Vec<u8>,
    /// How many bytes of `out` have been written.
    written: usize,
    /// Nothing written yet: the body's ready frames are still to be
    /// gathered behind the head.
    fresh: bool,
    /// What the body still owes its `Content-Length`; `None` when chunked.
    remaining: Option<u64>,
    /// The body has ended: `out` holds its last bytes.
    last: bool,
}

impl<B: SendBody> Sending<B> {
    pub(super) fn new(head: Vec<u8>, framing: RequestFraming, body: B) -> Self {
        let remaining = match framing {
            RequestFraming::Length(n) => Some(n),
            RequestFraming::Chunked => None,
        };
        let last = remaining == Some(0) && body.is_end_stream();
        Sending {
            body,
            out: head,
            written: 0,
            fresh: true,
            remaining,
            last,
        }
    }

    /// Writes on: ready when the request is all sent, or has failed.
    pub(super) fn poll(
        &mut self,
        io: &mut (impl AsyncWrite + Unpin),
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Error<B::Error>>> {
        if std::mem::take(&mut self.fresh) && !self.last {
            // With the head in `out`, gathering is never pending.
            if let Poll::Ready(Err(e)) = self.gather(cx) {
                return Poll::Ready(Err(e));
            }
        }
        loop {
            while self.written < self.out.len() {
                let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out[self.written..]))?;
                if n == 0 {
                    return Poll::Ready(Err(
                        std::io::Error::from(std::io::ErrorKind::WriteZero).into()
                    ));
                }
                self.written += n;
            }
            if !self.out.is_empty() {
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                self.out.clear();
                self.written = 0;
            }
            if self.last {
                return Poll::Ready(Ok(()));
            }
            ready!(self.gather(cx))?;
        }
    }

    /// Takes the body's frames that are ready now into `out`, framed, up
    /// to `WRITE_GATHER` bytes or the body's end: pending only while not
    /// one is ready.
    fn gather(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error<B::Error>>> {
        use std::io::Write as _;
        loop {
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending if self.out.is_empty() => return Poll::Pending,
                Poll::Pending => return Poll::Ready(Ok(())),
                Poll::Ready(frame) => frame,
            };
            match frame {
                None => {
                    if self.remaining.is_some_and(|n| n > 0) {
                        return Poll::Ready(Err(Error::RequestLength));
                    }
                    if self.remaining.is_none() {
                        self.out.extend_from_slice(b"0\r\n\r\n");
                    }
                    self.last = true;
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => return Poll::Ready(Err(Error::RequestBody(e))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        match &mut self.remaining {
                            Some(n) => {
                                *n = n
                                    .checked_sub(data.len() as u64)
                                    .ok_or(Error::RequestLength)?;
                                self.out.extend_from_slice(&data);
                            }
                            None => {
                                // A Vec's write cannot fail.
                                let _ = write!(self.out, "{:x}\r\n", data.len());
                                self.out.extend_from_slice(&data);
                                self.out.extend_from_slice(b"\r\n");
                            }
                        }
                        if self.remaining == Some(0) && self.body.is_end_stream() {
                            self.last = true;
                            return Poll::Ready(Ok(()));
                        }
                    }
                    // Trailers end a chunked body, as its trailer section.
                    // A body sent with a Content-Length has none: they are
                    // dropped, and its end is still to come.
                    Err(frame) => {
                        if let (None, Ok(trailers)) = (self.remaining, frame.into_trailers()) {
                            self.out.extend_from_slice(b"0\r\n");
                            for (name, value) in &trailers {
                                if may_trail(name) {
                                    self.out.extend_from_slice(name.as_str().as_bytes());
                                    self.out.extend_from_slice(b": ");
                                    self.out.extend_from_slice(value.as_bytes());
                                    self.out.extend_from_slice(b"\r\n");
                                }
                            }
                            self.out.extend_from_slice(b"\r\n");
                            self.last = true;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
            }
            if self.out.len() >= WRITE_GATHER {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// Whether a field can be sent as a trailer: not one of those that frame,
/// route, authenticate or describe the message, which a recipient must
/// have before the content (RFC 9110 §6.5.1; hyper's client leaves out the
/// same ones).
pub(crate) fn may_trail(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::AUTHORIZATION
            | header::CACHE_CONTROL
            | header::CONTENT_ENCODING
            | header::CONTENT_LENGTH
            | header::CONTENT_RANGE
            | header::CONTENT_TYPE
            | header::HOST
            | header::MAX_FORWARDS
            | header::SET_COOKIE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::TE
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use http::header::HeaderValue;
    use http_body::Frame;

    use super::super::tests::{TestBody, client_body, streaming};
    use super::*;

    /// A connection that takes every write whole, and keeps each apart.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.get_mut().0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn sending(body: TestBody) -> Sending<TestBody> {
        let mut req = Request::new(body);
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "/v1/chat/completions".parse().unwrap();
        let Prepared {
            head,
            framing,
            body,
            ..
        } = Prepared::new(req);
        Sending::new(head, framing, body)
    }

    /// A body read ahead goes out in the head's write: the upstream reads
    /// the request whole, never a head whose body is still to come.
    #[test]
    fn a_body_ready_with_the_head_goes_out_in_the_heads_write() {
        let frames = [&b"{\"model\":"[..], b"\"m1\"}"].map(|d| Frame::data(Bytes::from_static(d)));
        let mut sending = sending(TestBody::held(frames.into()));
        let mut io = Writes::default();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            sending.poll(&mut io, &mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(io.0.len(), 1, "{} writes", io.0.len());
        let wire = String::from_utf8(io.0.concat()).unwrap();
        assert!(
            wire.starts_with("POST /v1/chat/completions HTTP/1.1\r\n")
                && wire.ends_with("content-length: 14\r\n\r\n{\"model\":\"m1\"}"),
            "{wire:?}"
        );
    }

    /// A body still to come does not hold the head back: it is written
    /// at once, and the body as it comes.
    #[tokio::test]
    async fn a_body_still_to_come_does_not_hold_the_head_back() {
        use tokio::io::AsyncWriteExt as _;
        let (mut client, incoming) = client_body(b"").await;
        let mut sending = sending(streaming(incoming, Duration::from_secs(10)));
        let mut io = Writes::default();
        let first = std::future::poll_fn(|cx| Poll::Ready(sending.poll(&mut io, cx))).await;
        assert!(first.is_pending());
        assert_eq!(io.0.len(), 1);
        assert!(io.0[0].ends_with(b"transfer-encoding: chunked\r\n\r\n"));
        client.write_all(b"2\r\n{}\r\n0\r\n\r\n").await.unwrap();
        std::future::poll_fn(|cx| sending.poll(&mut io, cx))
            .await
            .unwrap();
        assert_eq!(io.0[1..].concat(), b"2\r\n{}\r\n0\r\n\r\n");
    }

    #[test]
    fn the_request_head_carries_its_framing() {
        let head = |method: Method, headers: &[(&str, &str)], body: TestBody| {
            let mut req = Request::new(body);
            *req.method_mut() = method;
            *req.uri_mut() = "/v1/chat?x=1".parse().unwrap();
            for (n, v) in headers {
                req.headers_mut().append(
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            let (parts, body) = req.into_parts();
            let (out, framing) = request_head(&parts, &body);
            (String::from_utf8(out).unwrap(), framing)
        };
        let buffered = |s: &str| TestBody::held([Frame::data(Bytes::from(s.to_owned()))].into());
        let empty = || TestBody::held(Default::default());

        let (out, framing) = head(Method::POST, &[("host", "up:8000")], buffered("{}"));
        assert_eq!(
            out,
            "POST /v1/chat?x=1 HTTP/1.1\r\nhost: up:8000\r\ncontent-length: 2\r\n\r\n"
        );
        assert_eq!(framing, RequestFraming::Length(2));
        let (out, framing) = head(Method::POST, &[("content-length", "2")], buffered("{}"));
        assert_eq!(
            out,
            "POST /v1/chat?x=1 HTTP/1.1\r\ncontent-length: 2\r\n\r\n"
        );
        assert_eq!(framing, RequestFraming::Length(2));
        let (out, framing) = head(Method::GET, &[], empty());
        assert_eq!(out, "GET /v1/chat?x=1 HTTP/1.1\r\n\r\n");
        assert_eq!(framing, RequestFraming::Length(0));
        let (out, _) = head(Method::POST, &[], empty());
        assert_eq!(
            out,
            "POST /v1/chat?x=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
        );
    }
}
