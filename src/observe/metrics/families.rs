//! The families a request touches, registered once and shared by every
//! request, and the series of each label set ([`Histograms`],
//! [`Counters`]), which a request finds once ([`Found`]) and takes each
//! series from, made the first time any request of that label set touches
//! it: a series appears when a request first observes it, as it would
//! with `with_label_values` at that moment.

use std::sync::{Arc, OnceLock};

use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::{
    CounterVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
};

use super::exemplars::{Exemplars, SeriesExemplars};
use meter::{Outcome, TokenSource};
use slo::ObjectiveKind;
use slo::capacity::knee;
use slo::found::Found;

/// The families a request touches, built once and shared by every request
/// (one `Arc`).
pub(super) struct Families {
    pub(super) ttft: HistogramVec,
    pub(super) ttft_visible: HistogramVec,
    pub(super) headers: HistogramVec,
    pub(super) tpot: HistogramVec,
    pub(super) itl: HistogramVec,
    /// The ITL histogram's bucket bounds.
    pub(super) itl_buckets: Arc<[f64]>,
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

/// The series of one label set of the histograms (`route`, `model`, `slo`,
/// `tenant` or empty, `operation`).
pub(super) struct Histograms {
    labels: [Box<str>; 5],
    pub(super) ttft: Histogram,
    pub(super) headers: Histogram,
    pub(super) itl: Histogram,
    pub(super) tpot: Histogram,
    pub(super) e2el: Histogram,
    ttft_visible: OnceLock<Histogram>,
    client_wait: OnceLock<Histogram>,
    proxy_time: OnceLock<Histogram>,
    output_tokens: OnceLock<Histogram>,
    input_tokens: OnceLock<Histogram>,
    server_queue: OnceLock<Histogram>,
    server_prefill: OnceLock<Histogram>,
    server_decode: OnceLock<Histogram>,
    outside_engine: OnceLock<Histogram>,
    exemplars: OnceLock<Arc<SeriesExemplars>>,
}

/// A histogram of [`Histograms`] made on first use.
#[derive(Clone, Copy)]
pub(super) enum Later {
    TtftVisible,
    ClientWait,
    ProxyTime,
    OutputTokens,
    InputTokens,
    ServerQueue,
    ServerPrefill,
    ServerDecode,
    OutsideEngine,
}

impl Histograms {
    /// The series of `labels`; the five a stream observes are made now
    /// (every request observes them), the rest on first use.
    pub(super) fn new(f: &Families, labels: [&str; 5]) -> Histograms {
        Histograms {
            ttft: f.ttft.with_label_values(&labels),
            headers: f.headers.with_label_values(&labels),
            itl: f.itl.with_label_values(&labels),
            tpot: f.tpot.with_label_values(&labels),
            e2el: f.e2el.with_label_values(&labels),
            labels: labels.map(Box::from),
            ttft_visible: OnceLock::new(),
            client_wait: OnceLock::new(),
            proxy_time: OnceLock::new(),
            output_tokens: OnceLock::new(),
            input_tokens: OnceLock::new(),
            server_queue: OnceLock::new(),
            server_prefill: OnceLock::new(),
            server_decode: OnceLock::new(),
            outside_engine: OnceLock::new(),
            exemplars: OnceLock::new(),
        }
    }

    pub(super) fn later(&self, f: &Families, which: Later) -> &Histogram {
        let (cell, family) = match which {
            Later::TtftVisible => (&self.ttft_visible, &f.ttft_visible),
            Later::ClientWait => (&self.client_wait, &f.client_wait),
            Later::ProxyTime => (&self.proxy_time, &f.proxy_time),
            Later::OutputTokens => (&self.output_tokens, &f.output_tokens),
            Later::InputTokens => (&self.input_tokens, &f.input_tokens),
            Later::ServerQueue => (&self.server_queue, &f.server_queue),
            Later::ServerPrefill => (&self.server_prefill, &f.server_prefill),
            Later::ServerDecode => (&self.server_decode, &f.server_decode),
            Later::OutsideEngine => (&self.outside_engine, &f.outside_engine),
        };
        cell.get_or_init(|| made(family, &self.labels))
    }

    /// The exemplar slots of these series.
    pub(super) fn exemplars(&self, f: &Families) -> &Arc<SeriesExemplars> {
        self.exemplars
            .get_or_init(|| f.exemplars.series(&self.labels.each_ref().map(|l| &**l)))
    }
}

/// The `status_class` label values of `requests_total`, by index.
pub(super) const STATUS_CLASS_LABELS: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];
const STATUS_CLASSES: usize = STATUS_CLASS_LABELS.len();

/// The counters of one label set of the counters (`route`, `model`, `slo`,
/// `tenant`, `operation`), each made on first use.
pub(super) struct Counters {
    labels: [Box<str>; 5],
    /// By outcome and status class.
    requests: [[OnceLock<IntCounter>; STATUS_CLASSES]; Outcome::ALL.len()],
    /// By token source.
    output_tokens_total: [OnceLock<IntCounter>; 2],
    input_tokens_total: OnceLock<IntCounter>,
    cached_input_tokens_total: OnceLock<IntCounter>,
    reasoning_output_tokens_total: OnceLock<IntCounter>,
    stalls: OnceLock<IntCounter>,
    stalled_seconds: OnceLock<prometheus::Counter>,
    slow_readers: OnceLock<IntCounter>,
    outside_engine_negative: OnceLock<IntCounter>,
    slo_good_output_tokens: OnceLock<IntCounter>,
    /// `good`, then `bad`.
    slo_requests: [OnceLock<IntCounter>; 2],
    slo_violations: [OnceLock<IntCounter>; ObjectiveKind::ALL.len()],
    /// By load bucket at arrival: `good`, then `bad`.
    slo_load_requests: [[OnceLock<IntCounter>; 2]; knee::BUCKETS],
    slo_load_violations: [[OnceLock<IntCounter>; ObjectiveKind::ALL.len()]; knee::BUCKETS],
}

/// A counter of [`Counters`] that has no label of its own.
#[derive(Clone, Copy)]
pub(super) enum Count {
    InputTokens,
    CachedInputTokens,
    ReasoningOutputTokens,
    Stalls,
    SlowReaders,
    OutsideEngineNegative,
    SloGoodOutputTokens,
}

impl Counters {
    pub(super) fn new(labels: [&str; 5]) -> Counters {
        Counters {
            labels: labels.map(Box::from),
            requests: Default::default(),
            output_tokens_total: Default::default(),
            input_tokens_total: OnceLock::new(),
            cached_input_tokens_total: OnceLock::new(),
            reasoning_output_tokens_total: OnceLock::new(),
            stalls: OnceLock::new(),
            stalled_seconds: OnceLock::new(),
            slow_readers: OnceLock::new(),
            outside_engine_negative: OnceLock::new(),
            slo_good_output_tokens: OnceLock::new(),
            slo_requests: Default::default(),
            slo_violations: Default::default(),
            slo_load_requests: Default::default(),
            slo_load_violations: Default::default(),
        }
    }

    fn labels(&self) -> [&str; 5] {
        self.labels.each_ref().map(|l| &**l)
    }

    /// The request counter of `outcome` and `status` (a status class's
    /// index, [`STATUS_CLASS_LABELS`]).
    pub(super) fn requests(&self, f: &Families, outcome: Outcome, status: usize) -> &IntCounter {
        let [route, model, slo, tenant, operation] = self.labels();
        self.requests[outcome as usize][status].get_or_init(|| {
            f.requests.with_label_values(&[
                route,
                model,
                slo,
                tenant,
                operation,
                outcome.as_str(),
                STATUS_CLASS_LABELS[status],
            ])
        })
    }

    pub(super) fn output_tokens(&self, f: &Families, source: TokenSource) -> &IntCounter {
        self.output_tokens_total[source as usize]
            .get_or_init(|| with_one_more(&f.output_tokens_total, self.labels(), source.as_str()))
    }

    pub(super) fn count(&self, f: &Families, which: Count) -> &IntCounter {
        let (cell, family) = match which {
            Count::InputTokens => (&self.input_tokens_total, &f.input_tokens_total),
            Count::CachedInputTokens => (
                &self.cached_input_tokens_total,
                &f.cached_input_tokens_total,
            ),
            Count::ReasoningOutputTokens => (
                &self.reasoning_output_tokens_total,
                &f.reasoning_output_tokens_total,
            ),
            Count::Stalls => (&self.stalls, &f.stalls),
            Count::SlowReaders => (&self.slow_readers, &f.slow_readers),
            Count::OutsideEngineNegative => {
                (&self.outside_engine_negative, &f.outside_engine_negative)
            }
            Count::SloGoodOutputTokens => (&self.slo_good_output_tokens, &f.slo_good_output_tokens),
        };
        cell.get_or_init(|| made(family, &self.labels))
    }

    pub(super) fn stalled_seconds(&self, f: &Families) -> &prometheus::Counter {
        self.stalled_seconds
            .get_or_init(|| made(&f.stalled_seconds, &self.labels))
    }

    /// The SLO request counter of `good` (`true`) or `bad`.
    pub(super) fn slo_requests(&self, f: &Families, good: bool) -> &IntCounter {
        let label = if good { "good" } else { "bad" };
        self.slo_requests[usize::from(!good)]
            .get_or_init(|| with_one_more(&f.slo_requests, self.labels(), label))
    }

    pub(super) fn slo_violations(&self, f: &Families, kind: ObjectiveKind) -> &IntCounter {
        self.slo_violations[kind as usize]
            .get_or_init(|| with_one_more(&f.slo_violations, self.labels(), kind.as_str()))
    }

    /// The load bucket `bucket`'s counter of `good` (`true`) or `bad`
    /// requests (labels `route`, `model`, `slo`, `load`, `verdict`).
    pub(super) fn slo_load_requests(&self, f: &Families, bucket: usize, good: bool) -> &IntCounter {
        let [route, model, slo, ..] = self.labels();
        let label = if good { "good" } else { "bad" };
        self.slo_load_requests[bucket][usize::from(!good)].get_or_init(|| {
            f.slo_load_requests
                .with_label_values(&[route, model, slo, knee::LABELS[bucket], label])
        })
    }

    pub(super) fn slo_load_violations(
        &self,
        f: &Families,
        bucket: usize,
        kind: ObjectiveKind,
    ) -> &IntCounter {
        let [route, model, slo, ..] = self.labels();
        self.slo_load_violations[bucket][kind as usize].get_or_init(|| {
            f.slo_load_violations.with_label_values(&[
                route,
                model,
                slo,
                knee::LABELS[bucket],
                kind.as_str(),
            ])
        })
    }
}

/// The series of `family` with `labels`.
fn made<T: MetricVecBuilder>(family: &MetricVec<T>, labels: &[Box<str>; 5]) -> T::M {
    family.with_label_values(&labels.each_ref().map(|l| &**l))
}

/// The series of `family` with `labels` and one label more, `last`.
fn with_one_more<T: MetricVecBuilder>(
    family: &MetricVec<T>,
    labels: [&str; 5],
    last: &str,
) -> T::M {
    let [a, b, c, d, e] = labels;
    family.with_label_values(&[a, b, c, d, e, last])
}
