//! [`Tab`]: what a metered request holds while it is in flight, taken
//! once when its observers are made and given back once when it finishes.
//!
//! It is its place among the requests in flight (by route, model and class
//! label, which holds the route and model's count: one lookup, one guard)
//! and its tab in its route's GPU ledger, when the route has GPUs. Its
//! slot among its route's requests in flight (`max_in_flight`) is taken
//! before it is metered, and held by its response body
//! (`proxy::body::Metered`), metered or not.

use std::sync::Arc;

use tokio::time::Instant;

use super::labels::Labels;
use super::metrics::{Bill, ChargePlan, Concurrency, Place};
use super::request::Charged;

/// A metered request's holdings while it is in flight.
pub struct Tab {
    /// The requests in flight, where it moves when its model label
    /// changes.
    concurrency: Arc<Concurrency>,
    /// Its place there, until it finishes.
    place: Option<Place>,
    /// Its tab in its route's GPU ledger, when the route has GPUs.
    bill: Option<Bill>,
}

impl Tab {
    /// Opens the tab of a request of `labels` at `now`: in flight from now
    /// on, and charged its share of its route's GPUs. Tells how many of its
    /// route and model are in flight with it.
    pub fn open(
        concurrency: &Arc<Concurrency>,
        charges: &ChargePlan,
        labels: &Labels,
        now: Instant,
    ) -> (Self, u64) {
        let (place, with) = concurrency.enter(labels);
        let tab = Self {
            concurrency: concurrency.clone(),
            place: Some(place),
            bill: charges.open(labels.route(), now),
        };
        (tab, with)
    }

    /// In flight under `labels` from now on (its model label changed),
    /// unless it has been closed.
    pub fn relabelled(&mut self, labels: &Labels) {
        if self.place.is_some() {
            // The new place is taken before the old one is given back.
            self.place = Some(self.concurrency.enter(labels).0);
        }
    }

    /// Closes the tab at `now`, once: no longer in flight, and charged
    /// under its final `labels` and verdict (`good`), when it has a bill.
    /// A second close finds nothing to give back.
    pub fn close(&mut self, now: Instant, labels: &Labels, good: bool) -> Option<Charged> {
        self.place = None;
        self.bill.take().map(|bill| bill.close(now, labels, good))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MetricsSettings;
    use crate::observe::metrics::Metrics;

    fn metrics() -> Metrics {
        Metrics::new(
            &MetricsSettings::default(),
            &[],
            prometheus::Registry::new(),
        )
        .unwrap()
    }

    /// The labels of a request naming `model`, under `slo`: a model the
    /// upstream answered before, so that it is its own label.
    fn labels(m: &Metrics, model: Option<&str>, slo: &str) -> Labels {
        let chat = meter::Operation::Chat;
        let resolve = || Labels::resolve(m.bounds(), "r", model, Some(slo), None, chat);
        resolve().admit(200);
        resolve()
    }

    #[test]
    fn a_tab_counts_its_request_by_class_and_by_model_until_it_closes_once() {
        let m = metrics();
        let plan = ChargePlan::default();
        let chat = labels(&m, Some("m"), "chat");
        let batch = labels(&m, Some("m"), "batch");
        let (mut a, with) = Tab::open(m.concurrency(), &plan, &chat, Instant::now());
        assert_eq!(with, 1);
        let (mut b, with) = Tab::open(m.concurrency(), &plan, &batch, Instant::now());
        assert_eq!(with, 2, "the route and model's count, across classes");
        let c = m.concurrency();
        assert_eq!(c.now(["r", "m", "chat"]), (1, 2));
        assert_eq!(c.now(["r", "m", "batch"]), (1, 2));
        assert!(
            a.close(Instant::now(), &chat, true).is_none(),
            "no GPUs, no charge"
        );
        assert_eq!(c.now(["r", "m", "chat"]), (0, 1));
        // A second close, and a relabelling after the close, change nothing.
        a.close(Instant::now(), &chat, true);
        a.relabelled(&batch);
        assert_eq!(c.now(["r", "m", "batch"]), (1, 1));
        drop(a);
        b.close(Instant::now(), &batch, false);
        assert_eq!(c.now(["r", "m", "batch"]), (0, 0));
        drop(b);
        assert_eq!(c.now(["r", "m", "batch"]), (0, 0));
    }

    #[test]
    fn a_relabelled_tab_moves_to_its_new_model() {
        let m = metrics();
        // "m" has its own label; this request names no model.
        let _ = labels(&m, Some("m"), "chat");
        let mut labels = labels(&m, None, "chat");
        let plan = ChargePlan::default();
        let (mut tab, _) = Tab::open(m.concurrency(), &plan, &labels, Instant::now());
        let c = m.concurrency();
        assert_eq!(c.now(["r", "unknown", "chat"]), (1, 1));
        // Its response names one.
        assert!(labels.response_model("m"));
        tab.relabelled(&labels);
        assert_eq!(c.now(["r", "unknown", "chat"]), (0, 0));
        assert_eq!(c.now(["r", "m", "chat"]), (1, 1));
        drop(tab);
        assert_eq!(c.now(["r", "m", "chat"]), (0, 0), "a drop gives it back");
    }
}
