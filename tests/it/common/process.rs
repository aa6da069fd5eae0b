//! The `tokenmeter` binary as a child process: `tokenmeter serve` on
//! ephemeral ports, its start line read for them, killed when the test
//! ends.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// The `tokenmeter` binary of this build.
pub const BIN: &str = env!("CARGO_BIN_EXE_tokenmeter");

/// A `tokenmeter serve` child with JSON logs at info, once it has said it
/// started: its addresses and the rest of its log.
pub struct Served {
    pub child: Child,
    pub proxy: std::net::SocketAddr,
    pub admin: std::net::SocketAddr,
    pub lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
    /// The lines it logged up to and including the start-up line.
    pub early: Vec<String>,
}

/// A child process, killed if the test ends without stopping it (a failed
/// assertion must not leave a server running).
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs `kill -SIG` on `child`.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig}");
}

/// Sends `sig` (`-INT`, `-TERM`) to `child` and waits for it to exit
/// successfully.
pub async fn end(child: Child, sig: &str) {
    signal(&child, sig);
    let mut child = child;
    let status = tokio::task::spawn_blocking(move || child.0.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status}");
}

/// Starts `tokenmeter serve` on ephemeral ports with `args` added.
pub fn serve(args: &[&std::ffi::OsStr]) -> Served {
    serve_logging(args, "info")
}

/// [`serve`] with `TOKENMETER_LOG` set to `filter`, which must let
/// `tokenmeter::app` INFO lines through (the start-up line gives the ports).
pub fn serve_logging(args: &[&std::ffi::OsStr], filter: &str) -> Served {
    serve_wrapped(&[], args, filter)
}

/// [`serve_logging`], the binary run by the command `wrapper` (`prlimit
/// --nofile=256:256`, say) when it is not empty.
pub fn serve_wrapped(wrapper: &[&str], args: &[&std::ffi::OsStr], filter: &str) -> Served {
    serve_env(wrapper, args, filter, &[])
}

/// [`serve_wrapped`] with the variables `env` set too.
pub fn serve_env(
    wrapper: &[&str],
    args: &[&std::ffi::OsStr],
    filter: &str,
    env: &[(&str, &str)],
) -> Served {
    let mut command = match wrapper {
        [] => Command::new(BIN),
        [program, rest @ ..] => {
            let mut c = Command::new(program);
            c.args(rest).arg(BIN);
            c
        }
    };
    let mut child = command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--log-format", "json"])
        .args(args)
        .env("TOKENMETER_LOG", filter)
        .envs(env.iter().copied())
        // Its banner; the log on standard error says the same.
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut early = Vec::new();
    let started: serde_json::Value = loop {
        let line = lines.next().expect("serve exited before starting").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log lines");
        early.push(line);
        if v["fields"]["message"] == "tokenmeter started" {
            break v;
        }
    };
    let addr = |key: &str| started["fields"][key].as_str().unwrap().parse().unwrap();
    Served {
        proxy: addr("proxy_addr"),
        admin: addr("admin_addr"),
        child: Child(child),
        lines,
        early,
    }
}

/// A configuration file in `dir` for the sessions tests: sessions that end
/// 300 ms idle, and one route `chat` to `upstream` with its tenant in
/// `x-tenant` and a GPU at 3.6 an hour (a millionth a millisecond).
pub fn sessions_config(
    dir: &std::path::Path,
    upstream: std::net::SocketAddr,
) -> std::path::PathBuf {
    let path = dir.join("tokenmeter.yaml");
    std::fs::write(
        &path,
        format!(
            "sessions: {{idle_timeout: 300ms}}\nroutes:\n  - name: chat\n    upstream: http://{upstream}\n    tenant: {{header: x-tenant}}\n    gpus: 1\n    gpu_hourly_cost: 3.6\n"
        ),
    )
    .unwrap();
    path
}
