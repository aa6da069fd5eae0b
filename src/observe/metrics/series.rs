//! The series of one label set, found once: a request looks its label set
//! up once, lock-free, and takes from there each series it touches, made
//! the first time any request of that label set touches it.
//!
//! Without this, each `with_label_values` hashes the label values and takes
//! its family's map lock, a dozen times per request. Here a request hashes
//! its label values once, reads a map that is replaced whole (never
//! locked) when a label set is added, and then reads `OnceLock`s. A label
//! set is added once in the process's life: the families' series are never
//! removed, and the label values are bounded (`observe::labels`), so the map
//! holds no more entries than `llm_requests_total` has label sets.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::{Histogram, IntCounter};

use super::exemplars::SeriesExemplars;
use super::families::Families;
use meter::{Outcome, TokenSource};
use slo::ObjectiveKind;
use slo::capacity::knee;

/// What a request finds by its label values: `N` of them.
pub(super) struct Found<V, const N: usize> {
    sets: ArcSwap<HashMap<u64, Vec<Arc<Entry<V, N>>>>>,
    /// Held by the one adding a label set, so two that add at once do not
    /// lose one another's.
    adding: Mutex<()>,
}

struct Entry<V, const N: usize> {
    labels: [Box<str>; N],
    value: Arc<V>,
}

impl<V, const N: usize> Default for Found<V, N> {
    fn default() -> Self {
        Found {
            sets: ArcSwap::default(),
            adding: Mutex::new(()),
        }
    }
}

impl<V, const N: usize> Found<V, N> {
    /// What `labels` found, made by `make` if no request had them yet.
    pub(super) fn get(&self, labels: [&str; N], make: impl FnOnce() -> V) -> Arc<V> {
        let hash = hash(labels);
        if let Some(v) = find(&self.sets.load(), hash, labels) {
            return v;
        }
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let sets = self.sets.load_full();
        if let Some(v) = find(&sets, hash, labels) {
            return v;
        }
        let value = Arc::new(make());
        let mut grown = HashMap::clone(&sets);
        grown.entry(hash).or_default().push(Arc::new(Entry {
            labels: labels.map(Box::from),
            value: value.clone(),
        }));
        self.sets.store(Arc::new(grown));
        value
    }

    /// How many label sets were found.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.sets.load().values().map(Vec::len).sum()
    }
}

fn hash<const N: usize>(labels: [&str; N]) -> u64 {
    let mut h = DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

fn find<V, const N: usize>(
    sets: &HashMap<u64, Vec<Arc<Entry<V, N>>>>,
    hash: u64,
    labels: [&str; N],
) -> Option<Arc<V>> {
    let entries = sets.get(&hash)?;
    entries
        .iter()
        .find(|e| e.labels.iter().map(|l| &**l).eq(labels))
        .map(|e| e.value.clone())
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

/// The status classes of `requests_total`, in the order of their index.
const STATUS_CLASSES: usize = 6;

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
    /// index, [`super::request::status_class`]'s order).
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
                super::request::STATUS_CLASS_LABELS[status],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_set_is_made_once_and_found_again() {
        let found: Found<u32, 2> = Found::default();
        let mut made = 0;
        let a = found.get(["r", "m"], || {
            made += 1;
            1
        });
        let again = found.get(["r", "m"], || {
            made += 1;
            2
        });
        assert_eq!((*a, *again, made), (1, 1, 1));
        // Values that join into the same text are another label set.
        let other = found.get(["rm", ""], || 3);
        assert_eq!((*other, found.len()), (3, 2));
    }

    #[test]
    fn label_sets_added_from_many_threads_are_all_kept() {
        let found: Arc<Found<usize, 1>> = Arc::default();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let found = found.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let name = format!("{}", (i * 4 + t) % 120);
                        assert_eq!(*found.get([&name], || (i * 4 + t) % 120), (i * 4 + t) % 120);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(found.len(), 120);
    }
}
