//! The response body of every completion answer, and the counters behind
//! `GET /sim/stats`.
//!
//! [`SimBody`] plays a [`Script`] in time: it waits for each step's absolute
//! deadline and yields exactly one SSE event per body frame. It also carries a
//! [`Tracker`], which records how the response ended exactly once: completed
//! when the last frame is handed to the server, failed when a fault resets the
//! connection, and aborted when the body is dropped before either, which is
//! how a client (or proxy) going away becomes visible.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::batch::Admission;
use super::script::{Action, Script, Step};
use super::stamp::{Fnv64, mono_ns, stamp};

/// Why a simulated body failed on purpose. Hyper answers a body error by
/// closing the connection without the terminating chunk, which a client sees
/// as an incomplete message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SimBodyError {
    /// `x-sim-abort-after` fired.
    #[error("simulated connection abort")]
    Abort,
    /// The server shut down while a stalled stream was waiting.
    #[error("simulator shutting down")]
    Shutdown,
}

/// Counters of completion requests, shared by all connections.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    requests: AtomicU64,
    completed: AtomicU64,
    aborted: AtomicU64,
    failed: AtomicU64,
    stamped_responses: AtomicU64,
    stamped_frames: AtomicU64,
    stamped_bytes: AtomicU64,
    stamped_hash: AtomicU64,
}

/// A snapshot of the simulator's counters, served as JSON by `GET /sim/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    /// Completion requests received (chat and legacy, whatever the answer).
    pub requests: u64,
    /// Responses whose body was handed to the server to its end, including
    /// error answers and `x-sim-error-after` streams.
    pub completed: u64,
    /// Responses dropped before their end: the client went away.
    pub aborted: u64,
    /// Responses the simulator cut on purpose (`x-sim-abort-after`), or
    /// stalled streams cut by shutdown.
    pub failed: u64,
    /// Stamped responses (`x-sim-stamp: 1` or `--stamp`) handed to the
    /// server to their end.
    pub stamped_responses: u64,
    /// Body frames of those responses.
    pub stamped_frames: u64,
    /// Body bytes of those responses, stamps included.
    pub stamped_bytes: u64,
    /// Wrapping sum of the FNV-1a fingerprints of those bodies: a client
    /// that sums the fingerprints of what it received gets the same value
    /// exactly when every byte arrived unchanged (order of responses aside).
    pub stamped_hash: u64,
}

impl Stats {
    /// Counts a new request and returns the tracker that will record its end.
    pub(crate) fn track(self: &Arc<Self>) -> Tracker {
        self.requests.fetch_add(1, Ordering::Relaxed);
        Tracker {
            stats: Arc::clone(self),
            outcome: Outcome::Aborted,
        }
    }

    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            requests: self.requests.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            aborted: self.aborted.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            stamped_responses: self.stamped_responses.load(Ordering::Relaxed),
            stamped_frames: self.stamped_frames.load(Ordering::Relaxed),
            stamped_bytes: self.stamped_bytes.load(Ordering::Relaxed),
            stamped_hash: self.stamped_hash.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Completed,
    Aborted,
    Failed,
}

/// Records how one response ended, when it is dropped. Until told otherwise
/// the outcome is "aborted", so every path that loses the response (a
/// dropped handler future, a dropped body) counts as the client going away.
#[derive(Debug)]
pub(crate) struct Tracker {
    stats: Arc<Stats>,
    outcome: Outcome,
}

impl Tracker {
    /// Adds a stamped response's body to the fingerprint totals.
    fn stamped(&self, print: &Fingerprint) {
        let s = &self.stats;
        s.stamped_responses.fetch_add(1, Ordering::Relaxed);
        s.stamped_frames.fetch_add(print.frames, Ordering::Relaxed);
        s.stamped_bytes.fetch_add(print.bytes, Ordering::Relaxed);
        // fetch_add wraps on overflow, which is what a wrapping sum needs.
        s.stamped_hash
            .fetch_add(print.hash.value(), Ordering::Relaxed);
    }

    pub(crate) fn complete(mut self) {
        self.outcome = Outcome::Completed;
    }

    pub(crate) fn fail(mut self) {
        self.outcome = Outcome::Failed;
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let counter = match self.outcome {
            Outcome::Completed => &self.stats.completed,
            Outcome::Aborted => &self.stats.aborted,
            Outcome::Failed => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Resolves when the simulator shuts down; never, if it is not served
/// through [`super::serve`].
pub(crate) fn closing(signal: &watch::Sender<bool>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let mut rx = signal.subscribe();
    Box::pin(async move {
        if rx.wait_for(|closing| *closing).await.is_err() {
            // The sender is gone only when the whole router is; stay put and
            // let the connection's end drop this body.
            std::future::pending::<()>().await;
        }
    })
}

/// What a [`SimBody`] sends.
#[derive(Debug)]
enum Payload {
    /// A streamed response, one event per frame.
    Script(Script),
    /// A complete JSON answer in one frame (taken when sent).
    Once(Option<Bytes>),
    /// A failure before the first byte of the body.
    Reset,
}

/// What a stamped body has sent so far.
#[derive(Debug, Default)]
struct Fingerprint {
    hash: Fnv64,
    frames: u64,
    bytes: u64,
}

/// The body of every completion response; see the module documentation.
pub(crate) struct SimBody {
    /// `Some` when each frame is stamped with its send time and
    /// fingerprinted (`x-sim-stamp`).
    stamp: Option<Fingerprint>,
    source: Payload,
    /// The step waiting for its deadline.
    pending: Option<Step>,
    /// Reused for every deadline, so a long stream allocates one timer.
    sleep: Pin<Box<Sleep>>,
    /// Set while stalled: resolves when the simulator shuts down.
    stalled: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Woken to cut a stalled stream at shutdown.
    shutdown: watch::Sender<bool>,
    /// `None` once the outcome has been recorded.
    tracker: Option<Tracker>,
    /// Set once the server has had a chance to flush before a reset.
    reset_armed: bool,
    /// In batch-limited mode, the request's slot, or its place in the
    /// queue until it has one; dropped when the outcome is recorded, which
    /// frees the slot.
    admission: Option<Admission>,
}

impl std::fmt::Debug for SimBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBody")
            .field("source", &self.source)
            .field("pending", &self.pending)
            .field("stalled", &self.stalled.is_some())
            .finish_non_exhaustive()
    }
}

impl SimBody {
    fn new(source: Payload, tracker: Tracker, shutdown: watch::Sender<bool>) -> Self {
        Self {
            stamp: None,
            source,
            pending: None,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            stalled: None,
            shutdown,
            tracker: Some(tracker),
            reset_armed: false,
            admission: None,
        }
    }

    /// A streamed response played from `script`.
    pub(crate) fn script(script: Script, tracker: Tracker, shutdown: watch::Sender<bool>) -> Self {
        Self::new(Payload::Script(script), tracker, shutdown)
    }

    /// A complete answer sent as one frame.
    pub(crate) fn once(bytes: Bytes, tracker: Tracker, shutdown: watch::Sender<bool>) -> Self {
        Self::new(Payload::Once(Some(bytes)), tracker, shutdown)
    }

    /// A body that fails before its first frame: the head goes out, then the
    /// connection is reset.
    pub(crate) fn reset(tracker: Tracker, shutdown: watch::Sender<bool>) -> Self {
        Self::new(Payload::Reset, tracker, shutdown)
    }

    /// Stamps every frame with its send time and fingerprints the body.
    pub(crate) fn stamped(mut self, on: bool) -> Self {
        self.stamp = on.then(Fingerprint::default);
        self
    }

    /// Holds the request's slot for the whole stream; a queued request
    /// sends nothing until it has one, and its script starts then.
    pub(crate) fn admitted(mut self, admission: Option<Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// Whether the source has nothing more to give after the current frame.
    fn source_ended(&self) -> bool {
        match &self.source {
            Payload::Script(script) => script.is_ended() && self.pending.is_none(),
            Payload::Once(bytes) => bytes.is_none(),
            Payload::Reset => false,
        }
    }

    fn next_step(&mut self) -> Option<Step> {
        match &mut self.source {
            Payload::Script(script) => script.next_step(),
            Payload::Once(bytes) => bytes.take().map(|bytes| Step {
                at: Instant::now(),
                action: Action::Frame(bytes),
            }),
            Payload::Reset => Some(Step {
                at: Instant::now(),
                action: Action::Reset,
            }),
        }
    }

    fn complete(&mut self) {
        self.admission = None;
        if let Some(tracker) = self.tracker.take() {
            if let Some(print) = &self.stamp {
                tracker.stamped(print);
            }
            tracker.complete();
        }
    }

    fn fail(&mut self, error: SimBodyError) -> Poll<Option<Result<Frame<Bytes>, SimBodyError>>> {
        self.admission = None;
        if let Some(tracker) = self.tracker.take() {
            tracker.fail();
        }
        Poll::Ready(Some(Err(error)))
    }
}

impl http_body::Body for SimBody {
    type Data = Bytes;
    type Error = SimBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.tracker.is_none() {
            // The outcome is recorded: the stream is over, whatever it was.
            return Poll::Ready(None);
        }
        if let Some(Admission::Queued(queued)) = this.admission.as_mut() {
            let Poll::Ready(slot) = queued.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            this.admission = Some(Admission::Running(slot));
            if let Payload::Script(script) = &mut this.source {
                script.begin(Instant::now());
            }
        }
        if let Some(stalled) = this.stalled.as_mut() {
            return match stalled.as_mut().poll(cx) {
                Poll::Ready(()) => this.fail(SimBodyError::Shutdown),
                Poll::Pending => Poll::Pending,
            };
        }
        let step = match this.pending.take() {
            Some(step) => step,
            None => match this.next_step() {
                Some(step) => step,
                None => {
                    this.complete();
                    return Poll::Ready(None);
                }
            },
        };
        // Checking the clock first sends frames that are already due without
        // touching the timer; the timer never fires early, so neither path
        // sends a frame before its deadline.
        if step.at > Instant::now() {
            if this.sleep.deadline() != step.at {
                this.sleep.as_mut().reset(step.at);
            }
            if this.sleep.as_mut().poll(cx).is_pending() {
                this.pending = Some(step);
                return Poll::Pending;
            }
        }
        match step.action {
            Action::Frame(mut bytes) => {
                if let Some(print) = this.stamp.as_mut() {
                    // Read as late as possible: the frame goes to hyper next.
                    bytes = stamp(&bytes, mono_ns());
                    print.hash.update(&bytes);
                    print.frames += 1;
                    print.bytes += bytes.len() as u64;
                }
                if this.source_ended() {
                    // Hyper may stop polling once `is_end_stream` holds, so
                    // the last frame is where the response counts as done.
                    this.complete();
                }
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Action::Reset if !this.reset_armed => {
                // Hyper drops whatever it has buffered when a body fails, and
                // it only flushes when the body is pending. Pending once (with
                // an immediate wake-up) gets the head and the frames before
                // the fault onto the wire, so "after K tokens" means K tokens
                // reach the client.
                this.reset_armed = true;
                this.pending = Some(step);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Action::Reset => this.fail(SimBodyError::Abort),
            Action::Stall => {
                let mut stalled = closing(&this.shutdown);
                if stalled.as_mut().poll(cx).is_ready() {
                    return this.fail(SimBodyError::Shutdown);
                }
                this.stalled = Some(stalled);
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.tracker.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            // The stamp's length is known only when it is sent: a stamped
            // answer goes out chunked.
            Payload::Once(_) if self.stamp.is_some() => SizeHint::default(),
            // An exact size lets the server send `content-length` for
            // non-streamed answers, as real servers do.
            Payload::Once(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Payload::Once(None) => SizeHint::with_exact(0),
            Payload::Script(_) | Payload::Reset => SizeHint::default(),
        }
    }
}
