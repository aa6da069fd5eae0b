//! `tokenmeter bench`: a rerunnable benchmark of the proxy's cost.
//!
//! A binary of its own, `tokenmeter-bench` (which `tokenmeter bench`
//! runs), so that the product holds none of it. It drives the `tokenmeter`
//! binary over sockets like any client: it starts the simulator with
//! send-time stamps (`tokenmeter sim --stamp`)
//! and each proxy under test as child processes, then runs the same load
//! through every leg — `direct` to the simulator, `tokenmeter`, `unmetered`
//! (tokenmeter with `protocol: none`) and `nginx` when installed —
//! interleaved in rounds (A B C D, A B C D, …), each round of a proxy leg
//! on a fresh process and with its warm-up discarded, and reports per leg
//! the client's TTFT, one-way latency of each chunk, gap distortion,
//! fidelity (bytes fingerprinted, frames counted), CPU and memory of the
//! proxy, and the proxy's own TTFT against the client's. With `--tls` the
//! proxy legs terminate TLS from the load generator (`direct` stays
//! plain), over connections kept alive as without it.
//!
//! Files: [`load`] is the load generator, [`legs`] the rig and one leg's
//! run, [`report`] the figures, deltas and target checks, [`procfs`] the
//! `/proc` readings, [`tls`] the certificate and the client's connector
//! of `--tls`. This module holds the options and the run's loop.
//!
//! The bench measures; it never asserts a timing. `--smoke` runs a few
//! seconds for CI, whose test checks the structure and fidelity of the
//! report only.

pub mod legs;
pub mod load;
pub mod procfs;
pub mod report;
pub mod tls;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use legs::{LegKind, Rig, RigOptions};
use load::{Arrivals, Scenario};
use report::Report;

/// Benchmark tokenmeter's cost against the simulator itself, tokenmeter
/// with metering off, nginx and another build (see docs/benchmarks.md).
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "tokenmeter bench", version)]
pub struct Options {
    /// The tokenmeter binary under test (it also runs the simulator);
    /// by default the one beside this program.
    #[arg(long)]
    pub tokenmeter_bin: Option<PathBuf>,
    /// Closed loop: concurrent streams (each sends its next request when the
    /// last one ended).
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Closed loop, several runs: a comma-separated list of stream counts,
    /// reporting the highest whose added chunk p99 stays under 1 ms.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<usize>,
    /// Open loop instead: requests per second, timed from their intended
    /// send times.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop with Poisson (exponential) gaps instead of constant ones.
    #[arg(long, requires = "rate")]
    pub poisson: bool,
    /// Non-streamed requests (one JSON body) instead of SSE streams.
    #[arg(long)]
    pub no_stream: bool,
    /// Simulated time to first token, ms.
    #[arg(long, default_value_t = 0)]
    pub ttft_ms: u64,
    /// Simulated time between chunks, ms (20 = 50 chunks/s per stream).
    #[arg(long, default_value_t = 20)]
    pub itl_ms: u64,
    /// Tokens (content chunks) per response.
    #[arg(long, default_value_t = 50)]
    pub tokens: u32,
    /// Measured time per leg and round.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Discarded time at the start of each leg and round.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Closed loop: spread the streams' first requests over this time
    /// (default: one chunk interval, at most the warm-up).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ramp: Option<Duration>,
    /// How long after a leg's last stream its proxy's RSS is read again
    /// (the `after` figure): time for the allocator to give memory back.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// Rounds; each runs every leg once, in order.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Legs, in the order each round runs them.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "direct,tokenmeter,unmetered,nginx"
    )]
    pub legs: Vec<LegKind>,
    /// The nginx binary (the leg is skipped when it is not found).
    #[arg(long, default_value = "nginx")]
    pub nginx: String,
    /// Another tokenmeter binary to run as the `baseline` leg (metering on,
    /// the `tokenmeter` leg's config), to compare two builds in one run.
    /// The leg is added to `--legs` after `tokenmeter` unless it is listed.
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// YAML appended to the `tokenmeter` leg's generated config (top-level
    /// keys it does not set, such as `otlp:` or `trace_context:`), not to
    /// the `baseline` leg's: with `--baseline-bin` naming the same binary,
    /// the two legs measure what those settings cost.
    #[arg(long, value_name = "FILE")]
    pub tokenmeter_config: Option<PathBuf>,
    /// Do not pin processes to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Pin the proxy under test to core 1 with the simulator and the load
    /// generator, instead of core 0: no request or chunk then crosses
    /// cores, which tells the proxy's own latency from the machine's
    /// cross-core wake-ups. A diagnostic: the targets are defined with the
    /// proxy on a core of its own, so they are not checked.
    #[arg(long, conflicts_with = "no_pin")]
    pub colocate: bool,
    /// The proxy legs (tokenmeter, unmetered, baseline, nginx) terminate
    /// TLS from the load generator, with a certificate made for the run
    /// that the generator trusts; the `direct` leg stays plain.
    /// Connections are kept alive as without it: the handshake is paid once
    /// per connection, and the report counts them.
    #[arg(long)]
    pub tls: bool,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Set by [`main`] when it pinned this process to core 1 before the
    /// runtime started.
    #[arg(skip)]
    pub pinned_self: bool,
    /// A few seconds in all (4 streams, 2 rounds of 0.6 s): checks that the
    /// rig works and its output is right, not a measurement.
    #[arg(long)]
    pub smoke: bool,
}

impl Options {
    /// Whether the bench process should pin itself before its runtime
    /// starts (to core 1, beside the simulator).
    pub fn wants_pinning(&self) -> bool {
        !self.no_pin && legs::two_cores() && legs::which("taskset").is_some()
    }

    fn apply_smoke(&mut self) {
        if self.smoke {
            self.concurrency = 4;
            self.sweep.clear();
            self.rate = None;
            self.ttft_ms = 2;
            self.itl_ms = 5;
            self.tokens = 20;
            self.duration = Duration::from_millis(600);
            self.warmup = Duration::from_millis(300);
            self.ramp = None;
            self.settle = Duration::from_millis(300);
            self.rounds = 2;
        }
    }

    fn scenario(&self, concurrency: usize) -> Scenario {
        let arrivals = match self.rate {
            Some(rate) => Arrivals::Open {
                rate,
                poisson: self.poisson,
            },
            None => Arrivals::Closed { concurrency },
        };
        let ramp = self
            .ramp
            .unwrap_or(Duration::from_millis(self.itl_ms.max(1)))
            .min(self.warmup);
        Scenario {
            base: String::new(),
            tls: None,
            arrivals,
            streamed: !self.no_stream,
            ttft_ms: self.ttft_ms,
            itl_ms: self.itl_ms,
            tokens: self.tokens,
            warmup: self.warmup,
            duration: self.duration,
            ramp,
            settle: self.settle,
        }
    }
}

/// Parses the command line, pins the process and runs the benchmark.
pub fn main() -> ExitCode {
    let mut opts = <Options as clap::Parser>::parse();
    // The load generator shares core 1 with the simulator and leaves core 0
    // to the proxy under test. Pinning the main thread before the runtime
    // starts pins every thread it starts, and tokio sizes its worker pool
    // from the affinity mask (one worker).
    if opts.wants_pinning() {
        match legs::pin_current_thread(1) {
            Ok(()) => opts.pinned_self = true,
            Err(e) => eprintln!("warning: cannot pin the load generator to core 1: {e}"),
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The `tokenmeter` binary: `--tokenmeter-bin`, else the one beside this
/// program.
fn tokenmeter_bin(opts: &Options) -> anyhow::Result<PathBuf> {
    if let Some(bin) = &opts.tokenmeter_bin {
        return Ok(bin.clone());
    }
    let me = std::env::current_exe().context("locating this program")?;
    let bin = me.with_file_name("tokenmeter");
    anyhow::ensure!(
        bin.is_file(),
        "no tokenmeter binary beside {} (build both with `cargo build --release`, or pass --tokenmeter-bin)",
        me.display()
    );
    Ok(bin)
}

/// Runs the benchmark and prints the report.
pub async fn run(mut opts: Options) -> anyhow::Result<ExitCode> {
    opts.apply_smoke();
    if opts.baseline_bin.is_some() && !opts.legs.contains(&LegKind::Baseline) {
        let at = opts
            .legs
            .iter()
            .position(|&k| k == LegKind::Tokenmeter)
            .map_or(opts.legs.len(), |i| i + 1);
        opts.legs.insert(at, LegKind::Baseline);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let machine = report::Machine::read();
    let fd_limit = legs::raise_fd_limit();
    let mut rig = Rig::start(&RigOptions {
        tokenmeter_bin: tokenmeter_bin(&opts)?,
        legs: opts.legs.clone(),
        pin: opts.pinned_self,
        colocate: opts.colocate,
        nginx: opts.nginx.clone(),
        baseline_bin: opts.baseline_bin.clone(),
        tls: opts.tls,
        tokenmeter_config: match &opts.tokenmeter_config {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
            ),
            None => None,
        },
    })
    .await?;
    let mut notes = rig.notes.clone();
    if let Some(limit) = fd_limit {
        notes.push(format!("open-file limit {limit}"));
    }
    if opts.smoke {
        notes.push("smoke run: checks the rig and its output, not a measurement".to_owned());
    }
    notes.push(
        "each round of a leg runs a fresh proxy process (processes of one binary differ in speed)"
            .to_owned(),
    );
    let legs = rig.legs();
    let counts = if opts.sweep.is_empty() || opts.rate.is_some() {
        vec![opts.concurrency]
    } else {
        opts.sweep.clone()
    };

    let mut scenarios = Vec::new();
    for &concurrency in &counts {
        let scenario = opts.scenario(concurrency);
        let label = match (opts.rate, opts.no_stream) {
            (Some(rate), false) => format!("stream-open-{rate}rps"),
            (Some(rate), true) => format!("nonstream-open-{rate}rps"),
            (None, false) => format!("stream-c{concurrency}"),
            (None, true) => format!("nonstream-c{concurrency}"),
        };
        let mut runs = Vec::new();
        for round in 0..opts.rounds {
            for &kind in &legs {
                eprintln!(
                    "bench: {label} round {}/{} leg {}",
                    round + 1,
                    opts.rounds,
                    kind.name()
                );
                // Every round of a leg is a fresh process (`Rig::restart`);
                // the run's first was started with the rig.
                let fresh = if round > 0 || !scenarios.is_empty() {
                    rig.restart(kind).await
                } else {
                    Ok(())
                };
                let run = match fresh {
                    Ok(()) => rig.run_leg(kind, &scenario).await,
                    Err(e) => Err(e.context("restarting the leg's proxy")),
                };
                // One failed leg (a process that stopped answering) is
                // reported, not allowed to lose the run's other figures.
                match run {
                    Ok(run) => runs.push(run),
                    Err(e) => {
                        let note = format!(
                            "{label} round {} leg {} failed: {e:#}",
                            round + 1,
                            kind.name()
                        );
                        eprintln!("bench: {note}");
                        notes.push(note);
                    }
                }
                // Lets closed connections and the proxies settle between legs.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        scenarios.push(report::scenario(&label, &scenario, opts.rounds, &runs));
    }
    if opts.colocate && rig.pinned {
        notes.push(
            "co-located: the targets are not checked (they put the proxy on a core of its own)"
                .to_owned(),
        );
    }
    let targets = if opts.smoke || (opts.colocate && rig.pinned) {
        Vec::new()
    } else {
        report::check_targets(&scenarios)
    };
    let max_streams_under_1ms = if counts.len() > 1 {
        report::max_streams_under_1ms(&scenarios)
    } else {
        Vec::new()
    };
    let report = Report {
        tool: format!("tokenmeter bench {}", env!("CARGO_PKG_VERSION")),
        command,
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        machine,
        notes,
        scenarios,
        max_streams_under_1ms,
        targets,
    };
    print!("{}", report::text(&report));
    if let Some(path) = &opts.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    drop(rig);
    Ok(ExitCode::SUCCESS)
}
