//! [`Admitted`]: a body that holds its request's slot among its route's
//! requests in flight.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

use slo::in_flight::Entered;

/// `inner`, holding the request's slot until it ends (its end or an
/// error) or is dropped, whichever comes first.
pub struct Admitted<B> {
    inner: B,
    slot: Option<Entered>,
}

impl<B> Admitted<B> {
    pub fn new(inner: B, slot: Entered) -> Self {
        Self {
            inner,
            slot: Some(slot),
        }
    }
}

impl<B: Body + Unpin> Body for Admitted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            this.slot = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::BodyExt as _;

    use super::*;
    use crate::proxy::body::testing::{Item, TestBody, frame};
    use slo::in_flight::InFlight;
    use tokio::sync::mpsc::Sender;

    fn admitted(count: &Arc<InFlight>) -> (Sender<Item>, Admitted<TestBody>) {
        let (tx, body) = TestBody::new();
        (tx, Admitted::new(body, count.admit(None).unwrap()))
    }

    #[tokio::test]
    async fn the_slot_is_held_while_frames_flow_and_given_back_at_the_end() {
        let count = Arc::new(InFlight::default());
        let (tx, mut body) = admitted(&count);
        tx.send(Ok(frame(b"a"))).await.unwrap();
        body.frame().await.unwrap().unwrap();
        assert_eq!(count.now(), 1);
        drop(tx);
        assert!(body.frame().await.is_none());
        assert_eq!(count.now(), 0, "given back at the end, before the drop");
        drop(body);
        assert_eq!(count.now(), 0);
    }

    #[tokio::test]
    async fn the_slot_is_given_back_at_an_error_or_a_drop() {
        let count = Arc::new(InFlight::default());
        let (tx, mut body) = admitted(&count);
        tx.send(Err("reset".into())).await.unwrap();
        assert!(body.frame().await.unwrap().is_err());
        assert_eq!(count.now(), 0);

        let (_tx, body) = admitted(&count);
        assert_eq!(count.now(), 1);
        drop(body);
        assert_eq!(count.now(), 0);
    }
}
