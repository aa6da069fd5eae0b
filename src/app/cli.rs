//! The command line: `serve`, `check`, `rules`, `dashboard`, `sim`, `demo`,
//! `load` and `bench`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::CommandError;

use super::demo::{DemoArgs, SimArgs};
use crate::config::{Config, OtelEnv, Overrides};
use crate::dashboard::ClassView;
use crate::observe::access::AccessLog;
use slo::rules::Histograms;

/// A transparent metering reverse proxy for LLM inference.
#[derive(Debug, Parser)]
#[command(name = "tokenmeter", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "TOKENMETER_LOG_FORMAT"
    )]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy and the admin listener.
    Serve(ServeArgs),
    /// Validate a config file and print every problem at once.
    Check {
        /// The config file.
        #[arg(long, short, env = "TOKENMETER_CONFIG")]
        config: PathBuf,
    },
    /// Write Prometheus recording and alerting rules for the config's SLO
    /// classes (burn-rate alerts as in the Google SRE workbook, and the
    /// fleet's latency-load knee and headroom), or their objectives as
    /// Pyrra or Sloth objects.
    Rules {
        /// The config file (its `slo_files` define the classes).
        #[arg(long, short, env = "TOKENMETER_CONFIG")]
        config: PathBuf,
        /// Where to write the rules; standard output by default.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// What to write: Prometheus rules, Pyrra `ServiceLevelObjective`s
        /// (one YAML document each) or a Sloth `prometheus/v1` spec.
        #[arg(long, value_enum, default_value = "prometheus")]
        format: RulesFormat,
        #[command(flatten)]
        histograms: HistogramsArg,
    },
    /// Write the Grafana dashboard for a config's metrics and SLO classes.
    Dashboard {
        /// The config file (its metric namespace and SLO classes).
        #[arg(long, short, env = "TOKENMETER_CONFIG")]
        config: PathBuf,
        /// Where to write the dashboard JSON; standard output by default.
        #[arg(long, short)]
        out: Option<PathBuf>,
        #[command(flatten)]
        histograms: HistogramsArg,
    },
    /// Print the SHA-256 of each API key read from standard input (one per
    /// line), as `routes[i].tenant.api_keys.keys` lists them. Keys are read
    /// from standard input so they stay out of the shell's history and the
    /// process list.
    HashKey,
    /// Run the built-in OpenAI-compatible upstream simulator.
    Sim(SimArgs),
    /// Run the simulator, the proxy in front of it and a small steady load.
    Demo(DemoArgs),
    /// Send a small steady load of streamed chat requests (demos, compose).
    Load(LoadArgs),
    /// Benchmark the proxy's cost against the simulator, tokenmeter with
    /// metering off, and nginx (see docs/benchmarks.md): runs the
    /// `tokenmeter-bench` program installed beside this one, with these
    /// arguments (`tokenmeter bench --help` for its options).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// What `tokenmeter rules` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum RulesFormat {
    Prometheus,
    Pyrra,
    Sloth,
}

#[derive(Debug, Args)]
struct HistogramsArg {
    /// Which histograms the queries read: `classic` (the `_bucket`,
    /// `_count` and `_sum` series), or `native`, for a Prometheus that
    /// scrapes native histograms (`scrape_native_histograms`).
    #[arg(long, value_enum, default_value = "classic")]
    histograms: HistogramKind,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HistogramKind {
    Classic,
    Native,
}

impl HistogramsArg {
    fn get(&self) -> Histograms {
        match self.histograms {
            HistogramKind::Classic => Histograms::Classic,
            HistogramKind::Native => Histograms::Native,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// Base URL of the proxy (or any OpenAI-compatible server).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub target: String,
    /// Requests per second.
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    /// A header sent on every request, `'Name: value'` as curl's `-H`
    /// takes it (a tenant, a session key); repeat for more. It replaces
    /// any header of that name the load sends itself.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE", value_parser = sim::load::parse_header)]
    pub headers: Vec<sim::load::Header>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The config file. Without one, `--upstream` is required.
    #[arg(long, short, env = "TOKENMETER_CONFIG")]
    config: Option<PathBuf>,
    /// Upstream base URL: without a file, one catch-all route to it; with a
    /// file, it replaces every route's upstream.
    #[arg(long, env = "TOKENMETER_UPSTREAM")]
    upstream: Option<String>,
    /// Proxy listen address (overrides the file).
    #[arg(long, env = "TOKENMETER_LISTEN")]
    listen: Option<SocketAddr>,
    /// Admin listen address (overrides the file).
    #[arg(long, env = "TOKENMETER_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// Do not watch the config and SLO files for changes (SIGHUP still
    /// reloads them).
    #[arg(long, env = "TOKENMETER_NO_WATCH")]
    no_watch: bool,
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Bench { args } = &cli.command {
        return run_bench(args);
    }
    let (_log, access) = init_logging(cli.log_format);
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
    let result = runtime.block_on(run(cli.command, access));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", e.chain());
            ExitCode::FAILURE
        }
    }
}

/// Runs `command`; the proxies it starts write access lines to `access`.
async fn run(command: Command, access: AccessLog) -> Result<ExitCode, CommandError> {
    match command {
        Command::Serve(args) => {
            let overrides = Overrides {
                listen: args.listen,
                admin_listen: args.admin_listen,
                upstream: args.upstream,
                otel_env: OtelEnv::from_process(),
            };
            let config = match &args.config {
                Some(path) => Config::load(path, &overrides),
                None => Config::from_overrides(&overrides),
            };
            let config = match config {
                Ok(c) => c,
                Err(errors) => {
                    eprintln!("{errors}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            let source = args.config.map(|path| crate::app::ConfigSource {
                path,
                overrides,
                watch: !args.no_watch,
            });
            let signals = crate::app::Signals::install()?;
            let tls = (
                config.tls.is_some(),
                config.admin.web.as_ref().is_some_and(|w| w.tls.is_some()),
            );
            let running = crate::app::start_with(config, source, Some(access)).await?;
            // Not `print!`: a closed standard output must not stop the proxy.
            let banner = serve_banner(running.proxy_addr, running.admin_addr, tls);
            let _ = std::io::Write::write_all(&mut std::io::stdout(), banner.as_bytes());
            crate::app::run_until_shutdown(&running, signals).await;
            running.stop().await;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { config } => {
            let overrides = Overrides {
                otel_env: OtelEnv::from_process(),
                ..Overrides::default()
            };
            check(&config, &overrides)
        }
        Command::Rules {
            config,
            out,
            format,
            histograms,
        } => {
            let Some(loaded) = load_reporting(&config) else {
                return Ok(ExitCode::FAILURE);
            };
            if loaded.slo_classes.is_empty() {
                eprintln!(
                    "{}: no SLO classes: list SLO files under `slo_files`",
                    config.display()
                );
                return Ok(ExitCode::FAILURE);
            }
            let text = rules_text(&loaded, format, histograms.get());
            let Some(text) = text.map_err(CommandError::Rules)? else {
                eprintln!(
                    "{}: no class has an objective or a goodput target for {format:?} to hold",
                    config.display()
                );
                return Ok(ExitCode::FAILURE);
            };
            write_output(out.as_deref(), &text)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Dashboard {
            config,
            out,
            histograms,
        } => {
            let Some(loaded) = load_reporting(&config) else {
                return Ok(ExitCode::FAILURE);
            };
            let classes: Vec<ClassView> = loaded
                .slo_classes
                .iter()
                .map(|c| ClassView {
                    name: c.name.clone(),
                    goodput_target: c.goodput.target,
                    window: c.window,
                })
                .collect();
            let json =
                crate::dashboard::render(&loaded.metrics.namespace, &classes, histograms.get());
            let text = serde_json::to_string_pretty(&json)? + "\n";
            write_output(out.as_deref(), &text)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::HashKey => {
            let mut out = String::new();
            for line in std::io::stdin().lines() {
                let line = line.map_err(CommandError::io("reading keys from standard input"))?;
                let key = line.trim();
                if !key.is_empty() {
                    out.push_str(&crate::observe::tenant::key_hash_hex(key.as_bytes()));
                    out.push('\n');
                }
            }
            write_output(None, &out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sim(args) => {
            super::demo::run_sim(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo(args) => {
            super::demo::run_demo(args, access).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Load(args) => {
            let stop = super::Signals::install()?.shutdown();
            let summary =
                sim::load::run_load(args.target, args.rate, Vec::new(), args.headers, stop).await;
            println!(
                "load: {} sent, {} ok, {} failed",
                summary.sent, summary.ok, summary.failed
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { args } => Ok(run_bench(&args)),
    }
}

/// What `tokenmeter rules` writes for `config`'s classes in `format`:
/// `None` for a tool's objects when no class has an objective for it.
fn rules_text(
    config: &Config,
    format: RulesFormat,
    histograms: Histograms,
) -> Result<Option<String>, String> {
    let (classes, namespace) = (&config.slo_classes, &config.metrics.namespace);
    match format {
        RulesFormat::Prometheus => {
            let mut file = slo::rules::rules(classes, namespace);
            // The fleet's latency–load curves and knees, after the ratios.
            file.groups
                .extend(slo::rules::capacity_groups(classes, namespace));
            // Chargeback whatever the routes: a route a reload gives GPUs
            // is covered by the rule file already deployed.
            file.groups.push(slo::rules::chargeback_group(
                namespace,
                &slo::rules::CHARGEBACK_WINDOWS,
            ));
            // The follow-up cache-hit ratio and its alert, likewise.
            file.groups.push(slo::rules::turns_group(namespace));
            if histograms == Histograms::Native {
                file.groups
                    .extend(slo::rules::native_latency_groups(classes, namespace));
            }
            slo::rules::to_yaml(&file).map(Some)
        }
        RulesFormat::Pyrra => {
            let objects = slo::rules::pyrra::pyrra(classes, namespace, histograms);
            if objects.is_empty() {
                return Ok(None);
            }
            slo::rules::pyrra::to_yaml(&objects).map(Some)
        }
        RulesFormat::Sloth => {
            let specs = slo::rules::sloth::sloth(classes, namespace, histograms);
            if specs.is_empty() {
                return Ok(None);
            }
            slo::rules::sloth::to_yaml(&specs).map(Some)
        }
    }
}

/// What `serve` prints on standard output once it listens: where the
/// proxy and the admin listener are, and the admin listener's live page,
/// `/metrics` and `/slo` (an address that listens on every interface shown
/// as the loopback one, which a browser on the host can open). `tls` says
/// whether the proxy's and the admin listener's are on.
fn serve_banner(proxy: SocketAddr, admin: SocketAddr, tls: (bool, bool)) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let url = |addr: SocketAddr, tls: bool| {
        let ip = match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(ip) if ip.is_unspecified() => Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
    };
    let (proxy, admin) = (url(proxy, tls.0), url(admin, tls.1));
    format!(
        "tokenmeter serve: proxy on {proxy}, admin on {admin}\n\
         \x20 live page:  {admin}/\n\
         \x20 metrics:    {admin}/metrics\n\
         \x20 SLO status: {admin}/slo (as a table: {admin}/slo?format=text)\n"
    )
}

/// `tokenmeter check`: every problem, or `ok` and the OpenTelemetry export
/// the file and the `OTEL_*` variables make (its headers' names only).
fn check(path: &std::path::Path, overrides: &Overrides) -> Result<ExitCode, CommandError> {
    match Config::load(path, overrides) {
        Ok(c) => {
            println!("{}: ok ({} routes)", path.display(), c.routes.len());
            if let Some(warning) = c.admin_exposure() {
                println!("warning: {warning}");
            }
            match &c.otlp {
                None => println!("otlp: off"),
                Some(o) => {
                    let from = |key: &str| {
                        o.origins
                            .iter()
                            .find(|(k, _)| *k == key)
                            .map_or("default", |(_, v)| v)
                    };
                    for (signal, export) in [
                        ("metrics", &o.exports.metrics),
                        ("traces", &o.exports.traces),
                    ] {
                        let Some(e) = export else {
                            println!("otlp {signal}: off");
                            continue;
                        };
                        let headers: Vec<String> = e
                            .headers
                            .redacted()
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect();
                        let [endpoint, protocol, headers_from, timeout] = e.origins;
                        println!(
                            "otlp {signal}: {} over {} (endpoint from {endpoint}, protocol from {protocol}), timeout {:?} (from {timeout}), headers [{}] (from {headers_from})",
                            e.endpoint,
                            e.protocol.as_str(),
                            e.timeout,
                            headers.join(", "),
                        );
                    }
                    println!(
                        "otlp: service.name {} (from {}), metrics every {:?} (from {}), spans batched within {:?} (from {}), resource attributes [{}]",
                        o.service_name,
                        from("service_name"),
                        o.metrics_interval,
                        from("metrics_interval"),
                        o.traces_delay,
                        from("traces_delay"),
                        o.resource_attributes
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            println!("{errors}");
            eprintln!("{}: {} problem(s)", path.display(), errors.0.len());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `tokenmeter bench ARGS`: replaces this process with `tokenmeter-bench
/// ARGS` from beside this binary, so that signals and the exit status are
/// the benchmark's own.
fn run_bench(args: &[std::ffi::OsString]) -> ExitCode {
    let bench = match std::env::current_exe() {
        Ok(me) => me.with_file_name("tokenmeter-bench"),
        Err(e) => {
            eprintln!("error: cannot locate this program: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !bench.is_file() {
        eprintln!(
            "error: `tokenmeter bench` runs {}, which is not there: build it with \
             `cargo build --release` (it is not part of the container image)",
            bench.display()
        );
        return ExitCode::FAILURE;
    }
    let mut command = std::process::Command::new(&bench);
    command.args(args);
    #[cfg(unix)]
    let e = std::os::unix::process::CommandExt::exec(&mut command);
    #[cfg(not(unix))]
    let e = match command.status() {
        Ok(status) => return ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => e,
    };
    eprintln!("error: cannot run {}: {e}", bench.display());
    ExitCode::FAILURE
}

/// Log lines are written to standard error by a thread of their own, in
/// batches: a slow reader of that pipe (a container runtime's log driver)
/// must never block the threads that forward requests. When the writer's
/// buffer of lines is full, lines are dropped rather than waited for, and
/// counted (`tokenmeter_log_lines_dropped_total`). The guard flushes what is
/// buffered when `main` returns. Access lines go to the same writer, through
/// the [`AccessLog`] returned, which the proxy is given.
fn init_logging(format: LogFormat) -> (tracing_appender::non_blocking::WorkerGuard, AccessLog) {
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        // About a second of access-log lines at 16k requests/s, ~6 MB at
        // most while the pipe is stalled (the crate's default holds 128k).
        .buffered_lines_limit(16_384)
        .thread_name("tokenmeter-log")
        .finish(std::io::BufWriter::new(std::io::stderr()));
    // Colours only for a person at a terminal, not in a file or a log
    // collector's pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let access = AccessLog::new(
        writer.clone(),
        match format {
            LogFormat::Text => crate::observe::access::Format::Text { ansi },
            LogFormat::Json => crate::observe::access::Format::Json,
        },
    );
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOKENMETER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    (guard, access)
}

/// Loads a config, printing every problem to standard error when it is
/// invalid.
fn load_reporting(path: &std::path::Path) -> Option<Config> {
    match Config::load(path, &Overrides::default()) {
        Ok(c) => Some(c),
        Err(errors) => {
            eprintln!("{errors}");
            None
        }
    }
}

/// Writes generated text to `out`, or to standard output.
fn write_output(out: Option<&std::path::Path>, text: &str) -> Result<(), CommandError> {
    match out {
        Some(path) => std::fs::write(path, text)
            .map_err(CommandError::io(format!("writing {}", path.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}
