//! One exchange on a connection: the request written while the response
//! head is read, and the response handed on with a body that reads the
//! rest.

use std::sync::Weak;
use std::task::Poll;

use http::{Method, Response, StatusCode, Version};

use super::body::Body;
use super::conn::{Conn, Keep, Transport};
use super::decode::Decoder;
use super::error::{Error, Failed};
use super::head::{Head, KeepAliveHint, connection_close, poll_head};
use super::limits::RACE_WINDOW;
use super::write::{Prepared, SendBody, Sending};

impl<T: Transport> Conn<T> {
    /// Sends `req` and reads the response head; the response's body reads
    /// the rest from this connection (and sends the rest of the request,
    /// if the head came first), and gives it back to `pool` at its end if
    /// it can be kept.
    pub(crate) async fn send<B: SendBody>(
        mut self,
        req: Prepared<B>,
        home: Weak<dyn Keep<T>>,
    ) -> Result<Response<Body<T, B>>, Failed<B::Error>> {
        let Prepared {
            head: out,
            framing,
            method,
            body,
        } = req;
        let mut sending = Sending::new(out, framing, body);
        let mut buf = std::mem::take(&mut self.buf);
        let mut received = false;
        let mut sent = None;
        let mut written = None;
        let head = std::future::poll_fn(|cx| {
            if sent.is_none()
                && let Poll::Ready(result) = sending.poll(&mut self.io, cx)
            {
                if result.is_ok() {
                    written = Some(tokio::time::Instant::now());
                }
                sent = Some(result);
            }
            // A request that cannot be completed (the client's body
            // failed) gets no answer: no use waiting for one.
            if matches!(
                sent,
                Some(Err(Error::RequestBody(_) | Error::RequestLength))
            ) && let Some(Err(e)) = sent.take()
            {
                return Poll::Ready(Err(e));
            }
            poll_head(&mut self.io, &mut buf, &mut received, cx).map_err(Error::widen)
        })
        .await;
        let (head, sending, request_failed) = match (head, sent) {
            // The response came first: its body sends the rest.
            (Ok(head), None) => (head, Some(Box::new(sending)), false),
            (Ok(head), Some(Ok(()))) => (head, None, false),
            // The upstream stopped taking the request, and answered.
            (Ok(head), Some(Err(e))) => {
                tracing::debug!(error = ?e, "the upstream answered a request it did not take whole");
                (head, None, true)
            }
            // An upstream that could not take the request whole and
            // closed: the write's error is the one to report.
            (Err(_), Some(Err(e))) | (Err(e), _) => {
                // A client's failed body is not the upstream's silence,
                // nor is a close that came long after the request was out.
                let late = written.is_some_and(|at| at.elapsed() > RACE_WINDOW);
                let silent = !received
                    && !late
                    && !matches!(e, Error::RequestBody(_) | Error::RequestLength);
                return Err(Failed { error: e, silent });
            }
        };
        self.buf = buf;
        let Head {
            status,
            reason,
            version,
            headers,
            framing,
            ambiguous,
        } = head;
        let framing = if method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            Decoder::Done
        } else {
            framing
        };
        self.hint = KeepAliveHint::of(&headers);
        let keep = !request_failed
            && !ambiguous
            && version == Version::HTTP_11
            && framing != Decoder::Close
            && !connection_close(&headers)
            && self.hint.allows_another();
        let mut resp = Response::new(Body::new(self, framing, keep, sending, home, written));
        *resp.status_mut() = status;
        *resp.version_mut() = version;
        *resp.headers_mut() = headers;
        if let Some(reason) = reason {
            resp.extensions_mut().insert(reason);
        }
        // A body that is empty from the start has ended already.
        resp.body_mut().ended();
        Ok(resp)
    }
}
