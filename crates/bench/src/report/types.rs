//! The report's types, from one latency's percentiles to the whole run, and
//! how each figure is computed from a histogram or a leg's runs.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::legs::{LegKind, LegRun, Pairing, SimTotals};

/// Percentiles of one latency, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Quantiles {
    pub(super) fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Self {
            count: h.len(),
            p50: us(h.value_at_quantile(0.50)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        })
    }
}

/// The shape of the load the simulator offered in the measured window:
/// stamped events it sent per millisecond. `burstiness` (the p99
/// millisecond over the mean one: about 1.3 for chunks sent on time at 50
/// per ms) says whether a round's load came smooth or in bursts, so that
/// its tail can be read beside it; legs of one run should show the same.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Offered {
    pub mean_per_ms: f64,
    pub p99_per_ms: u32,
    pub max_per_ms: u32,
    pub burstiness: f64,
}

impl Offered {
    pub(super) fn of(sent_per_ms: &[u32]) -> Option<Self> {
        let total: u64 = sent_per_ms.iter().map(|&n| u64::from(n)).sum();
        if total == 0 {
            return None;
        }
        let mut sorted = sent_per_ms.to_vec();
        sorted.sort_unstable();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let mean = total as f64 / sorted.len() as f64;
        Some(Self {
            mean_per_ms: mean,
            p99_per_ms: at(0.99),
            max_per_ms: at(1.0),
            burstiness: f64::from(at(0.99)) / mean,
        })
    }
}

/// A leg's figure against the direct leg's.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Versus {
    pub p50_delta_us: f64,
    pub p99_delta_us: f64,
    pub p999_delta_us: f64,
    pub p50_ratio: f64,
    pub p99_ratio: f64,
    pub p999_ratio: f64,
}

impl Versus {
    pub(super) fn of(leg: &Option<Quantiles>, direct: &Option<Quantiles>) -> Option<Self> {
        let (l, d) = (leg.as_ref()?, direct.as_ref()?);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        Some(Self {
            p50_delta_us: l.p50 - d.p50,
            p99_delta_us: l.p99 - d.p99,
            p999_delta_us: l.p999 - d.p999,
            p50_ratio: ratio(l.p50, d.p50),
            p99_ratio: ratio(l.p99, d.p99),
            p999_ratio: ratio(l.p999, d.p999),
        })
    }
}

/// Did every byte arrive, in the frames it was sent in?
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FidelityReport {
    /// Client's fingerprint sum, byte count and response count equal the
    /// simulator's.
    pub byte_identical: bool,
    pub sim: SimTotals,
    pub client_responses: u64,
    pub client_bytes: u64,
    pub client_hash_sum: u64,
    /// SSE events the client framed (one per simulator frame).
    pub client_events: u64,
    /// Frames the client's HTTP stack delivered.
    pub client_frames: u64,
    pub merged_frames: u64,
    pub split_frames: u64,
}

/// CPU spent, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuReport {
    pub proxy_seconds: f64,
    /// Proxy CPU per chunk forwarded, in microseconds (= seconds per
    /// million chunks).
    pub proxy_us_per_chunk: f64,
    /// Proxy CPU seconds per thousand requests.
    pub proxy_seconds_per_1k_requests: f64,
    /// Of the proxy's CPU per chunk, what `/proc/<pid>/stat` counts in user
    /// space and in the kernel (clock ticks: coarser than the total).
    pub proxy_user_us_per_chunk: f64,
    pub proxy_kernel_us_per_chunk: f64,
    pub sim_seconds: f64,
    pub loadgen_seconds: f64,
    /// Share of the rig's core (simulator + load generator) that was busy.
    pub rig_core_busy: f64,
    pub wall_seconds: f64,
}

/// Resident memory of the proxy, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct MemoryReport {
    pub idle_bytes: u64,
    pub steady_bytes: u64,
    pub peak_bytes: u64,
    /// (steady - idle) / concurrent streams.
    pub steady_per_stream_bytes: f64,
    /// (peak - idle) / concurrent streams.
    pub peak_per_stream_bytes: f64,
    /// The scenario's `settle` after the leg's last stream ended.
    pub after_bytes: u64,
    /// `after / idle`: 1.0 when everything the streams took was given back.
    pub after_vs_idle: Option<f64>,
    /// The anonymous part of `idle_bytes` and `after_bytes`: memory the
    /// process allocated, without its binary's pages.
    pub idle_anon_bytes: u64,
    pub after_anon_bytes: u64,
    /// Seconds until RSS was first back within 10 % of idle (the slowest
    /// round); `None` when some round did not get there within `settle`.
    pub returned_after_s: Option<f64>,
}

/// The proxy's own TTFT against the client's, request by request: each
/// measured stream's client TTFT (first token received minus request handed
/// to the client's HTTP stack) and the proxy's (`ttft_ms` of its access-log
/// line, `t_first - t0`), matched by `x-request-id`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AccuracyReport {
    /// Streams the client measured, and those an access line matched.
    pub client_requests: u64,
    pub paired_requests: u64,
    pub client_mean_us: f64,
    pub proxy_mean_us: f64,
    /// Client TTFT minus proxy TTFT, averaged over the paired requests.
    pub mean_diff_us: f64,
    /// `|client TTFT - proxy TTFT|` of each paired request (none when no
    /// request was paired, as with a baseline binary that logs no
    /// `request_id`).
    pub abs_diff_us: Option<Quantiles>,
    /// Paired requests whose proxy TTFT was the longer one (the proxy's
    /// clock starts after the client's and stops before it: this should
    /// be none, up to the access log's 1 µs rounding).
    pub proxy_longer: u64,
}

impl AccuracyReport {
    /// Every measured stream was paired, and `|client - proxy|` is within
    /// `limit_us` at p99.
    pub(super) fn within(&self, limit_us: f64) -> bool {
        self.paired_requests == self.client_requests
            && self.abs_diff_us.is_some_and(|q| q.p99 <= limit_us)
    }

    pub(super) fn of(runs: &[&LegRun]) -> Option<Self> {
        let pairings: Vec<&Pairing> = runs.iter().filter_map(|r| r.accuracy.as_ref()).collect();
        if pairings.is_empty() {
            return None;
        }
        let mut abs = Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).ok()?;
        let (mut diff_sum, mut proxy_sum, mut paired, mut unpaired, mut longer) =
            (0i128, 0u128, 0u64, 0u64, 0u64);
        for p in &pairings {
            for &(client, proxy) in &p.ttft_ns {
                let d = client as i64 - proxy as i64;
                abs.saturating_record(d.unsigned_abs().max(1));
                diff_sum += i128::from(d);
                proxy_sum += u128::from(proxy);
                paired += 1;
                if d < -1_000 {
                    longer += 1;
                }
            }
            unpaired += p.unpaired;
        }
        if paired + unpaired == 0 {
            return None;
        }
        let n = paired.max(1) as f64;
        let proxy_mean_us = proxy_sum as f64 / n / 1000.0;
        let mean_diff_us = diff_sum as f64 / n / 1000.0;
        Some(Self {
            client_requests: paired + unpaired,
            paired_requests: paired,
            client_mean_us: proxy_mean_us + mean_diff_us,
            proxy_mean_us,
            mean_diff_us,
            abs_diff_us: Quantiles::of(&abs),
            proxy_longer: longer,
        })
    }
}

/// One leg of one scenario, rounds merged.
#[derive(Debug, Clone, Serialize)]
pub struct LegReport {
    pub leg: LegKind,
    pub rounds: usize,
    /// How many proxy processes its rounds ran on (one each; 0 for
    /// `direct`).
    pub processes: usize,
    pub sent: u64,
    pub errors: u64,
    pub measured_requests: u64,
    pub measured_chunks: u64,
    pub requests_per_second: f64,
    pub chunks_per_second: f64,
    pub ttft_us: Option<Quantiles>,
    pub ttft_vs_direct: Option<Versus>,
    pub chunk_latency_us: Option<Quantiles>,
    pub chunk_latency_vs_direct: Option<Versus>,
    pub gap_distortion_us: Option<Quantiles>,
    pub e2e_us: Option<Quantiles>,
    pub e2e_vs_direct: Option<Versus>,
    pub fidelity: FidelityReport,
    pub cpu: CpuReport,
    pub cpu_vs_nginx: Option<f64>,
    pub memory: MemoryReport,
    pub metering_accuracy: Option<AccuracyReport>,
    /// The load the simulator offered, rounds merged.
    pub offered: Option<Offered>,
    /// Connections the load generator opened over the leg's rounds.
    pub connections: u64,
    /// The leg terminated TLS (`--tls`): its handshakes.
    pub tls: Option<TlsReport>,
    /// How much the rounds of this leg differ from each other.
    pub spread: Spread,
    /// Each round's tail beside the load it was offered, in the order run.
    pub rounds_detail: Vec<RoundDetail>,
}

/// A leg that terminated TLS: what its handshakes negotiated and how many
/// requests each paid for (connections are kept alive, so the handshake's
/// cost is spread over them as in production).
#[derive(Debug, Clone, Serialize)]
pub struct TlsReport {
    pub handshakes: u64,
    /// `<version> <suite> <key exchange group>` of the first handshake.
    pub negotiated: Option<String>,
    /// Responses completed per handshake.
    pub requests_per_handshake: f64,
}

/// One round of a leg: its latency p99 (chunk, or end-to-end when not
/// streamed) and the burstiness of its offered load.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RoundDetail {
    pub latency_p99_us: Option<f64>,
    pub burstiness: Option<f64>,
}

/// The lowest and highest value of one figure over a leg's rounds: on a
/// shared machine the width of this range says how far a merged figure can
/// be trusted.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

impl Range {
    fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        values.into_iter().fold(None, |r, v| {
            Some(match r {
                None => Range { min: v, max: v },
                Some(Range { min, max }) => Range {
                    min: min.min(v),
                    max: max.max(v),
                },
            })
        })
    }
}

/// A round's latency: chunk latency when streamed, else end-to-end.
pub(super) fn round_latency(r: &LegRun) -> Option<Quantiles> {
    if r.load.chunk_latency.is_empty() {
        Quantiles::of(&r.load.e2e)
    } else {
        Quantiles::of(&r.load.chunk_latency)
    }
}

/// Per-round figures of one leg, as ranges over its rounds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Spread {
    /// Chunk latency (streamed) or end-to-end latency (non-streamed), µs.
    pub latency_p50_us: Option<Range>,
    pub latency_p99_us: Option<Range>,
    pub ttft_p99_us: Option<Range>,
    /// Proxy CPU per chunk, µs (absent for `direct`).
    pub cpu_us_per_chunk: Option<Range>,
}

impl Spread {
    pub(super) fn of(kind: LegKind, runs: &[&LegRun]) -> Self {
        Spread {
            latency_p50_us: Range::of(runs.iter().filter_map(|r| round_latency(r).map(|q| q.p50))),
            latency_p99_us: Range::of(runs.iter().filter_map(|r| round_latency(r).map(|q| q.p99))),
            ttft_p99_us: Range::of(
                runs.iter()
                    .filter_map(|r| Quantiles::of(&r.load.ttft).map(|q| q.p99)),
            ),
            cpu_us_per_chunk: Range::of(runs.iter().filter_map(|r| {
                let cpu = r.proxy_cpu_seconds.filter(|_| kind != LegKind::Direct)?;
                let chunks = r.load.fidelity.events;
                (chunks > 0).then(|| cpu / chunks as f64 * 1e6)
            })),
        }
    }
}

/// One scenario's settings and its legs.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub label: String,
    pub mode: String,
    pub streams: Option<usize>,
    pub rate: Option<f64>,
    pub poisson: bool,
    pub streamed: bool,
    pub ttft_ms: u64,
    pub itl_ms: u64,
    pub tokens: u32,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// How long after each leg its proxy's RSS was watched (`after`).
    pub settle_s: f64,
    pub rounds: usize,
    pub legs: Vec<LegReport>,
}

/// A target of the issue, as checked on one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub scenario: String,
    pub leg: LegKind,
    pub target: String,
    pub measured: String,
    /// `met`, `missed` or `rig-limited`.
    pub verdict: &'static str,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: String,
    pub command: String,
    pub date: String,
    pub machine: Machine,
    pub notes: Vec<String>,
    pub scenarios: Vec<ScenarioReport>,
    /// Highest swept stream count whose added chunk p99 stayed under 1 ms
    /// with no errors, per leg (sweeps only).
    pub max_streams_under_1ms: Vec<(LegKind, Option<usize>)>,
    pub targets: Vec<TargetCheck>,
}

/// Where it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
    pub kernel: String,
    pub load_average_at_start: String,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .trim()
                .to_owned()
        };
        Self {
            // Not `available_parallelism`: this process may be pinned to one.
            nproc: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            cpu,
            kernel: read("/proc/sys/kernel/osrelease"),
            load_average_at_start: read("/proc/loadavg"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn offered_load_is_the_p99_millisecond_over_the_mean() {
        assert!(Offered::of(&[]).is_none());
        assert!(Offered::of(&[0, 0, 0]).is_none());
        // A smooth load: every millisecond the same.
        let smooth = Offered::of(&[5; 1000]).unwrap();
        assert_eq!((smooth.p99_per_ms, smooth.max_per_ms), (5, 5));
        assert!((smooth.burstiness - 1.0).abs() < 1e-9);
        // The same chunks in bursts: 50 every tenth millisecond.
        let bursts: Vec<u32> = (0..1000)
            .map(|i| if i % 10 == 0 { 50 } else { 0 })
            .collect();
        let b = Offered::of(&bursts).unwrap();
        assert!((b.mean_per_ms - 5.0).abs() < 1e-9);
        assert_eq!((b.p99_per_ms, b.max_per_ms), (50, 50));
        assert!((b.burstiness - 10.0).abs() < 1e-9);
    }
}
