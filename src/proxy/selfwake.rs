//! Wakes the response's task would send itself while it drives the
//! upstream connection.
//!
//! A plain-HTTP response body polls hyper's client connection (which reads
//! the socket and decodes frames into a body channel) and then the channel,
//! both from the task that writes to the client (`upstream.rs`). hyper
//! signals between the two ends of that channel with wakers: a frame sent
//! wakes the receiver, a frame taken wakes the sender, and the receiver's
//! "want more" wakes the sender again. Here both ends are the same task,
//! polled one after the other, so each of these wakes only schedules the
//! whole client connection again, for a poll that finds nothing to do
//! (measured with a uprobe at 1,000 streams: about five body polls per
//! upstream read instead of two).
//!
//! [`SelfWakes::poll`] polls with a waker that, during the poll, notes a
//! wake instead of sending it. If the poll is still pending and a wake was
//! noted, it polls again at once, here, instead of through the scheduler;
//! a wake from outside a poll (the socket became readable, from the
//! reactor) goes to the task as usual. No wake is lost: a noted wake is
//! always followed by another poll, in the loop, or by the body's consumer
//! when the poll returned a frame (a body that returned `Ready` owes no
//! wake), or by the task itself after [`MAX_ROUNDS`] rounds (tokio's
//! cooperative budget, when spent, wakes the task this way and must not
//! be spun on).
//!
//! The poll is also told whether any wake at all (during a poll or from
//! outside) came since the previous round began: the upstream connection,
//! which hyper would otherwise run in a task of its own that is polled only
//! when woken, is driven only then (`upstream.rs`). Every future registers
//! the waker it was polled with for whatever can let it go on (the socket's
//! readiness, the body channel's capacity, the request body), and the
//! connection is always polled with this one waker, so a round without a
//! wake has nothing new for it: hyper's server polls the response body
//! again after each frame it writes and after each flush, and those polls
//! need only look at the body channel.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Rounds of polling in one call before handing the wake to the task.
pub const MAX_ROUNDS: usize = 4;

/// A poll is in progress.
const POLLING: u8 = 1;
/// A wake came during the poll in progress: it polls again.
const NOTED: u8 = 2;
/// A wake came since the last round began (or the owner asked for one with
/// [`SelfWakes::woken`]).
const WOKEN: u8 = 4;

/// A waker for the upstream connection and body channel of one response.
pub struct SelfWakes {
    shared: Arc<Shared>,
    /// `shared` as a waker, made once.
    waker: Waker,
    /// The last round's poll returned pending (having polled everything
    /// with `waker`, which it registered): until a wake, another would too.
    pending: bool,
}

struct Shared {
    /// `POLLING`, `NOTED` and `WOKEN` bits.
    state: AtomicU8,
    /// The task's own waker, from the last poll.
    task: Mutex<Option<Waker>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Noted when a poll is in progress: it polls again. (`NOTED` set
        // outside a poll is cleared when the next one begins.)
        let before = self.state.fetch_or(NOTED | WOKEN, Ordering::AcqRel);
        // Not being polled: the task must be.
        if before & POLLING == 0
            && let Ok(task) = self.task.lock()
            && let Some(task) = task.as_ref()
        {
            task.wake_by_ref();
        }
    }
}

impl SelfWakes {
    pub fn new() -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(WOKEN),
            task: Mutex::new(None),
        });
        let waker = Waker::from(shared.clone());
        Self {
            shared,
            waker,
            pending: false,
        }
    }

    /// Forgets the task's waker (a connection going back to the pool must
    /// not keep the finished request's task alive, nor wake it).
    pub fn forget_task(&self) {
        if let Ok(mut task) = self.shared.task.lock() {
            *task = None;
        }
    }

    /// Makes the next round be told it was woken, as a new `SelfWakes` is:
    /// for futures that were last polled with another waker.
    pub fn woken(&self) {
        self.shared.state.fetch_or(WOKEN, Ordering::AcqRel);
    }

    /// Polls `f` with this waker until it is ready, or it is pending and no
    /// wake was noted during the round, for at most [`MAX_ROUNDS`] rounds.
    /// `f` is told whether any wake came since the previous round began
    /// (true for the first round of a new `SelfWakes`, or after
    /// [`SelfWakes::woken`]).
    ///
    /// A round is skipped (pending, `f` not called) when the last one was
    /// pending and nothing woke this waker since: `f` must poll everything
    /// it waits on with the context it is given, so that it registers this
    /// waker, and it must be the same `f` from one poll to the next while
    /// it is pending (a ready poll ends that).
    pub fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut f: impl FnMut(&mut Context<'_>, bool) -> Poll<T>,
    ) -> Poll<T> {
        if let Ok(mut task) = self.shared.task.lock()
            && !task.as_ref().is_some_and(|t| t.will_wake(cx.waker()))
        {
            *task = Some(cx.waker().clone());
        }
        let mut inner = Context::from_waker(&self.waker);
        for _ in 0..MAX_ROUNDS {
            let before = self.shared.state.swap(POLLING, Ordering::AcqRel);
            let woken = before & WOKEN != 0;
            let polled = if woken || !self.pending {
                let polled = f(&mut inner, woken);
                self.pending = polled.is_pending();
                polled
            } else {
                Poll::Pending
            };
            // Ends the round; a wake during it stays as `WOKEN` for the next.
            let during = self.shared.state.fetch_and(WOKEN, Ordering::AcqRel);
            if polled.is_ready() || during & NOTED == 0 {
                return polled;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts the wakes the task gets.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn task() -> (Arc<Task>, Waker) {
        let t = Arc::new(Task::default());
        (t.clone(), Waker::from(t))
    }

    #[test]
    fn a_wake_during_the_poll_polls_again_instead_of_waking_the_task() {
        let (task, waker) = task();
        let mut wakes = SelfWakes::new();
        let mut rounds = 0;
        let polled = wakes.poll(&mut Context::from_waker(&waker), |cx, _| {
            rounds += 1;
            if rounds == 1 {
                cx.waker().wake_by_ref();
                cx.waker().wake_by_ref();
            }
            Poll::<()>::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(rounds, 2);
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_ready_poll_drops_the_wakes_it_noted() {
        let (task, waker) = task();
        let mut wakes = SelfWakes::new();
        let polled = wakes.poll(&mut Context::from_waker(&waker), |cx, _| {
            cx.waker().wake_by_ref();
            Poll::Ready(7)
        });
        assert_eq!(polled, Poll::Ready(7));
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_after_the_poll_reaches_the_task() {
        let (task, waker) = task();
        let mut wakes = SelfWakes::new();
        let mut kept = None;
        let polled = wakes.poll(&mut Context::from_waker(&waker), |cx, _| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        // As the reactor would, later, from any thread.
        std::thread::spawn(move || kept.unwrap().wake())
            .join()
            .unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_poll_that_keeps_waking_itself_yields_to_the_task() {
        let (task, waker) = task();
        let mut wakes = SelfWakes::new();
        let mut rounds = 0;
        let polled = wakes.poll(&mut Context::from_waker(&waker), |cx, _| {
            rounds += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(rounds, MAX_ROUNDS);
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
    }

    /// What each of `polls` polls of `wakes` (one round each, with no wake
    /// in it, pending) was told: whether it had been woken, `None` when the
    /// round was skipped.
    fn told(wakes: &mut SelfWakes, waker: &Waker, polls: usize) -> Vec<Option<bool>> {
        (0..polls)
            .map(|_| {
                let mut told = None;
                let polled = wakes.poll(&mut Context::from_waker(waker), |_, woken| {
                    told = Some(woken);
                    Poll::<()>::Pending
                });
                assert!(polled.is_pending());
                told
            })
            .collect()
    }

    #[test]
    fn a_round_after_a_pending_one_runs_only_after_a_wake() {
        let (_task, waker) = task();
        let mut wakes = SelfWakes::new();
        // A new one has never been polled with its waker: woken.
        assert_eq!(told(&mut wakes, &waker, 2), [Some(true), None]);
        wakes.woken();
        assert_eq!(told(&mut wakes, &waker, 2), [Some(true), None]);
    }

    #[test]
    fn a_round_after_a_ready_one_runs_and_is_told_if_it_was_woken() {
        let (_task, waker) = task();
        let mut wakes = SelfWakes::new();
        let mut told = Vec::new();
        for _ in 0..2 {
            let _ = wakes.poll(&mut Context::from_waker(&waker), |_, woken| {
                told.push(woken);
                Poll::Ready(())
            });
        }
        assert_eq!(told, [true, false]);
    }

    #[test]
    fn a_wake_from_outside_the_poll_runs_the_next_round() {
        let (task, waker) = task();
        let mut wakes = SelfWakes::new();
        let mut kept = None;
        let _ = wakes.poll(&mut Context::from_waker(&waker), |cx, _| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert_eq!(told(&mut wakes, &waker, 1), [None]);
        std::thread::spawn(move || kept.unwrap().wake())
            .join()
            .unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert_eq!(told(&mut wakes, &waker, 2), [Some(true), None]);
    }

    #[test]
    fn a_wake_during_a_round_tells_the_next_round() {
        let (_task, waker) = task();
        let mut wakes = SelfWakes::new();
        let _ = wakes.poll(&mut Context::from_waker(&waker), |_, _| Poll::Ready(()));
        let mut rounds = Vec::new();
        let polled = wakes.poll(&mut Context::from_waker(&waker), |cx, woken| {
            rounds.push(woken);
            if rounds.len() == 1 {
                cx.waker().wake_by_ref();
            }
            Poll::<()>::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(rounds, [false, true]);
        // Also when the round that was woken returned ready.
        let mut wakes = SelfWakes::new();
        let _ = wakes.poll(&mut Context::from_waker(&waker), |_, _| Poll::Ready(()));
        let _ = wakes.poll(&mut Context::from_waker(&waker), |cx, _| {
            cx.waker().wake_by_ref();
            Poll::Ready(())
        });
        assert_eq!(told(&mut wakes, &waker, 2), [Some(true), None]);
    }

    #[test]
    fn the_latest_task_waker_is_the_one_woken() {
        let (first, first_waker) = task();
        let (second, second_waker) = task();
        let mut wakes = SelfWakes::new();
        let mut kept = None;
        for waker in [&first_waker, &second_waker] {
            let _ = wakes.poll(&mut Context::from_waker(waker), |cx, _| {
                kept = Some(cx.waker().clone());
                Poll::<()>::Pending
            });
        }
        kept.unwrap().wake();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }
}
