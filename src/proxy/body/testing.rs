//! A body for the wrappers' tests: its frames (or errors) are sent to it
//! through a channel, and it ends when the sender is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::sync::mpsc;

use crate::proxy::blame::{Blame, Fault};
use crate::proxy::client_body::ClientBodyError;
use crate::proxy::upstream::BoxError;

/// What the body yields next.
pub type Item = Result<Frame<Bytes>, BoxError>;

pub struct TestBody(mpsc::Receiver<Item>);

impl TestBody {
    /// The body, and where its frames are sent.
    pub fn new() -> (mpsc::Sender<Item>, Self) {
        let (tx, rx) = mpsc::channel(16);
        (tx, Self(rx))
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        self.0.poll_recv(cx)
    }
}

/// A data frame of `bytes`.
pub fn frame(bytes: &[u8]) -> Frame<Bytes> {
    Frame::data(Bytes::copy_from_slice(bytes))
}

impl Blame for BoxError {
    /// A test body's error: the client's when it is the client's body's,
    /// else the upstream's.
    fn fault(&self) -> Fault {
        match self.downcast_ref::<ClientBodyError>() {
            Some(e) => e.fault(),
            None => Fault::Upstream,
        }
    }
}
