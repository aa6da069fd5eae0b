//! [`Metered`]: a body whose frames are shown to the request's meter, and
//! which holds the request's slot among its route's requests in flight.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::idle::Activity;
use crate::observe::RequestObserver;
use crate::proxy::blame::{Blame, Fault};
use meter::{Recorder, StreamMeter};
use slo::in_flight::Entered;

/// `inner`, each frame stamped with one clock reading and shown to the
/// meter by shared reference, then returned as it came.
///
/// The time from returning a frame to the next poll is time the client's
/// connection spent writing it and waiting for the client to take it. When
/// the next frame (or the end) is already there at that poll, the wait
/// held it back: the meter is told of it ([`StreamMeter::client_waited`]),
/// so that a slow reader is not read as a slow server. When nothing is
/// there yet, the wait held nothing back and is not counted. (hyper polls
/// the body again at once while it can buffer what it has to write; it
/// stops only when the client's socket is full.)
///
/// It finishes the meter at the body's end (hyper stops polling once the
/// body says it has ended, so the end is recorded with the frame that says
/// so) or error (blamed as [`Blame`] says: the upstream's, or the client's
/// own request body still being sent), or when told it timed out
/// ([`Activity::timed_out`]: `timeout`). Dropped unfinished, the meter
/// finishes itself as `client_abort`. `inner` is dropped first, which
/// closes the upstream connection.
///
/// An error of `inner` is returned one poll after it came: hyper drops its
/// connection with whatever it had buffered to write as soon as a body
/// fails, and it buffers the response head and each frame until it next
/// waits. So the error first waits a poll (waking the task at once), and
/// hyper writes out the head and the frames the upstream sent before it
/// failed; what the client's socket cannot take at that moment is still
/// lost with the connection.
///
/// It holds the request's slot among its route's requests in flight
/// (`max_in_flight`'s count), and gives it back where the request ends: at
/// the body's end or error, when it timed out, or when dropped, whichever
/// comes first. Metered or not, a forwarded request holds its slot in this
/// one place, so a frame passes through no wrapper of its own for it.
pub struct Metered<B: Body, R: Recorder = RequestObserver> {
    inner: B,
    /// An error of `inner`, held for one poll.
    failed: Option<B::Error>,
    /// `None` for a request forwarded unmetered: its frames are still
    /// stamped, for the idle timer.
    meter: Option<StreamMeter<R>>,
    /// When the last frame (or the head) came.
    last_activity: Instant,
    /// When the last frame was handed on, until the next poll (metered
    /// requests only).
    handed: Option<Instant>,
    /// The request's slot among its route's requests in flight, until it
    /// ends. Declared after `meter`, so that a drop gives it back after
    /// the meter has finished.
    slot: Option<Entered>,
}

impl<B: Body, R: Recorder> Metered<B, R> {
    /// `inner`, whose response head came at `now`, metered by `meter`,
    /// holding `slot` until it ends.
    pub fn new(
        inner: B,
        mut meter: Option<StreamMeter<R>>,
        now: Instant,
        slot: Option<Entered>,
    ) -> Self {
        // hyper may never poll a body that is empty from the start: it ends
        // here.
        let ended = inner.is_end_stream();
        if ended && let Some(m) = meter.as_mut() {
            m.end(now);
        }
        Self {
            inner,
            failed: None,
            meter,
            last_activity: now,
            handed: None,
            slot: slot.filter(|_| !ended),
        }
    }
}

impl<B, R> Body for Metered<B, R>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Blame + Unpin,
    R: Recorder + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        let handed = this.handed.take();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending() {
            return Poll::Pending;
        }
        // One clock reading stamps what came and ends the client's wait.
        let now = Instant::now();
        // The wait held something back only if what came next was already
        // there when the client's connection asked for it.
        if let Some(handed) = handed
            && let Some(m) = this.meter.as_mut()
        {
            m.client_waited(now.saturating_duration_since(handed));
        }
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.last_activity = now;
                let ended = this.inner.is_end_stream();
                if let Some(m) = this.meter.as_mut() {
                    if let Some(data) = frame.data_ref() {
                        m.data(now, data);
                    }
                    if ended {
                        m.end(now);
                    } else {
                        this.handed = Some(now);
                    }
                }
                if ended {
                    this.slot = None;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(m) = this.meter.as_mut() {
                    m.fail(now, e.fault().outcome(), None);
                }
                this.failed = Some(e);
                this.slot = None;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(None) => {
                if let Some(m) = this.meter.as_mut() {
                    m.end(now);
                }
                this.slot = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body, R: Recorder> Activity for Metered<B, R> {
    fn last_activity(&self) -> Instant {
        self.last_activity
    }

    fn timed_out(&mut self, now: Instant) {
        if let Some(m) = self.meter.as_mut() {
            m.fail(now, Fault::Timeout.outcome(), None);
        }
        self.slot = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use http_body_util::BodyExt as _;

    use super::*;
    use crate::proxy::body::testing::{Item, TestBody, frame};
    use meter::{Api, Limits, Outcome, ParseError, Summary};
    use slo::in_flight::InFlight;

    /// Keeps the summary of the request, and counts finishes.
    #[derive(Default, Clone)]
    struct Kept(Arc<Mutex<Vec<Summary>>>);

    impl Recorder for Kept {
        fn response_headers(&mut self, _: Duration, _: u16) {}
        fn first_token(&mut self, _: Duration) {}
        fn inter_token(&mut self, _: Duration) {}
        fn parse_error(&mut self, _: ParseError) {}
        fn finish(&mut self, summary: &Summary) {
            self.0.lock().unwrap().push(summary.clone());
        }
    }

    impl Kept {
        fn summaries(&self) -> Vec<Summary> {
            self.0.lock().unwrap().clone()
        }
    }

    const TOKEN: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";

    /// A metered SSE stream whose head came now, and what it records.
    fn metered(inner: TestBody) -> (Metered<TestBody, Kept>, Kept) {
        let kept = Kept::default();
        let now = Instant::now();
        let mut meter = StreamMeter::new(now, Api::OpenAi, Limits::default(), kept.clone());
        meter.response_head(now, 200, Some(b"text/event-stream"), None);
        (Metered::new(inner, Some(meter), now, None), kept)
    }

    /// Sends `items` to the body `ms` from now, while the test polls it.
    fn send_after(tx: &tokio::sync::mpsc::Sender<Item>, ms: u64, items: Vec<Item>) {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            for item in items {
                tx.send(item).await.unwrap();
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn frames_are_returned_as_they_came_and_stamped_once() {
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        let t0 = Instant::now();
        let sent = Bytes::from_static(TOKEN);
        send_after(&tx, 20, vec![Ok(Frame::data(sent.clone()))]);
        let got = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(got.as_ptr(), sent.as_ptr(), "the same bytes");
        assert_eq!(body.last_activity(), t0 + Duration::from_millis(20));
        send_after(
            &tx,
            30,
            vec![Ok(frame(TOKEN)), Ok(frame(b"data: [DONE]\n\n"))],
        );
        body.frame().await.unwrap().unwrap();
        body.frame().await.unwrap().unwrap();
        // Whatever comes after the terminal event changes nothing.
        send_after(&tx, 30, vec![Err("cut".into())]);
        assert!(body.frame().await.unwrap().is_err());
        drop(body);
        let s = kept.summaries();
        assert_eq!(s.len(), 1, "finished once");
        assert_eq!(s[0].outcome, Outcome::Ok);
        assert_eq!(s[0].ttft, Some(Duration::from_millis(20)));
        assert_eq!(
            s[0].e2el,
            Some(Duration::from_millis(50)),
            "t_end at [DONE]"
        );
        assert_eq!(s[0].client_wait, Duration::ZERO);
    }

    /// Time between handing a frame on and the next poll is the client's:
    /// counted as its wait, and taken out of the stamps, whereas the
    /// upstream's own pauses stay in them.
    #[tokio::test(start_paused = true)]
    async fn time_waiting_on_the_client_is_not_the_upstreams() {
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        send_after(&tx, 10, vec![Ok(frame(TOKEN))]);
        body.frame().await.unwrap().unwrap();
        // The next token is there at once, but the client takes 2 s to
        // make room for it.
        tx.send(Ok(frame(TOKEN))).await.unwrap();
        tokio::time::advance(Duration::from_secs(2)).await;
        body.frame().await.unwrap().unwrap();
        // The upstream itself pauses 300 ms, then ends 5 ms later.
        send_after(&tx, 300, vec![Ok(frame(TOKEN))]);
        body.frame().await.unwrap().unwrap();
        let end = tx.clone();
        drop(tx);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(end);
        });
        assert!(body.frame().await.is_none());
        let s = kept.summaries();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].client_wait, Duration::from_secs(2));
        assert_eq!(s[0].ttft, Some(Duration::from_millis(10)));
        // The second token came with the first as far as the upstream is
        // concerned, the third 300 ms later.
        assert_eq!(s[0].tpot, Some(Duration::from_millis(150)));
        assert_eq!(s[0].e2el, Some(Duration::from_millis(315)));
    }

    /// A wait on the client while the upstream had nothing more to send
    /// held nothing back: the upstream's gap stays whole, and no client
    /// wait is counted.
    #[tokio::test(start_paused = true)]
    async fn a_wait_that_held_nothing_back_is_not_counted() {
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        send_after(&tx, 10, vec![Ok(frame(TOKEN))]);
        body.frame().await.unwrap().unwrap();
        // The connection comes back 2 s later; the upstream's next token
        // comes 500 ms after that.
        tokio::time::advance(Duration::from_secs(2)).await;
        send_after(&tx, 500, vec![Ok(frame(TOKEN))]);
        body.frame().await.unwrap().unwrap();
        drop(tx);
        assert!(body.frame().await.is_none());
        let s = kept.summaries();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].client_wait, Duration::ZERO);
        assert_eq!(s[0].tpot, Some(Duration::from_millis(2500)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_body_finishes_the_meter_when_it_comes() {
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        tx.send(Ok(frame(TOKEN))).await.unwrap();
        body.frame().await.unwrap().unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(tx);
        });
        assert!(body.frame().await.is_none());
        let s = kept.summaries();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].outcome, Outcome::Ok);
        assert_eq!(s[0].e2el, Some(Duration::from_millis(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_is_the_upstreams_and_passes_through() {
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        tokio::time::advance(Duration::from_millis(7)).await;
        tx.send(Err("reset".into())).await.unwrap();
        assert_eq!(
            body.frame().await.unwrap().unwrap_err().to_string(),
            "reset"
        );
        let s = kept.summaries();
        assert_eq!(s[0].outcome, Outcome::UpstreamError);
        assert_eq!(s[0].elapsed, Duration::from_millis(7));
    }

    /// The client's request body, still being sent, failed after the
    /// response head: the client's, as it would have been before the head.
    #[tokio::test(start_paused = true)]
    async fn the_clients_body_failing_after_the_head_is_the_clients() {
        use crate::proxy::client_body::{BodyTimeout, ClientBodyError};
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        let stalled = ClientBodyError::Timeout(BodyTimeout::Idle(Duration::from_secs(1)));
        tx.send(Err(Box::new(stalled))).await.unwrap();
        assert!(body.frame().await.unwrap().is_err());
        let s = kept.summaries();
        assert_eq!(s[0].outcome, Outcome::ClientTimeout);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_a_timeout_at_the_moment_it_fired() {
        let (_tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        body.timed_out(Instant::now() + Duration::from_secs(3));
        drop(body);
        let s = kept.summaries();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].outcome, Outcome::Timeout);
        assert_eq!(s[0].elapsed, Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_unfinished_it_is_a_client_abort() {
        let (tx, body) = TestBody::new();
        let (mut body, kept) = metered(body);
        tx.send(Ok(frame(TOKEN))).await.unwrap();
        body.frame().await.unwrap().unwrap();
        tokio::time::advance(Duration::from_millis(9)).await;
        drop(body);
        let s = kept.summaries();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].outcome, Outcome::ClientAbort);
        assert_eq!(s[0].elapsed, Duration::from_millis(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_empty_from_the_start_is_finished_at_once() {
        let kept = Kept::default();
        let now = Instant::now();
        let mut meter = StreamMeter::new(now, Api::OpenAi, Limits::default(), kept.clone());
        meter.response_head(now, 200, Some(b"application/json"), None);
        let body = Metered::new(
            http_body_util::Empty::<Bytes>::new(),
            Some(meter),
            now,
            None,
        );
        assert_eq!(kept.summaries().len(), 1);
        drop(body);
        assert_eq!(kept.summaries().len(), 1);
    }

    /// An unmetered body holding a slot of `count`.
    fn admitted(
        count: &Arc<InFlight>,
    ) -> (tokio::sync::mpsc::Sender<Item>, Metered<TestBody, Kept>) {
        let (tx, body) = TestBody::new();
        let slot = count.admit(None);
        (tx, Metered::new(body, None, Instant::now(), slot))
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

    #[tokio::test(start_paused = true)]
    async fn the_slot_is_given_back_at_an_error_a_timeout_or_a_drop() {
        let count = Arc::new(InFlight::default());
        let (tx, mut body) = admitted(&count);
        tx.send(Err("reset".into())).await.unwrap();
        assert!(body.frame().await.unwrap().is_err());
        assert_eq!(count.now(), 0);

        let (_tx, mut body) = admitted(&count);
        assert_eq!(count.now(), 1);
        body.timed_out(Instant::now());
        assert_eq!(count.now(), 0);

        let (_tx, body) = admitted(&count);
        assert_eq!(count.now(), 1);
        drop(body);
        assert_eq!(count.now(), 0);
    }

    #[tokio::test]
    async fn a_body_ended_from_the_start_holds_no_slot() {
        let count = Arc::new(InFlight::default());
        let slot = count.admit(None);
        let body = Metered::<_, Kept>::new(
            http_body_util::Empty::<Bytes>::new(),
            None,
            Instant::now(),
            slot,
        );
        assert_eq!(count.now(), 0);
        drop(body);
    }
}
