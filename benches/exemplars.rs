//! What one histogram observation costs on the forwarding path, in the
//! `prometheus` crate the exporter uses and in `prometheus-client` (the
//! official Rust client, which has OpenMetrics exemplars): the question
//! being whether exemplars can come from the official client without
//! making each token event dearer.
//!
//! Each case observes ITL-like values on a handle resolved beforehand, as
//! the proxy does (`Handles` in `src/metrics`), with the default ITL
//! buckets:
//!
//! - `prometheus`: `Histogram::observe` (atomics, no lock);
//! - `prometheus_client`: `Histogram::observe` (a mutex per series);
//! - `prometheus_client_exemplar`: `HistogramWithExemplars::observe` with a
//!   trace id as the exemplar (a read-write lock and the mutex, and the
//!   exemplar stored per bucket);
//!
//! once on one thread (`observe/*`, time per observation) and with two
//! threads observing the same series at once (`observe_2_threads/*`, time
//! per observation of each thread), as two runtime workers do when two
//! streams of one route, model and class send tokens together.
//!
//! `cargo bench --bench exemplars`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use tokenmeter::config::Buckets;

/// Gaps between tokens, spread over the buckets.
const VALUES: [f64; 8] = [0.004, 0.012, 0.018, 0.021, 0.03, 0.05, 0.2, 0.0009];

/// A trace id as an exemplar label value, without allocating.
#[derive(Clone, Copy, Debug)]
struct TraceId([u8; 32]);

impl EncodeLabelValue for TraceId {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(std::str::from_utf8(&self.0).map_err(|_| std::fmt::Error)?)
    }
}

type Exemplar = [(&'static str, TraceId); 1];

const TRACE: TraceId = TraceId(*b"0af7651916cd43dd8448eb211c80319c");

fn buckets() -> Vec<f64> {
    Buckets::default().inter_token_latency
}

fn observers() -> (
    prometheus::Histogram,
    prometheus_client::metrics::histogram::Histogram,
    HistogramWithExemplars<Exemplar>,
) {
    let vec = prometheus::HistogramVec::new(
        prometheus::HistogramOpts::new("itl", "itl").buckets(buckets()),
        &["route", "model", "slo", "tenant"],
    )
    .unwrap();
    (
        vec.with_label_values(&["chat", "m", "interactive", ""]),
        prometheus_client::metrics::histogram::Histogram::new(buckets()),
        HistogramWithExemplars::new(buckets().into_iter()),
    )
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
    let (prom, client, exemplars) = observers();
    for (threads, name) in [(1, "observe"), (2, "observe_2_threads")] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(1));
        group.bench_function("prometheus", |b| {
            b.iter_custom(|iters| timed(threads, iters, &|v| prom.observe(v)))
        });
        group.bench_function("prometheus_client", |b| {
            b.iter_custom(|iters| timed(threads, iters, &|v| client.observe(v)))
        });
        group.bench_function("prometheus_client_exemplar", |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, &|v| {
                    exemplars.observe(v, Some([("trace_id", TRACE)]), None)
                })
            })
        });
        group.finish();
    }
}

criterion_group!(benches, observe);
criterion_main!(benches);
