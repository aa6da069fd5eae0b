//! [`IdleTimeout`]: a body failed when no frame comes for the route's idle
//! timeout.

use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::proxy::upstream::BoxError;

/// A body that knows when its last frame came and can be told it timed
/// out. The wrapper that already reads the clock for each frame (the
/// meter's, [`super::Metered`]) keeps the time, so the idle timer adds no
/// clock reading and no timer work per frame.
pub trait Activity {
    /// When the last frame (or the response head) came.
    fn last_activity(&self) -> Instant;
    /// The body is failed by its idle timeout at `now`.
    fn timed_out(&mut self, now: Instant);
}

/// The upstream went silent for longer than the route's idle timeout.
#[derive(Debug, thiserror::Error)]
#[error("upstream body idle for longer than {0:?}")]
pub struct Idle(pub Duration);

/// `inner`, failed with [`Idle`] once it has had no frame for `idle`.
///
/// The timer is armed at the first wait (a body all there at once never
/// makes one) for the inner body's last activity plus `idle`, and re-armed
/// from it only when it fires: a frame costs the timer nothing. Nor does a
/// wait: the timer is polled again only when it has fired or the task's
/// waker changed, since until then it holds the waker it would be given.
pub struct IdleTimeout<B> {
    inner: B,
    idle: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// The waker the timer was last polled with.
    waker: Option<Waker>,
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            timer: None,
            waker: None,
        }
    }
}

impl<B> Body for IdleTimeout<B>
where
    B: Body + Activity + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(item) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(item.map(|r| r.map_err(Into::into)));
        }
        let idle = this.idle;
        let inner = &mut this.inner;
        let timer = this.timer.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until(inner.last_activity() + idle))
        });
        match &this.waker {
            // Registered with this task's waker and not fired: it will wake
            // the task when it fires.
            Some(w) if w.will_wake(cx.waker()) && !timer.is_elapsed() => return Poll::Pending,
            _ => this.waker = Some(cx.waker().clone()),
        }
        loop {
            ready!(timer.as_mut().poll(cx));
            let deadline = inner.last_activity() + idle;
            let now = Instant::now();
            if now < deadline {
                timer.as_mut().reset(deadline);
                continue;
            }
            inner.timed_out(now);
            return Poll::Ready(Some(Err(Idle(idle).into())));
        }
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
    use bytes::Bytes;
    use http_body_util::BodyExt as _;

    use super::*;
    use crate::proxy::body::testing::{TestBody, frame};

    /// A body stamped with the clock at each frame, as the meter's wrapper
    /// stamps it, with the moments it was told it timed out.
    struct Stamped {
        inner: TestBody,
        last: Instant,
        timed_out: Vec<Instant>,
    }

    impl Body for Stamped {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            let polled = Pin::new(&mut self.inner).poll_frame(cx);
            if let Poll::Ready(Some(Ok(_))) = &polled {
                self.last = Instant::now();
            }
            polled
        }
    }

    impl Activity for Stamped {
        fn last_activity(&self) -> Instant {
            self.last
        }
        fn timed_out(&mut self, now: Instant) {
            self.timed_out.push(now);
        }
    }

    fn stamped(inner: TestBody) -> Stamped {
        Stamped {
            inner,
            last: Instant::now(),
            timed_out: Vec::new(),
        }
    }

    const IDLE: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn frames_closer_than_the_timeout_flow_and_the_end_passes_through() {
        let (tx, body) = TestBody::new();
        let mut body = IdleTimeout::new(stamped(body), IDLE);
        let start = Instant::now();
        tokio::spawn(async move {
            for i in 0..5u8 {
                tokio::time::sleep(IDLE - Duration::from_millis(1)).await;
                tx.send(Ok(frame(&[i]))).await.unwrap();
            }
        });
        for i in 0..5u8 {
            let f = body.frame().await.unwrap().unwrap();
            assert_eq!(f.into_data().unwrap(), Bytes::copy_from_slice(&[i]));
        }
        assert!(body.frame().await.is_none(), "the sender is gone: the end");
        assert!(Instant::now() - start >= 5 * (IDLE - Duration::from_millis(1)));
        assert!(body.inner.timed_out.is_empty());
    }

    /// The deadline is the last frame's time plus the timeout, however
    /// long ago the timer was armed.
    #[tokio::test(start_paused = true)]
    async fn silence_fails_the_body_at_the_last_frame_plus_the_timeout() {
        let (tx, body) = TestBody::new();
        let mut body = IdleTimeout::new(stamped(body), IDLE);
        let start = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(7)).await;
            tx.send(Ok(frame(b"a"))).await.unwrap();
            // Held open, silent.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        assert!(body.frame().await.unwrap().is_ok());
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<Idle>(), "{err}");
        assert_eq!(err.to_string(), "upstream body idle for longer than 10s");
        let fired = start + Duration::from_secs(7) + IDLE;
        assert_eq!(body.inner.timed_out, [fired]);
        assert_eq!(Instant::now(), fired);
    }

    /// Frames move the deadline without touching the timer: it is re-armed
    /// only when it fires.
    #[tokio::test(start_paused = true)]
    async fn frames_do_not_reset_the_timer() {
        let (tx, body) = TestBody::new();
        let mut body = IdleTimeout::new(stamped(body), IDLE);
        let start = Instant::now();
        let sender = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tx.send(Ok(frame(b"a"))).await.unwrap();
            }
            tx
        });
        for _ in 0..3 {
            body.frame().await.unwrap().unwrap();
        }
        let armed = body.timer.as_ref().unwrap().deadline();
        assert_eq!(armed, start + IDLE, "armed at the first wait, not moved");
        let _tx = sender.await.unwrap();
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<Idle>());
        assert_eq!(
            body.inner.timed_out,
            [start + Duration::from_secs(3) + IDLE]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_of_the_body_passes_through_without_a_timeout() {
        let (tx, body) = TestBody::new();
        let mut body = IdleTimeout::new(stamped(body), IDLE);
        tx.send(Err("reset".into())).await.unwrap();
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(err.to_string(), "reset");
        assert!(body.inner.timed_out.is_empty());
        assert!(body.timer.is_none(), "never waited: no timer made");
    }
}
