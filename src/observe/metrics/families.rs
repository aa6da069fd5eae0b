//! The families a request touches, registered once and shared by every
//! request.

use prometheus::{CounterVec, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec};

use super::exemplars::Exemplars;
use super::series::{Counters, Found, Histograms};

/// The families a request touches, built once and shared by every request
/// (one `Arc`).
pub(super) struct Families {
    pub(super) ttft: HistogramVec,
    pub(super) ttft_visible: HistogramVec,
    pub(super) headers: HistogramVec,
    pub(super) tpot: HistogramVec,
    pub(super) itl: HistogramVec,
    /// The ITL histogram's bucket bounds.
    pub(super) itl_buckets: std::sync::Arc<[f64]>,
    pub(super) e2el: HistogramVec,
    pub(super) output_tokens: HistogramVec,
    pub(super) input_tokens: HistogramVec,
    pub(super) requests: IntCounterVec,
    pub(super) output_tokens_total: IntCounterVec,
    pub(super) input_tokens_total: IntCounterVec,
    pub(super) cached_input_tokens_total: IntCounterVec,
    pub(super) reasoning_output_tokens_total: IntCounterVec,
    pub(super) stalls: IntCounterVec,
    pub(super) stalled_seconds: CounterVec,
    pub(super) server_queue: HistogramVec,
    pub(super) server_prefill: HistogramVec,
    pub(super) server_decode: HistogramVec,
    pub(super) outside_engine: HistogramVec,
    pub(super) outside_engine_negative: IntCounterVec,
    pub(super) client_wait: HistogramVec,
    pub(super) slow_readers: IntCounterVec,
    pub(super) proxy_time: HistogramVec,
    pub(super) in_flight: IntGaugeVec,
    pub(super) parse_errors: IntCounterVec,
    pub(super) slo_requests: IntCounterVec,
    pub(super) slo_violations: IntCounterVec,
    pub(super) slo_good_output_tokens: IntCounterVec,
    /// Judged requests and their violations by load bucket at arrival.
    pub(super) slo_load_requests: IntCounterVec,
    pub(super) slo_load_violations: IntCounterVec,
    /// The exemplars of TTFT, TPOT, ITL and E2EL.
    pub(super) exemplars: Exemplars,
    /// The series of each label set of the histograms, of the counters,
    /// and of `in_flight` (`route`, `model`, `slo`), found once.
    pub(super) histogram_series: Found<Histograms, 5>,
    pub(super) counter_series: Found<Counters, 5>,
    pub(super) in_flight_series: Found<IntGauge, 3>,
}

impl Families {
    /// The `in_flight` gauge of `labels`.
    pub(super) fn in_flight(&self, labels: [&str; 3]) -> IntGauge {
        IntGauge::clone(
            &self
                .in_flight_series
                .get(labels, || self.in_flight.with_label_values(&labels)),
        )
    }
}
