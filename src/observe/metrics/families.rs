//! The families a request touches, registered once and shared by every
//! request, and the series of each label set ([`Histograms`],
//! [`Counters`]), which a request finds once ([`Found`]) and takes each
//! series from, made the first time any request of that label set touches
//! it: a series appears when a request first observes it, as it would
//! with `with_label_values` at that moment. Each series of a histogram
//! ([`HistogramSeries`]) keeps its native buckets beside its classic ones when
//! native histograms are on (`native.rs`).

use std::sync::{Arc, OnceLock};

use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::proto::LabelPair;
use prometheus::{CounterVec, Histogram, HistogramVec, IntCounter, IntCounterVec};

use super::exemplars::{Exemplars, SeriesExemplars};
use super::native::{self, Native, Shape, Snapshot};
use super::register::Register;
use crate::config::Buckets;
use meter::{Outcome, TokenSource};
use slo::capacity::knee;
use slo::found::Found;
use slo::{ObjectiveKind, SloClass};

/// The families a request touches, built once and shared by every request
/// (one `Arc`).
pub(super) struct Families {
    pub(super) histograms: HistogramFamilies,
    pub(super) counters: CounterFamilies,
    pub(super) parse_errors: IntCounterVec,
    /// The exemplars of TTFT, TPOT, ITL and E2EL.
    pub(super) exemplars: Exemplars,
    /// The series of each label set of the histograms and of the counters,
    /// found once.
    pub(super) histogram_series: Found<Histograms, 5>,
    pub(super) counter_series: Found<Counters, 5>,
    /// The shape of each series' native buckets, when they are kept.
    pub(super) native: Option<Shape>,
    /// The histograms' full names, for the protobuf exposition to find
    /// each one's native buckets.
    pub(super) native_names: Vec<(String, HistogramKind)>,
    /// The families by kind of turn.
    pub(super) turns: TurnFamilies,
}

/// The families by kind of turn (docs/metrics.md, "Sessions and turns"),
/// observed once when a request ends, on the series of its label set
/// found once.
pub(super) struct TurnFamilies {
    /// Labels `route`, `model`, `slo`, `turn`.
    ttft: HistogramVec,
    /// Labels `route`, `model`, `turn`.
    requests: IntCounterVec,
    prompt_tokens: IntCounterVec,
    cached_prompt_tokens: IntCounterVec,
    /// By `route`, `model`, `slo`, `turn`.
    series: Found<TurnSeries, 4>,
}

/// The series of one label set of the families by kind of turn, each made
/// on its first use (a figure the upstream never reports has no series).
pub(super) struct TurnSeries {
    labels: [Box<str>; 4],
    ttft: OnceLock<Histogram>,
    requests: OnceLock<IntCounter>,
    prompt_tokens: OnceLock<IntCounter>,
    cached_prompt_tokens: OnceLock<IntCounter>,
}

impl TurnFamilies {
    /// The series of a request of `route`, `model`, `slo` and `turn`.
    pub(super) fn series(&self, labels: [&str; 4]) -> Arc<TurnSeries> {
        self.series.get(labels, || TurnSeries {
            labels: labels.map(Box::from),
            ttft: OnceLock::new(),
            requests: OnceLock::new(),
            prompt_tokens: OnceLock::new(),
            cached_prompt_tokens: OnceLock::new(),
        })
    }
}

impl TurnSeries {
    /// Its `route`, `model` and `turn`.
    fn by_turn(&self) -> [&str; 3] {
        let [route, model, _, turn] = &self.labels;
        [route, model, turn]
    }

    pub(super) fn ttft(&self, f: &TurnFamilies) -> &Histogram {
        let l = &self.labels;
        self.ttft
            .get_or_init(|| f.ttft.with_label_values(&[&*l[0], &l[1], &l[2], &l[3]]))
    }

    pub(super) fn requests(&self, f: &TurnFamilies) -> &IntCounter {
        self.requests
            .get_or_init(|| f.requests.with_label_values(&self.by_turn()))
    }

    pub(super) fn prompt_tokens(&self, f: &TurnFamilies) -> &IntCounter {
        self.prompt_tokens
            .get_or_init(|| f.prompt_tokens.with_label_values(&self.by_turn()))
    }

    pub(super) fn cached_prompt_tokens(&self, f: &TurnFamilies) -> &IntCounter {
        self.cached_prompt_tokens
            .get_or_init(|| f.cached_prompt_tokens.with_label_values(&self.by_turn()))
    }
}

/// The histograms of a request (labels `route`, `model`, `slo`, `tenant`,
/// `operation`).
pub(super) struct HistogramFamilies {
    pub(super) ttft: HistogramVec,
    pub(super) headers: HistogramVec,
    pub(super) tpot: HistogramVec,
    pub(super) itl: HistogramVec,
    /// The ITL histogram's bucket bounds.
    pub(super) itl_buckets: Arc<[f64]>,
    pub(super) e2el: HistogramVec,
    /// Indexed by [`Later`].
    pub(super) later: [HistogramVec; Later::ALL.len()],
}

/// The counters of a request (labels `route`, `model`, `slo`, `tenant`,
/// `operation`, and one of their own for some).
pub(super) struct CounterFamilies {
    pub(super) requests: IntCounterVec,
    pub(super) output_tokens_total: IntCounterVec,
    /// Indexed by [`Count`].
    pub(super) counts: [IntCounterVec; Count::ALL.len()],
    pub(super) stalled_seconds: CounterVec,
    pub(super) slo_requests: IntCounterVec,
    pub(super) slo_violations: IntCounterVec,
    pub(super) slo_good_output_tokens: IntCounterVec,
    /// Judged requests and their violations by load bucket at arrival.
    pub(super) slo_load_requests: IntCounterVec,
    pub(super) slo_load_violations: IntCounterVec,
}

impl Families {
    /// Registers the families of a request, with their buckets: the SLO
    /// classes' thresholds merged into the TTFT, TPOT and E2EL buckets.
    /// `native`, when native histograms are on, is the shape of each
    /// series' native buckets.
    pub(super) fn register(
        r: Register<'_>,
        b: &Buckets,
        classes: &[SloClass],
        native: Option<Shape>,
    ) -> Result<Self, prometheus::Error> {
        let ttft_buckets = merged_buckets(&b.time_to_first_token, classes, ObjectiveKind::Ttft);
        let tpot_buckets = merged_buckets(&b.time_per_output_token, classes, ObjectiveKind::Tpot);
        let e2el_buckets = merged_buckets(&b.e2e_request_latency, classes, ObjectiveKind::E2el);
        let later = |which: Later| {
            let buckets: &[f64] = match which {
                Later::TtftVisible => &ttft_buckets,
                Later::ClientWait => &b.e2e_request_latency,
                Later::ProxyTime => &b.proxy_time,
                Later::OutputTokens => &b.output_tokens,
                Later::InputTokens => &b.input_tokens,
                Later::ServerQueue => &b.time_to_first_token,
                Later::ServerPrefill => &b.time_to_first_token,
                Later::ServerDecode => &b.e2e_request_latency,
                Later::OutsideEngine => &b.time_to_first_token,
            };
            r.histograms(HistogramKind::Later(which).family(), buckets)
        };
        let count = |which: Count| {
            r.counters(match which {
                Count::InputTokens => names::INPUT_TOKENS_TOTAL,
                Count::CachedInputTokens => names::CACHED_INPUT_TOKENS_TOTAL,
                Count::ReasoningOutputTokens => names::REASONING_OUTPUT_TOKENS_TOTAL,
                Count::Stalls => names::STALLS,
                Count::SlowReaders => names::SLOW_READERS,
                Count::OutsideEngineNegative => names::OUTSIDE_ENGINE_NEGATIVE,
            })
        };
        Ok(Families {
            histograms: HistogramFamilies {
                ttft: r.histograms(names::TTFT, &ttft_buckets)?,
                headers: r.histograms(names::RESPONSE_HEADERS, &b.time_to_response_headers)?,
                tpot: r.histograms(names::TPOT, &tpot_buckets)?,
                itl: r.histograms(names::ITL, &b.inter_token_latency)?,
                itl_buckets: b.inter_token_latency.as_slice().into(),
                e2el: r.histograms(names::E2EL, &e2el_buckets)?,
                later: try_each(Later::ALL, later)?,
            },
            counters: CounterFamilies {
                requests: r.counters(names::REQUESTS)?,
                output_tokens_total: r.counters(names::OUTPUT_TOKENS_TOTAL)?,
                counts: try_each(Count::ALL, count)?,
                stalled_seconds: r.float_counters(names::STALLED_SECONDS)?,
                slo_requests: r.counters(names::SLO_REQUESTS)?,
                slo_violations: r.counters(names::SLO_VIOLATIONS)?,
                slo_good_output_tokens: r.counters(names::SLO_GOOD_OUTPUT_TOKENS)?,
                slo_load_requests: r.counters(names::SLO_LOAD_REQUESTS)?,
                slo_load_violations: r.counters(names::SLO_LOAD_VIOLATIONS)?,
            },
            parse_errors: r.counters(names::PARSE_ERRORS)?,
            exemplars: Exemplars::new(
                [
                    &ttft_buckets,
                    &tpot_buckets,
                    &b.inter_token_latency,
                    &e2el_buckets,
                ],
                names::TTFT.labels,
            ),
            histogram_series: Found::default(),
            counter_series: Found::default(),
            native,
            native_names: HistogramKind::ALL
                .iter()
                .map(|&k| (k.family().name(r.namespace), k))
                .collect(),
            turns: TurnFamilies {
                ttft: r.histograms(names::TURN_TTFT, &ttft_buckets)?,
                requests: r.counters(names::TURNS)?,
                prompt_tokens: r.counters(names::TURN_PROMPT_TOKENS)?,
                cached_prompt_tokens: r.counters(names::TURN_CACHED_PROMPT_TOKENS)?,
                series: Found::default(),
            },
        })
    }
}

/// The histograms' native buckets, found by the family's index in
/// `native_names` and the series' label values.
impl native::Source for Families {
    fn family(&self, name: &str) -> Option<usize> {
        self.native?;
        self.native_names.iter().position(|(n, _)| n == name)
    }

    fn snapshot(&self, family: usize, labels: &[LabelPair]) -> Option<Snapshot> {
        let (_, kind) = self.native_names.get(family)?;
        let value = |name: &str| {
            let pair = labels.iter().find(|l| l.name() == name);
            pair.map_or("", |l| l.value())
        };
        let series = self.histogram_series.find(names::LABELS.map(value))?;
        Some(series.series(*kind)?.native.as_ref()?.snapshot())
    }
}

/// `make` of each of `all`, in order, or the first error.
fn try_each<K: Copy, T, const N: usize>(
    all: [K; N],
    make: impl Fn(K) -> Result<T, prometheus::Error>,
) -> Result<[T; N], prometheus::Error> {
    let mut made = Vec::with_capacity(N);
    for k in all {
        made.push(make(k)?);
    }
    made.try_into()
        .map_err(|_| prometheus::Error::Msg("a family array of the wrong length".into()))
}

/// `configured` with every threshold of `kind` from `classes` added as an
/// exact bound (sorted, without duplicates), so `le="0.5"` is a series.
pub fn merged_buckets(configured: &[f64], classes: &[SloClass], kind: ObjectiveKind) -> Vec<f64> {
    let mut bounds: Vec<f64> = configured.to_vec();
    bounds.extend(
        classes
            .iter()
            .filter_map(|class| class.objective(kind))
            .map(|objective| objective.threshold.as_secs_f64()),
    );
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

/// The series of one label set of the histograms (`route`, `model`, `slo`,
/// `tenant` or empty, `operation`).
pub(super) struct Histograms {
    labels: [Box<str>; 5],
    pub(super) ttft: HistogramSeries,
    pub(super) headers: HistogramSeries,
    pub(super) itl: HistogramSeries,
    pub(super) tpot: HistogramSeries,
    pub(super) e2el: HistogramSeries,
    /// Indexed by [`Later`].
    later: [OnceLock<HistogramSeries>; Later::ALL.len()],
    exemplars: OnceLock<Arc<SeriesExemplars>>,
}

/// One series of a histogram: its classic buckets and, when native
/// histograms are on, its native buckets beside them.
pub(super) struct HistogramSeries {
    pub(super) classic: Histogram,
    pub(super) native: Option<Native>,
}

impl HistogramSeries {
    fn new(classic: Histogram, native: Option<Shape>) -> Self {
        HistogramSeries {
            classic,
            native: native.map(Native::new),
        }
    }

    /// Observes `v` in both. The native buckets come first: the exposition
    /// reads the classic ones first, so a scrape that races an observation
    /// never finds a classic bucket above the native count, which the
    /// protobuf exposition writes as the histogram's.
    pub(super) fn observe(&self, v: f64) {
        if let Some(native) = &self.native {
            native.observe(v);
        }
        self.classic.observe(v);
    }
}

/// Each histogram of [`Histograms`].
#[derive(Clone, Copy)]
pub(super) enum HistogramKind {
    Ttft,
    Headers,
    Tpot,
    Itl,
    E2el,
    Later(Later),
}

impl HistogramKind {
    const ALL: [HistogramKind; 5 + Later::ALL.len()] = {
        let mut all = [HistogramKind::Ttft; 5 + Later::ALL.len()];
        all[1] = HistogramKind::Headers;
        all[2] = HistogramKind::Tpot;
        all[3] = HistogramKind::Itl;
        all[4] = HistogramKind::E2el;
        let mut i = 0;
        while i < Later::ALL.len() {
            all[5 + i] = HistogramKind::Later(Later::ALL[i]);
            i += 1;
        }
        all
    };

    /// Its family in the catalogue.
    fn family(self) -> names::Family {
        match self {
            HistogramKind::Ttft => names::TTFT,
            HistogramKind::Headers => names::RESPONSE_HEADERS,
            HistogramKind::Tpot => names::TPOT,
            HistogramKind::Itl => names::ITL,
            HistogramKind::E2el => names::E2EL,
            HistogramKind::Later(later) => match later {
                Later::TtftVisible => names::TTFT_VISIBLE,
                Later::ClientWait => names::CLIENT_WAIT,
                Later::ProxyTime => names::PROXY_TIME,
                Later::OutputTokens => names::OUTPUT_TOKENS,
                Later::InputTokens => names::INPUT_TOKENS,
                Later::ServerQueue => names::SERVER_QUEUE,
                Later::ServerPrefill => names::SERVER_PREFILL,
                Later::ServerDecode => names::SERVER_DECODE,
                Later::OutsideEngine => names::OUTSIDE_ENGINE,
            },
        }
    }
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

impl Later {
    pub(super) const ALL: [Later; 9] = [
        Later::TtftVisible,
        Later::ClientWait,
        Later::ProxyTime,
        Later::OutputTokens,
        Later::InputTokens,
        Later::ServerQueue,
        Later::ServerPrefill,
        Later::ServerDecode,
        Later::OutsideEngine,
    ];
}

impl Histograms {
    /// The series of `labels`; the five a stream observes are made now
    /// (every request observes them), the rest on first use.
    pub(super) fn new(f: &Families, labels: [&str; 5]) -> Histograms {
        let h = &f.histograms;
        let series = |family: &HistogramVec| {
            HistogramSeries::new(family.with_label_values(&labels), f.native)
        };
        Histograms {
            ttft: series(&h.ttft),
            headers: series(&h.headers),
            itl: series(&h.itl),
            tpot: series(&h.tpot),
            e2el: series(&h.e2el),
            labels: labels.map(Box::from),
            later: Default::default(),
            exemplars: OnceLock::new(),
        }
    }

    pub(super) fn later(&self, f: &Families, which: Later) -> &HistogramSeries {
        self.later[which as usize].get_or_init(|| {
            let classic = made(&f.histograms.later[which as usize], &self.labels);
            HistogramSeries::new(classic, f.native)
        })
    }

    /// The series of `kind`, if it was made.
    fn series(&self, kind: HistogramKind) -> Option<&HistogramSeries> {
        match kind {
            HistogramKind::Ttft => Some(&self.ttft),
            HistogramKind::Headers => Some(&self.headers),
            HistogramKind::Tpot => Some(&self.tpot),
            HistogramKind::Itl => Some(&self.itl),
            HistogramKind::E2el => Some(&self.e2el),
            HistogramKind::Later(later) => self.later[later as usize].get(),
        }
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
    /// Indexed by [`Count`].
    counts: [OnceLock<IntCounter>; Count::ALL.len()],
    stalled_seconds: OnceLock<prometheus::Counter>,
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
}

impl Count {
    pub(super) const ALL: [Count; 6] = [
        Count::InputTokens,
        Count::CachedInputTokens,
        Count::ReasoningOutputTokens,
        Count::Stalls,
        Count::SlowReaders,
        Count::OutsideEngineNegative,
    ];
}

impl Counters {
    pub(super) fn new(labels: [&str; 5]) -> Counters {
        Counters {
            labels: labels.map(Box::from),
            requests: Default::default(),
            output_tokens_total: Default::default(),
            counts: Default::default(),
            stalled_seconds: OnceLock::new(),
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
            f.counters.requests.with_label_values(&[
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
        self.output_tokens_total[source as usize].get_or_init(|| {
            with_one_more(
                &f.counters.output_tokens_total,
                self.labels(),
                source.as_str(),
            )
        })
    }

    pub(super) fn count(&self, f: &Families, which: Count) -> &IntCounter {
        self.counts[which as usize]
            .get_or_init(|| made(&f.counters.counts[which as usize], &self.labels))
    }

    /// The good output tokens of the request's class.
    pub(super) fn good_output_tokens(&self, f: &Families) -> &IntCounter {
        self.slo_good_output_tokens
            .get_or_init(|| made(&f.counters.slo_good_output_tokens, &self.labels))
    }

    pub(super) fn stalled_seconds(&self, f: &Families) -> &prometheus::Counter {
        self.stalled_seconds
            .get_or_init(|| made(&f.counters.stalled_seconds, &self.labels))
    }

    /// The SLO request counter of `good` (`true`) or `bad`.
    pub(super) fn slo_requests(&self, f: &Families, good: bool) -> &IntCounter {
        let label = if good { "good" } else { "bad" };
        self.slo_requests[usize::from(!good)]
            .get_or_init(|| with_one_more(&f.counters.slo_requests, self.labels(), label))
    }

    pub(super) fn slo_violations(&self, f: &Families, kind: ObjectiveKind) -> &IntCounter {
        self.slo_violations[kind as usize]
            .get_or_init(|| with_one_more(&f.counters.slo_violations, self.labels(), kind.as_str()))
    }

    /// The load bucket `bucket`'s counter of `good` (`true`) or `bad`
    /// requests (labels `route`, `model`, `slo`, `load`, `verdict`).
    pub(super) fn slo_load_requests(&self, f: &Families, bucket: usize, good: bool) -> &IntCounter {
        let [route, model, slo, ..] = self.labels();
        let label = if good { "good" } else { "bad" };
        self.slo_load_requests[bucket][usize::from(!good)].get_or_init(|| {
            f.counters.slo_load_requests.with_label_values(&[
                route,
                model,
                slo,
                knee::LABELS[bucket],
                label,
            ])
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
            f.counters.slo_load_violations.with_label_values(&[
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
