//! The plain-text rendering of the report, for people.

use std::fmt::Write as _;

use super::types::{Quantiles, Range, Report, Versus};
use crate::legs::LegKind;

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
        let tls = s.legs.iter().any(|l| l.tls.is_some());
        if tls {
            let _ = writeln!(
                o,
                "TLS on: the proxy legs terminate TLS from the load generator; direct is plain HTTP"
            );
        }
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
        for l in s.legs.iter().filter(|_| tls) {
            let how = match &l.tls {
                Some(t) => format!(
                    "TLS {}: {} handshakes, one per {:.1} requests",
                    t.negotiated.as_deref().unwrap_or("(none completed)"),
                    t.handshakes,
                    t.requests_per_handshake
                ),
                None => "plain HTTP".to_owned(),
            };
            let _ = writeln!(
                o,
                "connections ({}): {} opened over {} rounds, {how}",
                l.leg.name(),
                l.connections,
                l.rounds,
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
