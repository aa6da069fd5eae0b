//! The rig: the simulator and every proxy under test started as child
//! processes, placed on their cores, and each proxy started again for a
//! round of its own.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

use anyhow::Context as _;

use super::config::{nginx_config, nginx_version, tokenmeter_config};
use super::host::which;
use super::kind::LegKind;
use super::process::Proc;
use crate::tls::Certificate;

/// A free loopback port (released before the child binds it).
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// One target a leg sends to.
pub(super) struct Target {
    pub(super) kind: LegKind,
    pub(super) addr: SocketAddr,
    /// The proxy process (none for `direct`).
    pub(super) proc: Option<Proc>,
    /// A metering tokenmeter: its access log pairs with the client.
    pub(super) metered: bool,
    /// It terminates TLS (`--tls`; every leg but `direct`).
    pub(super) tls: bool,
}

/// The simulator, started once per run, and every proxy under test,
/// started with it and again for each later round ([`Rig::restart`]).
pub struct Rig {
    dir: PathBuf,
    pub(super) sim: Proc,
    pub(super) sim_addr: SocketAddr,
    pub(super) targets: Vec<Target>,
    /// The run's certificate (`--tls`), which the TLS legs serve and the
    /// load generator trusts.
    pub(super) tls: Option<Certificate>,
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
    /// The proxy legs terminate TLS (`--tls`).
    pub tls: bool,
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

        let tls = if opts.tls {
            let certificate = Certificate::make(&dir.join("tls"))?;
            notes.push(
                "TLS on: the proxy legs terminate TLS from the load generator (a certificate \
                 made for the run, ECDSA P-256, which the generator trusts; ALPN http/1.1; \
                 connections kept alive); the direct leg stays plain HTTP"
                    .to_owned(),
            );
            Some(certificate)
        } else {
            None
        };

        let mut targets = Vec::new();
        for &kind in &opts.legs {
            let target = match kind {
                LegKind::Direct => Target {
                    kind,
                    addr: sim_addr,
                    proc: None,
                    metered: false,
                    tls: false,
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
                    let mut text = tokenmeter_config(addr, admin, sim_addr, metered, tls.as_ref());
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
                        tls: tls.is_some(),
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
                    std::fs::write(&conf, nginx_config(addr, sim_addr, &prefix, tls.as_ref()))?;
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
                        "nginx: {} with worker_processes 1, proxy_buffering off, keepalive upstream{}",
                        nginx_version(&nginx),
                        if tls.is_some() {
                            ", listen ssl with the same certificate"
                        } else {
                            ""
                        }
                    ));
                    Target {
                        kind,
                        addr,
                        proc: Some(proc),
                        metered: false,
                        tls: tls.is_some(),
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
            tls,
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
}
