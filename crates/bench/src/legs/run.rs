//! One leg's run: the load sent through it, what its proxy, the simulator
//! and the load generator spent meanwhile (CPU, memory), and what the
//! simulator sent.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio_util::sync::CancellationToken;

use super::access::{Pairing, pair_with_access_log};
use super::kind::LegKind;
use super::rig::Rig;
use crate::load::{self, LoadResult, Scenario};
use crate::procfs;

impl Rig {
    /// Runs `scenario` against one leg (its `base` is filled in here).
    pub async fn run_leg(&self, kind: LegKind, scenario: &Scenario) -> anyhow::Result<LegRun> {
        let target = self
            .targets
            .iter()
            .find(|t| t.kind == kind)
            .context("leg not started")?;
        let mut scenario = scenario.clone();
        scenario.tls = self
            .tls
            .as_ref()
            .filter(|_| target.tls)
            .map(|c| c.client.clone());
        let scheme = if scenario.tls.is_some() {
            "https"
        } else {
            "http"
        };
        scenario.base = format!("{scheme}://{}", target.addr);
        let pids = target
            .proc
            .as_ref()
            .map(|p| procfs::with_children(p.pid))
            .unwrap_or_default();
        let me = std::process::id();

        let sim_before = self.sim_stats()?;
        let log = target.proc.as_ref().filter(|_| target.metered).map(|p| {
            let from = std::fs::metadata(&p.log).map_or(0, |m| m.len());
            (p.log.as_path(), from)
        });
        for &pid in &pids {
            procfs::reset_peak(pid);
        }
        let idle_rss = procfs::sum(&pids, procfs::rss_bytes);
        let idle_anon = procfs::sum(&pids, procfs::anon_rss_bytes);
        let cpu = |pids: &[u32]| procfs::sum(pids, procfs::cpu_seconds);
        let (proxy0, sim0, me0) = (cpu(&pids), procfs::cpu_seconds(self.sim.pid), cpu(&[me]));
        let split = |pids: &[u32]| {
            pids.iter().try_fold((0.0, 0.0), |(u, s), &pid| {
                let (pu, ps) = procfs::user_system_seconds(pid)?;
                Some((u + pu, s + ps))
            })
        };
        let split0 = split(&pids);
        let wall0 = std::time::Instant::now();

        // Resident memory while the measured window runs, every 200 ms.
        let stop = CancellationToken::new();
        let sampler = tokio::spawn({
            let pids = pids.clone();
            let stop = stop.clone();
            let warmup = scenario.warmup;
            async move {
                let mut samples = Vec::new();
                tokio::select! {
                    () = stop.cancelled() => return samples,
                    () = tokio::time::sleep(warmup) => {}
                }
                loop {
                    if let Some(rss) = procfs::sum(&pids, procfs::rss_bytes) {
                        samples.push(rss);
                    }
                    tokio::select! {
                        () = stop.cancelled() => return samples,
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
            }
        });
        let load = load::run(&scenario).await;
        stop.cancel();
        let load = load?;
        let mut rss_samples = sampler.await.unwrap_or_default();

        let wall = wall0.elapsed().as_secs_f64();
        let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        let proxy_cpu = diff(proxy0, cpu(&pids));
        let proxy_split = split0
            .zip(split(&pids))
            .map(|((u0, s0), (u1, s1))| (u1 - u0, s1 - s0));
        let sim_cpu = diff(sim0, procfs::cpu_seconds(self.sim.pid));
        let loadgen_cpu = diff(me0, cpu(&[me]));
        let peak_rss = procfs::sum(&pids, procfs::peak_rss_bytes);
        rss_samples.sort_unstable();
        let steady_rss = rss_samples.get(rss_samples.len() / 2).copied();
        // What the proxy keeps once the streams are over (the load
        // generator's connections are closed by now): RSS is read every
        // 250 ms for `settle`, noting when it first came back within 10 %
        // of idle, and the last reading is `after`.
        let (after_rss, returned_after) = if pids.is_empty() {
            (None, None)
        } else {
            let start = std::time::Instant::now();
            let mut returned = None;
            loop {
                let rss = procfs::sum(&pids, procfs::rss_bytes);
                if returned.is_none()
                    && matches!((rss, idle_rss), (Some(r), Some(i)) if r as f64 <= i as f64 * 1.10)
                {
                    returned = Some(start.elapsed());
                }
                if start.elapsed() >= scenario.settle {
                    break (rss, returned);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };
        let sim_after = self.sim_stats()?;
        let accuracy = match log {
            Some((path, from)) => Some(pair_with_access_log(&load, path, from).await?),
            None => None,
        };
        Ok(LegRun {
            kind,
            proxy_pid: target.proc.as_ref().map(|p| p.pid),
            load,
            wall_seconds: wall,
            proxy_cpu_seconds: if pids.is_empty() {
                Some(0.0)
            } else {
                proxy_cpu
            },
            proxy_user_system_seconds: if pids.is_empty() {
                Some((0.0, 0.0))
            } else {
                proxy_split
            },
            sim_cpu_seconds: sim_cpu,
            loadgen_cpu_seconds: loadgen_cpu,
            idle_rss,
            steady_rss,
            peak_rss,
            after_rss,
            returned_after,
            idle_anon,
            after_anon: procfs::sum(&pids, procfs::anon_rss_bytes),
            sim: sim_after.minus(&sim_before),
            accuracy,
        })
    }

    fn sim_stats(&self) -> anyhow::Result<SimTotals> {
        let body = http_get(self.sim_addr, "/sim/stats")?;
        let v: serde_json::Value = serde_json::from_str(&body).context("parsing /sim/stats")?;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        Ok(SimTotals {
            responses: n("stamped_responses"),
            frames: n("stamped_frames"),
            bytes: n("stamped_bytes"),
            hash_sum: n("stamped_hash"),
        })
    }
}

/// What the simulator sent in stamped responses (a difference of totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimTotals {
    pub responses: u64,
    pub frames: u64,
    pub bytes: u64,
    pub hash_sum: u64,
}

impl SimTotals {
    fn minus(&self, before: &SimTotals) -> SimTotals {
        SimTotals {
            responses: self.responses - before.responses.min(self.responses),
            frames: self.frames - before.frames.min(self.frames),
            bytes: self.bytes - before.bytes.min(self.bytes),
            hash_sum: self.hash_sum.wrapping_sub(before.hash_sum),
        }
    }

    pub fn add(&mut self, other: &SimTotals) {
        self.responses += other.responses;
        self.frames += other.frames;
        self.bytes += other.bytes;
        self.hash_sum = self.hash_sum.wrapping_add(other.hash_sum);
    }
}

/// Everything one run of one leg measured.
#[derive(Debug, Clone)]
pub struct LegRun {
    pub kind: LegKind,
    /// The proxy's process (none for `direct`).
    pub proxy_pid: Option<u32>,
    pub load: LoadResult,
    pub wall_seconds: f64,
    /// CPU of the proxy (all its processes); 0 for `direct`.
    pub proxy_cpu_seconds: Option<f64>,
    /// The proxy's CPU split into user space and kernel (`utime`, `stime`).
    pub proxy_user_system_seconds: Option<(f64, f64)>,
    pub sim_cpu_seconds: Option<f64>,
    pub loadgen_cpu_seconds: Option<f64>,
    pub idle_rss: Option<u64>,
    /// Median of the samples taken during the measured window.
    pub steady_rss: Option<u64>,
    pub peak_rss: Option<u64>,
    /// `settle` after the last stream of the leg ended.
    pub after_rss: Option<u64>,
    /// When RSS first came back within 10 % of idle after the streams,
    /// if it did within `settle`.
    pub returned_after: Option<Duration>,
    /// The anonymous part of `idle_rss` and `after_rss` (the rest is the
    /// binary's and libraries' pages, which grow as code paths are first run).
    pub idle_anon: Option<u64>,
    pub after_anon: Option<u64>,
    pub sim: SimTotals,
    /// A metering leg: its TTFTs paired with the client's, request by
    /// request.
    pub accuracy: Option<Pairing>,
}

/// A plain HTTP/1.0 GET on a blocking socket (admin endpoints only, between
/// legs, so it needs no client pool). Retried for up to a minute: after a
/// leg of thousands of streams the simulator may still be busy closing them.
fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut last = None;
    for attempt in 0..6 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_secs(2));
        }
        match try_get(addr, path) {
            Ok(body) => return Ok(body),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("GET {path} on {addr} failed")))
}

fn try_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "GET {path} on {addr}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_owned())
}
