//! [`InFlight`]: the one count of requests in flight. A request adds
//! itself when it starts and holds the returned [`Entered`] guard, which
//! takes it out when dropped, however the request ends (finished, failed,
//! refused, or its future dropped with its client).
//!
//! The proxy keeps one per route, across reloads, for `max_in_flight`
//! ([`InFlight::admit`]); the observers keep them per label set, found
//! without a lock ([`crate::found::Found`]): per route and model for the
//! load a request meets, and, each [`within`](InFlight::within) its route
//! and model's, per route, model and class for the exported gauge, so that
//! a request takes its place in both with one guard.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests in flight, each counted by the guard it holds.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicU64,
    /// The wider count that each request counted here is part of.
    wider: Option<Arc<InFlight>>,
}

impl InFlight {
    /// A count whose every request is counted in `wider` too, for as long.
    pub fn within(wider: Arc<InFlight>) -> Self {
        Self {
            count: AtomicU64::new(0),
            wider: Some(wider),
        }
    }

    /// Counts one more request until the returned guard is dropped (in
    /// the wider count too, when this one is within one), and tells how
    /// many are in flight with it: in the wider count, when there is one,
    /// else in this one.
    pub fn enter(self: Arc<Self>) -> (Entered, u64) {
        let own = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let with = match &self.wider {
            Some(wider) => wider.count.fetch_add(1, Ordering::Relaxed) + 1,
            None => own,
        };
        (Entered(self), with)
    }

    /// Counts one more request unless `max` are already in flight: the
    /// request is counted until the returned guard is dropped; a refused
    /// one is not counted at all.
    pub fn admit(self: &Arc<Self>, max: Option<u64>) -> Option<Entered> {
        let (entered, with) = self.clone().enter();
        match max {
            // `entered` gives the place back as it drops.
            Some(max) if with > max => None,
            _ => Some(entered),
        }
    }

    /// Requests in flight now.
    pub fn now(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// One request counted in flight, until it is dropped.
#[derive(Debug)]
pub struct Entered(Arc<InFlight>);

impl Drop for Entered {
    fn drop(&mut self) {
        let counted = &self.0;
        counted.count.fetch_sub(1, Ordering::Relaxed);
        if let Some(wider) = &counted.wider {
            wider.count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_itself_until_its_guard_drops() {
        let count = Arc::new(InFlight::default());
        let (a, with) = count.clone().enter();
        assert_eq!(with, 1);
        let (b, with) = count.clone().enter();
        assert_eq!((with, count.now()), (2, 2));
        drop(a);
        assert_eq!(count.now(), 1);
        drop(b);
        assert_eq!(count.now(), 0);
    }

    #[test]
    fn admits_up_to_the_limit_and_a_refusal_holds_no_place() {
        let count = Arc::new(InFlight::default());
        let a = count.admit(Some(2)).unwrap();
        let b = count.admit(Some(2)).unwrap();
        assert!(count.admit(Some(2)).is_none());
        assert_eq!(count.now(), 2, "a refusal holds no place");
        drop(a);
        let c = count.admit(Some(2)).unwrap();
        assert!(count.admit(Some(2)).is_none());
        drop((b, c));
        assert_eq!(count.now(), 0);
    }

    #[test]
    fn without_a_limit_every_request_is_admitted_and_counted() {
        let count = Arc::new(InFlight::default());
        let held: Vec<_> = (0..100).map(|_| count.admit(None).unwrap()).collect();
        assert_eq!(count.now(), 100);
        // A limit set later (a reload) sees them.
        assert!(count.admit(Some(100)).is_none());
        drop(held);
        assert!(count.admit(Some(100)).is_some());
    }

    #[test]
    fn a_count_within_another_counts_its_requests_in_both() {
        let wide = Arc::new(InFlight::default());
        let a = Arc::new(InFlight::within(wide.clone()));
        let b = Arc::new(InFlight::within(wide.clone()));
        let (in_a, with) = a.clone().enter();
        assert_eq!(with, 1, "the wider count, itself included");
        let (in_b, with) = b.clone().enter();
        assert_eq!(with, 2);
        let (again_a, with) = a.clone().enter();
        assert_eq!(with, 3);
        assert_eq!((a.now(), b.now(), wide.now()), (2, 1, 3));
        // Requests counted in the wider one alone are its own.
        let (alone, with) = wide.clone().enter();
        assert_eq!(with, 4);
        assert_eq!((a.now(), wide.now()), (2, 4));
        drop((in_a, alone));
        assert_eq!((a.now(), b.now(), wide.now()), (1, 1, 2));
        drop((in_b, again_a));
        assert_eq!((a.now(), b.now(), wide.now()), (0, 0, 0));
    }
}
