//! A scenario's report built from every run of every leg: the rounds of
//! each leg merged, and each leg's figures against the direct leg's and
//! nginx's.

use super::types::{
    AccuracyReport, CpuReport, FidelityReport, LegReport, MemoryReport, Offered, Quantiles,
    RoundDetail, ScenarioReport, Spread, TlsReport, Versus, round_latency,
};
use crate::legs::{LegKind, LegRun, SimTotals};
use crate::load::{Arrivals, LoadResult, Scenario};

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
        connections: load.connections,
        tls: load.tls.then(|| TlsReport {
            handshakes: load.tls_handshakes,
            negotiated: load.tls_negotiated.clone(),
            requests_per_handshake: f.responses as f64 / load.tls_handshakes.max(1) as f64,
        }),
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
