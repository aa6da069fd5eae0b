//! The rig and its legs: starting the simulator and the proxies under test
//! as child processes pinned to their cores, running one leg, and reading
//! what each process spent (CPU, memory) and what the simulator sent.
//!
//! Pinning (Linux, 2 cores or more): proxies run on core 0 (`taskset -c 0`),
//! the simulator on core 1 (`taskset -c 1`), and the bench process itself,
//! the load generator, pins itself to core 1 with `sched_setaffinity`
//! before its runtime starts ([`pin_current_thread`]).
//!
//! Legs: `direct` (the simulator itself), `tokenmeter` (metering on),
//! `unmetered` (tokenmeter with the route's `protocol: none`: it forwards
//! through the same code but never parses), and `nginx` (Debian's package,
//! `proxy_buffering off`, HTTP/1.1 keep-alive to the upstream) when an
//! `nginx` binary is found, and `baseline` (another tokenmeter binary,
//! `--baseline-bin`, metering on) to compare two builds in one session.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::load::{self, LoadResult, MEASURED_MODEL, Scenario};
use super::procfs;

/// A proxy (or none) under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LegKind {
    /// Straight to the simulator: the rig's own floor.
    Direct,
    /// tokenmeter, metering on.
    Tokenmeter,
    /// tokenmeter forwarding with metering off (`protocol: none`).
    Unmetered,
    /// nginx, the reference proxy.
    Nginx,
    /// Another tokenmeter binary (`--baseline-bin`), metering on, configured
    /// as the `tokenmeter` leg: an A/B comparison of two builds.
    Baseline,
}

impl LegKind {
    pub fn name(self) -> &'static str {
        match self {
            LegKind::Direct => "direct",
            LegKind::Tokenmeter => "tokenmeter",
            LegKind::Unmetered => "unmetered",
            LegKind::Nginx => "nginx",
            LegKind::Baseline => "baseline",
        }
    }
}

/// Pins the calling thread (and the threads it starts later) to `core`.
pub fn pin_current_thread(core: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(core);
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

/// Whether cores 0 and 1 are both available to this process.
pub fn two_cores() -> bool {
    rustix::thread::sched_getaffinity(None).is_ok_and(|set| set.is_set(0) && set.is_set(1))
}

/// Raises the open-file limit (10,000 streams need about 30,000 sockets on
/// the host): to 262,144 when allowed (root may raise the hard limit), else
/// to the hard limit. Children inherit it.
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    const WANT: u64 = 262_144;
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: Some(WANT.max(limit.maximum.unwrap_or(WANT))),
        maximum: Some(WANT.max(limit.maximum.unwrap_or(WANT))),
    };
    if setrlimit(Resource::Nofile, raised).is_err() {
        let fallback = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, fallback).ok()?;
    }
    getrlimit(Resource::Nofile).current
}

/// Finds `program` on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// A child process of the rig, killed when dropped.
struct Proc {
    child: Child,
    pid: u32,
    name: &'static str,
    log: PathBuf,
}

impl Proc {
    fn spawn(
        name: &'static str,
        core: Option<usize>,
        program: &Path,
        args: &[String],
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log)?;
        let mut cmd = match core {
            Some(core) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(core.to_string()).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .env("TOKENMETER_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let pid = child.id().context("child has no pid")?;
        Ok(Self {
            child,
            pid,
            name,
            log,
        })
    }

    /// Waits until `addr` accepts connections, failing if the process ends.
    async fn ready(&mut self, addr: SocketAddr) -> anyhow::Result<()> {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!("{} exited ({status}) before listening:\n{log}", self.name);
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("{} did not listen on {addr} within 10 s", self.name)
    }
}

impl Drop for Proc {
    /// Asks the process to stop (SIGTERM) and gives it a moment before
    /// `kill_on_drop`'s SIGKILL: nginx's master only stops its workers when
    /// it is asked, and a SIGKILLed master leaves them running, orphaned,
    /// holding their sockets.
    fn drop(&mut self) {
        // Only a child that has not been reaped still owns its pid.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) else {
            return;
        };
        if rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_err() {
            return;
        }
        for _ in 0..40 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A free loopback port (released before the child binds it).
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// One target a leg sends to.
struct Target {
    kind: LegKind,
    addr: SocketAddr,
    /// The proxy process (none for `direct`).
    proc: Option<Proc>,
    /// The admin listener of a metering tokenmeter.
    admin: Option<SocketAddr>,
}

/// The simulator and every proxy under test, started once per session.
pub struct Rig {
    dir: PathBuf,
    sim: Proc,
    sim_addr: SocketAddr,
    targets: Vec<Target>,
    /// Said in the report: how processes are placed, what was skipped.
    pub notes: Vec<String>,
    pub pinned: bool,
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Children are killed on drop (`kill_on_drop`); their logs go too.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the rig needs to know about the session.
#[derive(Debug, Clone)]
pub struct RigOptions {
    pub legs: Vec<LegKind>,
    /// The bench process pinned itself to core 1: pin the others too.
    pub pin: bool,
    pub nginx: String,
    /// The binary of the `baseline` leg.
    pub baseline_bin: Option<PathBuf>,
    /// The scenario's simulated TTFT, to centre the proxy's fine buckets.
    pub ttft_ms: u64,
}

impl Rig {
    pub async fn start(opts: &RigOptions) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tokenmeter-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let exe = std::env::current_exe().context("locating the tokenmeter binary")?;
        let mut notes = Vec::new();
        let pinned = opts.pin;
        let (proxy_core, rig_core) = if pinned {
            notes.push(
                "pinned: proxy under test on core 0 (taskset -c 0); simulator (taskset -c 1) \
                 and load generator (sched_setaffinity) on core 1"
                    .to_owned(),
            );
            (Some(0), Some(1))
        } else {
            notes.push("not pinned: processes share every core".to_owned());
            (None, None)
        };

        let sim_addr = free_addr()?;
        let mut sim = Proc::spawn(
            "sim",
            rig_core,
            &exe,
            &[
                "sim".into(),
                "--listen".into(),
                sim_addr.to_string(),
                "--stamp".into(),
            ],
            &dir,
        )?;
        sim.ready(sim_addr).await?;

        let mut targets = Vec::new();
        for &kind in &opts.legs {
            let target = match kind {
                LegKind::Direct => Target {
                    kind,
                    addr: sim_addr,
                    proc: None,
                    admin: None,
                },
                LegKind::Tokenmeter | LegKind::Unmetered | LegKind::Baseline => {
                    let program = if kind == LegKind::Baseline {
                        let Some(bin) = opts.baseline_bin.as_deref().and_then(|b| {
                            which(b.to_str()?).map(|p| std::fs::canonicalize(&p).unwrap_or(p))
                        }) else {
                            notes.push(
                                "baseline leg skipped: no --baseline-bin (or the file is missing)"
                                    .to_owned(),
                            );
                            continue;
                        };
                        notes.push(format!(
                            "baseline: {} with the tokenmeter leg's config",
                            bin.display()
                        ));
                        bin
                    } else {
                        exe.clone()
                    };
                    let addr = free_addr()?;
                    let admin = free_addr()?;
                    let metered = kind != LegKind::Unmetered;
                    let config = dir.join(format!("{}.yaml", kind.name()));
                    std::fs::write(
                        &config,
                        tokenmeter_config(addr, admin, sim_addr, metered, opts.ttft_ms),
                    )?;
                    let mut proc = Proc::spawn(
                        kind.name(),
                        proxy_core,
                        &program,
                        &[
                            "serve".into(),
                            "--config".into(),
                            config.display().to_string(),
                        ],
                        &dir,
                    )?;
                    proc.ready(addr).await?;
                    Target {
                        kind,
                        addr,
                        proc: Some(proc),
                        admin: metered.then_some(admin),
                    }
                }
                LegKind::Nginx => {
                    let Some(nginx) = which(&opts.nginx) else {
                        notes.push(format!(
                            "nginx leg skipped: `{}` not found on PATH (apt-get install nginx)",
                            opts.nginx
                        ));
                        continue;
                    };
                    let addr = free_addr()?;
                    let prefix = dir.join("nginx");
                    std::fs::create_dir_all(&prefix)?;
                    let conf = prefix.join("nginx.conf");
                    std::fs::write(&conf, nginx_config(addr, sim_addr, &prefix))?;
                    let mut proc = Proc::spawn(
                        "nginx",
                        proxy_core,
                        &nginx,
                        &[
                            "-p".into(),
                            prefix.display().to_string(),
                            "-c".into(),
                            conf.display().to_string(),
                            "-e".into(),
                            prefix.join("error.log").display().to_string(),
                        ],
                        &dir,
                    )?;
                    proc.ready(addr).await?;
                    notes.push(format!(
                        "nginx: {} with worker_processes 1, proxy_buffering off, keepalive upstream",
                        nginx_version(&nginx)
                    ));
                    Target {
                        kind,
                        addr,
                        proc: Some(proc),
                        admin: None,
                    }
                }
            };
            targets.push(target);
        }
        Ok(Self {
            dir,
            sim,
            sim_addr,
            targets,
            notes,
            pinned,
        })
    }

    /// The legs that could be started, in session order.
    pub fn legs(&self) -> Vec<LegKind> {
        self.targets.iter().map(|t| t.kind).collect()
    }

    /// Runs `scenario` against one leg (its `base` is filled in here).
    pub async fn run_leg(&self, kind: LegKind, scenario: &Scenario) -> anyhow::Result<LegRun> {
        let target = self
            .targets
            .iter()
            .find(|t| t.kind == kind)
            .context("leg not started")?;
        let mut scenario = scenario.clone();
        scenario.base = format!("http://{}", target.addr);
        let pids = target
            .proc
            .as_ref()
            .map(|p| procfs::with_children(p.pid))
            .unwrap_or_default();
        let me = std::process::id();

        let sim_before = self.sim_stats()?;
        let prom_before = target.admin.map(scrape_ttft).transpose()?;
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
        let proxy_ttft = match (prom_before, target.admin) {
            (Some(before), Some(admin)) => Some(scrape_ttft(admin)?.minus(&before)),
            _ => None,
        };
        Ok(LegRun {
            kind,
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
            proxy_ttft,
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
    /// The proxy's own TTFT histogram over the measured requests.
    pub proxy_ttft: Option<PromHistogram>,
}

/// A Prometheus histogram read from `/metrics` (cumulative buckets).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromHistogram {
    /// `(le, cumulative count)`, ascending, `+Inf` excluded.
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl PromHistogram {
    fn minus(&self, before: &PromHistogram) -> PromHistogram {
        PromHistogram {
            buckets: self
                .buckets
                .iter()
                .zip(before.buckets.iter().chain(std::iter::repeat(&(0.0, 0.0))))
                .map(|(&(le, c), &(_, b))| (le, c - b))
                .collect(),
            sum: self.sum - before.sum,
            count: self.count - before.count,
        }
    }

    pub fn merge(&mut self, other: &PromHistogram) {
        if self.buckets.is_empty() {
            self.buckets = other.buckets.clone();
        } else {
            for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
                mine.1 += theirs.1;
            }
        }
        self.sum += other.sum;
        self.count += other.count;
    }

    /// The `q` quantile, interpolated linearly inside its bucket (as
    /// PromQL's `histogram_quantile` does), in seconds.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for &(le, cum) in &self.buckets {
            if cum >= rank {
                let width = cum - lower.1;
                let frac = if width > 0.0 {
                    (rank - lower.1) / width
                } else {
                    1.0
                };
                return Some(lower.0 + (le - lower.0) * frac);
            }
            lower = (le, cum);
        }
        Some(lower.0)
    }

    /// The width of the bucket holding the `q` quantile, in seconds.
    pub fn resolution(&self, q: f64) -> Option<f64> {
        let rank = q * self.count;
        let mut lower = 0.0;
        for &(le, cum) in &self.buckets {
            if cum >= rank {
                return Some(le - lower);
            }
            lower = le;
        }
        None
    }
}

/// Parses the measured model's TTFT histogram out of a `/metrics` page.
pub fn parse_ttft(text: &str) -> PromHistogram {
    let model = format!("model=\"{MEASURED_MODEL}\"");
    let mut h = PromHistogram::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("llm_time_to_first_token_seconds") else {
            continue;
        };
        if !rest.contains(&model) {
            continue;
        }
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if rest.starts_with("_bucket") {
            let le = rest
                .split("le=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .and_then(|s| s.parse::<f64>().ok());
            if let Some(le) = le.filter(|le| le.is_finite()) {
                h.buckets.push((le, value));
            }
        } else if rest.starts_with("_sum") {
            h.sum = value;
        } else if rest.starts_with("_count") {
            h.count = value;
        }
    }
    h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    h
}

fn scrape_ttft(admin: SocketAddr) -> anyhow::Result<PromHistogram> {
    Ok(parse_ttft(&http_get(admin, "/metrics")?))
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

/// Fine TTFT buckets around the simulated TTFT, so the proxy's percentiles
/// can be compared with the client's (10 µs steps for the first 2 ms, then
/// 50 µs to 10 ms, 250 µs to 50 ms, then coarse).
fn ttft_buckets(ttft_ms: u64) -> Vec<f64> {
    let base = ttft_ms as f64 / 1000.0;
    let mut out: Vec<f64> = Vec::new();
    let mut push = |v: f64| {
        if out.last().is_none_or(|&l| v > l + 1e-9) {
            out.push(v);
        }
    };
    for i in 1..=200 {
        push(base + i as f64 * 10e-6);
    }
    for i in 1..=160 {
        push(base + 0.002 + i as f64 * 50e-6);
    }
    for i in 1..=160 {
        push(base + 0.010 + i as f64 * 250e-6);
    }
    for v in [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 600.0] {
        push(base + v);
    }
    out
}

fn tokenmeter_config(
    listen: SocketAddr,
    admin: SocketAddr,
    upstream: SocketAddr,
    metered: bool,
    ttft_ms: u64,
) -> String {
    let buckets: Vec<String> = ttft_buckets(ttft_ms)
        .iter()
        .map(|b| format!("{b:.6}"))
        .collect();
    let protocol = if metered { "auto" } else { "none" };
    format!(
        "# Generated by `tokenmeter bench`.\n\
         listen: {listen}\n\
         admin:\n  listen: {admin}\n\
         metrics:\n  buckets:\n    time_to_first_token: [{}]\n\
         routes:\n  - name: bench\n    upstream: http://{upstream}\n    protocol: {protocol}\n",
        buckets.join(", ")
    )
}

fn nginx_config(listen: SocketAddr, upstream: SocketAddr, prefix: &Path) -> String {
    let p = prefix.display();
    format!(
        "# Generated by `tokenmeter bench`.\n\
         daemon off;\n\
         user root;\n\
         worker_processes 1;\n\
         worker_rlimit_nofile 65535;\n\
         pid {p}/nginx.pid;\n\
         error_log {p}/error.log warn;\n\
         events {{ worker_connections 30000; }}\n\
         http {{\n\
         \x20 access_log off;\n\
         \x20 client_body_temp_path {p}/client_body;\n\
         \x20 proxy_temp_path {p}/proxy;\n\
         \x20 fastcgi_temp_path {p}/fastcgi;\n\
         \x20 uwsgi_temp_path {p}/uwsgi;\n\
         \x20 scgi_temp_path {p}/scgi;\n\
         \x20 keepalive_requests 1000000;\n\
         \x20 upstream sim {{ server {upstream}; keepalive 20000; keepalive_requests 1000000; }}\n\
         \x20 server {{\n\
         \x20   listen {listen} backlog=65535;\n\
         \x20   location / {{\n\
         \x20     proxy_pass http://sim;\n\
         \x20     proxy_http_version 1.1;\n\
         \x20     proxy_set_header Connection \"\";\n\
         \x20     proxy_buffering off;\n\
         \x20     proxy_read_timeout 600s;\n\
         \x20     tcp_nodelay on;\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n"
    )
}

fn nginx_version(nginx: &Path) -> String {
    std::process::Command::new(nginx)
        .arg("-v")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .unwrap_or_else(|| "nginx".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_the_measured_models_ttft_and_interpolates() {
        let text = "\
# TYPE llm_time_to_first_token_seconds histogram
llm_time_to_first_token_seconds_bucket{model=\"warmup\",route=\"bench\",slo=\"\",le=\"0.001\"} 9
llm_time_to_first_token_seconds_bucket{model=\"bench\",route=\"bench\",slo=\"\",le=\"0.001\"} 0
llm_time_to_first_token_seconds_bucket{model=\"bench\",route=\"bench\",slo=\"\",le=\"0.002\"} 10
llm_time_to_first_token_seconds_bucket{model=\"bench\",route=\"bench\",slo=\"\",le=\"+Inf\"} 10
llm_time_to_first_token_seconds_sum{model=\"bench\",route=\"bench\",slo=\"\"} 0.015
llm_time_to_first_token_seconds_count{model=\"bench\",route=\"bench\",slo=\"\"} 10
";
        let h = parse_ttft(text);
        assert_eq!(h.buckets, vec![(0.001, 0.0), (0.002, 10.0)]);
        assert_eq!((h.sum, h.count), (0.015, 10.0));
        let p50 = h.quantile(0.5).unwrap();
        assert!((p50 - 0.0015).abs() < 1e-9, "{p50}");
        assert!((h.resolution(0.5).unwrap() - 0.001).abs() < 1e-9);
        let none = h.minus(&h);
        assert_eq!(none.count, 0.0);
        assert_eq!(none.quantile(0.5), None);
    }

    #[test]
    fn buckets_strictly_increase() {
        let b = ttft_buckets(0);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b[0] > 0.0);
    }
}
