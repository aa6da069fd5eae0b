//! The metrics library, weighed on what tokenmeter asks of it: the
//! `prometheus` crate the exporter registers its families with, with the
//! project's own OpenMetrics encoder and exemplars on top, against the
//! official Rust client `prometheus-client`, which has exemplars,
//! OpenMetrics, the Prometheus text format 0.0.4 and the Prometheus
//! protobuf format with native histograms of its own.
//!
//! - `encode/*`: one exposition of about 10,000 series (Prometheus's count:
//!   each bucket, `_sum` and `_count` is one) in the mix the proxy exports:
//!   per label set (`route`, `model`, `slo`, `tenant`, `operation`) the
//!   TTFT, TPOT, ITL, E2EL and output-token histograms with the default
//!   buckets (26, 22, 22, 23 and 15), the four latency ones with a
//!   trace-id exemplar per bucket hit, the request, output-token and
//!   input-token counters and the in-flight gauge. `prometheus` is gathered
//!   (its families copied into its protobuf-shaped model) then written by
//!   its own 0.0.4 encoder or the project's OpenMetrics one;
//!   `prometheus_client` writes 0.0.4, OpenMetrics and protobuf (length
//!   delimited, as Prometheus scrapes it), and so does the project's own
//!   protobuf encoder from the gathered families, with its own native
//!   buckets beside each series (`protobuf_own_native`);
//!   `prometheus_client_native` is the same series with classic and
//!   native buckets in one histogram (without exemplars: its histograms
//!   with exemplars have classic buckets only).
//! - `observe/*`, `observe_2_threads/*`: what the proxy does per token and
//!   per request on a handle resolved once: a histogram observation (ITL
//!   buckets; with a trace-id exemplar; classic and native; the project's
//!   own native buckets alone and beside the `prometheus` ones) and a counter
//!   increment, on one thread and on two threads at once on one series.
//! - `lookup/*`: finding an existing label set's histogram in its family,
//!   as a request whose series is not yet cached does.
//!
//! Before the timings it prints, once, what one encode allocates (a
//! counting global allocator: allocations and bytes) and writes, and the
//! allocations of an observation and a lookup; and it checks that every
//! text exposition holds the same series.
//!
//! `cargo bench --bench metrics_library`; `cargo test --bench
//! metrics_library` runs each case once.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::System;
use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, NativeHistogramConfig};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokenmeter::config::Buckets;

use observe::metrics::exemplars::{ExemplarId, Exemplars, Exemplified};
use observe::metrics::native::{self, Native, Shape};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The project's exemplars and OpenMetrics encoder, compiled in from their
/// source at the path they have in the crate: they are private to it, and
/// it is their cost that is weighed. Their unit tests' imports are
/// compiled too (this target is built with `cfg(test)` under `cargo
/// test`) but not the tests, which this harness does not run.
#[allow(dead_code, unused_imports)]
#[path = "../src/observe"]
mod observe {
    pub mod metrics {
        pub mod exemplars;
        pub mod native;
        pub mod openmetrics;
        pub mod protobuf;
    }
}

const SHAPE: Shape = Shape {
    schema: 3,
    max_buckets: 160,
};
/// The series of one exposition, as Prometheus counts them.
const SERIES: usize = 10_000;
const NAMESPACE: &str = "llm";
const ROUTES: [&str; 4] = ["chat", "completions", "responses", "batch"];
const SLOS: [&str; 3] = ["interactive", "standard", "batch"];
/// Requests observed in each label set before the exposition.
const REQUESTS_PER_SET: usize = 8;
/// Token gaps per request.
const GAPS: usize = 12;
/// Gaps between tokens, spread over the ITL buckets.
const VALUES: [f64; 8] = [0.004, 0.012, 0.018, 0.021, 0.03, 0.05, 0.2, 0.0009];

/// The histograms of a label set: the catalogue's family, its buckets and
/// whether it carries exemplars.
fn histograms() -> [(names::Family, Vec<f64>, Option<Exemplified>); 5] {
    let b = Buckets::default();
    [
        (names::TTFT, b.time_to_first_token, Some(Exemplified::Ttft)),
        (
            names::TPOT,
            b.time_per_output_token,
            Some(Exemplified::Tpot),
        ),
        (names::ITL, b.inter_token_latency, Some(Exemplified::Itl)),
        (names::E2EL, b.e2e_request_latency, Some(Exemplified::E2el)),
        (names::OUTPUT_TOKENS, b.output_tokens, None),
    ]
}

/// The histograms' buckets by index, as `fn` constructors of
/// `prometheus-client`'s families need them.
fn buckets<const H: usize>() -> Vec<f64> {
    histograms()[H].1.clone()
}

/// The label values of each label set, in the catalogue's order (`route`,
/// `model`, `slo`, `tenant`, `operation`): as many as make [`SERIES`].
fn label_sets() -> Vec<[String; 5]> {
    let buckets: usize = histograms().iter().map(|(_, b, _)| b.len() + 3).sum();
    // The histograms' series, three counters and a gauge.
    let per_set = buckets + 4;
    (0..SERIES.div_ceil(per_set))
        .map(|i| {
            [
                ROUTES[i % ROUTES.len()].to_owned(),
                format!("model-{:02}", i / (ROUTES.len() * SLOS.len())),
                SLOS[(i / ROUTES.len()) % SLOS.len()].to_owned(),
                String::new(),
                "chat".to_owned(),
            ]
        })
        .collect()
}

/// One request's observations: TTFT, TPOT, E2EL (seconds), its gaps, its
/// output and input tokens, and its trace id.
struct Request {
    set: usize,
    ttft: f64,
    tpot: f64,
    e2el: f64,
    gaps: Vec<f64>,
    output: u64,
    input: u64,
    trace: [u8; 16],
}

impl Request {
    fn max_gap(&self) -> f64 {
        self.gaps.iter().copied().fold(0.0, f64::max)
    }
}

fn requests(sets: usize) -> Vec<Request> {
    let mut rng = fastrand::Rng::with_seed(51);
    (0..sets * REQUESTS_PER_SET)
        .map(|i| {
            let gaps: Vec<f64> = (0..GAPS)
                .map(|_| VALUES[rng.usize(..VALUES.len())])
                .collect();
            let ttft = 0.05 + rng.f64() * 2.0;
            Request {
                set: i % sets,
                ttft,
                tpot: gaps.iter().sum::<f64>() / GAPS as f64,
                e2el: ttft + gaps.iter().sum::<f64>(),
                gaps,
                output: rng.u64(1..4096),
                input: rng.u64(1..8192),
                trace: rng.u128(..).to_be_bytes(),
            }
        })
        .collect()
}

/// A trace id as an exemplar label value, hex, without allocating.
#[derive(Clone, Copy, Debug)]
struct TraceId([u8; 32]);

impl TraceId {
    fn new(id: [u8; 16]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0; 32];
        for (i, b) in id.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        Self(out)
    }
}

impl EncodeLabelValue for TraceId {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(std::str::from_utf8(&self.0).map_err(|_| std::fmt::Error)?)
    }
}

type Exemplar = [(&'static str, TraceId); 1];

/// The `prometheus` crate's families, as the exporter registers them, with
/// the project's exemplars.
struct Prom {
    registry: prometheus::Registry,
    histograms: Vec<HistogramVec>,
    exemplars: Exemplars,
    exemplified: Vec<(String, Exemplified)>,
    natives: Natives,
}

/// The project's native buckets of each series, of the default shape (`SHAPE`).
struct Natives {
    names: Vec<String>,
    series: std::collections::HashMap<(usize, Vec<String>), Native>,
}

impl native::Source for Natives {
    fn family(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    fn snapshot(
        &self,
        family: usize,
        labels: &[prometheus::proto::LabelPair],
    ) -> Option<native::Snapshot> {
        let values = names::LABELS.iter().map(|name| {
            let pair = labels.iter().find(|l| l.name() == *name);
            pair.map_or(String::new(), |l| l.value().to_owned())
        });
        Some(self.series.get(&(family, values.collect()))?.snapshot())
    }
}

impl Prom {
    fn new(sets: &[[String; 5]], requests: &[Request]) -> Self {
        let registry = prometheus::Registry::new();
        let mut vecs = Vec::new();
        let mut exemplified = Vec::new();
        let mut bounds: Vec<Vec<f64>> = Vec::new();
        for (family, buckets, exemplar) in histograms() {
            let h = HistogramVec::new(
                HistogramOpts::new(family.name(NAMESPACE), family.help).buckets(buckets.clone()),
                family.labels,
            )
            .unwrap();
            registry.register(Box::new(h.clone())).unwrap();
            vecs.push(h);
            if let Some(e) = exemplar {
                exemplified.push((family.name(NAMESPACE), e));
                bounds.push(buckets);
            }
        }
        let counter = |f: names::Family| {
            let c = IntCounterVec::new(Opts::new(f.name(NAMESPACE), f.help), f.labels).unwrap();
            registry.register(Box::new(c.clone())).unwrap();
            c
        };
        let (requests_total, output_total, input_total) = (
            counter(names::REQUESTS),
            counter(names::OUTPUT_TOKENS_TOTAL),
            counter(names::INPUT_TOKENS_TOTAL),
        );
        let f = names::IN_FLIGHT;
        let in_flight = IntGaugeVec::new(Opts::new(f.name(NAMESPACE), f.help), f.labels).unwrap();
        registry.register(Box::new(in_flight.clone())).unwrap();
        let exemplars = Exemplars::new(
            [&bounds[0], &bounds[1], &bounds[2], &bounds[3]],
            &names::LABELS,
        );
        let mut natives = Natives {
            names: histograms().iter().map(|h| h.0.name(NAMESPACE)).collect(),
            series: Default::default(),
        };
        for r in requests {
            let l = sets[r.set].each_ref().map(String::as_str);
            let [route, model, slo, tenant, operation] = l;
            let mut observe = |i: usize, v: f64| {
                vecs[i].with_label_values(&l).observe(v);
                let native = natives.series.entry((i, sets[r.set].to_vec()));
                native.or_insert_with(|| Native::new(SHAPE)).observe(v);
            };
            observe(0, r.ttft);
            observe(1, r.tpot);
            r.gaps.iter().for_each(|&gap| observe(2, gap));
            observe(3, r.e2el);
            observe(4, r.output as f64);
            // The ITL exemplar is the request's largest gap, set at its end.
            let id = ExemplarId::Trace(r.trace);
            let series = exemplars.series(&l);
            series.set(Exemplified::Ttft, r.ttft, &id);
            series.set(Exemplified::Tpot, r.tpot, &id);
            series.set(Exemplified::Itl, r.max_gap(), &id);
            series.set(Exemplified::E2el, r.e2el, &id);
            requests_total
                .with_label_values(&[route, model, slo, tenant, operation, "ok", "2xx"])
                .inc();
            output_total
                .with_label_values(&[route, model, slo, tenant, operation, "usage"])
                .inc_by(r.output);
            input_total.with_label_values(&l).inc_by(r.input);
            in_flight.with_label_values(&[route, model, slo]).set(1);
        }
        Self {
            registry,
            histograms: vecs,
            exemplars,
            exemplified,
            natives,
        }
    }

    fn protobuf(&self) -> Vec<u8> {
        observe::metrics::protobuf::encode(
            &self.registry.gather(),
            &self.exemplified,
            &self.exemplars,
            &self.natives,
        )
    }

    fn text(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 * 1024);
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .unwrap();
        out
    }

    fn openmetrics(&self) -> String {
        observe::metrics::openmetrics::encode(
            &self.registry.gather(),
            &self.exemplified,
            &self.exemplars,
        )
    }
}

/// A label set of `prometheus-client`, in the catalogue's order.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Series {
    route: String,
    model: String,
    slo: String,
    tenant: String,
    operation: String,
}

impl Series {
    fn new(l: &[String; 5]) -> Self {
        let [route, model, slo, tenant, operation] = l.clone();
        Self {
            route,
            model,
            slo,
            tenant,
            operation,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestSeries {
    #[prometheus(flatten)]
    series: Series,
    outcome: &'static str,
    status_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceSeries {
    #[prometheus(flatten)]
    series: Series,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InFlightSeries {
    route: String,
    model: String,
    slo: String,
}

type Latency = Family<Series, HistogramWithExemplars<Exemplar>>;

fn with_exemplars<const H: usize>() -> HistogramWithExemplars<Exemplar> {
    HistogramWithExemplars::new(buckets::<H>().into_iter())
}

fn classic<const H: usize>() -> Histogram {
    Histogram::new(buckets::<H>())
}

/// Classic and native buckets: the Prometheus default factor (1.1, schema
/// 3) and bucket limit (160).
fn classic_and_native<const H: usize>() -> Histogram {
    Histogram::new_classic_and_native(
        buckets::<H>(),
        NativeHistogramConfig::default().max_buckets(160),
    )
}

/// `prometheus-client`'s registry of the same series; `native`: the
/// histograms have native buckets too, and no exemplars.
fn client_registry(
    sets: &[[String; 5]],
    requests: &[Request],
    native: bool,
) -> prometheus_client::registry::Registry {
    let mut registry = prometheus_client::registry::Registry::default();
    let name = |f: names::Family| f.name(NAMESPACE);
    let counter_name = |f: names::Family| {
        let n = f.name(NAMESPACE);
        n.strip_suffix("_total").unwrap_or(&n).to_owned()
    };
    let [ttft, tpot, itl, e2el, output] = histograms().map(|(f, _, _)| f);
    let latency: [Latency; 4] = [
        Family::new_with_constructor(with_exemplars::<0>),
        Family::new_with_constructor(with_exemplars::<1>),
        Family::new_with_constructor(with_exemplars::<2>),
        Family::new_with_constructor(with_exemplars::<3>),
    ];
    let natives: [Family<Series, Histogram>; 4] = [
        Family::new_with_constructor(classic_and_native::<0>),
        Family::new_with_constructor(classic_and_native::<1>),
        Family::new_with_constructor(classic_and_native::<2>),
        Family::new_with_constructor(classic_and_native::<3>),
    ];
    let output_tokens: Family<Series, Histogram> = if native {
        Family::new_with_constructor(classic_and_native::<4>)
    } else {
        Family::new_with_constructor(classic::<4>)
    };
    let requests_total = Family::<RequestSeries, Counter>::default();
    let output_total = Family::<SourceSeries, Counter>::default();
    let input_total = Family::<Series, Counter>::default();
    let in_flight = Family::<InFlightSeries, Gauge>::default();
    for r in requests {
        let series = Series::new(&sets[r.set]);
        let exemplar = Some([("trace_id", TraceId::new(r.trace))]);
        let at = Some(SystemTime::now());
        let values = [r.ttft, r.tpot, 0.0, r.e2el];
        // The gap that carries the ITL exemplar: the largest, as in the
        // project's recorder.
        let max_gap = r.gaps.iter().position(|&g| g == r.max_gap());
        for (h, (family, native_family)) in latency.iter().zip(&natives).enumerate() {
            if native {
                let histogram = native_family.get_or_create(&series);
                if h == 2 {
                    r.gaps.iter().for_each(|&gap| histogram.observe(gap));
                } else {
                    histogram.observe(values[h]);
                }
            } else {
                let histogram = family.get_or_create(&series);
                if h == 2 {
                    for (i, &gap) in r.gaps.iter().enumerate() {
                        let exemplar = exemplar.filter(|_| Some(i) == max_gap);
                        histogram.observe(gap, exemplar, at);
                    }
                } else {
                    histogram.observe(values[h], exemplar, at);
                }
            }
        }
        output_tokens
            .get_or_create(&series)
            .observe(r.output as f64);
        requests_total
            .get_or_create(&RequestSeries {
                series: series.clone(),
                outcome: "ok",
                status_class: "2xx",
            })
            .inc();
        output_total
            .get_or_create(&SourceSeries {
                series: series.clone(),
                source: "usage",
            })
            .inc_by(r.output);
        input_total.get_or_create(&series).inc_by(r.input);
        in_flight
            .get_or_create(&InFlightSeries {
                route: series.route,
                model: series.model,
                slo: series.slo,
            })
            .set(1);
    }
    let families = [ttft, tpot, itl, e2el];
    if native {
        for (f, family) in families.into_iter().zip(natives) {
            registry.register(name(f), f.help, family);
        }
    } else {
        for (f, family) in families.into_iter().zip(latency) {
            registry.register(name(f), f.help, family);
        }
    }
    registry.register(name(output), output.help, output_tokens);
    let counters = [
        names::REQUESTS,
        names::OUTPUT_TOKENS_TOTAL,
        names::INPUT_TOKENS_TOTAL,
    ];
    registry.register(counter_name(counters[0]), counters[0].help, requests_total);
    registry.register(counter_name(counters[1]), counters[1].help, output_total);
    registry.register(counter_name(counters[2]), counters[2].help, input_total);
    let f = names::IN_FLIGHT;
    registry.register(name(f), f.help, in_flight);
    registry
}

fn client_text(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, registry).unwrap();
    out
}

fn client_openmetrics(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}

fn client_protobuf(registry: &prometheus_client::registry::Registry) -> Vec<u8> {
    prometheus_client::encoding::prometheus_protobuf::encode_to_vec(registry).unwrap()
}

/// The series of a text exposition: each sample's name and label set (its
/// labels sorted, `le` as a number), without values or exemplars.
fn series_of(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let sample = line.split(' ').next().unwrap_or("");
            let Some((name, labels)) = sample.split_once('{') else {
                return sample.to_owned();
            };
            let mut pairs: Vec<String> = labels
                .trim_end_matches('}')
                .split(',')
                .map(|pair| match pair.strip_prefix("le=") {
                    Some(le) => {
                        let bound = le.trim_matches('"');
                        format!("le={}", bound.parse::<f64>().unwrap_or(f64::NAN))
                    }
                    None => pair.to_owned(),
                })
                .collect();
            pairs.sort();
            format!("{name}{{{}}}", pairs.join(","))
        })
        .collect()
}

/// The samples of the protobuf exposition: a histogram's buckets, `_sum`
/// and `_count`, a counter's or a gauge's value.
fn protobuf_samples(registry: &prometheus_client::registry::Registry) -> usize {
    prometheus_client::encoding::prometheus_protobuf::encode(registry)
        .unwrap()
        .iter()
        .flat_map(|family| &family.metric)
        .map(|m| m.histogram.as_ref().map_or(1, |h| h.bucket.len() + 2))
        .sum()
}

/// What `f` allocates: allocations (reallocations included) and bytes.
fn allocations<T>(f: impl FnOnce() -> T) -> (usize, usize, T) {
    let region = Region::new(ALLOCATOR);
    let out = f();
    let change = region.change();
    (
        change.allocations + change.reallocations,
        change.bytes_allocated + change.bytes_reallocated.max(0) as usize,
        out,
    )
}

struct Setup {
    sets: Vec<[String; 5]>,
    prom: Prom,
    client: prometheus_client::registry::Registry,
    native: prometheus_client::registry::Registry,
}

fn setup() -> Setup {
    let sets = label_sets();
    let requests = requests(sets.len());
    Setup {
        prom: Prom::new(&sets, &requests),
        client: client_registry(&sets, &requests, false),
        native: client_registry(&sets, &requests, true),
        sets,
    }
}

/// Checks that every exposition holds the same series, and prints what
/// each encode writes and allocates.
fn report(s: &Setup) {
    let prom_text = String::from_utf8(s.prom.text()).unwrap();
    let prom_openmetrics = s.prom.openmetrics();
    let expected = series_of(&prom_text);
    assert!(expected.len() >= SERIES, "{} series", expected.len());
    for (name, text) in [
        ("prometheus OpenMetrics", &prom_openmetrics),
        ("prometheus-client 0.0.4", &client_text(&s.client)),
        (
            "prometheus-client OpenMetrics",
            &client_openmetrics(&s.client),
        ),
        ("native 0.0.4", &client_text(&s.native)),
    ] {
        let got = series_of(text);
        let missing: Vec<_> = expected.symmetric_difference(&got).take(3).collect();
        assert!(missing.is_empty(), "{name} differs: {missing:?}");
    }
    assert_eq!(protobuf_samples(&s.client), expected.len());
    let exemplars = prom_openmetrics.matches(" # {trace_id=").count();
    let client_exemplars = client_openmetrics(&s.client)
        .matches(" # {trace_id=")
        .count();
    assert_eq!(exemplars, client_exemplars);
    println!(
        "{} series in {} label sets, {exemplars} exemplars",
        expected.len(),
        s.sets.len()
    );
    let encoders: [(&str, &dyn Fn() -> usize); 8] = [
        ("prometheus gather", &|| s.prom.registry.gather().len()),
        ("prometheus text 0.0.4", &|| s.prom.text().len()),
        ("prometheus + own OpenMetrics", &|| {
            s.prom.openmetrics().len()
        }),
        ("prometheus + own protobuf, native", &|| {
            s.prom.protobuf().len()
        }),
        ("prometheus-client text 0.0.4", &|| {
            client_text(&s.client).len()
        }),
        ("prometheus-client OpenMetrics", &|| {
            client_openmetrics(&s.client).len()
        }),
        ("prometheus-client protobuf", &|| {
            client_protobuf(&s.client).len()
        }),
        ("prometheus-client protobuf, native", &|| {
            client_protobuf(&s.native).len()
        }),
    ];
    for (name, encode) in encoders {
        let (count, bytes, written) = allocations(encode);
        println!("{name}: {count} allocations, {bytes} bytes allocated, {written} written");
    }
}

fn encode(c: &mut Criterion) {
    let s = setup();
    report(&s);
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(SERIES as u64));
    group.bench_function("prometheus/gather", |b| b.iter(|| s.prom.registry.gather()));
    group.bench_function("prometheus/text", |b| b.iter(|| s.prom.text()));
    group.bench_function("prometheus/openmetrics_own", |b| {
        b.iter(|| s.prom.openmetrics())
    });
    group.bench_function("prometheus/protobuf_own_native", |b| {
        b.iter(|| s.prom.protobuf())
    });
    group.bench_function("prometheus_client/text", |b| {
        b.iter(|| client_text(&s.client))
    });
    group.bench_function("prometheus_client/openmetrics", |b| {
        b.iter(|| client_openmetrics(&s.client))
    });
    group.bench_function("prometheus_client/protobuf", |b| {
        b.iter(|| client_protobuf(&s.client))
    });
    group.bench_function("prometheus_client_native/protobuf", |b| {
        b.iter(|| client_protobuf(&s.native))
    });
    group.finish();
}

/// Runs `observe` `iters` times on each of `threads` threads at once; the
/// time per observation of one thread.
fn timed(threads: usize, iters: u64, observe: &(dyn Fn(f64) + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                for i in 0..iters {
                    observe(black_box(VALUES[(i as usize + t) % VALUES.len()]));
                }
            });
        }
    });
    start.elapsed()
}

fn observe(c: &mut Criterion) {
    let itl = Buckets::default().inter_token_latency;
    let prom_vec = HistogramVec::new(
        HistogramOpts::new("itl", "itl").buckets(itl.clone()),
        &names::LABELS,
    )
    .unwrap();
    let prom = prom_vec.with_label_values(&["chat", "m", "interactive", "", "chat"]);
    let prom_counter = prometheus::IntCounter::new("c", "c").unwrap();
    let client = Histogram::new(itl.clone());
    let exemplars = HistogramWithExemplars::<Exemplar>::new(itl.clone().into_iter());
    let native = Histogram::new_classic_and_native(
        itl.clone(),
        NativeHistogramConfig::default().max_buckets(160),
    );
    let client_counter: Counter = Counter::default();
    let trace = TraceId::new([0x0a; 16]);
    let own_native = Native::new(SHAPE);
    let prom_and_native = (
        prom_vec.with_label_values(&["chat", "m", "interactive", "", "completions"]),
        Native::new(SHAPE),
    );
    let cases: [(&str, &(dyn Fn(f64) + Sync)); 8] = [
        ("prometheus", &|v| prom.observe(v)),
        ("own_native", &|v| own_native.observe(v)),
        ("prometheus_and_own_native", &|v| {
            prom_and_native.1.observe(v);
            prom_and_native.0.observe(v);
        }),
        ("prometheus_counter", &|_| prom_counter.inc()),
        ("prometheus_client", &|v| client.observe(v)),
        ("prometheus_client_exemplar", &|v| {
            exemplars.observe(v, Some([("trace_id", trace)]), None)
        }),
        ("prometheus_client_native", &|v| native.observe(v)),
        ("prometheus_client_counter", &|_| {
            client_counter.inc();
        }),
    ];
    for (name, case) in &cases {
        let (count, _, ()) = allocations(|| (0..1000).for_each(|i| case(VALUES[i % 8])));
        println!("observe {name}: {count} allocations in 1,000");
    }
    for (threads, group) in [(1, "observe"), (2, "observe_2_threads")] {
        let mut group = c.benchmark_group(group);
        group.throughput(Throughput::Elements(1));
        for (name, case) in &cases {
            group.bench_function(*name, |b| {
                b.iter_custom(|iters| timed(threads, iters, *case))
            });
        }
        group.finish();
    }
}

fn lookup(c: &mut Criterion) {
    let sets = label_sets();
    let requests = requests(sets.len());
    let prom = Prom::new(&sets, &requests);
    let family: Family<Series, Histogram> = Family::new_with_constructor(classic::<0>);
    for l in &sets {
        family.get_or_create(&Series::new(l)).observe(0.1);
    }
    let wanted = &sets[sets.len() / 2];
    let values = wanted.each_ref().map(String::as_str);
    let key = Series::new(wanted);
    let cases: [(&str, &dyn Fn()); 3] = [
        ("prometheus", &|| {
            black_box(prom.histograms[0].with_label_values(black_box(&values)));
        }),
        ("prometheus_client", &|| {
            black_box(family.get_or_create_owned(black_box(&key)));
        }),
        ("prometheus_client_key_from_values", &|| {
            let [route, model, slo, tenant, operation] = black_box(values).map(str::to_owned);
            let key = Series {
                route,
                model,
                slo,
                tenant,
                operation,
            };
            black_box(family.get_or_create_owned(&key));
        }),
    ];
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(1));
    for (name, case) in cases {
        let (count, _, _) = allocations(case);
        println!("lookup {name}: {count} allocations");
        group.bench_function(name, |b| b.iter(case));
    }
    group.finish();
}

criterion_group!(benches, encode, observe, lookup);
criterion_main!(benches);
