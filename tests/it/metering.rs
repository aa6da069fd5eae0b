//! Through the proxy, against the simulator's known schedule, the scraped
//! metrics give the numbers docs/metrics.md defines; the exposition is valid for
//! Prometheus' own tools and declares every series with its labels.

use std::time::Duration;

use crate::common::*;
use sim::SimConfig;

const ROUTE: [(&str, &str); 3] = [("route", "test"), ("model", "m1"), ("slo", "chat")];

fn near(got: f64, want: f64, slack: f64, what: &str) {
    assert!(
        got >= want - 0.001 && got <= want + slack,
        "{what}: got {got:.4}s, want {want:.4}s (+{slack}s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_timings_match_the_upstream_schedule() {
    let Stack { proxy, .. } = Stack::start(schedule(200, 20, 50), config_for).await;
    let n = 4;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (head, body) = chat_request("m1", true, &[]);
        let addr = proxy.proxy_addr;
        tasks.push(tokio::spawn(async move {
            raw_exchange(addr, &head, &body).await
        }));
    }
    for t in tasks {
        let resp = t.await.unwrap();
        assert_eq!(resp.status, 200);
        // role chunk, 50 tokens, finish, usage, [DONE]: one frame each.
        assert_eq!(resp.chunks.len(), 54);
    }
    let s = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_requests_total", &[("outcome", "ok")]) == n as f64
    })
    .await;
    assert_eq!(
        value(
            &s,
            "llm_requests_total",
            &[
                ROUTE[0],
                ROUTE[1],
                ROUTE[2],
                ("outcome", "ok"),
                ("status_class", "2xx")
            ]
        ),
        n as f64
    );

    // The role-only chunk is sent at once; counting it would make TTFT ~0.
    let (count, ttft) = mean(&s, "llm_time_to_first_token_seconds", &ROUTE);
    assert_eq!(count, n as f64);
    near(ttft, 0.200, 0.060, "TTFT");
    // One ITL per gap: 49 per request, the usage chunk adds none.
    let (count, itl) = mean(&s, "llm_inter_token_latency_seconds", &ROUTE);
    assert_eq!(count, (n * 49) as f64);
    near(itl, 0.020, 0.006, "ITL");
    let (count, tpot) = mean(&s, "llm_time_per_output_token_seconds", &ROUTE);
    assert_eq!(count, n as f64);
    near(tpot, 0.020, 0.006, "TPOT");
    let (count, e2el) = mean(&s, "llm_e2e_request_latency_seconds", &ROUTE);
    assert_eq!(count, n as f64);
    near(e2el, 0.200 + 49.0 * 0.020, 0.150, "E2EL");
    let (count, headers) = mean(&s, "llm_time_to_response_headers_seconds", &ROUTE);
    assert_eq!(count, n as f64);
    near(headers, 0.0, 0.050, "time to headers");
    // Seed identity: E2EL ≈ TTFT + TPOT × (N − 1) plus the tail.
    assert!((e2el - (ttft + tpot * 49.0)).abs() < 0.050);

    assert_eq!(
        value(
            &s,
            "llm_output_tokens_total",
            &[ROUTE[0], ROUTE[1], ROUTE[2], ("source", "usage")]
        ),
        (n * 50) as f64
    );
    assert_eq!(value(&s, "llm_input_tokens_total", &ROUTE), (n * 3) as f64);
    let (count, tokens) = mean(&s, "llm_output_tokens", &ROUTE);
    assert_eq!((count, tokens), (n as f64, 50.0));
    assert_eq!(value(&s, "llm_requests_in_flight", &ROUTE), 0.0);
    assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 0.0);
    proxy.stop().await;
}

/// `t0` is when the request reached the proxy's socket, not when the proxy
/// got to it: a request that waits for a busy proxy has that wait in its
/// latencies, as its client does.
#[tokio::test]
async fn the_time_a_request_waits_for_a_busy_proxy_is_in_its_latencies() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = start_sim(SimConfig {
        ttft: Duration::ZERO,
        itl: Duration::from_millis(1),
        tokens: 3,
        ..SimConfig::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    // The kernel switches receive timestamps on for the host a moment after
    // the proxy's listener asks: a first request, and a pause, let it.
    let (head, body) = chat_request("m1", true, &[]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let s = scrape(proxy.admin_addr).await.1;
    let sums = |s: &[Sample]| {
        [
            "llm_time_to_first_token_seconds",
            "llm_time_to_response_headers_seconds",
            "llm_e2e_request_latency_seconds",
        ]
        .map(|name| value(s, &format!("{name}_sum"), &ROUTE))
    };
    let before = sums(&s);

    // The request is in the proxy's socket while the one thread of this
    // runtime, which also runs the proxy, is held.
    let mut conn = tokio::net::TcpStream::connect(proxy.proxy_addr)
        .await
        .unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&body).await.unwrap();
    let held = Duration::from_millis(150);
    std::thread::sleep(held);
    let mut buf = Vec::new();
    conn.read_to_end(&mut buf).await.unwrap();
    assert_eq!(parse_response(&buf).status, 200);

    let s = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_requests_total", &[("outcome", "ok")]) == 2.0
    })
    .await;
    let after = sums(&s);
    for ((name, b), a) in ["TTFT", "time to headers", "E2EL"]
        .iter()
        .zip(before)
        .zip(after)
    {
        let took = a - b;
        assert!(
            took >= held.as_secs_f64() - 0.005 && took < 5.0,
            "{name} {took:.4}s, held {held:?}"
        );
    }
}

#[tokio::test]
async fn histogram_buckets_count_each_observation_once() {
    let sim = start_sim(SimConfig {
        ttft: Duration::from_millis(320),
        itl: Duration::from_millis(5),
        tokens: 5,
        ..SimConfig::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    let (head, body) = chat_request("m1", true, &[]);
    raw_exchange(proxy.proxy_addr, &head, &body).await;
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    // 320 ms TTFT (never less: the simulator waits that long): not in the
    // 300 ms bucket, in the 500 ms one, which leaves 180 ms for a loaded
    // machine.
    let bucket = |le: &str| {
        value(
            &s,
            "llm_time_to_first_token_seconds_bucket",
            &[ROUTE[0], ROUTE[1], ROUTE[2], ("le", le)],
        )
    };
    assert_eq!(bucket("0.3"), 0.0);
    assert_eq!(bucket("0.5"), 1.0);
    assert_eq!(bucket("+Inf"), 1.0);
    proxy.stop().await;
}

#[tokio::test]
async fn non_streamed_responses_observe_latency_and_tokens_but_no_token_timings() {
    let sim = start_sim(SimConfig {
        ttft: Duration::from_millis(50),
        itl: Duration::from_millis(5),
        tokens: 10,
        ..SimConfig::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    let (head, body) = chat_request("m1", false, &[]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    let (count, e2el) = mean(&s, "llm_e2e_request_latency_seconds", &ROUTE);
    assert_eq!(count, 1.0);
    near(e2el, 0.050 + 9.0 * 0.005, 0.100, "E2EL");
    assert_eq!(
        mean(&s, "llm_time_to_response_headers_seconds", &ROUTE).0,
        1.0
    );
    for h in [
        "llm_time_to_first_token_seconds",
        "llm_inter_token_latency_seconds",
        "llm_time_per_output_token_seconds",
    ] {
        assert_eq!(
            mean(&s, h, &ROUTE).0,
            0.0,
            "{h} observed for a non-streamed response"
        );
    }
    assert_eq!(
        value(
            &s,
            "llm_output_tokens_total",
            &[ROUTE[0], ROUTE[1], ROUTE[2], ("source", "usage")]
        ),
        10.0
    );
    assert_eq!(value(&s, "llm_input_tokens_total", &ROUTE), 3.0);
    proxy.stop().await;
}

/// Every metric the proxy declares, with the labels each must carry.
const DECLARED: &[(&str, &[&str])] = &[
    (
        "llm_time_to_first_token_seconds_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_time_to_response_headers_seconds_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_time_per_output_token_seconds_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_inter_token_latency_seconds_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_e2e_request_latency_seconds_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_output_tokens_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_input_tokens_bucket",
        &["route", "model", "slo", "tenant", "operation", "le"],
    ),
    (
        "llm_requests_total",
        &[
            "route",
            "model",
            "slo",
            "tenant",
            "operation",
            "outcome",
            "status_class",
        ],
    ),
    (
        "llm_output_tokens_total",
        &["route", "model", "slo", "tenant", "operation", "source"],
    ),
    (
        "llm_input_tokens_total",
        &["route", "model", "slo", "tenant", "operation"],
    ),
    ("llm_requests_in_flight", &["route", "model", "slo"]),
    ("tokenmeter_unrouted_requests_total", &[]),
    ("tokenmeter_model_label_overflow_total", &[]),
    ("tokenmeter_tenant_label_overflow_total", &[]),
    ("tokenmeter_build_info", &["version"]),
    ("tokenmeter_config_reload_total", &["result"]),
    (
        "tokenmeter_config_last_reload_success_timestamp_seconds",
        &[],
    ),
    ("tokenmeter_config_last_reload_successful", &[]),
    ("tokenmeter_log_lines_dropped_total", &[]),
];

#[tokio::test]
async fn exposition_declares_every_series_and_is_valid_needs_tool_promtool() {
    let sim = start_sim(SimConfig {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(1),
        tokens: 5,
        ..SimConfig::default()
    })
    .await;
    let proxy = start(config_for(sim)).await;
    let (head, body) = chat_request("m1", true, &[]);
    raw_exchange(proxy.proxy_addr, &head, &body).await;
    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    let (text, samples) = scrape(proxy.admin_addr).await;
    for (name, labels) in DECLARED {
        let series: Vec<_> = samples.iter().filter(|s| s.name == *name).collect();
        assert!(!series.is_empty(), "{name} missing from /metrics");
        for s in series {
            let got: Vec<&str> = s.labels.keys().map(String::as_str).collect();
            let mut want = labels.to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "{name} labels");
        }
    }
    for (name, _) in DECLARED {
        let family = name.trim_end_matches("_bucket");
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} has no help text"
        );
    }
    // The standard process metrics, from this (test) process.
    let process = |name: &str| value(&samples, name, &[]);
    assert!(process("process_open_fds") >= 2.0, "two listeners at least");
    assert!(process("process_max_fds") >= process("process_open_fds"));
    assert!(process("process_resident_memory_bytes") > 0.0);
    assert!(process("process_start_time_seconds") > 1.7e9);
    assert!(
        samples
            .iter()
            .any(|s| s.name == "process_cpu_seconds_total")
    );
    let (ok, out) = promtool_check_metrics(&text);
    assert!(ok, "promtool check metrics failed:\n{out}");
    proxy.stop().await;
}

/// Runs `promtool check metrics` (Debian's `prometheus` package) on `text`.
pub(crate) fn promtool_check_metrics(text: &str) -> (bool, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: install Debian's `prometheus` package (see README)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), msg)
}

#[tokio::test]
async fn malformed_streams_degrade_metering_but_pass_unchanged() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let body: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
        data: {not json\n\n\
        data: \xff\xfe\x00 binary\n\n\
        : comment\n\
        data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n\
        data: [DONE]\n\n";
    let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
    let (head, req) = chat_request(
        "m1",
        true,
        &[("x-body-hex", &hex), ("x-cuts", "7,40,41,90")],
    );
    let resp = raw_exchange(proxy.proxy_addr, &head, &req).await;
    assert_eq!(resp.body(), body);
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    assert_eq!(
        value(
            &s,
            "tokenmeter_stream_parse_errors_total",
            &[("route", "test"), ("kind", "invalid_json")]
        ),
        2.0
    );
    // The stream itself completed; its token count is unknown (no usage,
    // and counting events is unreliable once some could not be read).
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(sum(&s, "llm_output_tokens_total", &[]), 0.0);
    assert_eq!(sum(&s, "llm_time_to_first_token_seconds_count", &[]), 1.0);
    assert_eq!(sum(&s, "llm_inter_token_latency_seconds_count", &[]), 1.0);
    proxy.stop().await;
}

#[tokio::test]
async fn compressed_streams_pass_untouched_and_are_metered_from_a_decoded_copy() {
    use std::io::Write;
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let plain = fixture("openai-chat-basic-usage.sse");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let packed = gz.finish().unwrap();
    let hex: String = packed.iter().map(|b| format!("{b:02x}")).collect();
    let cuts = format!("{},{}", packed.len() / 3, packed.len() / 2);
    let (head, req) = chat_request(
        "m1",
        true,
        &[
            ("x-body-hex", &hex),
            ("x-cuts", &cuts),
            ("x-content-encoding", "gzip"),
        ],
    );
    let resp = raw_exchange(proxy.proxy_addr, &head, &req).await;
    assert_eq!(resp.header("content-encoding"), Some("gzip"));
    assert_eq!(
        resp.body(),
        packed,
        "the client gets the compressed bytes as sent"
    );
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "usage")]),
        30.0
    );
    assert_eq!(sum(&s, "llm_input_tokens_total", &[]), 14.0);
    assert_eq!(sum(&s, "llm_inter_token_latency_seconds_count", &[]), 29.0);
    assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 0.0);
    proxy.stop().await;
}

/// Pauses longer than `metrics.stall_threshold` are stalls, counted per
/// route, model and class with their length, when the request ends; the
/// gaps of a steady stream are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_past_the_stall_threshold_are_counted_with_their_length() {
    // Three tokens 400 ms apart: two gaps of 400 ms, past a 300 ms threshold.
    let Stack { proxy, .. } = Stack::start(schedule(10, 400, 3), |sim| {
        let mut config = config_for(sim);
        config.metrics.stall_threshold = Duration::from_millis(300);
        config
    })
    .await;
    let (head, body) = chat_request("m1", true, &[]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    // And one whose gaps (20 ms) are all under it.
    let (head, body) = chat_request("m1", true, &[("x-sim-itl-ms", "20")]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 2.0
    })
    .await;
    assert_eq!(value(&s, "llm_stalls_total", &ROUTE_TENANT), 2.0);
    let stalled = value(&s, "llm_stalled_seconds_total", &ROUTE_TENANT);
    // Each gap is past the threshold and about 400 ms: together 0.6 to 1.2 s.
    near(stalled, 0.600, 0.600, "stalled seconds");
    proxy.stop().await;
}

const ROUTE_TENANT: [(&str, &str); 4] = [ROUTE[0], ROUTE[1], ROUTE[2], ("tenant", "")];

/// A client that stops reading holds the proxy up: its socket full, the
/// proxy stops reading the upstream, whose tokens wait in the proxy's
/// socket and are read late. The time is the client's (its wait,
/// the slow reader mark), not to the server: no 1 s gap between tokens, no
/// stall, and an E2EL without it. Its class leaves slow readers out, so it
/// is neither good nor bad.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_for_1s_is_counted_1s_of_wait_not_a_1s_gap() {
    use bytes::Bytes;
    use http_body::Frame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (upstream, mut gates) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_from_files(
        dir.path(),
        "slo_files: [slo/*.yaml]\nroutes:\n  - name: test\n    upstream: http://127.0.0.1:1\n    slo: chat\n",
        &[(
            "chat.yaml",
            "classes:\n  - name: chat\n    objectives:\n      ttft: {p95: 1s}\n      e2el: {p95: 1s}\n    exclude_slow_readers: true\n",
        )],
        upstream,
    );
    let proxy = start(config).await;
    let token = |text: &str| -> Result<Frame<Bytes>, std::convert::Infallible> {
        Ok(Frame::data(Bytes::from(format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
        ))))
    };

    // A client with a small receive buffer, so that little fills it.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(proxy.proxy_addr).await.unwrap();
    let (head, body) = chat_request("m1", true, &[]);
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    let gate = gates.recv().await.unwrap();
    gate.send(token("first")).await.unwrap();
    read_until(&mut client, b"first").await;

    // The client stops reading. Big tokens until the upstream's body
    // takes no more: every buffer on the way is full.
    let stopped = std::time::Instant::now();
    let big = "x".repeat(16 << 10);
    let mut sent = 1;
    loop {
        assert!(
            stopped.elapsed() < Duration::from_secs(20),
            "the proxy never stopped taking tokens ({sent} sent)"
        );
        match tokio::time::timeout(Duration::from_millis(200), gate.send(token(&big))).await {
            Ok(r) => {
                r.unwrap();
                sent += 1;
            }
            Err(_) => break,
        }
    }
    // Held up 1 s more, then reading again (the rest arrives as fast as
    // the small buffer lets it: more wait, while it drains).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let paused = stopped.elapsed();
    let mut buf = vec![0u8; 1 << 16];
    let reader = tokio::spawn(async move {
        let mut total = 0usize;
        loop {
            let n = client.read(&mut buf).await.unwrap();
            if n == 0 {
                return total;
            }
            total += n;
        }
    });
    gate.send(token("last")).await.unwrap();
    gate.send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))))
        .await
        .unwrap();
    drop(gate);
    let received = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the rest never came")
        .unwrap();
    let whole = stopped.elapsed();
    if received <= sent * (16 << 10) {
        let (_, s) = scrape(proxy.admin_addr).await;
        let requests: Vec<_> = s
            .iter()
            .filter(|x| x.name == "llm_requests_total")
            .collect();
        panic!("{received} bytes for {sent} tokens; {requests:?}");
    }

    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 1.0
    })
    .await;
    let waited = sum(&s, "llm_client_wait_seconds_sum", &[]);
    assert_eq!(sum(&s, "llm_client_wait_seconds_count", &[]), 1.0);
    assert!(
        waited >= 1.0 && waited <= whole.as_secs_f64(),
        "client wait {waited:.3} s, paused {paused:?}, drained after {whole:?}"
    );
    eprintln!("{sent} tokens; paused {paused:?}, drained after {whole:?}, waited {waited:.3} s");
    // No gap of the token timeline holds the pause.
    let gaps = sum(&s, "llm_inter_token_latency_seconds_count", &[]);
    assert_eq!(gaps, sent as f64, "one gap per token after the first");
    assert_eq!(
        sum(&s, "llm_inter_token_latency_seconds_bucket", &[("le", "1")]),
        gaps,
        "a gap over 1 s"
    );
    assert_eq!(sum(&s, "llm_stalls_total", &[]), 0.0);
    let e2el = sum(&s, "llm_e2e_request_latency_seconds_sum", &[]);
    assert!(
        e2el < whole.as_secs_f64() - 1.0,
        "E2EL {e2el:.3} s holds the client's pause ({paused:?} of {whole:?})"
    );
    eprintln!("E2EL {e2el:.3} s");
    assert_eq!(sum(&s, "llm_slow_reader_requests_total", &[]), 1.0);
    assert_eq!(sum(&s, "llm_slo_requests_total", &[]), 0.0, "judged");
    proxy.stop().await;
}

/// The proxy's own time is known per request, small, and never holds the
/// client's slow upload: a body sent 300 ms after its head is in the
/// request's TTFT (`t0` is the head), not in the proxy's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_own_time_is_observed_without_the_clients_upload() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let Stack { proxy, .. } = Stack::start(schedule(10, 5, 3), config_for).await;
    for _ in 0..3 {
        let (head, body) = chat_request("m1", true, &[]);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    }
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 3.0
    })
    .await;
    let (count, mean) = mean(&s, "llm_proxy_time_seconds", &ROUTE_TENANT);
    assert_eq!(count, 3.0);
    assert!(mean > 0.0 && mean < 0.25, "proxy time {mean:.6} s");
    let before = value(&s, "llm_proxy_time_seconds_sum", &ROUTE_TENANT);

    let (head, body) = chat_request("m1", true, &[]);
    let mut client = tokio::net::TcpStream::connect(proxy.proxy_addr)
        .await
        .unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.write_all(&body).await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 4.0
    })
    .await;
    assert_eq!(
        value(&s, "llm_proxy_time_seconds_count", &ROUTE_TENANT),
        4.0
    );
    let slow_upload = value(&s, "llm_proxy_time_seconds_sum", &ROUTE_TENANT) - before;
    assert!(slow_upload < 0.25, "proxy time {slow_upload:.3} s");
    let ttft = value(&s, "llm_time_to_first_token_seconds_sum", &ROUTE_TENANT);
    assert!(ttft > 0.3, "TTFT sum {ttft:.3} s");
    proxy.stop().await;
}

/// A stream that pauses 1 s between two tokens, replayed through a proxy
/// that calls a gap over 500 ms a stall: one stall of 1 s, whatever TPOT
/// says of it. The stall is bracketed by
/// what the test saw, not by a slack: the proxy read the third token after
/// it was sent and before the client had it, and the fourth likewise, so
/// the gap it measured lies between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1s_pause_is_one_stall_of_1s() {
    let (upstream, mut gates) = gated_upstream().await;
    let mut config = config_for(upstream);
    config.metrics.stall_threshold = Duration::from_millis(500);
    let proxy = start(config).await;
    let mut stream = GatedStream::open(proxy.proxy_addr, &mut gates).await;
    for n in 1..=4 {
        if n == 4 {
            let third = stream.times[2].1 + Duration::from_secs(1);
            tokio::time::sleep_until(third.into()).await;
        } else if n > 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stream.token().await;
    }
    let times = stream.times.clone();
    stream.finish().await;
    // The proxy read the third token within (sent, received) of it, and
    // the fourth within its own: the stall lies between these two bounds.
    let ((sent_3, received_3), (sent_4, received_4)) = (times[2], times[3]);
    let shortest = (sent_4 - received_3).as_secs_f64();
    let longest = (received_4 - sent_3).as_secs_f64();
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 1.0
    })
    .await;
    assert_eq!(sum(&s, "llm_stalls_total", &[]), 1.0);
    let stalled = sum(&s, "llm_stalled_seconds_total", &[]);
    assert!(shortest >= 1.0, "paused only {shortest:.3} s");
    assert!(
        stalled >= shortest && stalled <= longest,
        "stalled {stalled:.3} s for a pause of {shortest:.3} to {longest:.3} s"
    );
    assert_eq!(sum(&s, "llm_inter_token_latency_seconds_count", &[]), 3.0);
    proxy.stop().await;
}
