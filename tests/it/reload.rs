//! Hot reload end to end: config and SLO files on disk, reloaded through
//! `Running::reload` (what SIGHUP does) and by the file watcher, with
//! streams held open across reloads by an upstream the test writes frame by
//! frame (no timing decides what is in flight).
//!
//! The only sleeps make latencies (a first token at least 300 ms late, far
//! from both the 100 ms and the 10 s thresholds) or pace writes (a log's,
//! and a file the watcher must read before the next change); none
//! synchronises.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use hyper::body::Frame;
use tokenmeter::app::{ConfigSource, ReloadError, Running};
use tokenmeter::config::{Config, Overrides};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How late the first token of a request fed by [`feed`] is.
const LATE: Duration = Duration::from_millis(300);

fn slo_file(ttft: &str) -> String {
    format!(
        "classes:\n  - name: interactive\n    objectives:\n      ttft: {{threshold: {ttft}, target: 0.9}}\n    goodput: {{target: 0.8}}\n"
    )
}

fn main_file(upstream: SocketAddr, extra: &str) -> String {
    format!(
        "slo_files: [slo/*.yaml]\nroutes:\n  - name: chat\n    match: {{path_prefix: /v1/}}\n    upstream: http://{upstream}\n    slo: interactive\n{extra}"
    )
}

fn overrides() -> Overrides {
    Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        upstream: None,
        ..Default::default()
    }
}

/// Writes the files (TTFT threshold 100 ms) and starts a reloadable proxy.
async fn start_files(dir: &Path, upstream: SocketAddr, watch: bool) -> Running {
    std::fs::create_dir_all(dir.join("slo")).unwrap();
    std::fs::write(dir.join("slo/classes.yaml"), slo_file("100ms")).unwrap();
    std::fs::write(dir.join("main.yaml"), main_file(upstream, "")).unwrap();
    let path: PathBuf = dir.join("main.yaml");
    let config = Config::load(&path, &overrides()).unwrap();
    tokenmeter::app::start_with(
        config,
        Some(ConfigSource {
            path,
            overrides: overrides(),
            watch,
        }),
        None,
    )
    .await
    .unwrap()
}

fn pieces() -> Vec<Vec<u8>> {
    split_events(&fixture("openai-chat-basic-usage.sse"))
}

/// Sends `pieces` as frames, the first token piece `LATE` after the role
/// chunk, then ends the body.
async fn feed(gate: Gate, pieces: Vec<Vec<u8>>) {
    let mut pieces = pieces.into_iter();
    let role = pieces.next().unwrap();
    gate.send(Ok(Frame::data(Bytes::from(role)))).await.unwrap();
    tokio::time::sleep(LATE).await;
    for piece in pieces {
        gate.send(Ok(Frame::data(Bytes::from(piece))))
            .await
            .unwrap();
    }
}

/// One whole request through the proxy to the gated upstream, fed by the
/// test; returns the status (checking the body on 200).
async fn request(
    proxy: SocketAddr,
    path: &str,
    gates: &mut tokio::sync::mpsc::UnboundedReceiver<Gate>,
) -> u16 {
    let (head, body) = chat_request("m1", true, &[]);
    let head = head.replace("/v1/chat/completions", path);
    let client = tokio::spawn(async move { raw_exchange(proxy, &head, &body).await });
    feed(gates.recv().await.unwrap(), pieces()).await;
    let resp = client.await.unwrap();
    if resp.status == 200 {
        assert_eq!(resp.body(), fixture("openai-chat-basic-usage.sse"));
    }
    resp.status
}

async fn scrape_now(admin: SocketAddr) -> Vec<Sample> {
    scrape(admin).await.1
}

fn reloads(s: &[Sample], result: &str) -> f64 {
    value(s, "tokenmeter_config_reload_total", &[("result", result)])
}

fn verdicts(s: &[Sample], verdict: &str) -> f64 {
    sum(s, "llm_slo_requests_total", &[("verdict", verdict)])
}

/// The TTFT threshold `/slo` reports for the class.
async fn slo_threshold(admin: SocketAddr) -> f64 {
    let report = admin_json(admin, "/slo").await;
    let series = report["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["slo"] == "interactive")
        .expect("a series for the class")
        .clone();
    series["objectives"][0]["threshold_seconds"]
        .as_f64()
        .unwrap()
}

/// A streamed request whose head and first piece (the role chunk) have
/// come through, its upstream body then held open by the test: the
/// client's socket, the body's gate and what the client has read.
async fn held_stream(
    proxy: SocketAddr,
    gates: &mut tokio::sync::mpsc::UnboundedReceiver<Gate>,
    pieces: &[Vec<u8>],
) -> (TcpStream, Gate, Vec<u8>) {
    let (head, body) = chat_request("m1", true, &[]);
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let gate = gates.recv().await.unwrap();
    gate.send(Ok(Frame::data(Bytes::from(pieces[0].clone()))))
        .await
        .unwrap();
    let seen = read_until(&mut stream, &pieces[0][pieces[0].len() - 24..]).await;
    (stream, gate, seen)
}

#[tokio::test]
async fn broken_files_keep_the_old_config_and_in_flight_streams_are_untouched() {
    let (upstream, mut gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, false).await;
    let s = scrape_now(proxy.admin_addr).await;
    assert_eq!(reloads(&s, "success"), 0.0);
    assert_eq!(reloads(&s, "failure"), 0.0);
    assert!(
        value(
            &s,
            "tokenmeter_config_last_reload_success_timestamp_seconds",
            &[]
        ) > 0.0
    );

    // Stream A: head and role chunk through, then held open by the test.
    let pieces = pieces();
    let (mut a, gate_a, mut seen_a) = held_stream(proxy.proxy_addr, &mut gates, &pieces).await;

    // A YAML syntax error in the SLO file.
    let slo_path = dir.path().join("slo/classes.yaml");
    std::fs::write(
        &slo_path,
        "classes:\n  - name: interactive\n    objectives: {ttft: [\n",
    )
    .unwrap();
    let err = proxy.reload().await.unwrap_err();
    let ReloadError::Invalid(errors) = &err else {
        panic!("{err}")
    };
    // The syntax error, located; the main file's class is then undefined.
    assert!(
        errors
            .0
            .iter()
            .any(|e| e.file.ends_with("classes.yaml") && e.line == Some(3)),
        "{err}"
    );
    // An unknown key in the main file (the SLO file is fine again).
    std::fs::write(&slo_path, slo_file("10s")).unwrap();
    let main_path = dir.path().join("main.yaml");
    std::fs::write(&main_path, main_file(upstream, "    sloo: typo\n")).unwrap();
    let err = proxy.reload().await.unwrap_err();
    assert!(err.to_string().contains("sloo"), "{err}");

    let s = scrape_now(proxy.admin_addr).await;
    assert_eq!(reloads(&s, "failure"), 2.0);
    assert_eq!(reloads(&s, "success"), 0.0);
    assert_eq!(
        value(&s, "tokenmeter_config_last_reload_successful", &[]),
        0.0
    );
    // The old class (TTFT ≤ 100 ms) still judges new requests: B is bad.
    assert_eq!(slo_threshold(proxy.admin_addr).await, 0.1);
    assert_eq!(
        request(proxy.proxy_addr, "/v1/chat/completions", &mut gates).await,
        200
    );
    let s = scrape_until(proxy.admin_addr, |s| verdicts(s, "bad") >= 1.0).await;
    assert_eq!(verdicts(&s, "bad"), 1.0);

    // Fixed: the 10 s threshold is in force for new requests: C is good.
    std::fs::write(&main_path, main_file(upstream, "")).unwrap();
    proxy.reload().await.unwrap();
    assert_eq!(slo_threshold(proxy.admin_addr).await, 10.0);
    assert_eq!(
        request(proxy.proxy_addr, "/v1/chat/completions", &mut gates).await,
        200
    );
    let s = scrape_until(proxy.admin_addr, |s| verdicts(s, "good") >= 1.0).await;
    assert_eq!(verdicts(&s, "good"), 1.0);
    assert_eq!(reloads(&s, "success"), 1.0);
    assert_eq!(
        value(&s, "tokenmeter_config_last_reload_successful", &[]),
        1.0
    );

    // Stream A was in flight across all three reloads. It ends now, byte
    // for byte, outcome ok, and is judged by the class it started with
    // (TTFT ≥ 300 ms > 100 ms: bad), not the one in force now.
    feed_rest(gate_a, &pieces).await;
    a.read_to_end(&mut seen_a).await.unwrap();
    let resp = parse_response(&seen_a);
    assert_eq!(resp.status, 200);
    assert!(!resp.truncated);
    assert_eq!(resp.body(), fixture("openai-chat-basic-usage.sse"));
    let s = scrape_until(proxy.admin_addr, |s| verdicts(s, "bad") >= 2.0).await;
    assert_eq!(verdicts(&s, "bad"), 2.0);
    assert_eq!(verdicts(&s, "good"), 1.0);
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 3.0);
    assert_eq!(sum(&s, "llm_requests_total", &[]), 3.0);
    proxy.stop().await;
}

/// The rest of a stream after its role chunk: the first token `LATE`.
async fn feed_rest(gate: Gate, pieces: &[Vec<u8>]) {
    tokio::time::sleep(LATE).await;
    for piece in &pieces[1..] {
        gate.send(Ok(Frame::data(Bytes::from(piece.clone()))))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_valid_reload_adds_routes_and_reports_what_needs_a_restart() {
    let (upstream, mut gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, false).await;

    // No route for /v2/ yet: the proxy answers 404 itself.
    let (head, body) = chat_request("m1", true, &[]);
    let v2 = head.replace("/v1/chat/completions", "/v2/chat/completions");
    assert_eq!(raw_exchange(proxy.proxy_addr, &v2, &body).await.status, 404);

    let extra = format!(
        "  - name: second\n    match: {{path_prefix: /v2/}}\n    upstream: http://{upstream}\n    protocol: openai\n    slo: interactive\nmetrics: {{namespace: other}}\nproxy: {{max_request_head: 16KiB}}\n"
    );
    std::fs::write(dir.path().join("main.yaml"), main_file(upstream, &extra)).unwrap();
    let reloaded = proxy.reload().await.unwrap();
    assert_eq!(reloaded.restart_needed.len(), 2, "{reloaded:?}");
    assert!(reloaded.restart_needed[0].contains("max_request_head"));
    assert!(reloaded.restart_needed[1].contains("namespace"));

    assert_eq!(
        request(proxy.proxy_addr, "/v2/chat/completions", &mut gates).await,
        200
    );
    // Metered under the new route, in the running namespace.
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("route", "second")]) >= 1.0
    })
    .await;
    assert_eq!(sum(&s, "llm_requests_total", &[("route", "second")]), 1.0);
    assert_eq!(reloads(&s, "success"), 1.0);
    proxy.stop().await;
}

#[tokio::test]
async fn the_watcher_reloads_on_file_changes_without_a_call() {
    let (upstream, _gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, true).await;
    let target = |s: &[Sample], slo: &str| {
        value(
            s,
            "llm_slo_objective_target",
            &[("slo", slo), ("objective", "goodput")],
        )
    };

    // A new SLO file in the globbed directory defines a new class.
    std::fs::write(
        dir.path().join("slo/batch.yaml"),
        "classes:\n  - name: batch\n    goodput: {target: 0.5}\n",
    )
    .unwrap();
    let s = scrape_until(proxy.admin_addr, |s| reloads(s, "success") >= 1.0).await;
    assert_eq!(reloads(&s, "success"), 1.0);
    assert_eq!(target(&s, "batch"), 0.5);

    // A broken edit of it is rejected; both classes stay.
    std::fs::write(
        dir.path().join("slo/batch.yaml"),
        "classes:\n  - name: batch\n    goodput: {target: 5}\n",
    )
    .unwrap();
    let s = scrape_until(proxy.admin_addr, |s| reloads(s, "failure") >= 1.0).await;
    assert_eq!(reloads(&s, "failure"), 1.0);
    assert_eq!(reloads(&s, "success"), 1.0);
    assert_eq!(target(&s, "batch"), 0.5);
    assert_eq!(target(&s, "interactive"), 0.8);

    // The broken file removed: valid again, and its class is gone.
    std::fs::remove_file(dir.path().join("slo/batch.yaml")).unwrap();
    let s = scrape_until(proxy.admin_addr, |s| reloads(s, "success") >= 2.0).await;
    assert_eq!(reloads(&s, "success"), 2.0);
    assert!(
        !s.iter().any(|x| x.name == "llm_slo_objective_target"
            && x.labels.get("slo").map(String::as_str) == Some("batch")),
        "the removed class's target is gone"
    );
    proxy.stop().await;
}

/// A bad edit undone: the files are the running config again, which the
/// watcher reports as a successful reload, with no SIGHUP.
#[tokio::test]
async fn the_watcher_clears_a_failed_reload_when_the_file_is_put_back() {
    let (upstream, _gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, true).await;
    let main = dir.path().join("main.yaml");
    let running = std::fs::read(&main).unwrap();
    let last = |s: &[Sample]| value(s, "tokenmeter_config_last_reload_successful", &[]);
    let stamp = |s: &[Sample]| {
        value(
            s,
            "tokenmeter_config_last_reload_success_timestamp_seconds",
            &[],
        )
    };
    let started = stamp(&scrape_now(proxy.admin_addr).await);

    std::fs::write(&main, main_file(upstream, "    sloo: typo\n")).unwrap();
    let s = scrape_until(proxy.admin_addr, |s| reloads(s, "failure") >= 1.0).await;
    assert_eq!(reloads(&s, "failure"), 1.0);
    assert_eq!(last(&s), 0.0);

    // The file put back byte for byte: the running config is on disk again.
    std::fs::write(&main, &running).unwrap();
    let s = scrape_until(proxy.admin_addr, |s| last(s) == 1.0).await;
    assert_eq!(last(&s), 1.0, "the failed reload is not cleared");
    assert_eq!(reloads(&s, "success"), 1.0);
    assert_eq!(reloads(&s, "failure"), 1.0);
    assert!(stamp(&s) > started, "{} <= {started}", stamp(&s));

    // Written again after a good reload, unchanged: not a reload. (The
    // pause lets the watcher read it on its own before the next change.)
    std::fs::write(&main, &running).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let other = slo_file("1s").replace("interactive", "other");
    std::fs::write(dir.path().join("slo/other.yaml"), other).unwrap();
    let has_other = |s: &[Sample]| {
        s.iter().any(|x| {
            x.name == "llm_slo_objective_target"
                && x.labels.get("slo").map(String::as_str) == Some("other")
        })
    };
    let s = scrape_until(proxy.admin_addr, has_other).await;
    assert!(has_other(&s), "the new SLO file was not reloaded");
    assert_eq!(
        reloads(&s, "success"),
        2.0,
        "an unchanged file was reloaded"
    );
    assert_eq!(reloads(&s, "failure"), 1.0);
    proxy.stop().await;
}

/// A log written beside the config (`serve --config x.yaml 2>> x.log` in
/// one directory) changes that directory every few milliseconds; its
/// events must neither hold back a reload nor reach the proxy's threads.
#[tokio::test]
async fn a_file_written_beside_the_config_does_not_hold_back_the_watcher() {
    let (upstream, _gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, true).await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (stop, log) = (stop.clone(), dir.path().join("tokenmeter.log"));
        move || {
            use std::io::Write as _;
            let mut log = std::fs::File::create(log).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                log.write_all(b"{\"level\":\"INFO\"}\n").unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });

    std::fs::write(
        dir.path().join("main.yaml"),
        main_file(upstream, "    max_in_flight: 3\n"),
    )
    .unwrap();
    let s = scrape_until(proxy.admin_addr, |s| reloads(s, "success") >= 1.0).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(
        reloads(&s, "success"),
        1.0,
        "the config's change was reloaded while the log beside it grew"
    );
    assert_eq!(reloads(&s, "failure"), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn a_limit_added_by_a_reload_counts_the_streams_already_in_flight() {
    let (upstream, mut gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, false).await;

    // Stream A, admitted with no limit in force, held open.
    let pieces = pieces();
    let (mut a, gate_a, mut seen_a) = held_stream(proxy.proxy_addr, &mut gates, &pieces).await;
    let (head, body) = chat_request("m1", true, &[]);

    std::fs::write(
        dir.path().join("main.yaml"),
        main_file(upstream, "    max_in_flight: 1\n"),
    )
    .unwrap();
    proxy.reload().await.unwrap();

    // A holds the one slot: the next request is refused.
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 503);

    // A ends; its slot is free for the next one.
    for piece in &pieces[1..] {
        gate_a
            .send(Ok(Frame::data(Bytes::from(piece.clone()))))
            .await
            .unwrap();
    }
    drop(gate_a);
    a.read_to_end(&mut seen_a).await.unwrap();
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_in_flight", &[]) == 0.0
    })
    .await;
    assert_eq!(
        value(
            &s,
            "tokenmeter_rejected_requests_total",
            &[("route", "chat"), ("reason", "max_in_flight")]
        ),
        1.0
    );
    assert_eq!(
        request(proxy.proxy_addr, "/v1/chat/completions", &mut gates).await,
        200
    );
    proxy.stop().await;
}

/// A reload swaps the configuration, the forwarding service and the
/// scrapes together: `/config`, the engine figures and new requests are
/// the new route's at once, while a stream in flight across the reload
/// ends under the route it started on, counted once.
#[tokio::test]
async fn a_reload_swaps_configuration_proxy_and_scrapes_together() {
    const VLLM: &str = include_str!("../../crates/telemetry/tests/data/vllm.prom");
    const SGLANG: &str = include_str!("../../crates/telemetry/tests/data/sglang.prom");
    let (upstream, mut gates) = gated_upstream().await;
    let vllm = Page::serve(VLLM.to_owned()).await.addr;
    let sglang = Page::serve(SGLANG.to_owned()).await.addr;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_files(dir.path(), upstream, false).await;
    let route = |name: &str, engine: SocketAddr| {
        format!(
            "scrape: {{interval: 200ms, timeout: 150ms}}\nslo_files: [slo/*.yaml]\nroutes:\n  - name: {name}\n    match: {{path_prefix: /v1/}}\n    upstream: http://{upstream}\n    slo: interactive\n    engine_metrics: http://{engine}/metrics\n"
        )
    };
    let main = dir.path().join("main.yaml");
    std::fs::write(&main, route("before", vllm)).unwrap();
    proxy.reload().await.unwrap();
    let engine = |s: &[Sample], route: &str, server: &str| {
        value(
            s,
            "llm_engine_info",
            &[("route", route), ("server", server)],
        )
    };
    scrape_until(proxy.admin_addr, |s| engine(s, "before", "vllm") == 1.0).await;

    // Stream A starts on route `before`, and is held open.
    let pieces = pieces();
    let (mut a, gate_a, mut seen_a) = held_stream(proxy.proxy_addr, &mut gates, &pieces).await;

    std::fs::write(&main, route("after", sglang)).unwrap();
    proxy.reload().await.unwrap();
    let config = admin_json(proxy.admin_addr, "/config").await;
    assert_eq!(config["routes"][0]["name"], "after", "{config}");
    // The old scrapes stopped with the snapshot that held them: the
    // engine figures are the new route's only.
    let s = scrape_until(proxy.admin_addr, |s| engine(s, "after", "sglang") == 1.0).await;
    assert!(
        s.iter().all(|x| !(x.name.starts_with("llm_engine")
            && x.labels.get("route").is_some_and(|r| r == "before"))),
        "the old route's engine is still exported"
    );

    // A new request goes by the new route.
    assert_eq!(
        request(proxy.proxy_addr, "/v1/chat/completions", &mut gates).await,
        200
    );
    // A ends, byte for byte, counted once, under the route it started on.
    feed_rest(gate_a, &pieces).await;
    a.read_to_end(&mut seen_a).await.unwrap();
    assert_eq!(
        parse_response(&seen_a).body(),
        fixture("openai-chat-basic-usage.sse")
    );
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) >= 2.0 && sum(s, "llm_requests_in_flight", &[]) == 0.0
    })
    .await;
    let requests = |route: &str| sum(&s, "llm_requests_total", &[("route", route)]);
    assert_eq!((requests("before"), requests("after")), (1.0, 1.0));
    assert_eq!(sum(&s, "llm_requests_total", &[]), 2.0);
    proxy.stop().await;
}

/// A reload changes how sessions are told and bounded, never the sessions
/// open: one that spans it is one session of all its turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_sessions_open() {
    let sim = start_sim(schedule(0, 0, 2)).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("slo")).unwrap();
    std::fs::write(dir.path().join("slo/classes.yaml"), slo_file("10s")).unwrap();
    let write = |sessions: &str| {
        std::fs::write(
            dir.path().join("main.yaml"),
            main_file(sim, &format!("sessions: {sessions}\n")),
        )
        .unwrap();
    };
    write("{idle_timeout: 1s}");
    let path: PathBuf = dir.path().join("main.yaml");
    let config = Config::load(&path, &overrides()).unwrap();
    let source = ConfigSource {
        path,
        overrides: overrides(),
        watch: false,
    };
    let proxy = tokenmeter::app::start_with(config, Some(source), None)
        .await
        .unwrap();
    let turn = || async {
        let (head, body) = chat_request("m1", false, &[("x-session-id", "task-1")]);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    };
    turn().await;
    let s = scrape_now(proxy.admin_addr).await;
    assert_eq!(sum(&s, "llm_sessions_active", &[]), 1.0);

    // Other bounds and another key first: the open session stays.
    write(
        "{idle_timeout: 2s, max_sessions: 500, keys: [{header: x-task}, {header: x-session-id}]}",
    );
    proxy.reload().await.unwrap();
    let s = scrape_now(proxy.admin_addr).await;
    assert_eq!(sum(&s, "llm_sessions_active", &[]), 1.0);
    assert_eq!(sum(&s, "tokenmeter_sessions_ended_total", &[]), 0.0);
    turn().await;

    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "tokenmeter_sessions_ended_total", &[("reason", "idle")]) == 1.0
    })
    .await;
    assert_eq!(sum(&s, "llm_sessions_active", &[]), 0.0);
    assert_eq!(sum(&s, "llm_session_turns_count", &[]), 1.0);
    assert_eq!(
        sum(&s, "llm_session_turns_sum", &[]),
        2.0,
        "one session of both turns"
    );
    assert_eq!(
        sum(
            &s,
            "tokenmeter_sessions_ended_total",
            &[("reason", "evicted")]
        ),
        0.0
    );
    proxy.stop().await;
}
