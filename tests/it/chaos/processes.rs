//! The child processes: the simulator, restartable on its port, and the
//! proxy; their config files, signals and figures.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{BIN, Child};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::{HEAD_TIMEOUT, MAX_CONNECTIONS};

/// The simulator child, restartable on its fixed port.
pub(super) struct Sim {
    pub(super) port: u16,
    pub(super) log: PathBuf,
    pub(super) child: Mutex<Option<Child>>,
    /// How many times it was started.
    pub(super) starts: AtomicU64,
}

impl Sim {
    pub(super) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Starts the simulator on a port of the system's choosing, which it
    /// keeps across restarts: its start line says which (a port found
    /// free and let go first could be taken by a test running beside
    /// this one before the simulator binds it).
    pub(super) async fn launch(log: PathBuf) -> Sim {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut child = spawn_sim("127.0.0.1:0", &log);
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let started = text.lines().find_map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                let addr = v["fields"]["addr"].as_str()?;
                (v["fields"]["message"] == "simulator listening")
                    .then(|| addr.parse::<SocketAddr>().unwrap().port())
            });
            if let Some(port) = started {
                break port;
            }
            if let Ok(Some(status)) = child.0.try_wait() {
                panic!("the simulator exited at start ({status}):\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "no start line within 15 s:\n{text}"
            );
            sleep(Duration::from_millis(20)).await;
        };
        let sim = Sim {
            port,
            log,
            child: Mutex::new(Some(child)),
            starts: AtomicU64::new(1),
        };
        while !health(sim.addr()).await {
            assert!(
                Instant::now() < deadline,
                "the simulator did not answer /health within 15 s"
            );
            sleep(Duration::from_millis(20)).await;
        }
        sim
    }

    /// Starts the simulator and waits until it answers `/health`; a start
    /// that fails (the port not yet free again) is retried, within 15 s.
    pub(super) async fn start(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        'spawn: loop {
            assert!(Instant::now() < deadline, "the simulator did not start");
            let mut child = spawn_sim(&self.addr().to_string(), &self.log);
            loop {
                if let Ok(Some(status)) = child.0.try_wait() {
                    eprintln!("sim exited at start ({status}); retrying");
                    sleep(Duration::from_millis(100)).await;
                    continue 'spawn;
                }
                if health(self.addr()).await {
                    *self.child.lock().unwrap() = Some(child);
                    self.starts.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if Instant::now() > deadline {
                    panic!("the simulator did not answer /health within 15 s");
                }
                sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// SIGKILL, and reap it.
    pub(super) fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            child.0.kill().unwrap();
            child.0.wait().unwrap();
        }
    }
}

/// `GET /health` answers 200, within 1 s.
async fn health(addr: SocketAddr) -> bool {
    let get = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: sim\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        Some(buf.starts_with(b"HTTP/1.1 200"))
    };
    matches!(timeout(Duration::from_secs(1), get).await, Ok(Some(true)))
}

/// `tokenmeter sim` on `listen`, logging JSON lines to the end of `log`.
fn spawn_sim(listen: &str, log: &Path) -> Child {
    let log = File::options().create(true).append(true).open(log).unwrap();
    let child = Command::new(BIN)
        .args(["sim", "--log-format", "json", "--listen", listen])
        .env("TOKENMETER_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    Child(child)
}

/// The config files: two valid ones that differ in a route's idle timeout,
/// and a broken one (YAML cut off inside a mapping).
pub(super) fn configs(sim_port: u16) -> [String; 3] {
    let valid = |idle: &str| {
        format!(
            "proxy:\n\
             \x20 max_connections: {MAX_CONNECTIONS}\n\
             \x20 request_head_timeout: {}s\n\
             \x20 overload_timeout: 2s\n\
             metrics:\n\
             \x20 models:\n\
             \x20   allow: [sim-model]\n\
             routes:\n\
             \x20 - name: chaos\n\
             \x20   upstream: http://127.0.0.1:{sim_port}\n\
             \x20   timeouts:\n\
             \x20     connect: 2s\n\
             \x20     response_headers: 10s\n\
             \x20     idle: {idle}\n\
             \x20     request_body: 2s\n\
             \x20     request_body_total: 5s\n",
            HEAD_TIMEOUT.as_secs()
        )
    };
    let broken = format!(
        "proxy:\n  max_connections: {MAX_CONNECTIONS}\nroutes:\n  - name: chaos\n    upstream: [http://127.0.0.1:{sim_port}\n    timeouts: {{idle: 10s\n"
    );
    [valid("10s"), valid("11s"), broken]
}

/// Replaces `path` with `text` in one rename, so a reload never reads half
/// a file.
pub(super) fn install(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The proxy child and where it listens.
pub(super) struct Proxy {
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) addr: SocketAddr,
    pub(super) admin: SocketAddr,
    pub(super) log: PathBuf,
}

/// Starts `tokenmeter serve` with its log going to `log`, and waits (10 s)
/// for its start line to learn its ports.
pub(super) async fn start_proxy(config: &Path, log: &Path) -> Proxy {
    let file = File::create(log).unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .args([
            "--no-watch",
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env("TOKENMETER_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    let mut child = Child(child);
    let pid = child.0.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["fields"]["message"] == "tokenmeter started" {
                let addr = |k: &str| v["fields"][k].as_str().unwrap().parse().unwrap();
                return Proxy {
                    addr: addr("proxy_addr"),
                    admin: addr("admin_addr"),
                    child,
                    pid,
                    log: log.to_owned(),
                };
            }
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("tokenmeter serve exited at start ({status}):\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "no start line within 10 s:\n{text}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// `kill -SIG pid`.
pub(super) async fn signal(pid: u32, sig: &str) {
    let status = tokio::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// VmRSS and VmHWM in KiB, and the number of open file descriptors.
pub(super) fn proc_figures(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (kib("VmRSS:"), kib("VmHWM:"), fds)
}
