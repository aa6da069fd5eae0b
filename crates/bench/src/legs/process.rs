//! One child process of the rig: started (pinned with `taskset` when asked),
//! waited for until it listens, restarted, and stopped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

/// A child process of the rig, killed when dropped.
pub(super) struct Proc {
    child: Child,
    pub(super) pid: u32,
    name: &'static str,
    pub(super) log: PathBuf,
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
    pub(super) fn spawn(
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
    pub(super) async fn restart(&mut self, addr: SocketAddr) -> anyhow::Result<()> {
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
    pub(super) async fn ready(&mut self, addr: SocketAddr) -> anyhow::Result<()> {
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
