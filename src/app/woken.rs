//! [`Woken`]: a future that is polled only once it has woken its task.
//!
//! A task that waits for its own work and for a rare signal at once (a
//! client connection and the listener's overload and shutdown signal) polls
//! both each time it is woken, so the signal's future is polled for every
//! chunk the connection forwards. A `tokio::sync::watch` receiver's
//! `changed()` takes the lock of the channel's waiter list at each such poll:
//! a lock that every connection's task shares, on the per-chunk path. Behind
//! [`Woken`] the signal's future is polled when it is new, when it woke the
//! task, or when the task's waker changed; any other poll of the task costs
//! it one atomic load.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// What a task keeps to poll one future at a time, each through
/// [`wrap`](Self::wrap), only when that future woke it.
pub(super) struct Woken {
    flag: Arc<Flag>,
    /// `flag` as a waker, handed to the futures polled.
    waker: Waker,
    /// The task's waker that `flag` wakes, as last given to it.
    task: Option<Waker>,
}

/// Set when the polled future wakes, and the task's waker it wakes then.
struct Flag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Set before the task is woken, so that its next poll sees it.
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

impl Woken {
    pub(super) fn new() -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        Self {
            waker: Waker::from(Arc::clone(&flag)),
            flag,
            task: None,
        }
    }

    /// `future`, polled at its first poll and afterwards only when it woke
    /// the task (or the task's waker changed). One future at a time: the
    /// next one replaces it.
    pub(super) fn wrap<F: Future + Unpin>(&mut self, future: F) -> Gated<'_, F> {
        Gated {
            woken: self,
            future,
            fresh: true,
        }
    }
}

/// A future behind [`Woken::wrap`].
pub(super) struct Gated<'w, F> {
    woken: &'w mut Woken,
    future: F,
    fresh: bool,
}

impl<F: Future + Unpin> Future for Gated<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let woken = &mut *this.woken;
        let same_task = woken.task.as_ref().is_some_and(|t| t.will_wake(cx.waker()));
        if !same_task {
            let task = cx.waker().clone();
            *woken.flag.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.clone());
            woken.task = Some(task);
        }
        // A load first: the swap, a locked instruction, only once woken.
        let was_woken = woken.flag.woken.load(Ordering::Relaxed)
            && woken.flag.woken.swap(false, Ordering::Acquire);
        if !(this.fresh || was_woken || !same_task) {
            return Poll::Pending;
        }
        this.fresh = false;
        Pin::new(&mut this.future).poll(&mut Context::from_waker(&woken.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A future that counts its polls and is ready once `ready` is set,
    /// waking the waker it was last polled with when it is set.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        ready: AtomicBool,
        waker: Mutex<Option<Waker>>,
    }

    impl Probe {
        fn set(&self) {
            self.ready.store(true, Ordering::Release);
            if let Some(w) = self.waker.lock().unwrap().take() {
                w.wake();
            }
        }
    }

    impl Future for &Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.ready.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_future_is_polled_when_new_when_it_woke_the_task_or_for_another_task() {
        let probe = Probe::default();
        let task = Arc::new(Task::default());
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        let mut woken = Woken::new();
        let mut gated = woken.wrap(&probe);
        for _ in 0..5 {
            assert!(Pin::new(&mut gated).poll(&mut cx).is_pending());
        }
        assert_eq!(probe.polls.load(Ordering::Relaxed), 1);
        // Another task's waker: polled, so that the future holds a way to it.
        let other = Arc::new(Task::default());
        let other_waker = Waker::from(Arc::clone(&other));
        let mut other_cx = Context::from_waker(&other_waker);
        assert!(Pin::new(&mut gated).poll(&mut other_cx).is_pending());
        assert_eq!(probe.polls.load(Ordering::Relaxed), 2);
        assert!(Pin::new(&mut gated).poll(&mut other_cx).is_pending());
        assert_eq!(probe.polls.load(Ordering::Relaxed), 2);
        // Its wake-up reaches the task that polled last, and the next poll
        // polls it.
        probe.set();
        assert_eq!(other.0.load(Ordering::Relaxed), 1);
        assert_eq!(task.0.load(Ordering::Relaxed), 0);
        assert!(Pin::new(&mut gated).poll(&mut other_cx).is_ready());
        assert_eq!(probe.polls.load(Ordering::Relaxed), 3);
        // A new future is polled at once, even with no wake-up pending.
        let next = Probe::default();
        let mut gated = woken.wrap(&next);
        assert!(Pin::new(&mut gated).poll(&mut other_cx).is_pending());
        assert_eq!(next.polls.load(Ordering::Relaxed), 1);
    }
}
