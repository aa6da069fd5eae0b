//! The rig and its legs: starting the simulator and the proxies under test
//! as child processes pinned to their cores, running one leg, and reading
//! what each process spent (CPU, memory) and what the simulator sent.
//!
//! Pinning (Linux, 2 cores or more): proxies run on core 0 (`taskset -c 0`),
//! the simulator on core 1 (`taskset -c 1`), and the bench process itself,
//! the load generator, pins itself to core 1 with `sched_setaffinity`
//! before its runtime starts ([`pin_current_thread`]). `--colocate` puts
//! the proxies on core 1 too.
//!
//! Legs: `direct` (the simulator itself), `tokenmeter` (metering on),
//! `unmetered` (tokenmeter with the route's `protocol: none`: it forwards
//! through the same code but never parses), and `nginx` (Debian's package,
//! `proxy_buffering off`, HTTP/1.1 keep-alive to the upstream) when an
//! `nginx` binary is found, and `baseline` (another tokenmeter binary,
//! `--baseline-bin`, metering on) to compare two builds in one run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::load::{self, LoadResult, REQUEST_ID_PREFIX, Scenario};
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
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    set.set(core).map_err(std::io::Error::from)?;
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

/// Whether cores 0 and 1 are both available to this process.
pub fn two_cores() -> bool {
    nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .is_ok_and(|set| set.is_set(0) == Ok(true) && set.is_set(1) == Ok(true))
}

/// Raises the open-file limit (10,000 streams need about 30,000 sockets on
/// the host): to 262,144 when allowed (root may raise the hard limit), else
/// to the hard limit. Children inherit it.
pub fn raise_fd_limit() -> Option<u64> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    const WANT: u64 = 262_144;
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let want = if hard == RLIM_INFINITY {
        WANT
    } else {
        WANT.max(hard)
    };
    if setrlimit(Resource::RLIMIT_NOFILE, want, want).is_err() {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).ok()?;
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft != RLIM_INFINITY).then_some(soft)
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
    /// How it was started, to start it again ([`Proc::restart`]).
    core: Option<usize>,
    program: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    log_filter: String,
}

impl Proc {
    /// Starts `program`, its stdout and stderr going to
    /// `<dir>/logs/<name>.log`, `TOKENMETER_LOG` set to `log`. The logs
    /// are kept out of `dir`, where the proxies' configs are: each proxy
    /// watches that directory, and every line written there would wake
    /// each proxy's watcher thread, which no production setup with its
    /// logs on a pipe pays.
    fn spawn(
        name: &'static str,
        core: Option<usize>,
        program: &Path,
        args: &[String],
        dir: &Path,
        log_filter: &str,
    ) -> anyhow::Result<Self> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let log = logs.join(format!("{name}.log"));
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
            .env("TOKENMETER_LOG", log_filter)
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
            core,
            program: program.to_path_buf(),
            args: args.to_vec(),
            dir: dir.to_path_buf(),
            log_filter: log_filter.to_owned(),
        })
    }

    /// Stops the process and starts it again as it was started (its log
    /// begun anew), then waits until `addr` accepts connections.
    async fn restart(&mut self, addr: SocketAddr) -> anyhow::Result<()> {
        // As `stop`, without blocking the runtime while the process exits.
        if self.terminate() {
            let exited = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
            if exited.is_err() {
                let _ = self.child.start_kill();
            }
        }
        let _ = self.child.wait().await;
        *self = Proc::spawn(
            self.name,
            self.core,
            &self.program,
            &self.args,
            &self.dir,
            &self.log_filter,
        )?;
        self.ready(addr).await
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

impl Proc {
    /// Asks the process to stop (SIGTERM) and gives it two seconds before
    /// SIGKILL: nginx's master only stops its workers when it is asked, and
    /// a SIGKILLed master leaves them running, orphaned, holding their
    /// sockets.
    fn stop(&mut self) {
        if !self.terminate() {
            return;
        }
        for _ in 0..40 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.start_kill();
    }

    /// Sends SIGTERM to a process still running: whether there is one to
    /// wait for (when the signal cannot be sent, it is SIGKILLed at once).
    fn terminate(&mut self) -> bool {
        // Only a child that has not been reaped still owns its pid.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return false;
        }
        let sent = i32::try_from(self.pid)
            .ok()
            .filter(|&pid| pid > 0)
            .is_some_and(|pid| {
                use nix::sys::signal::{Signal, kill};
                kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).is_ok()
            });
        if !sent {
            let _ = self.child.start_kill();
        }
        sent
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
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
    /// A metering tokenmeter: its access log pairs with the client.
    metered: bool,
}

/// The simulator, started once per run, and every proxy under test,
/// started with it and again for each later round ([`Rig::restart`]).
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

/// What the rig needs to know about the run.
#[derive(Debug, Clone)]
pub struct RigOptions {
    /// The tokenmeter binary under test; the simulator is its `sim`.
    pub tokenmeter_bin: PathBuf,
    pub legs: Vec<LegKind>,
    /// The bench process pinned itself to core 1: pin the others too.
    pub pin: bool,
    /// Pin the proxies to core 1 as well (`--colocate`).
    pub colocate: bool,
    pub nginx: String,
    /// The binary of the `baseline` leg.
    pub baseline_bin: Option<PathBuf>,
    /// YAML appended to the `tokenmeter` leg's config.
    pub tokenmeter_config: Option<String>,
}

impl Rig {
    pub async fn start(opts: &RigOptions) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tokenmeter-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let exe = opts.tokenmeter_bin.clone();
        let mut notes = Vec::new();
        let pinned = opts.pin;
        let (proxy_core, rig_core) = if pinned && opts.colocate {
            notes.push(
                "pinned, co-located: proxy under test (taskset -c 1), simulator (taskset -c 1) \
                 and load generator (sched_setaffinity) all on core 1"
                    .to_owned(),
            );
            (Some(1), Some(1))
        } else if pinned {
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
            "warn",
        )?;
        sim.ready(sim_addr).await?;

        let mut targets = Vec::new();
        for &kind in &opts.legs {
            let target = match kind {
                LegKind::Direct => Target {
                    kind,
                    addr: sim_addr,
                    proc: None,
                    metered: false,
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
                    let mut text = tokenmeter_config(addr, admin, sim_addr, metered);
                    if let (LegKind::Tokenmeter, Some(extra)) = (kind, &opts.tokenmeter_config) {
                        text.push_str(extra);
                        notes.push("tokenmeter: its config has --tokenmeter-config's".to_owned());
                    }
                    std::fs::write(&config, text)?;
                    let mut proc = Proc::spawn(
                        kind.name(),
                        proxy_core,
                        &program,
                        &[
                            "serve".into(),
                            "--log-format".into(),
                            "json".into(),
                            "--config".into(),
                            config.display().to_string(),
                        ],
                        &dir,
                        // Warnings, and the access log that metering
                        // accuracy pairs with the client's requests (on by
                        // default in production too).
                        "warn,tokenmeter::access=info",
                    )?;
                    proc.ready(addr).await?;
                    Target {
                        kind,
                        addr,
                        proc: Some(proc),
                        metered,
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
                        "warn",
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
                        metered: false,
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

    /// Starts `kind`'s proxy process again, so that each round of a leg
    /// measures a process of its own: how fast one process of the same
    /// binary runs differs from the next by up to ±15 % on this machine
    /// (measured: steady over one process's rounds, not between
    /// processes), so one process per leg would make that difference look
    /// like the legs'. `direct` has none.
    pub async fn restart(&mut self, kind: LegKind) -> anyhow::Result<()> {
        let target = self
            .targets
            .iter_mut()
            .find(|t| t.kind == kind)
            .context("leg not started")?;
        match &mut target.proc {
            Some(proc) => proc.restart(target.addr).await,
            None => Ok(()),
        }
    }

    /// The legs that could be started, in the order each round runs them.
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

/// The proxy's TTFT of each measured stream against the client's, matched
/// by `x-request-id`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pairing {
    /// The client's and the proxy's TTFT of each paired request,
    /// nanoseconds.
    pub ttft_ns: Vec<(u64, u64)>,
    /// Streams the client measured that no access line matched.
    pub unpaired: u64,
}

/// Pairs the client's TTFT of each measured stream with the `ttft_ms` of
/// the access-log line carrying its `x-request-id`, reading the proxy's log
/// from byte `from` (where it stood when the run began). The log writer
/// flushes on its own thread: lines still missing are waited for, up to
/// 5 s, before they count as unpaired.
async fn pair_with_access_log(load: &LoadResult, log: &Path, from: u64) -> anyhow::Result<Pairing> {
    use std::io::Seek as _;
    // Nothing to pair (a non-streamed scenario): the log, which can hold a
    // line for each of a million requests, is not read.
    if load.ttft_by_request.is_empty() {
        return Ok(Pairing::default());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut new = Vec::new();
        std::fs::File::open(log)
            .and_then(|mut f| {
                f.seek(std::io::SeekFrom::Start(from))?;
                f.read_to_end(&mut new)
            })
            .with_context(|| format!("reading {}", log.display()))?;
        let proxy = access_ttfts(&String::from_utf8_lossy(&new));
        let pairing = pair(&load.ttft_by_request, &proxy);
        if pairing.unpaired == 0 || std::time::Instant::now() >= deadline {
            return Ok(pairing);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each bench request's TTFT in an access log (JSON lines), by the number
/// in its `x-request-id`, in nanoseconds (the log gives microseconds).
pub fn access_ttfts(log: &str) -> std::collections::HashMap<u64, u64> {
    log.lines()
        .filter_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            if v["target"] != "tokenmeter::access" {
                return None;
            }
            let f = &v["fields"];
            let id = f["request_id"]
                .as_str()?
                .strip_prefix(REQUEST_ID_PREFIX)?
                .parse()
                .ok()?;
            let ms = f["ttft_ms"].as_f64()?;
            Some((id, (ms * 1e6).round() as u64))
        })
        .collect()
}

/// Matches the client's `(id, ttft)` list with the proxy's by id.
pub fn pair(client: &[(u64, u64)], proxy: &std::collections::HashMap<u64, u64>) -> Pairing {
    let mut out = Pairing::default();
    for &(id, client_ns) in client {
        match proxy.get(&id) {
            Some(&proxy_ns) => out.ttft_ns.push((client_ns, proxy_ns)),
            None => out.unpaired += 1,
        }
    }
    out
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

fn tokenmeter_config(
    listen: SocketAddr,
    admin: SocketAddr,
    upstream: SocketAddr,
    metered: bool,
) -> String {
    let protocol = if metered { "auto" } else { "none" };
    format!(
        "# Generated by `tokenmeter bench`.\n\
         listen: {listen}\n\
         admin:\n  listen: {admin}\n\
         routes:\n  - name: bench\n    upstream: http://{upstream}\n    protocol: {protocol}\n"
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
    fn pairs_access_lines_with_the_clients_requests_by_id() {
        // Lines as `--log-format json` writes them: other targets, other
        // ids, a line with no TTFT and a torn last line are skipped.
        let log = r#"{"timestamp":"t","level":"WARN","fields":{"message":"slow"},"target":"tokenmeter::proxy"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000003","ttft_ms":2.0415},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000004","ttft_ms":1.9},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"other-0000000005","ttft_ms":1.0},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000006","status":502},"target":"tokenmeter::access"}
{"timestamp":"t","level":"INFO","fields":{"message":"request","request_id":"bench-0000000007","ttft_ms":1"#;
        let proxy = access_ttfts(log);
        assert_eq!(proxy.len(), 2, "{proxy:?}");
        assert_eq!(proxy[&3], 2_041_500);
        assert_eq!(proxy[&4], 1_900_000);

        let client = [
            (3, 2_100_000),
            (4, 1_899_000),
            (5, 1_000_000),
            (7, 1_000_000),
        ];
        let p = pair(&client, &proxy);
        assert_eq!(
            p.ttft_ns,
            vec![(2_100_000, 2_041_500), (1_899_000, 1_900_000)]
        );
        assert_eq!(p.unpaired, 2);
    }

    #[tokio::test]
    async fn lines_written_after_the_run_began_are_the_only_ones_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("tokenmeter.log");
        let line = |id: u64, ms: f64| {
            format!(
                "{{\"fields\":{{\"request_id\":\"bench-{id:010}\",\"ttft_ms\":{ms}}},\"target\":\"tokenmeter::access\"}}\n"
            )
        };
        // The previous round's request 0 had another TTFT.
        let earlier = line(0, 9.0);
        std::fs::write(&log, format!("{earlier}{}", line(0, 2.0))).unwrap();
        let mut load = LoadResult::empty().unwrap();
        load.ttft_by_request = vec![(0, 2_000_100)];
        let p = pair_with_access_log(&load, &log, earlier.len() as u64)
            .await
            .unwrap();
        assert_eq!(p.ttft_ns, vec![(2_000_100, 2_000_000)]);
        assert_eq!(p.unpaired, 0);
    }
}
