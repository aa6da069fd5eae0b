//! `tokenmeter sim` and `tokenmeter demo`: the simulator on its own, and the
//! embedded default that works out of the box (simulator, proxy in front of
//! it, a small steady load from a few tenants, agent-like sessions, and a
//! bill for their GPU time).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::CommandError;
use super::Signals;
use crate::config::{Config, Overrides};
use crate::observe::access::AccessLog;
use sim::{self, SimConfig};

#[derive(Debug, Args)]
pub(crate) struct SimArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Time to first token, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub ttft_ms: u64,
    /// Time between tokens, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub itl_ms: u64,
    /// Output tokens per choice.
    #[arg(long, default_value_t = 50)]
    pub tokens: u32,
    /// Model name reported when a request names none.
    #[arg(long, default_value = "sim-model")]
    pub model: String,
    /// Stamp every response's frames with their send time (as if each
    /// request carried `x-sim-stamp: 1`).
    #[arg(long)]
    pub stamp: bool,
    /// Batch-limited mode: at most N requests generate at once, the others queue (FIFO); serves `/metrics` in vLLM's names.
    #[arg(long, value_name = "N")]
    pub slots: Option<std::num::NonZeroU32>,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Proxy listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Admin listen address.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub admin_listen: SocketAddr,
    /// Simulator listen address (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sim_listen: SocketAddr,
    /// Requests per second of the built-in load (0 for none).
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    /// Run the ramp of concurrent clients on route `batched` (a
    /// batch-limited engine), whose latency-vs-load curve shows a knee.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub ramp: bool,
    /// Coding agents running tasks on route `chat`, each task one session
    /// (`x-session-id`): tool calls, sub-agents at once, follow-ups.
    #[arg(long, default_value_t = 3)]
    pub agents: usize,
    /// Write an access line per request to standard error, as `serve`
    /// does. Off by default: several lines a second would scroll the
    /// banner, which says where to look, out of the terminal.
    #[arg(long)]
    pub access_log: bool,
}

fn sim_config(args: &SimArgs) -> SimConfig {
    SimConfig {
        ttft: Duration::from_millis(args.ttft_ms),
        itl: Duration::from_millis(args.itl_ms),
        tokens: args.tokens,
        model: args.model.clone(),
        stamp: args.stamp,
        slots: args.slots,
        ..SimConfig::default()
    }
}

/// Runs the simulator until SIGINT/SIGTERM.
pub(crate) async fn run_sim(args: SimArgs) -> Result<(), CommandError> {
    let signals = Signals::install()?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(CommandError::io(format!(
            "binding the simulator on {}",
            args.listen
        )))?;
    let addr = listener
        .local_addr()
        .map_err(CommandError::io("the simulator's address"))?;
    tracing::info!(%addr, ttft_ms = args.ttft_ms, itl_ms = args.itl_ms, tokens = args.tokens, "simulator listening");
    sim::serve(listener, sim_config(&args), signals.shutdown())
        .await
        .map_err(CommandError::io("the simulator"))?;
    Ok(())
}

/// Starts the simulator, the proxy in front of it and a steady load, prints
/// where to look, and runs until SIGINT/SIGTERM. With `--access-log`, the
/// proxy writes access lines to `access`.
pub(crate) async fn run_demo(args: DemoArgs, access: AccessLog) -> Result<(), CommandError> {
    let signals = Signals::install()?;
    let stop = CancellationToken::new();
    let sim_listener = TcpListener::bind(args.sim_listen)
        .await
        .map_err(CommandError::io(format!(
            "binding the simulator on {}",
            args.sim_listen
        )))?;
    let sim_addr = sim_listener
        .local_addr()
        .map_err(CommandError::io("the simulator's address"))?;
    let sim_task = tokio::spawn(sim::serve(
        sim_listener,
        SimConfig::default(),
        stop.clone().cancelled_owned(),
    ));
    // The ramp's engine: a batch-limited simulator, whose knee the ramp
    // shows.
    let batched_listener = TcpListener::bind(SocketAddr::new(args.sim_listen.ip(), 0))
        .await
        .map_err(CommandError::io("binding the batch-limited simulator"))?;
    let batched_addr = batched_listener
        .local_addr()
        .map_err(CommandError::io("the batch-limited simulator's address"))?;
    let batched_task = tokio::spawn(sim::serve(
        batched_listener,
        batched_sim(),
        stop.clone().cancelled_owned(),
    ));

    let overrides = Overrides {
        listen: Some(args.listen),
        admin_listen: Some(args.admin_listen),
        ..Default::default()
    };
    let files = DemoFiles::write(sim_addr, batched_addr)
        .map_err(CommandError::io("writing the demo config"))?;
    let config = Config::load(&files.config, &overrides).map_err(CommandError::Config)?;
    let access = args.access_log.then_some(access);
    let running = super::start_with(config, None, access).await?;
    let proxy = running.proxy_addr;
    let admin = running.admin_addr;

    println!(
        "tokenmeter demo: open http://{admin}/ for live charts of latency, goodput and SLO status"
    );
    println!("  simulator on http://{sim_addr}, proxy on http://{proxy}, admin on http://{admin}");
    println!(
        "  try:     curl -N http://{proxy}/v1/chat/completions -H 'content-type: application/json' \\"
    );
    println!(
        "             -d '{{\"model\":\"demo\",\"stream\":true,\"stream_options\":{{\"include_usage\":true}},\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    println!("  metrics: curl -s http://{admin}/metrics | grep '^llm_'");
    println!(
        "  goodput: curl -s 'http://{admin}/slo?format=text'   (SLO classes: the presets of config/slo/)"
    );
    println!(
        "  bill:    the page's \"Who used the GPUs\", or curl -s 'http://{admin}/slo?format=text': tenants {} on a GPU per route at {GPU_HOURLY_COST} USD an hour",
        DEMO_TENANTS.join(", ")
    );
    println!(
        "  a steady load of {} request(s)/s is running; Ctrl-C stops.",
        args.rate
    );
    if !args.access_log {
        println!("  the access log is off, to keep this in view (`--access-log` turns it on)");
    }

    let ramp = args.ramp.then(|| {
        println!(
            "  a ramp of {} concurrent clients (each step {}s) runs on route `batched`, a {BATCHED_SLOTS}-slot engine:",
            RAMP_STEPS.map(|s| s.to_string()).join(", "),
            RAMP_HOLD.as_secs()
        );
        println!(
            "  the page's latency-vs-load chart shows its knee at {BATCHED_SLOTS} within about {} minutes",
            (RAMP_STEPS.len() as u64 * RAMP_HOLD.as_secs()).div_ceil(60) + 1
        );
        tokio::spawn(sim::ramp::run_ramp(
            format!("http://{proxy}/batched"),
            sim::ramp::Ramp {
                steps: RAMP_STEPS.to_vec(),
                hold: RAMP_HOLD,
                max_tokens: BATCHED_TOKENS,
                tenants: tenants(),
            },
            stop.clone().cancelled_owned(),
        ))
    });
    if args.agents > 0 {
        println!(
            "  sessions: {} coding agents run tasks on route `chat`, one session each (x-session-id), ending {}s after their last turn: the page's \"Sessions\"",
            args.agents,
            SESSION_IDLE.as_secs()
        );
    }
    let agents = tokio::spawn(sim::agent::run_agents(
        format!("http://{proxy}"),
        sim::agent::Agents {
            agents: args.agents,
            tenants: tenants(),
            max_tokens: AGENT_TOKENS,
            between_tasks: Duration::from_secs(2),
        },
        stop.clone().cancelled_owned(),
    ));
    let load = tokio::spawn(sim::load::run_load(
        format!("http://{proxy}"),
        args.rate,
        tenants(),
        Vec::new(),
        stop.clone().cancelled_owned(),
    ));
    signals.shutdown().await;
    stop.cancel();
    let summary = load.await.unwrap_or_default();
    println!(
        "load: {} sent, {} ok, {} failed (some failures are simulated on purpose)",
        summary.sent, summary.ok, summary.failed
    );
    let summary = agents.await.unwrap_or_default();
    if summary.sent > 0 {
        println!(
            "agents: {} sent, {} ok, {} failed",
            summary.sent, summary.ok, summary.failed
        );
    }
    if let Some(ramp) = ramp {
        let summary = ramp.await.unwrap_or_default();
        println!(
            "ramp: {} sent, {} ok, {} failed",
            summary.sent, summary.ok, summary.failed
        );
    }
    running.stop().await;
    for (name, task) in [
        ("simulator", sim_task),
        ("batch-limited simulator", batched_task),
    ] {
        match task.await {
            Ok(result) => result.map_err(CommandError::io(name))?,
            Err(e) => tracing::error!(error = %e, "{name} task failed"),
        }
    }
    Ok(())
}

/// The tenants of the demo's clients: the load's take 3, 2 and 1 of every
/// 6 requests, the ramp's clients name them in turn.
const DEMO_TENANTS: [&str; 3] = ["assistant", "search", "reports"];

fn tenants() -> Vec<String> {
    DEMO_TENANTS.map(str::to_owned).to_vec()
}

/// What each simulated GPU costs an hour, in USD: a plausible cloud price
/// for one data-centre GPU.
const GPU_HOURLY_COST: f64 = 2.5;

/// How long a session lasts after its last turn: short, so that the
/// agents' sessions end while one watches.
const SESSION_IDLE: Duration = Duration::from_secs(20);
/// Output tokens of an agent's request.
const AGENT_TOKENS: u32 = 24;

/// Slots of the ramp's engine: where its knee is.
const BATCHED_SLOTS: u32 = 4;
/// Output tokens of a ramp request.
const BATCHED_TOKENS: u32 = 40;
/// The ramp's steps: up to twice the slots, past the knee.
const RAMP_STEPS: [u32; 7] = [1, 2, 3, 4, 5, 6, 8];
/// How long each step lasts: a request holds its slot about 0.75 s, so a
/// step of one client sends about 26, above the 20 judged requests a load
/// bucket needs before the knee is believed.
const RAMP_HOLD: Duration = Duration::from_secs(20);

/// The ramp's engine: a first token after 150 ms and one every 15 ms, 40
/// of them, so a request holds its slot about 0.75 s and one that waits
/// for a slot misses the `chat` class's TTFT of 500 ms at p95.
fn batched_sim() -> SimConfig {
    SimConfig {
        ttft: Duration::from_millis(150),
        itl: Duration::from_millis(15),
        tokens: BATCHED_TOKENS,
        slots: std::num::NonZeroU32::new(BATCHED_SLOTS),
        ..SimConfig::default()
    }
}

/// The demo's config: one route per SLO preset class in front of the
/// simulator, written with the presets (embedded in the binary, so the demo
/// works from any directory) to a private folder that is removed on drop.
struct DemoFiles {
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
}

/// The SLO presets shipped in `config/slo/`.
const PRESETS: [(&str, &str); 4] = [
    ("chat.yaml", include_str!("../../config/slo/chat.yaml")),
    (
        "code-completion.yaml",
        include_str!("../../config/slo/code-completion.yaml"),
    ),
    (
        "document-generation.yaml",
        include_str!("../../config/slo/document-generation.yaml"),
    ),
    ("batch.yaml", include_str!("../../config/slo/batch.yaml")),
];

/// The demo's config, for the simulators at `sim` and `batched`.
fn demo_config(sim: SocketAddr, batched: SocketAddr) -> String {
    let tenant = sim::load::TENANT_HEADER;
    let idle = SESSION_IDLE.as_secs();
    format!(
        "\
# tokenmeter demo: the simulator behind one route per kind of traffic, and
# a batch-limited engine whose capacity a ramp of clients explores. Each
# simulator stands for one GPU, counted on the route its clients use, and
# priced, so that the tenants' bill shows who used it; `completions` shares
# `chat`'s simulator, whose GPU `chat` counts. The agents' sessions end
# {idle}s after their last turn.
slo_files: [slo/*.yaml]
sessions:
  idle_timeout: {idle}s
routes:
  - name: batched
    match: {{path_prefix: /batched/}}
    strip_prefix: true
    upstream: http://{batched}
    slo: chat
    engine_metrics: http://{batched}/metrics
    gpus: 1
    gpu_hourly_cost: {GPU_HOURLY_COST}
    tenant: {{header: {tenant}}}
  - name: chat
    match: {{path_prefix: /v1/chat/}}
    upstream: http://{sim}
    slo: chat
    slo_header: x-slo-class
    gpus: 1
    gpu_hourly_cost: {GPU_HOURLY_COST}
    tenant: {{header: {tenant}}}
  - name: completions
    upstream: http://{sim}
    slo: code-completion
"
    )
}

impl DemoFiles {
    fn write(sim: SocketAddr, batched: SocketAddr) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tokenmeter-demo-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("slo"))?;
        for (name, text) in PRESETS {
            std::fs::write(dir.join("slo").join(name), text)?;
        }
        let config = dir.join("tokenmeter.yaml");
        std::fs::write(&config, demo_config(sim, batched))?;
        Ok(Self { dir, config })
    }
}

impl Drop for DemoFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
