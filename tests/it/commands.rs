//! The commands around the proxy as a user runs them: `serve` says where
//! its pages are, `demo` keeps that on screen, and `load` sends the headers
//! it is given to the server it loads.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::*;

/// `serve` prints where to look on standard output: the proxy and the
/// admin listener, and the live page, `/metrics` and `/slo` there, each an
/// address that answers (the proxy, listening on every interface, at the
/// loopback address).
#[tokio::test]
async fn serve_prints_where_its_pages_are() {
    let sim = start_sim(schedule(1, 1, 1)).await;
    let mut child = Child(
        Command::new(BIN)
            .args(["serve", "--upstream", &format!("http://{sim}")])
            .args(["--listen", "0.0.0.0:0", "--admin-listen", "127.0.0.1:0"])
            .env("TOKENMETER_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut line = || lines.next().expect("serve printed too little").unwrap();
    let first = line();
    let after = |text: &str, what: &str| -> String {
        let rest = text
            .split(what)
            .nth(1)
            .unwrap_or_else(|| panic!("{what}: {text}"));
        rest.split([',', ' ']).next().unwrap().to_owned()
    };
    let proxy: SocketAddr = after(&first, "proxy on http://").parse().unwrap();
    let admin: SocketAddr = after(&first, "admin on http://").parse().unwrap();
    assert!(proxy.ip().is_loopback(), "{first}");
    let banner = [line(), line(), line()];
    let url = |label: &str| -> String {
        let line = banner
            .iter()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label} in {banner:?}"));
        after(line, "http://")
    };
    assert_eq!(url("live page:"), format!("{admin}/"));
    assert_eq!(url("metrics:"), format!("{admin}/metrics"));
    assert_eq!(url("SLO status:"), format!("{admin}/slo"));

    // Each is where it says.
    let page = get(admin, "/").await;
    assert_eq!(page.status, 200);
    assert!(
        String::from_utf8(page.body())
            .unwrap()
            .contains("<title>tokenmeter</title>")
    );
    let (text, _) = scrape(admin).await;
    assert!(
        text.contains("tokenmeter_config_last_reload_successful"),
        "{text}"
    );
    assert!(admin_json(admin, "/slo").await.get("series").is_some());
    let (head, body) = chat_request("m1", true, &[]);
    assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);
    end(child, "-TERM").await;
}

/// The demo's standard error, in JSON lines, until SIGINT, with `extra`
/// arguments: its banner read first, and its requests counted.
async fn demo_log(extra: &[&str]) -> Vec<serde_json::Value> {
    let mut child = Child(
        Command::new(BIN)
            .args([
                "--log-format",
                "json",
                "demo",
                "--ramp",
                "false",
                "--rate",
                "50",
            ])
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(extra)
            .env("TOKENMETER_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let first = stdout.next().expect("demo printed nothing").unwrap();
    // The rest of what it prints is read, so that it never writes to a
    // closed pipe.
    let rest = std::thread::spawn(move || stdout.count());
    let page = first.split("open http://").nth(1).unwrap();
    let admin: SocketAddr = page.split('/').next().unwrap().parse().unwrap();
    let mut stderr = child.0.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    let s = scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= 5.0).await;
    assert!(sum(&s, "llm_requests_total", &[]) >= 5.0);
    end(child, "-INT").await;
    rest.join().unwrap();
    let text = log.join().unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The demo writes no access line unless asked to, so its banner stays
/// on screen; its other logs are written as before.
#[tokio::test]
async fn the_demo_keeps_access_lines_off_its_terminal_unless_asked() {
    let access = |log: &[serde_json::Value]| {
        log.iter()
            .filter(|v| v["target"] == "tokenmeter::access")
            .count()
    };
    let started = |log: &[serde_json::Value]| {
        log.iter()
            .any(|v| v["fields"]["message"] == "tokenmeter started")
    };
    let quiet = demo_log(&[]).await;
    assert!(started(&quiet), "{quiet:?}");
    assert_eq!(access(&quiet), 0, "{quiet:?}");
    let loud = demo_log(&["--access-log"]).await;
    assert!(access(&loud) >= 5, "{loud:?}");
}

/// What a server that answers every request with an empty stream
/// receives: each request head, as text.
async fn recording_server() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    while buf.len() < end + length {
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + length);
                    let _ = tx.send(head);
                    let body = "data: [DONE]\n\n";
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Each `--header` goes on every request: the name in lower case as HTTP/1.1
/// allows, the value trimmed; one named twice twice; one the load sends
/// itself (its simulated queue time) replaced, not doubled.
#[tokio::test]
async fn load_sends_the_given_headers_with_every_request() {
    let (server, mut heads) = recording_server().await;
    let mut child = Child(
        Command::new(BIN)
            .args([
                "load",
                "--target",
                &format!("http://{server}"),
                "--rate",
                "20",
            ])
            .args(["-H", "X-Tenant: team-a", "--header", "x-session-id:  s-42 "])
            .args([
                "-H",
                "x-sim-queue-ms: 7",
                "-H",
                "x-tag: a",
                "-H",
                "x-tag: b",
            ])
            .env("TOKENMETER_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let header = |head: &str, name: &str| -> Vec<String> {
        head.lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_owned())
            .collect()
    };
    for _ in 0..3 {
        let head = heads.recv().await.unwrap();
        assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
        assert_eq!(header(&head, "x-tenant"), ["team-a"], "{head}");
        assert_eq!(header(&head, "x-session-id"), ["s-42"], "{head}");
        assert_eq!(header(&head, "x-sim-queue-ms"), ["7"], "{head}");
        assert_eq!(header(&head, "x-tag"), ["a", "b"], "{head}");
        assert_eq!(
            header(&head, "content-type"),
            ["application/json"],
            "{head}"
        );
    }
    let stdout = child.0.stdout.take().unwrap();
    end(child, "-INT").await;
    let mut said = String::new();
    BufReader::new(stdout).read_to_string(&mut said).unwrap();
    assert!(said.starts_with("load: "), "{said}");
    assert!(!said.contains(" 0 ok"), "{said}");
}

/// A header that is not one is a usage error, told at the flag, before
/// anything is sent: no panic.
#[test]
fn load_refuses_a_bad_header() {
    for (bad, told) in [
        ("x-tenant team-a", "colon"),
        ("x tenant: a", "is not a header name"),
        ("x-tenant: a\u{7f}", "visible ASCII"),
        ("content-length: 3", "frames the body"),
    ] {
        let out = Command::new(BIN)
            .args(["load", "--target", "http://127.0.0.1:1", "-H", bad])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains("--header"), "{bad:?}: {stderr}");
        assert!(stderr.contains(told), "{bad:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{bad:?}: {stderr}");
    }
}
