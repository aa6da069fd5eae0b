//! A route's limit of requests in flight (`max_in_flight`).
//!
//! Every route counts its requests in flight, limited or not, so a limit
//! added by a reload sees the requests already running. The count lives as
//! long as the route's name: a reloaded proxy takes over its predecessor's,
//! so requests admitted under the old configuration still count under the
//! new one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The requests of one route in flight.
#[derive(Debug, Default)]
pub struct InFlight(AtomicUsize);

impl InFlight {
    /// Admits one more request unless `max` are already in flight. The slot
    /// is held by the returned [`Slot`] until it is dropped.
    pub fn admit(self: &Arc<Self>, max: Option<usize>) -> Option<Slot> {
        let before = self.0.fetch_add(1, Ordering::Relaxed);
        let admitted = Slot(self.clone());
        match max {
            Some(max) if before >= max => None, // `admitted` gives the slot back
            _ => Some(admitted),
        }
    }

    /// Requests in flight now.
    #[cfg(test)]
    pub(crate) fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One admitted request's slot, given back when dropped: by the response
/// body (`body::Admitted`) at its end, for a forwarded response, or with
/// the response itself.
#[derive(Debug)]
pub struct Slot(Arc<InFlight>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_and_frees_slots_on_drop() {
        let count = Arc::new(InFlight::default());
        let a = count.admit(Some(2)).unwrap();
        let b = count.admit(Some(2)).unwrap();
        assert!(count.admit(Some(2)).is_none());
        assert_eq!(count.now(), 2, "a refusal holds no slot");
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
}
