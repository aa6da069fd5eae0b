//! The report: per leg, the figures of the issue, each also as a delta and a
//! ratio to the `direct` leg; the checks of the targets; JSON for tools and
//! a plain-text table for people.
//!
//! Deltas are differences of percentiles (leg p99 minus direct p99), not
//! percentiles of per-chunk differences: the same chunk is not sent through
//! two legs. A target is "rig-limited" when the direct leg alone already
//! misses it, or when the core shared by the simulator and the load
//! generator was nearly saturated: then the rig, not the proxy, set the
//! figure. A direct leg with errors or lost bytes makes the whole scenario's
//! verdicts "rig-limited": its deltas compare with a broken floor.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::legs::{LegKind, LegRun, Pairing, SimTotals};
use super::load::{Arrivals, LoadResult, Scenario};

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
    fn of(h: &Histogram<u64>) -> Option<Self> {
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
    fn of(sent_per_ms: &[u32]) -> Option<Self> {
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
    fn of(leg: &Option<Quantiles>, direct: &Option<Quantiles>) -> Option<Self> {
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
    fn within(&self, limit_us: f64) -> bool {
        self.paired_requests == self.client_requests
            && self.abs_diff_us.is_some_and(|q| q.p99 <= limit_us)
    }

    fn of(runs: &[&LegRun]) -> Option<Self> {
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
    /// How much the rounds of this leg differ from each other.
    pub spread: Spread,
    /// Each round's tail beside the load it was offered, in the order run.
    pub rounds_detail: Vec<RoundDetail>,
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
fn round_latency(r: &LegRun) -> Option<Quantiles> {
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
    fn of(kind: LegKind, runs: &[&LegRun]) -> Self {
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

fn merged(runs: &[&LegRun]) -> (Option<LoadResult>, SimTotals) {
    let mut load: Option<LoadResult> = None;
    let mut sim = SimTotals::default();
    for r in runs {
        match load.as_mut() {
            Some(l) => l.merge(&r.load),
            None => load = Some(r.load.clone()),
        }
        sim.add(&r.sim);
    }
    (load, sim)
}

/// Builds one scenario's report from every run of every leg.
pub fn scenario(label: &str, s: &Scenario, rounds: usize, runs: &[LegRun]) -> ScenarioReport {
    let kinds: Vec<LegKind> = {
        let mut k: Vec<LegKind> = runs.iter().map(|r| r.kind).collect();
        k.dedup();
        let mut seen = Vec::new();
        for x in k {
            if !seen.contains(&x) {
                seen.push(x);
            }
        }
        seen
    };
    let streams = match s.arrivals {
        Arrivals::Closed { concurrency } => Some(concurrency),
        Arrivals::Open { .. } => None,
    };
    let mut legs: Vec<LegReport> = kinds
        .iter()
        .filter_map(|&kind| {
            let mine: Vec<&LegRun> = runs.iter().filter(|r| r.kind == kind).collect();
            leg(kind, &mine, streams)
        })
        .collect();
    let direct = legs.iter().find(|l| l.leg == LegKind::Direct).cloned();
    let nginx_cpu = legs
        .iter()
        .find(|l| l.leg == LegKind::Nginx)
        .map(|l| l.cpu.proxy_us_per_chunk);
    for l in &mut legs {
        if let Some(d) = &direct {
            l.ttft_vs_direct = Versus::of(&l.ttft_us, &d.ttft_us);
            l.chunk_latency_vs_direct = Versus::of(&l.chunk_latency_us, &d.chunk_latency_us);
            l.e2e_vs_direct = Versus::of(&l.e2e_us, &d.e2e_us);
        }
        if let Some(n) = nginx_cpu.filter(|&n| n > 0.0)
            && l.leg != LegKind::Direct
        {
            l.cpu_vs_nginx = Some(l.cpu.proxy_us_per_chunk / n);
        }
    }
    let (mode, rate, poisson) = match s.arrivals {
        Arrivals::Closed { .. } => ("closed".to_owned(), None, false),
        Arrivals::Open { rate, poisson } => (
            if poisson {
                "open-poisson"
            } else {
                "open-constant"
            }
            .to_owned(),
            Some(rate),
            poisson,
        ),
    };
    ScenarioReport {
        label: label.to_owned(),
        mode,
        streams,
        rate,
        poisson,
        streamed: s.streamed,
        ttft_ms: s.ttft_ms,
        itl_ms: s.itl_ms,
        tokens: s.tokens,
        warmup_s: s.warmup.as_secs_f64(),
        duration_s: s.duration.as_secs_f64(),
        settle_s: s.settle.as_secs_f64(),
        rounds,
        legs,
    }
}

fn leg(kind: LegKind, runs: &[&LegRun], streams: Option<usize>) -> Option<LegReport> {
    let (load, sim) = merged(runs);
    let load = load?;
    let sum = |f: &dyn Fn(&LegRun) -> Option<f64>| runs.iter().filter_map(|r| f(r)).sum::<f64>();
    let wall = sum(&|r| Some(r.wall_seconds));
    let proxy_cpu = sum(&|r| r.proxy_cpu_seconds);
    let proxy_user = sum(&|r| r.proxy_user_system_seconds.map(|(u, _)| u));
    let proxy_kernel = sum(&|r| r.proxy_user_system_seconds.map(|(_, s)| s));
    let sim_cpu = sum(&|r| r.sim_cpu_seconds);
    let loadgen_cpu = sum(&|r| r.loadgen_cpu_seconds);
    let f = load.fidelity;
    // CPU covers the whole leg (warm-up included), so it is divided by every
    // chunk and request of the leg, not only the measured ones.
    let all_chunks = f.events.max(1) as f64;
    let all_requests = f.responses.max(1) as f64;
    let byte_identical = f.responses == sim.responses
        && f.bytes == sim.bytes
        && f.hash_sum == sim.hash_sum
        && f.events == sim.frames;
    let avg = |get: &dyn Fn(&LegRun) -> Option<u64>| {
        let v: Vec<u64> = runs.iter().filter_map(|r| get(r)).collect();
        if v.is_empty() {
            0
        } else {
            v.iter().sum::<u64>() / v.len() as u64
        }
    };
    let idle = avg(&|r| r.idle_rss);
    let steady = avg(&|r| r.steady_rss);
    let peak = runs.iter().filter_map(|r| r.peak_rss).max().unwrap_or(0);
    let after = avg(&|r| r.after_rss);
    let per_stream = |v: u64| match streams {
        Some(n) if n > 0 && kind != LegKind::Direct => v.saturating_sub(idle) as f64 / n as f64,
        _ => 0.0,
    };
    let metering_accuracy = AccuracyReport::of(runs);
    let measured_s = load.measured_seconds.max(1e-9);
    let mut pids: Vec<u32> = runs.iter().filter_map(|r| r.proxy_pid).collect();
    pids.sort_unstable();
    pids.dedup();
    Some(LegReport {
        leg: kind,
        rounds: runs.len(),
        processes: pids.len(),
        sent: load.sent,
        errors: load.errors,
        measured_requests: load.measured_requests,
        measured_chunks: load.measured_chunks,
        requests_per_second: load.measured_requests as f64 / measured_s,
        chunks_per_second: load.measured_chunks as f64 / measured_s,
        ttft_us: Quantiles::of(&load.ttft),
        ttft_vs_direct: None,
        chunk_latency_us: Quantiles::of(&load.chunk_latency),
        chunk_latency_vs_direct: None,
        gap_distortion_us: Quantiles::of(&load.gap_distortion),
        e2e_us: Quantiles::of(&load.e2e),
        e2e_vs_direct: None,
        fidelity: FidelityReport {
            byte_identical,
            sim,
            client_responses: f.responses,
            client_bytes: f.bytes,
            client_hash_sum: f.hash_sum,
            client_events: f.events,
            client_frames: f.frames,
            merged_frames: f.merged_frames,
            split_frames: f.split_frames,
        },
        cpu: CpuReport {
            proxy_seconds: proxy_cpu,
            proxy_us_per_chunk: proxy_cpu / all_chunks * 1e6,
            proxy_seconds_per_1k_requests: proxy_cpu / all_requests * 1000.0,
            proxy_user_us_per_chunk: proxy_user / all_chunks * 1e6,
            proxy_kernel_us_per_chunk: proxy_kernel / all_chunks * 1e6,
            sim_seconds: sim_cpu,
            loadgen_seconds: loadgen_cpu,
            rig_core_busy: if wall > 0.0 {
                (sim_cpu + loadgen_cpu) / wall
            } else {
                0.0
            },
            wall_seconds: wall,
        },
        cpu_vs_nginx: None,
        memory: MemoryReport {
            idle_bytes: idle,
            steady_bytes: steady,
            peak_bytes: peak,
            steady_per_stream_bytes: per_stream(steady),
            peak_per_stream_bytes: per_stream(peak),
            after_bytes: after,
            after_vs_idle: (idle > 0 && after > 0).then(|| after as f64 / idle as f64),
            idle_anon_bytes: avg(&|r| r.idle_anon),
            after_anon_bytes: avg(&|r| r.after_anon),
            returned_after_s: runs
                .iter()
                .map(|r| r.returned_after.map(|d| d.as_secs_f64()))
                .collect::<Option<Vec<f64>>>()
                .and_then(|v| v.into_iter().reduce(f64::max)),
        },
        metering_accuracy,
        offered: Offered::of(&load.sent_per_ms),
        spread: Spread::of(kind, runs),
        rounds_detail: runs
            .iter()
            .map(|r| RoundDetail {
                latency_p99_us: round_latency(r).map(|q| q.p99),
                burstiness: Offered::of(&r.load.sent_per_ms).map(|o| o.burstiness),
            })
            .collect(),
    })
}

/// Above this share of its core busy, the rig is taken as the limit.
const RIG_SATURATED: f64 = 0.9;

/// Checks the targets on every scenario they apply to.
pub fn check_targets(scenarios: &[ScenarioReport]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for s in scenarios {
        let direct = s.legs.iter().find(|l| l.leg == LegKind::Direct);
        // A comparison with a direct leg that failed requests or lost
        // bytes says nothing about the proxy: such a direct leg makes every
        // verdict of the scenario "rig-limited", never "met".
        let direct_sound = direct.is_none_or(|d| d.errors == 0 && d.fidelity.byte_identical);
        let rig_busy = s
            .legs
            .iter()
            .map(|l| l.cpu.rig_core_busy)
            .fold(0.0, f64::max);
        for l in s.legs.iter().filter(|l| l.leg != LegKind::Direct) {
            let mut check = |target: &str, measured: String, ok: bool, direct_ok: bool| {
                let verdict = if !direct_sound {
                    "rig-limited"
                } else if ok {
                    "met"
                } else if !direct_ok || rig_busy > RIG_SATURATED {
                    "rig-limited"
                } else {
                    "missed"
                };
                out.push(TargetCheck {
                    scenario: s.label.clone(),
                    leg: l.leg,
                    target: target.to_owned(),
                    measured,
                    verdict,
                });
            };
            let f = &l.fidelity;
            check(
                "fidelity: byte-identical, no merged/split frames",
                format!(
                    "identical={} merged={} split={}",
                    f.byte_identical, f.merged_frames, f.split_frames
                ),
                f.byte_identical && f.merged_frames == 0 && f.split_frames == 0,
                direct
                    .is_none_or(|d| d.fidelity.merged_frames == 0 && d.fidelity.split_frames == 0),
            );
            let direct_errors = direct.is_some_and(|d| d.errors > 0);
            let ttft = l.ttft_vs_direct;
            let chunk = l.chunk_latency_vs_direct;
            if s.streamed && s.streams == Some(1) {
                if let Some(t) = ttft {
                    check(
                        "added TTFT p99 <= 150 us at concurrency 1",
                        format!("{:+.1} us", t.p99_delta_us),
                        t.p99_delta_us <= 150.0,
                        true,
                    );
                }
                if let Some(c) = chunk {
                    check(
                        "added chunk latency p50 <= 25 us, p99 <= 100 us at concurrency 1",
                        format!(
                            "p50 {:+.1} us, p99 {:+.1} us",
                            c.p50_delta_us, c.p99_delta_us
                        ),
                        c.p50_delta_us <= 25.0 && c.p99_delta_us <= 100.0,
                        true,
                    );
                }
                if let Some(a) = l.metering_accuracy {
                    check(
                        "proxy TTFT within 200 us of the client's at p99",
                        accuracy_measured(&a, direct),
                        a.within(200.0),
                        one_hop_fits(direct, 200.0),
                    );
                }
            }
            if s.streamed
                && s.streams.is_some_and(|n| n > 1)
                && let Some(a) = l.metering_accuracy
            {
                check(
                    &format!(
                        "proxy TTFT within 1 ms of the client's at p99, {} streams",
                        s.streams.unwrap_or(0)
                    ),
                    accuracy_measured(&a, direct),
                    a.within(1000.0),
                    !direct_errors && one_hop_fits(direct, 1000.0),
                );
            }
            if s.streamed && s.streams.is_some_and(|n| n >= 1000) {
                if let Some(t) = ttft {
                    check(
                        &format!(
                            "added TTFT p99 <= 1 ms at {} streams",
                            s.streams.unwrap_or(0)
                        ),
                        format!("{:+.1} us", t.p99_delta_us),
                        t.p99_delta_us <= 1000.0 && l.errors == 0,
                        !direct_errors,
                    );
                }
                if let Some(c) = chunk {
                    check(
                        &format!(
                            "{} streams at {:.0} chunks/s: added chunk p99 <= 1 ms, no errors",
                            s.streams.unwrap_or(0),
                            1000.0 / s.itl_ms.max(1) as f64
                        ),
                        format!(
                            "{:+.1} us, {} errors{}",
                            c.p99_delta_us,
                            l.errors,
                            burst_work(l)
                        ),
                        c.p99_delta_us <= 1000.0 && l.errors == 0,
                        !direct_errors,
                    );
                }
            }
            // The target names 10,000 streams; a proxy needs two sockets per
            // stream, so an open-file limit of 20,000 stops just short of it.
            if s.streamed && s.streams.is_some_and(|n| n >= 5_000) {
                check(
                    &format!(
                        "<= 32 KiB RSS per stream at {} streams",
                        s.streams.unwrap_or(0)
                    ),
                    format!(
                        "steady {:.1} KiB, peak {:.1} KiB",
                        l.memory.steady_per_stream_bytes / 1024.0,
                        l.memory.peak_per_stream_bytes / 1024.0
                    ),
                    l.memory.peak_per_stream_bytes <= 32.0 * 1024.0,
                    true,
                );
                if let Some(ratio) = l.memory.after_vs_idle {
                    check(
                        "RSS back within 10 % of idle after the streams",
                        format!(
                            "{:.1} MiB {:.0} s after, idle {:.1} MiB ({ratio:.2}x; anonymous {:.1} MiB after, {:.1} idle); {}",
                            l.memory.after_bytes as f64 / 1048576.0,
                            s.settle_s,
                            l.memory.idle_bytes as f64 / 1048576.0,
                            l.memory.after_anon_bytes as f64 / 1048576.0,
                            l.memory.idle_anon_bytes as f64 / 1048576.0,
                            l.memory.returned_after_s.map_or(
                                "not within 10 % of idle in that time".to_owned(),
                                |t| format!("within 10 % after {t:.2} s")
                            )
                        ),
                        ratio <= 1.10,
                        true,
                    );
                }
            }
            if s.streamed && l.leg != LegKind::Nginx {
                check(
                    "<= 5 us proxy CPU per chunk, all-in",
                    format!("{:.2} us", l.cpu.proxy_us_per_chunk),
                    l.cpu.proxy_us_per_chunk <= 5.0,
                    true,
                );
                if let Some(r) = l.cpu_vs_nginx {
                    check(
                        "<= 1.25x nginx's CPU per chunk",
                        format!("{r:.2}x"),
                        r <= 1.25,
                        true,
                    );
                }
            }
            if !s.streamed {
                let e2e_p99 = l.e2e_us.map_or(f64::INFINITY, |q| q.p99);
                let direct_rps = direct.map_or(f64::INFINITY, |d| d.requests_per_second);
                check(
                    "non-streamed >= 20k req/s per proxy core at p99 <= 5 ms",
                    format!(
                        "{:.0} req/s, p99 {:.0} us, {} errors",
                        l.requests_per_second, e2e_p99, l.errors
                    ),
                    l.requests_per_second >= 20_000.0 && e2e_p99 <= 5000.0 && l.errors == 0,
                    direct_rps >= 20_000.0,
                );
            }
        }
    }
    out
}

/// What the offered load's p99 millisecond asks of this leg's proxy: its
/// chunks times the proxy's CPU per chunk. On one core, the chunk of that
/// millisecond forwarded last waits at least that work less 1 ms, whatever
/// the proxy does with its time: above 2 ms, more than the target allows.
fn burst_work(l: &LegReport) -> String {
    match l.offered {
        Some(o) if l.cpu.proxy_us_per_chunk > 0.0 => format!(
            "; the simulator's p99 ms brought {} chunks, {:.2} ms of this proxy's CPU",
            o.p99_per_ms,
            f64::from(o.p99_per_ms) * l.cpu.proxy_us_per_chunk / 1000.0
        ),
        _ => String::new(),
    }
}

/// The accuracy figures a target check quotes, with the direct leg's chunk
/// latency p99 (see [`one_hop_fits`]).
fn accuracy_measured(a: &AccuracyReport, direct: Option<&LegReport>) -> String {
    let hop = direct
        .and_then(|d| d.chunk_latency_us)
        .map_or_else(String::new, |c| {
            format!("; one hop to the client (direct chunk p99) {:.1} us", c.p99)
        });
    let p99 = a
        .abs_diff_us
        .map_or_else(|| "-".to_owned(), |q| format!("{:.1}", q.p99));
    format!(
        "|client-proxy| p99 {p99} us, mean client-proxy {:.1} us, {}/{} paired{hop}",
        a.mean_diff_us, a.paired_requests, a.client_requests
    )
}

/// Whether the rig lets the proxy's TTFT come within `limit_us` of the
/// client's at p99. The proxy's clock stops when it reads the first token
/// (docs/metrics.md), the client's when that token has crossed one more hop, the
/// proxy's write to the client and the client's wake-up. The direct leg's
/// chunk latency is one such hop (simulator to client): when its p99 is
/// already over the limit, no proxy can meet it on this rig.
fn one_hop_fits(direct: Option<&LegReport>, limit_us: f64) -> bool {
    direct
        .and_then(|d| d.chunk_latency_us)
        .is_none_or(|c| c.p99 <= limit_us)
}

/// Highest stream count of a sweep whose added chunk p99 stayed <= 1 ms
/// with no errors and full fidelity, per leg.
pub fn max_streams_under_1ms(scenarios: &[ScenarioReport]) -> Vec<(LegKind, Option<usize>)> {
    let mut kinds: Vec<LegKind> = Vec::new();
    for s in scenarios {
        for l in &s.legs {
            if l.leg != LegKind::Direct && !kinds.contains(&l.leg) {
                kinds.push(l.leg);
            }
        }
    }
    kinds
        .into_iter()
        .map(|kind| {
            let best = scenarios
                .iter()
                .filter(|s| s.streamed)
                .filter_map(|s| {
                    let l = s.legs.iter().find(|l| l.leg == kind)?;
                    let c = l.chunk_latency_vs_direct?;
                    (c.p99_delta_us <= 1000.0 && l.errors == 0 && l.fidelity.byte_identical)
                        .then_some(s.streams?)
                })
                .max();
            (kind, best)
        })
        .collect()
}

fn q(v: &Option<Quantiles>) -> String {
    v.map_or("-".to_owned(), |q| {
        format!("{:.0}/{:.0}/{:.0}", q.p50, q.p99, q.p999)
    })
}

fn d(v: &Option<Versus>) -> String {
    v.map_or("-".to_owned(), |v| {
        format!(
            "{:+.0}/{:+.0}/{:+.0} ({:.2}x p99)",
            v.p50_delta_us, v.p99_delta_us, v.p999_delta_us, v.p99_ratio
        )
    })
}

/// The plain-text rendering.
pub fn text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} — {}", r.tool, r.date);
    let _ = writeln!(o, "command: {}", r.command);
    let m = &r.machine;
    let _ = writeln!(
        o,
        "machine: {} cpus, {}, kernel {}, load at start {}",
        m.nproc, m.cpu, m.kernel, m.load_average_at_start
    );
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    for s in &r.scenarios {
        let _ = writeln!(o);
        let shape = match (s.streams, s.rate) {
            (Some(n), _) => format!("{n} streams (closed loop)"),
            (None, Some(rate)) => format!("{rate} req/s ({})", s.mode),
            _ => s.mode.clone(),
        };
        let _ = writeln!(
            o,
            "== {}: {shape}, {}, ttft {} ms, itl {} ms, {} tokens; {} rounds of {:.1} s (+{:.1} s warm-up discarded; RSS 'after' {:.1} s after the streams)",
            s.label,
            if s.streamed {
                "streamed"
            } else {
                "non-streamed"
            },
            s.ttft_ms,
            s.itl_ms,
            s.tokens,
            s.rounds,
            s.duration_s,
            s.warmup_s,
            s.settle_s
        );
        let _ = writeln!(
            o,
            "{:<11} {:>9} {:>6} {:>9} {:>9} | {:<22} {:<30} | {:<22} {:<30} | {:<16}",
            "leg",
            "requests",
            "errors",
            "req/s",
            "chunks/s",
            "TTFT us p50/p99/p99.9",
            "vs direct",
            "chunk us p50/p99/p99.9",
            "vs direct",
            "gap distortion"
        );
        for l in &s.legs {
            let (lat, vs) = if s.streamed {
                (q(&l.chunk_latency_us), d(&l.chunk_latency_vs_direct))
            } else {
                (q(&l.e2e_us), d(&l.e2e_vs_direct))
            };
            let _ = writeln!(
                o,
                "{:<11} {:>9} {:>6} {:>9.0} {:>9.0} | {:<22} {:<30} | {:<22} {:<30} | {:<16}",
                l.leg.name(),
                l.measured_requests,
                l.errors,
                l.requests_per_second,
                l.chunks_per_second,
                q(&l.ttft_us),
                d(&l.ttft_vs_direct),
                lat,
                vs,
                q(&l.gap_distortion_us),
            );
        }
        if !s.streamed {
            let _ = writeln!(
                o,
                "(non-streamed: the chunk columns are end-to-end latency from the intended send time)"
            );
        }
        let _ = writeln!(
            o,
            "{:<11} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} | {:>11} {:>11} {:>11} {:>11} {:>11} | fidelity",
            "leg",
            "proxy cpu",
            "us/chunk",
            "s/1k req",
            "vs nginx",
            "rig busy",
            "",
            "idle RSS",
            "steady RSS",
            "B/stream",
            "peak B/str",
            "after/idle",
        );
        for l in &s.legs {
            let c = &l.cpu;
            let mm = &l.memory;
            let f = &l.fidelity;
            let _ = writeln!(
                o,
                "{:<11} {:>9.2}s {:>12.2} {:>12.3} {:>9} {:>8.0}% {:>9} | {:>11} {:>11} {:>11.0} {:>11.0} {:>11} | identical={} responses={}/{} events={}/{} frames={} merged={} split={}",
                l.leg.name(),
                c.proxy_seconds,
                c.proxy_us_per_chunk,
                c.proxy_seconds_per_1k_requests,
                l.cpu_vs_nginx
                    .map_or("-".to_owned(), |r| format!("{r:.2}x")),
                c.rig_core_busy * 100.0,
                "",
                mm.idle_bytes,
                mm.steady_bytes,
                mm.steady_per_stream_bytes,
                mm.peak_per_stream_bytes,
                mm.after_vs_idle
                    .map_or("-".to_owned(), |r| format!("{r:.2}x")),
                f.byte_identical,
                f.client_responses,
                f.sim.responses,
                f.client_events,
                f.sim.frames,
                f.client_frames,
                f.merged_frames,
                f.split_frames,
            );
        }
        for l in s.legs.iter().filter(|l| l.leg != LegKind::Direct) {
            let _ = writeln!(
                o,
                "cpu split ({}): {:.2} us/chunk in user space, {:.2} in the kernel (utime/stime)",
                l.leg.name(),
                l.cpu.proxy_user_us_per_chunk,
                l.cpu.proxy_kernel_us_per_chunk,
            );
        }
        if s.rounds > 1 {
            let range = |r: &Option<Range>| {
                r.map_or("-".to_owned(), |r| format!("{:.0}-{:.0}", r.min, r.max))
            };
            let cpu = |r: &Option<Range>| {
                r.map_or("-".to_owned(), |r| format!("{:.2}-{:.2}", r.min, r.max))
            };
            for l in &s.legs {
                let sp = &l.spread;
                let _ = writeln!(
                    o,
                    "spread over rounds ({}): {} p50 {} us, p99 {} us; TTFT p99 {} us; CPU {} us/chunk",
                    l.leg.name(),
                    if s.streamed { "chunk" } else { "end-to-end" },
                    range(&sp.latency_p50_us),
                    range(&sp.latency_p99_us),
                    range(&sp.ttft_p99_us),
                    cpu(&sp.cpu_us_per_chunk),
                );
            }
        }
        for l in &s.legs {
            let Some(offered) = l.offered else { continue };
            let mut line = format!(
                "offered load ({}): {:.1} chunks sent per ms, p99 {} (burstiness {:.2}x), max {}",
                l.leg.name(),
                offered.mean_per_ms,
                offered.p99_per_ms,
                offered.burstiness,
                offered.max_per_ms,
            );
            if l.rounds_detail.len() > 1 {
                let rounds: Vec<String> = l
                    .rounds_detail
                    .iter()
                    .map(|d| {
                        let b = d.burstiness.map_or("-".to_owned(), |b| format!("{b:.2}x"));
                        let p = d
                            .latency_p99_us
                            .map_or("-".to_owned(), |p| format!("{p:.0}"));
                        format!("{b} {p}")
                    })
                    .collect();
                let _ = write!(
                    line,
                    "; by round (burstiness, p99 us): {}",
                    rounds.join(", ")
                );
            }
            let _ = writeln!(o, "{line}");
        }
        for l in &s.legs {
            if let Some(a) = &l.metering_accuracy {
                let Some(q) = a.abs_diff_us else {
                    let _ = writeln!(
                        o,
                        "metering accuracy ({}): 0/{} requests paired (does the proxy log `request_id`?)",
                        l.leg.name(),
                        a.client_requests
                    );
                    continue;
                };
                let _ = writeln!(
                    o,
                    "metering accuracy ({}): TTFT client/proxy mean {:.1}/{:.1} us (client-proxy {:.1}); per request |client-proxy| p50 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1} us; {}/{} requests paired, {} with the proxy's longer",
                    l.leg.name(),
                    a.client_mean_us,
                    a.proxy_mean_us,
                    a.mean_diff_us,
                    q.p50,
                    q.p99,
                    q.p999,
                    q.max,
                    a.paired_requests,
                    a.client_requests,
                    a.proxy_longer
                );
            }
        }
    }
    if !r.max_streams_under_1ms.is_empty() {
        let _ = writeln!(o);
        for (kind, n) in &r.max_streams_under_1ms {
            let _ = writeln!(
                o,
                "sweep: {} keeps added chunk p99 <= 1 ms with no errors up to {} streams",
                kind.name(),
                n.map_or("none of the swept".to_owned(), |n| n.to_string())
            );
        }
    }
    if !r.targets.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "targets:");
        for t in &r.targets {
            let _ = writeln!(
                o,
                "  [{:<11}] {} / {}: {} — {}",
                t.verdict,
                t.scenario,
                t.leg.name(),
                t.target,
                t.measured
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;
    use crate::load::Arrivals;

    fn scenario_of(concurrency: usize) -> Scenario {
        Scenario {
            base: String::new(),
            arrivals: Arrivals::Closed { concurrency },
            streamed: true,
            ttft_ms: 0,
            itl_ms: 5,
            tokens: 10,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(10),
            ramp: Duration::ZERO,
            settle: Duration::ZERO,
        }
    }

    /// One round of a leg whose client saw every chunk `chunk_ns` after it
    /// was sent, the proxy's TTFT `diffs_ns` shorter than the client's.
    fn run(kind: LegKind, chunk_ns: u64, diffs_ns: &[i64]) -> LegRun {
        let mut load = LoadResult::empty().unwrap();
        for _ in 0..1000 {
            load.chunk_latency.record(chunk_ns).unwrap();
        }
        load.ttft.record(1_000_000).unwrap();
        load.fidelity.responses = 1;
        LegRun {
            kind,
            proxy_pid: None,
            load,
            wall_seconds: 10.0,
            proxy_cpu_seconds: Some(0.0),
            proxy_user_system_seconds: Some((0.0, 0.0)),
            sim_cpu_seconds: Some(0.0),
            loadgen_cpu_seconds: Some(0.0),
            idle_rss: None,
            steady_rss: None,
            peak_rss: None,
            after_rss: None,
            returned_after: None,
            idle_anon: None,
            after_anon: None,
            sim: SimTotals {
                responses: 1,
                ..SimTotals::default()
            },
            accuracy: (kind != LegKind::Direct).then(|| Pairing {
                ttft_ns: diffs_ns
                    .iter()
                    .map(|&d| ((1_000_000 + d) as u64, 1_000_000))
                    .collect(),
                unpaired: 0,
            }),
        }
    }

    /// The verdict of the accuracy target for one tokenmeter leg.
    fn accuracy_verdict(
        concurrency: usize,
        direct_chunk_ns: u64,
        diffs_ns: &[i64],
    ) -> &'static str {
        let runs = [
            run(LegKind::Direct, direct_chunk_ns, &[]),
            run(LegKind::Tokenmeter, direct_chunk_ns, diffs_ns),
        ];
        let report = scenario("s", &scenario_of(concurrency), 1, &runs);
        accuracy_check(&check_targets(&[report])).verdict
    }

    /// A concurrency-1 scenario of a direct leg and `leg`.
    fn beside_direct(leg: LegRun) -> ScenarioReport {
        let runs = [run(LegKind::Direct, 100_000, &[]), leg];
        scenario("s", &scenario_of(1), 1, &runs)
    }

    /// The accuracy target's check among `checks`.
    fn accuracy_check(checks: &[TargetCheck]) -> &TargetCheck {
        checks
            .iter()
            .find(|c| c.target.starts_with("proxy TTFT within"))
            .unwrap()
    }

    #[test]
    fn the_capacity_check_says_what_the_p99_millisecond_asks_of_the_proxy() {
        let mut leg = run(LegKind::Tokenmeter, 3_000_000, &[]);
        // A tenth of the milliseconds bring 160 chunks, one 300, the rest 40.
        leg.load.sent_per_ms = (0..1000)
            .map(|i| if i % 10 == 0 { 160 } else { 40 })
            .collect();
        leg.load.sent_per_ms[5] = 300;
        leg.load.fidelity.events = 1_000_000;
        leg.proxy_cpu_seconds = Some(13.8); // 13.8 us per chunk
        let runs = [run(LegKind::Direct, 100_000, &[]), leg];
        let checks = check_targets(&[scenario("s", &scenario_of(1000), 1, &runs)]);
        let capacity = checks
            .iter()
            .find(|c| c.target.contains("chunks/s: added chunk p99"))
            .unwrap();
        assert_eq!(capacity.verdict, "missed");
        assert!(
            capacity.measured.ends_with(
                "; the simulator's p99 ms brought 160 chunks, 2.21 ms of this proxy's CPU"
            ),
            "{}",
            capacity.measured
        );
    }

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

    #[test]
    fn accuracy_is_the_p99_of_each_requests_difference() {
        // 99 requests 50 µs apart and one 5 ms apart: p99 is 50 µs.
        let mut diffs = vec![50_000; 99];
        diffs.push(5_000_000);
        let runs = [run(LegKind::Tokenmeter, 100_000, &diffs)];
        let report = scenario("s", &scenario_of(1), 1, &runs);
        let a = report.legs[0].metering_accuracy.unwrap();
        assert_eq!((a.paired_requests, a.client_requests), (100, 100));
        assert!((a.abs_diff_us.unwrap().p99 - 50.0).abs() < 0.1, "{a:?}");
        assert!((a.mean_diff_us - (99.0 * 50.0 + 5000.0) / 100.0).abs() < 0.01);
        assert_eq!(a.proxy_longer, 0);
        assert_eq!(accuracy_verdict(1, 100_000, &diffs), "met");
    }

    #[test]
    fn accuracy_is_missed_or_rig_limited_by_one_hop_to_the_client() {
        let far = vec![300_000; 100];
        // One hop from the simulator to the client fits in 200 µs: missed.
        assert_eq!(accuracy_verdict(1, 100_000, &far), "missed");
        // It does not: no proxy could meet it here.
        assert_eq!(accuracy_verdict(1, 250_000, &far), "rig-limited");
        // Under load the limit is 1 ms.
        assert_eq!(accuracy_verdict(250, 250_000, &far), "met");
        assert_eq!(accuracy_verdict(250, 250_000, &[2_000_000; 100]), "missed");
        assert_eq!(
            accuracy_verdict(250, 1_500_000, &[2_000_000; 100]),
            "rig-limited"
        );
    }

    #[test]
    fn unpaired_requests_and_a_longer_proxy_ttft_are_reported() {
        let mut r = run(LegKind::Tokenmeter, 100_000, &[10_000, -5_000]);
        r.accuracy.as_mut().unwrap().unpaired = 3;
        let report = beside_direct(r);
        let a = report.legs[1].metering_accuracy.unwrap();
        assert_eq!((a.paired_requests, a.client_requests), (2, 5));
        assert_eq!(a.proxy_longer, 1);
        // A request without the proxy's figure fails the target.
        let c = accuracy_check(&check_targets(&[report])).clone();
        assert_eq!(c.verdict, "missed", "{}", c.measured);
    }

    #[test]
    fn a_leg_with_no_request_paired_still_reports_its_count() {
        let mut r = run(LegKind::Baseline, 100_000, &[]);
        r.accuracy.as_mut().unwrap().unpaired = 7;
        let report = beside_direct(r);
        let a = report.legs[1].metering_accuracy.unwrap();
        assert_eq!((a.paired_requests, a.client_requests), (0, 7));
        assert!(a.abs_diff_us.is_none());
        let checks = check_targets(std::slice::from_ref(&report));
        let c = accuracy_check(&checks);
        assert_eq!(c.verdict, "missed", "{}", c.measured);
        let text = text(&Report {
            tool: String::new(),
            command: String::new(),
            date: String::new(),
            machine: Machine::read(),
            notes: Vec::new(),
            scenarios: vec![report],
            max_streams_under_1ms: Vec::new(),
            targets: checks,
        });
        assert!(
            text.contains("metering accuracy (baseline): 0/7 requests paired"),
            "{text}"
        );
    }
}
