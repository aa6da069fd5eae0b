//! The proxy listener's overload state: how many client connections are
//! open against the limit, and whether the listener is shedding.
//!
//! When the open connections reach `proxy.overload_threshold` of
//! `proxy.max_connections`, the listener is *overloaded* until they fall a
//! tenth of the limit below that mark. While it is, a connection that has
//! not reached the upstream gets `proxy.overload_timeout` instead of its
//! usual timeouts, counted from when its wait began (as Envoy's overload
//! manager scales its timers): a connection idle between requests is
//! closed at once, one that has sent no complete request head within the
//! timeout of opening is closed, and a request whose body, read ahead, has
//! not all arrived within the timeout of its head is answered `408`. What
//! is shed is reported to the observers (`Occurrence::Shed`), which count it;
//! each episode is logged once when it starts and once when it ends.
//!
//! The signal is a `watch` channel that also carries the listener's
//! shutdown, so a connection waits on one channel for both.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why a connection was shed (the `reason` it is counted under).
pub use crate::observe::Shed;
use crate::observe::{Observers, Occurrence};

/// What the proxy listener's connections are told.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signal {
    /// The listener is overloaded: connections that have not reached the
    /// upstream are shed after [`Overload::timeout`].
    pub overloaded: bool,
    /// The listener is shutting down: connections finish what they are
    /// doing and close.
    pub stopping: bool,
}

/// The proxy listener's open connections, its overload threshold, and the
/// signal its connections watch.
pub struct Overload {
    max: usize,
    /// Overloaded from this many open connections...
    high: usize,
    /// ...until fewer than this many are open.
    low: usize,
    timeout: Duration,
    open: AtomicUsize,
    signal: watch::Sender<Signal>,
    /// Where each shed connection is counted.
    observers: Observers,
    /// Connections shed so far, for the log line of an episode's end.
    shed: AtomicU64,
    /// When the current episode began, and the shed count then.
    episode: Mutex<Option<(Instant, u64)>>,
}

impl Overload {
    /// The overload state of a listener of `max` connections, overloaded
    /// from `threshold` (a share, 0 to 1) of them, shedding after
    /// `timeout`.
    pub fn new(max: usize, threshold: f64, timeout: Duration, observers: &Observers) -> Self {
        let max = max.max(1);
        // Rounded up, so that a threshold of 100 % means the limit itself.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let high = ((max as f64 * threshold.clamp(0.0, 1.0)).ceil() as usize).clamp(1, max);
        let low = high.saturating_sub((max / 10).max(1)).max(1).min(high);
        let (signal, _) = watch::channel(Signal::default());
        Self {
            max,
            high,
            low,
            timeout,
            open: AtomicUsize::new(0),
            signal,
            observers: observers.clone(),
            shed: AtomicU64::new(0),
            episode: Mutex::new(None),
        }
    }

    /// How long a connection that has not reached the upstream may wait
    /// while the listener is overloaded.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The signal, for one connection. The listener has drained when every
    /// receiver is gone ([`drained`](Self::drained)).
    pub fn subscribe(&self) -> watch::Receiver<Signal> {
        self.signal.subscribe()
    }

    /// Whether the listener is overloaded now.
    pub fn overloaded(&self) -> bool {
        self.signal.borrow().overloaded
    }

    /// A connection was accepted.
    pub fn opened(&self) {
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        if open >= self.high && !self.overloaded() {
            self.set_overloaded(true, open);
        }
    }

    /// A connection closed.
    pub fn closed(&self) {
        let open = self.open.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
        if open < self.low && self.overloaded() {
            self.set_overloaded(false, open);
        }
    }

    fn set_overloaded(&self, overloaded: bool, open: usize) {
        let changed = self.signal.send_if_modified(|s| {
            let changed = s.overloaded != overloaded;
            s.overloaded = overloaded;
            changed
        });
        if !changed {
            return;
        }
        let mut episode = self
            .episode
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let shed = self.shed.load(Ordering::Relaxed);
        if overloaded {
            *episode = Some((Instant::now(), shed));
            tracing::warn!(
                open,
                max = self.max,
                threshold = self.high,
                timeout = ?self.timeout,
                "proxy listener overloaded: connections that have not reached the upstream are shed after the overload timeout"
            );
        } else if let Some((since, at_start)) = episode.take() {
            tracing::warn!(
                open,
                lasted = ?since.elapsed(),
                shed = shed - at_start,
                "proxy listener no longer overloaded"
            );
        }
    }

    /// Counts a connection shed for `reason`.
    pub fn shed(&self, reason: Shed) {
        self.shed.fetch_add(1, Ordering::Relaxed);
        self.observers.count(Occurrence::Shed(reason));
    }

    /// Tells every connection the listener is shutting down.
    pub fn stop(&self) {
        self.signal.send_modify(|s| s.stopping = true);
    }

    /// Resolves once every connection has let go of its signal.
    pub async fn drained(&self) {
        self.signal.closed().await;
    }

    /// Resolves when a wait that began at `since` has lasted the overload
    /// timeout while the listener is overloaded; never otherwise.
    pub async fn shed_after(&self, since: Instant) {
        let mut signal = self.subscribe();
        wait_to_shed(&mut signal, since, self.timeout).await;
    }
}

/// Resolves when `signal` says overloaded at `since + timeout` or later.
pub async fn wait_to_shed(signal: &mut watch::Receiver<Signal>, since: Instant, timeout: Duration) {
    let deadline = since + timeout;
    loop {
        if signal.wait_for(|s| s.overloaded).await.is_err() {
            return std::future::pending().await;
        }
        let over = tokio::select! {
            () = tokio::time::sleep_until(deadline) => None,
            over = signal.wait_for(|s| !s.overloaded) => Some(over.is_ok()),
        };
        match over {
            // Still overloaded at the deadline.
            None if signal.borrow().overloaded => return,
            // The sender is gone: nothing will shed this wait.
            Some(false) => return std::future::pending().await,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overload(max: usize, threshold: f64) -> Overload {
        Overload::new(
            max,
            threshold,
            Duration::from_secs(3),
            &Observers::detached(),
        )
    }

    #[test]
    fn overloaded_from_the_threshold_until_a_tenth_below_it() {
        let o = overload(64, 0.9);
        assert_eq!((o.high, o.low), (58, 52));
        for _ in 0..57 {
            o.opened();
        }
        assert!(!o.overloaded());
        o.opened();
        assert!(o.overloaded());
        for _ in 0..6 {
            o.closed();
        }
        assert!(o.overloaded(), "52 open");
        o.closed();
        assert!(!o.overloaded(), "51 open");
    }

    #[test]
    fn a_full_threshold_is_the_limit_and_tiny_limits_still_work() {
        let o = overload(10, 1.0);
        assert_eq!((o.high, o.low), (10, 9));
        let o = overload(1, 0.9);
        assert_eq!((o.high, o.low), (1, 1));
        o.opened();
        assert!(o.overloaded());
        o.closed();
        assert!(!o.overloaded());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_shed_only_past_the_timeout_while_overloaded() {
        let o = overload(2, 1.0);
        let since = Instant::now();
        let shed = o.shed_after(since);
        tokio::pin!(shed);
        // Not overloaded: never, however long it waits.
        assert!(
            tokio::time::timeout(Duration::from_secs(10), shed.as_mut())
                .await
                .is_err()
        );
        // Overloaded, long past the timeout: at once.
        o.opened();
        o.opened();
        assert!(
            tokio::time::timeout(Duration::from_millis(1), shed.as_mut())
                .await
                .is_ok()
        );
        // A wait that began just now waits out the timeout.
        let began = Instant::now();
        o.shed_after(began).await;
        assert_eq!(began.elapsed(), Duration::from_secs(3));
    }
}
