//! `tokenmeter sim` and `tokenmeter demo`: the simulator on its own, and the
//! embedded default that works out of the box (simulator, proxy in front of
//! it, a small steady load).

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
/// where to look, and runs until SIGINT/SIGTERM. The proxy writes access
/// lines to `access`.
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

    let overrides = Overrides {
        listen: Some(args.listen),
        admin_listen: Some(args.admin_listen),
        upstream: Some(format!("http://{sim_addr}")),
        ..Default::default()
    };
    let files = DemoFiles::write().map_err(CommandError::io("writing the demo config"))?;
    let config = Config::load(&files.config, &overrides).map_err(CommandError::Config)?;
    let running = super::start_with(config, None, Some(access)).await?;
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
        "  a steady load of {} request(s)/s is running; Ctrl-C stops.",
        args.rate
    );

    let load = tokio::spawn(sim::load::run_load(
        format!("http://{proxy}"),
        args.rate,
        stop.clone().cancelled_owned(),
    ));
    signals.shutdown().await;
    stop.cancel();
    let summary = load.await.unwrap_or_default();
    println!(
        "load: {} sent, {} ok, {} failed (some failures are simulated on purpose)",
        summary.sent, summary.ok, summary.failed
    );
    running.stop().await;
    match sim_task.await {
        Ok(result) => result.map_err(CommandError::io("the simulator"))?,
        Err(e) => tracing::error!(error = %e, "simulator task failed"),
    }
    Ok(())
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

const DEMO_CONFIG: &str = "\
# tokenmeter demo: the simulator behind one route per kind of traffic.
slo_files: [slo/*.yaml]
routes:
  - name: chat
    match: {path_prefix: /v1/chat/}
    upstream: http://127.0.0.1:8000
    slo: chat
    slo_header: x-slo-class
  - name: completions
    upstream: http://127.0.0.1:8000
    slo: code-completion
";

impl DemoFiles {
    fn write() -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tokenmeter-demo-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("slo"))?;
        for (name, text) in PRESETS {
            std::fs::write(dir.join("slo").join(name), text)?;
        }
        let config = dir.join("tokenmeter.yaml");
        std::fs::write(&config, DEMO_CONFIG)?;
        Ok(Self { dir, config })
    }
}

impl Drop for DemoFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
