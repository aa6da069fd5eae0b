//! The binary as a user runs it: `check` reports every problem with its
//! location, `serve` runs from flags alone and stops cleanly on SIGTERM,
//! and reloads its files on SIGHUP. And the README that tells a newcomer
//! how: short, its links sound, its test commands those CI runs. The
//! demo out of the box: `demo.rs`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

mod demo;

#[test]
fn check_accepts_every_shipped_config() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let out = Command::new(BIN)
                .arg("check")
                .arg("--config")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

#[test]
fn check_reports_every_problem_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "listen: 0.0.0.0:80800\n\
         admin:\n  listn: 127.0.0.1:9464\n\
         routes:\n\
         \x20 - name: a\n    upstream: ftp://x\n    timeouts: {idle: 5 parsecs}\n\
         \x20 - name: a\n    match: {path_prefix: v1}\n    upstream: http://127.0.0.1:8000\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let file = path.display().to_string();
    for (line, key) in [
        (1, "listen"),
        (3, "admin.listn"),
        (6, "routes[0].upstream"),
        (7, "routes[0].timeouts.idle"),
        (8, "routes[1].name"),
        (9, "routes[1].match.path_prefix"),
    ] {
        let prefix = format!("{file}:{line}:");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(&format!(": {key}: "))),
            "no error for {key} at line {line} in:\n{stdout}"
        );
    }
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
}

#[test]
fn serve_without_a_file_needs_an_upstream() {
    let out = Command::new(BIN)
        .arg("serve")
        .env_remove("TOKENMETER_UPSTREAM")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--upstream"));
}

/// `tokenmeter serve` on ephemeral ports, with no file watch and neither
/// `TOKENMETER_CONFIG` nor `TOKENMETER_UPSTREAM` from the environment: a
/// command for a start that is refused.
fn serve_command() -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0", "--no-watch"])
        .env_remove("TOKENMETER_CONFIG")
        .env_remove("TOKENMETER_UPSTREAM");
    command
}

/// Runs `command` (one that should refuse its config and exit) to its end,
/// killing it if it is still running after 10 s: its exit status, standard
/// output and standard error.
fn run_refused(command: &mut Command) -> (std::process::ExitStatus, String, String) {
    fn read_all(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<String> {
        let mut pipe = pipe.unwrap();
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).unwrap();
            text
        })
    }
    let mut child = Child(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = read_all(child.0.stdout.take());
    let stderr = read_all(child.0.stderr.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after 10 s: the config was not refused"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, stdout.join().unwrap(), stderr.join().unwrap())
}

/// Upstream URLs with a secret in their query, fragment or user info, how
/// each is refused, and how the refusal shows it.
const SECRET_UPSTREAMS: [(&str, &str, &str); 4] = [
    (
        "http://host/?api_key=s3cret",
        "must not have a query or fragment",
        "`http://host/?api_key=<redacted>`",
    ),
    (
        "http://host/#s3cret",
        "must not have a query or fragment",
        "`http://host/#<redacted>`",
    ),
    (
        "http://u:s3cret@host/",
        "must not contain user info",
        "`http://***@host/`",
    ),
    // One that is not a URL at all.
    (
        "http://host:bad/?key=s3cret",
        "invalid port",
        "`http://host:bad/?key=<redacted>`",
    ),
];

/// `serve --upstream URL` (or `TOKENMETER_UPSTREAM`, or with a config
/// file) refuses a URL with a secret in it, naming the problem and
/// showing the URL redacted, never the secret.
#[test]
fn serve_refuses_a_secret_upstream_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &file,
        "routes:\n  - name: r\n    upstream: http://127.0.0.1:1\n",
    )
    .unwrap();
    for (url, problem, shown) in SECRET_UPSTREAMS {
        let mut by_flag = serve_command();
        by_flag.args(["--upstream", url]);
        let mut by_env = serve_command();
        by_env.env("TOKENMETER_UPSTREAM", url);
        let mut over_a_file = serve_command();
        over_a_file
            .arg("--config")
            .arg(&file)
            .args(["--upstream", url]);
        for mut command in [by_flag, by_env, over_a_file] {
            let (status, stdout, stderr) = run_refused(&mut command);
            assert_eq!(status.code(), Some(1), "{url}: {stderr}");
            let line = format!("<flags>: --upstream: invalid URL {shown}: ");
            assert!(stderr.contains(&line), "{url}: {stderr}");
            assert!(stderr.contains(problem), "{url}: {stderr}");
            assert!(!stdout.contains("s3cret"), "{url}: {stdout}");
            assert!(!stderr.contains("s3cret"), "{url}: {stderr}");
        }
    }
}

/// `check` and `serve` refuse a config file whose upstreams and OTLP
/// endpoint carry secrets, each error at its line and key, naming the
/// problem and showing the URL redacted, never the secret.
#[test]
fn check_and_serve_refuse_secret_urls_in_a_file_without_echoing_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.yaml");
    let mut yaml =
        String::from("otlp:\n  endpoint: http://collector:4318/?token=s3cret#s3cret\nroutes:\n");
    for (i, (url, _, _)) in SECRET_UPSTREAMS.iter().enumerate() {
        yaml.push_str(&format!(
            "  - name: r{i}\n    match: {{path_prefix: /r{i}/}}\n    upstream: {url}\n"
        ));
    }
    std::fs::write(&path, &yaml).unwrap();
    let file = path.display().to_string();
    let expected: Vec<(String, &str, &str)> = std::iter::once((
        format!("{file}:2:13: otlp.endpoint: invalid URL "),
        "must not have a query or fragment",
        "`http://collector:4318/?token=<redacted>#<redacted>`",
    ))
    .chain(
        SECRET_UPSTREAMS
            .iter()
            .enumerate()
            .map(|(i, &(_, problem, shown))| {
                (
                    format!(
                        "{file}:{}:15: routes[{i}].upstream: invalid URL ",
                        6 + 3 * i
                    ),
                    problem,
                    shown,
                )
            }),
    )
    .collect();

    let (status, stdout, stderr) =
        run_refused(Command::new(BIN).arg("check").arg("--config").arg(&path));
    assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("s3cret"), "{stdout}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert_eq!(stdout.lines().count(), expected.len(), "{stdout}");
    for (line, (prefix, problem, shown)) in stdout.lines().zip(&expected) {
        assert!(line.starts_with(&format!("{prefix}{shown}: ")), "{line}");
        assert!(line.contains(problem), "{line}");
    }

    let (status, stdout, stderr) = run_refused(serve_command().arg("--config").arg(&path));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(!stdout.contains("s3cret"), "{stdout}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    for (prefix, problem, shown) in &expected {
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&format!("{prefix}{shown}: ")) && l.contains(problem)),
            "no `{prefix}{shown}` in:\n{stderr}"
        );
    }
}

/// `tokenmeter serve` from flags alone, in front of `upstream`.
fn serve_in_front_of(upstream: std::net::SocketAddr) -> Served {
    let upstream = format!("http://{upstream}");
    serve(&["--upstream".as_ref(), upstream.as_ref()])
}

#[tokio::test]
async fn serve_from_flags_proxies_and_stops_on_sigterm() {
    let sim = start_sim(schedule(5, 1, 5)).await;
    let Served {
        child,
        proxy,
        admin,
        mut lines,
        ..
    } = serve_in_front_of(sim);
    let (head, body) = chat_request(
        "m1",
        true,
        &[
            ("x-request-id", "req-7f3a"),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        ],
    );
    let resp = raw_exchange(proxy, &head, &body).await;
    assert_eq!(resp.status, 200);
    let s = scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) == 1.0).await;
    assert_eq!(
        sum(
            &s,
            "llm_requests_total",
            &[("route", "default"), ("outcome", "ok")]
        ),
        1.0
    );
    // One access-log line per request, with what an operator greps for.
    let access: serde_json::Value = loop {
        let line = lines.next().expect("serve exited").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log lines");
        if v["target"] == "tokenmeter::access" {
            break v;
        }
    };
    let f = &access["fields"];
    assert_eq!(f["route"], "default");
    assert_eq!(f["model"], "m1");
    assert_eq!(f["request_id"], "req-7f3a");
    assert_eq!(f["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let client = f["client"].as_str().unwrap();
    assert!(client.starts_with("127.0.0.1:"), "{client}");
    assert_eq!(f["status"], 200);
    assert_eq!(f["outcome"], "ok");
    assert_eq!(f["output_tokens"], 5);
    assert!(f["ttft_ms"].as_f64().unwrap() >= 5.0);
    assert!(f["e2el_ms"].as_f64().unwrap() >= f["ttft_ms"].as_f64().unwrap());
    // The configuration in force, flags applied.
    let config = get(admin, "/config").await;
    let config: serde_json::Value = serde_json::from_slice(&config.body()).unwrap();
    assert_eq!(config["routes"][0]["upstream"], format!("http://{sim}"));
    assert_eq!(config["listen"], "127.0.0.1:0");
    let health = get(admin, "/healthz").await;
    assert_eq!(health.status, 200);
    end(child, "-TERM").await;
}

#[tokio::test]
async fn the_log_filter_turns_the_access_log_off() {
    let sim = start_sim(schedule(5, 1, 5)).await;
    let upstream = format!("http://{sim}");
    let Served {
        child,
        proxy,
        admin,
        lines,
        ..
    } = serve_logging(
        &["--upstream".as_ref(), upstream.as_ref()],
        "info,tokenmeter::access=off",
    );
    let (head, body) = chat_request("m1", true, &[("x-request-id", "r1")]);
    assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);
    scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) == 1.0).await;
    end(child, "-TERM").await;
    let rest: Vec<serde_json::Value> = lines
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    // The lines written after the request are there, its access line not.
    assert!(
        rest.iter().any(|v| v["fields"]["message"] == "drained"),
        "{rest:?}"
    );
    assert!(
        rest.iter().all(|v| v["target"] != "tokenmeter::access"),
        "{rest:?}"
    );
}

/// Text lines into a pipe (a file, a log collector) carry no colour codes,
/// the access line included.
#[tokio::test]
async fn text_logs_into_a_pipe_have_no_colour_codes() {
    let sim = start_sim(schedule(5, 1, 5)).await;
    let mut child = Child(
        Command::new(BIN)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args([
                "--upstream",
                &format!("http://{sim}"),
                "--log-format",
                "text",
            ])
            .env("TOKENMETER_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let started = loop {
        let line = lines.next().expect("serve exited before starting").unwrap();
        if line.contains("tokenmeter started") {
            break line;
        }
    };
    let proxy: std::net::SocketAddr = started
        .split("proxy_addr=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    let (head, body) = chat_request("m1", true, &[("x-request-id", "r1")]);
    assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);
    let access = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if line.contains("tokenmeter::access") {
            break line;
        }
    };
    assert!(!started.contains('\x1b'), "{started:?}");
    assert!(!access.contains('\x1b'), "{access:?}");
    assert!(
        access.contains(" INFO tokenmeter::access: request route=default model=\"m1\""),
        "{access}"
    );
    assert!(
        access.contains(" request_id=\"r1\" client=127.0.0.1:"),
        "{access}"
    );
    assert!(access.contains(" status=200 outcome=\"ok\""), "{access}");
    end(child, "-TERM").await;
}

#[tokio::test]
async fn serve_reloads_on_sighup_and_logs_a_rejected_file() {
    let sim = start_sim(schedule(5, 1, 5)).await;
    let dir = tempfile::tempdir().unwrap();
    let slo = dir.path().join("classes.yaml");
    let class =
        |target: &str| format!("classes:\n  - name: c\n    goodput: {{target: {target}}}\n");
    std::fs::write(&slo, class("0.5")).unwrap();
    // The file's upstream is unreachable: `--upstream` replaces it, on
    // start and on every reload.
    std::fs::write(
        dir.path().join("main.yaml"),
        "slo_files: [classes.yaml]\nroutes:\n  - name: r\n    upstream: http://127.0.0.1:1\n    slo: c\n",
    )
    .unwrap();
    let config = dir.path().join("main.yaml");
    let upstream = format!("http://{sim}");
    let Served {
        child,
        proxy,
        admin,
        lines,
        ..
    } = serve(&[
        "--no-watch".as_ref(),
        "--config".as_ref(),
        config.as_ref(),
        "--upstream".as_ref(),
        upstream.as_ref(),
    ]);
    // Drain the log so the child never blocks on a full pipe.
    let log = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<String>>());
    let target = |s: &[Sample]| {
        value(
            s,
            "llm_slo_objective_target",
            &[("slo", "c"), ("objective", "goodput")],
        )
    };
    let reloads = |s: &[Sample], result: &str| {
        value(s, "tokenmeter_config_reload_total", &[("result", result)])
    };

    std::fs::write(&slo, class("0.7")).unwrap();
    signal(&child, "-HUP");
    let s = scrape_until(admin, |s| reloads(s, "success") >= 1.0).await;
    assert_eq!(reloads(&s, "success"), 1.0);
    assert_eq!(target(&s), 0.7);
    let (head, body) = chat_request("m1", true, &[]);
    assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);

    std::fs::write(&slo, class("7")).unwrap();
    signal(&child, "-HUP");
    let s = scrape_until(admin, |s| reloads(s, "failure") >= 1.0).await;
    assert_eq!(reloads(&s, "failure"), 1.0);
    assert_eq!(target(&s), 0.7);
    assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);

    end(child, "-TERM").await;
    let log = log.join().unwrap();
    let rejected: Vec<serde_json::Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["level"] == "ERROR")
        .collect();
    assert!(
        rejected.iter().any(|v| v["fields"]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("classes.yaml"))
            && v["fields"]["line"] == 3),
        "{log:#?}"
    );
}

/// Logging never blocks forwarding: with its standard error never read (a
/// stalled log pipe), `serve` goes on answering requests, each of which
/// writes an access-log line, far past what the pipe holds.
#[tokio::test]
async fn serve_keeps_forwarding_when_nobody_reads_its_log() {
    let sim = start_sim(sim::SimConfig {
        ttft: Duration::ZERO,
        itl: Duration::ZERO,
        tokens: 1,
        ..Default::default()
    })
    .await;
    // `_lines` keeps the pipe open, unread.
    let Served {
        child,
        proxy,
        admin,
        lines: _lines,
        ..
    } = serve_in_front_of(sim);
    // A pipe holds 64 KiB; each access-log line is over 300 bytes.
    const REQUESTS: usize = 1000;
    let (head, body) = chat_request("m1", false, &[]);
    for _ in 0..REQUESTS {
        let resp = tokio::time::timeout(Duration::from_secs(10), raw_exchange(proxy, &head, &body))
            .await
            .expect("the proxy stalled on its log");
        assert_eq!(resp.status, 200);
    }
    let s = scrape_until(admin, |s| {
        sum(s, "llm_requests_total", &[]) == REQUESTS as f64
    })
    .await;
    assert_eq!(sum(&s, "llm_requests_total", &[]), REQUESTS as f64);
    end(child, "-TERM").await;
}

/// The product is built without the benchmark rig: no dependency of the
/// `tokenmeter` package, of any kind, is `tokenmeter-bench` (the rig runs
/// beside the product as a binary of its own).
#[test]
fn the_product_does_not_depend_on_the_benchmark_rig() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{out:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let product = packages
        .iter()
        .find(|p| p["name"] == "tokenmeter")
        .expect("the product package");
    let deps: Vec<&str> = product["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(deps.contains(&"tokenmeter-meter"), "{deps:?}");
    assert!(!deps.contains(&"tokenmeter-bench"), "{deps:?}");
}

/// The README is a newcomer's page, under 250 lines: the reference is in
/// `docs/`, behind links that must lead somewhere, and the test commands
/// it gives are the ones `.ci/run` runs, so they cannot drift apart.
#[test]
fn the_readme_is_short_its_links_resolve_and_ci_runs_its_test_commands() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 250,
        "README.md has {lines} lines: move reference material to docs/"
    );

    // Every relative link names a file, and its anchor a heading there.
    for link in readme.split("](").skip(1).filter_map(|s| s.split_once(')')) {
        let target = link.0;
        if target.starts_with("http") {
            continue;
        }
        let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
        assert!(
            root.join(file).is_file(),
            "README.md links to {file}: no such file"
        );
        if !anchor.is_empty() {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            assert!(
                text.lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| slug(h.trim_start_matches('#')) == anchor),
                "README.md links to {target}: no such heading in {file}"
            );
        }
    }

    // `.ci/run` runs the README's test commands as written (the tool-less
    // one listed: its tests are a subset of the whole suite's, which it
    // runs).
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let ci_tests: Vec<&str> = ci
        .lines()
        .filter(|l| l.starts_with("cargo test "))
        .map(|l| l.strip_suffix(" --list >/dev/null").unwrap_or(l))
        .collect();
    assert!(ci_tests.len() >= 2, "{ci_tests:?}");
    for command in ci_tests {
        assert!(
            readme.contains(&format!("`{command}`")),
            "README.md does not give .ci/run's `{command}`"
        );
    }
}

/// A Markdown heading's anchor as GitHub makes it: lower case, spaces as
/// hyphens, and no punctuation but hyphens and underscores.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}
