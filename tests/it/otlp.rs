//! OpenTelemetry export against a real OTLP receiver built on the official
//! protobuf definitions (`tests/otlp/receiver.py`: PyPI's
//! `opentelemetry-proto` and `grpcio`), over HTTP/protobuf and gRPC: the
//! GenAI metrics carry the Prometheus histograms' observations, in the
//! bucket boundaries the GenAI semantic conventions advise, and each
//! sampled request has its span, in its client's trace.
//! With the collector down or hung, requests are forwarded as ever and
//! the drop counters rise.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;
use tokenmeter::config::{OtlpExport, OtlpExports, OtlpHeaders, OtlpProtocol, OtlpSettings};

/// The receiver process, killed when dropped, and what it has received.
pub(super) struct Receiver {
    child: Child,
    pub(super) grpc: SocketAddr,
    pub(super) http: SocketAddr,
    received: Arc<Mutex<Vec<Value>>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the receiver on ports of the system's choosing (it binds port 0
/// and says which it got), so no other test can be listening there.
pub(super) fn start_receiver() -> Receiver {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["--grpc-port", "0", "--http-port", "0", "--seconds", "180"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 not found");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let ports: Vec<&str> = first.split(' ').collect();
    assert!(
        ports.len() == 3 && ports[0] == "ready",
        "the OTLP receiver did not start: install opentelemetry-proto and grpcio into a \
         virtual environment first on PATH (.ci/run's is target/venv)"
    );
    let at = |port: &str| SocketAddr::from(([127, 0, 0, 1], port.parse().unwrap()));
    let (grpc, http) = (at(ports[1]), at(ports[2]));
    let received = Arc::new(Mutex::new(Vec::new()));
    std::thread::spawn({
        let received = received.clone();
        move || {
            for line in lines.map_while(Result::ok) {
                received
                    .lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        }
    });
    Receiver {
        child,
        grpc,
        http,
        received,
    }
}

fn otlp(endpoint: SocketAddr, protocol: OtlpProtocol) -> OtlpSettings {
    let export = |path: &str| OtlpExport {
        endpoint: match protocol {
            OtlpProtocol::HttpProtobuf => format!("http://{endpoint}{path}"),
            OtlpProtocol::Grpc => format!("http://{endpoint}"),
        },
        protocol,
        headers: OtlpHeaders::default(),
        timeout: Duration::from_secs(2),
        origins: ["test"; 4],
    };
    OtlpSettings {
        endpoint: Some(format!("http://{endpoint}")),
        protocol,
        timeout: Duration::from_secs(2),
        metrics: true,
        traces: true,
        exports: OtlpExports {
            metrics: Some(export("/v1/metrics")),
            traces: Some(export("/v1/traces")),
        },
        metrics_interval: Duration::from_millis(300),
        traces_delay: Duration::from_millis(100),
        queue: 2048,
        max_batch: 512,
        service_name: "tokenmeter-under-test".into(),
        resource_attributes: Vec::new(),
        gen_ai_names: Default::default(),
        origins: Vec::new(),
    }
}

/// The attributes of an OTLP JSON object (`attributes` list) as a map of
/// their values, as strings.
pub(super) fn attributes(v: &Value) -> std::collections::BTreeMap<String, String> {
    v["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let value = &kv["value"];
            let text = value["stringValue"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| value["intValue"].as_str().map(str::to_owned))
                .or_else(|| value["doubleValue"].as_f64().map(|d| d.to_string()))
                .unwrap_or_default();
            (kv["key"].as_str().unwrap().to_owned(), text)
        })
        .collect()
}

/// Every metric of the metrics exports received that `keep` keeps, in
/// arrival order.
pub(super) fn metrics(received: &[Value], keep: impl Fn(&Value) -> bool) -> Vec<&Value> {
    let mut out = Vec::new();
    for r in received
        .iter()
        .filter(|r| r["signal"] == "metrics" && keep(r))
    {
        let resources = r["request"]["resourceMetrics"].as_array();
        for rm in resources.into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                out.extend(sm["metrics"].as_array().into_iter().flatten());
            }
        }
    }
    out
}

/// Every data point of metric `name` (a histogram or a sum) in the export
/// requests received (of `via`), in arrival order.
pub(super) fn points(received: &[Value], via: &str, name: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for m in metrics(received, |r| r["via"] == via) {
        if m["name"] == name {
            for kind in ["histogram", "sum"] {
                let points = m[kind]["dataPoints"].as_array();
                out.extend(points.cloned().unwrap_or_default());
            }
        }
    }
    out
}

pub(super) fn spans(received: &[Value], via: &str) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for r in received
        .iter()
        .filter(|r| r["via"] == via && r["signal"] == "traces")
    {
        for rs in r["request"]["resourceSpans"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    out.push((rs["resource"].clone(), s.clone()));
                }
            }
        }
    }
    out
}

fn b64(bytes: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Waits up to 30 s for `done` over what the receiver has.
pub(super) async fn received_until(r: &Receiver, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = r.received.lock().unwrap().clone();
        if done(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the receiver never got it; it has: {}",
            serde_json::to_string(&now).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// The explicit bucket boundaries of the GenAI semantic conventions
// (v1.41.0, docs/gen-ai/gen-ai-metrics.md), as written there.
const SPEC_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const SPEC_TPOT: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
pub(super) const SPEC_DURATION: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
pub(super) const SPEC_TOKENS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// A histogram point's explicit bounds, and its bucket counts.
pub(super) fn buckets(point: &Value) -> (Vec<f64>, Vec<u64>) {
    let bounds = point["explicitBounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    let counts = point["bucketCounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().parse().unwrap())
        .collect();
    (bounds, counts)
}

/// The OTLP histogram point holds the observations of the Prometheus
/// histogram `family` (the same count and sum, and the same cumulative
/// count at each bound the two share) in the conventions' boundaries
/// `spec`. Returns how many bounds they share.
fn assert_same_observations(
    point: &Value,
    samples: &[Sample],
    family: &str,
    spec: &[f64],
) -> usize {
    let count: u64 = point["count"].as_str().unwrap().parse().unwrap();
    let prom_count = sum(samples, &format!("{family}_count"), &[]);
    assert_eq!(count as f64, prom_count, "{family} count: {point}");
    let otel_sum = point["sum"].as_f64().unwrap();
    let prom_sum = sum(samples, &format!("{family}_sum"), &[]);
    assert!(
        (otel_sum - prom_sum).abs() < 1e-9,
        "{family} sum {otel_sum} against {prom_sum}"
    );
    let (bounds, counts) = buckets(point);
    assert_eq!(bounds, spec, "{family}: the exported boundaries");
    assert_eq!(counts.len(), bounds.len() + 1, "{point}");
    assert_eq!(counts.iter().sum::<u64>(), count, "{point}");
    let prom_bounds: Vec<String> = samples
        .iter()
        .filter(|s| s.name == format!("{family}_bucket"))
        .filter_map(|s| s.labels.get("le").cloned())
        .collect();
    let mut cumulative = 0;
    let mut shared = 0;
    for (bound, n) in bounds.iter().zip(&counts) {
        cumulative += n;
        let le = bound.to_string();
        if prom_bounds.contains(&le) {
            shared += 1;
            let prom = sum(samples, &format!("{family}_bucket"), &[("le", &le)]);
            assert_eq!(cumulative as f64, prom, "{family} le={le}");
        }
    }
    shared
}

async fn export_and_compare(protocol: OtlpProtocol) {
    let receiver = start_receiver();
    let sim = start_sim(schedule(30, 3, 8)).await;
    let endpoint = match protocol {
        OtlpProtocol::Grpc => receiver.grpc,
        OtlpProtocol::HttpProtobuf => receiver.http,
    };
    let via = match protocol {
        OtlpProtocol::Grpc => "grpc",
        OtlpProtocol::HttpProtobuf => "http",
    };
    let mut config = config_for(sim);
    config.otlp = Some(otlp(endpoint, protocol));
    let tm = start(config).await;

    // A sampled trace, a request without trace context, an unsampled
    // trace, and a slower first token.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let requests: [(&str, &[(&str, &str)]); 4] = [
        (
            "sampled",
            &[
                (
                    "traceparent",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                ),
                ("x-session-id", "task-9"),
            ],
        ),
        ("root", &[]),
        (
            "unsampled",
            &[(
                "traceparent",
                "00-11111111111111111111111111111111-2222222222222222-00",
            )],
        ),
        ("slow", &[("x-sim-ttft-ms", "120")]),
    ];
    for (_, headers) in requests {
        let (head, body) = chat_request("m1", true, headers);
        assert_eq!(raw_exchange(tm.proxy_addr, &head, &body).await.status, 200);
    }
    let samples = scrape_until(tm.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 4.0
    })
    .await;

    // The latest cumulative export has all four requests.
    let got = received_until(&receiver, |r| {
        points(r, via, "gen_ai.server.time_to_first_token")
            .last()
            .is_some_and(|p| p["count"] == "4")
            && spans(r, via).len() >= 3
    })
    .await;
    let last = |name: &str| points(&got, via, name).last().cloned().unwrap();
    // The TTFTs (30 ms, and 120 ms for one) fall either side of 0.1 s, a
    // bound both have.
    let shared = assert_same_observations(
        &last("gen_ai.server.time_to_first_token"),
        &samples,
        "llm_time_to_first_token_seconds",
        SPEC_TTFT,
    );
    assert!(shared >= 5, "{shared}");
    assert_same_observations(
        &last("gen_ai.server.time_per_output_token"),
        &samples,
        "llm_time_per_output_token_seconds",
        SPEC_TPOT,
    );
    assert_same_observations(
        &last("gen_ai.client.operation.duration"),
        &samples,
        "llm_e2e_request_latency_seconds",
        SPEC_DURATION,
    );
    let ttft = last("gen_ai.server.time_to_first_token");
    let a = attributes(&ttft);
    assert_eq!(a["gen_ai.operation.name"], "chat", "{a:?}");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "m1");
    assert_eq!(a["server.address"], "127.0.0.1");
    assert_eq!(a["server.port"], sim.port().to_string());
    assert_eq!(a["tokenmeter.route"], "test");
    assert!(!a.contains_key("error.type"));
    // Tokens: one point per type, the Prometheus totals.
    let tokens = points(&got, via, "gen_ai.client.token.usage");
    for (kind, family) in [
        ("output", "llm_output_tokens"),
        ("input", "llm_input_tokens"),
    ] {
        let point = tokens
            .iter()
            .rev()
            .find(|p| attributes(p)["gen_ai.token.type"] == kind)
            .unwrap();
        assert_eq!(point["count"], "4");
        assert_eq!(buckets(point).0, SPEC_TOKENS, "{kind}");
        assert_eq!(
            point["sum"].as_f64().unwrap(),
            sum(&samples, &format!("{family}_sum"), &[]),
            "{kind}"
        );
    }
    let resource = &got.iter().find(|r| r["signal"] == "metrics").unwrap()["request"]["resourceMetrics"]
        [0]["resource"];
    assert_eq!(
        attributes(resource)["service.name"],
        "tokenmeter-under-test"
    );

    // Spans: the sampled trace's (a child of the client's span), two root
    // spans of their own, none for the unsampled trace.
    let spans = spans(&got, via);
    assert_eq!(spans.len(), 3, "{spans:?}");
    let (resource, sampled) = spans
        .iter()
        .find(|(_, s)| s["traceId"] == b64(&unhex(trace)))
        .expect("the sampled trace's span");
    assert_eq!(
        attributes(resource)["service.name"],
        "tokenmeter-under-test"
    );
    assert_eq!(sampled["parentSpanId"], b64(&unhex(parent)), "{sampled}");
    assert_eq!(sampled["kind"], "SPAN_KIND_SERVER");
    assert_eq!(sampled["name"], "chat m1");
    assert_eq!(sampled["status"]["code"], "STATUS_CODE_OK");
    let a = attributes(sampled);
    assert_eq!(a["http.response.status_code"], "200");
    assert_eq!(a["gen_ai.usage.output_tokens"], "8");
    assert_eq!(a["tokenmeter.outcome"], "ok");
    // Its turn, and its session's key as the conversation's id.
    assert_eq!(a["tokenmeter.turn"], "first");
    assert_eq!(a["gen_ai.conversation.id"], "task-9");
    assert_eq!(a["tokenmeter.session.turn"], "1");
    // Its load at arrival: requests in flight, itself included (no engine
    // is scraped, so that is the load its curve counts).
    let in_flight: u64 = a["tokenmeter.load.in_flight"].parse().unwrap();
    assert!(in_flight >= 1, "{a:?}");
    assert_eq!(a["tokenmeter.load"], a["tokenmeter.load.in_flight"]);
    assert!(!a.contains_key("tokenmeter.engine.running"), "{a:?}");
    let event = &sampled["events"][0];
    assert_eq!(event["name"], "first_token");
    let start: u64 = sampled["startTimeUnixNano"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let at: u64 = event["timeUnixNano"].as_str().unwrap().parse().unwrap();
    let end: u64 = sampled["endTimeUnixNano"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(start < at && at < end, "{sampled}");
    let roots = spans
        .iter()
        .filter(|(_, s)| s.get("parentSpanId").is_none_or(|p| p == ""))
        .count();
    assert_eq!(roots, 2, "{spans:?}");
    assert!(
        spans
            .iter()
            .all(|(_, s)| s["traceId"] != b64(&unhex("11111111111111111111111111111111"))),
        "an unsampled trace was exported"
    );
    // Nothing was lost.
    let samples = scrape_until(tm.admin_addr, |_| true).await;
    assert_eq!(sum(&samples, "tokenmeter_otlp_dropped_total", &[]), 0.0);
    assert_eq!(
        sum(&samples, "tokenmeter_otlp_export_failures_total", &[]),
        0.0
    );
    tm.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_spans_reach_a_receiver_over_http_needs_tool_otlp_receiver() {
    export_and_compare(OtlpProtocol::HttpProtobuf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_spans_reach_a_receiver_over_grpc_needs_tool_otlp_receiver() {
    export_and_compare(OtlpProtocol::Grpc).await;
}

/// With no collector listening, every request is forwarded whole; the
/// spans are dropped as their exports fail, and counted, as are the
/// failed metric exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_changes_nothing_for_clients() {
    let sim = start_sim(schedule(5, 1, 5)).await;
    for protocol in [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc] {
        let mut config = config_for(sim);
        let (down, _held) = closed_port();
        config.otlp = Some(otlp(down, protocol));
        let tm = start(config).await;
        for _ in 0..5 {
            let (head, body) = chat_request("m1", true, &[]);
            let resp = raw_exchange(tm.proxy_addr, &head, &body).await;
            assert_eq!(resp.status, 200);
            assert!(!resp.truncated);
            let body = String::from_utf8(resp.body()).unwrap();
            assert!(body.ends_with("data: [DONE]\n\n"), "{protocol:?}: {body}");
        }
        let samples = scrape_until(tm.admin_addr, |s| {
            value(
                s,
                "tokenmeter_otlp_dropped_total",
                &[("signal", "traces"), ("reason", "export_failed")],
            ) == 5.0
                && value(
                    s,
                    "tokenmeter_otlp_export_failures_total",
                    &[("signal", "metrics")],
                ) >= 1.0
        })
        .await;
        assert_eq!(
            sum(&samples, "llm_requests_total", &[("outcome", "ok")]),
            5.0
        );
        tm.stop().await;
    }
}

/// A collector that accepts connections and never answers holds the
/// exporter for its timeout: the queue fills, requests past it are
/// dropped from the export and counted, and every client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_collector_fills_the_queue_not_the_clients_wait() {
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = hung.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = hung.accept().await {
            open.push(s);
        }
    });
    let sim = start_sim(schedule(5, 1, 5)).await;
    let mut config = config_for(sim);
    let mut settings = otlp(addr, OtlpProtocol::HttpProtobuf);
    settings.queue = 2;
    settings.max_batch = 1;
    settings.traces_delay = Duration::from_millis(20);
    for e in [&mut settings.exports.metrics, &mut settings.exports.traces]
        .into_iter()
        .flatten()
    {
        e.timeout = Duration::from_secs(3);
    }
    config.otlp = Some(settings);
    let tm = start(config).await;
    let started = tokio::time::Instant::now();
    for _ in 0..12 {
        let (head, body) = chat_request("m1", true, &[]);
        let resp = raw_exchange(tm.proxy_addr, &head, &body).await;
        assert_eq!(resp.status, 200);
        assert!(!resp.truncated);
    }
    // Served while the exporter waited on the collector (its timeout is
    // 3 s): generous, for a loaded machine.
    let served_in = started.elapsed();
    let samples = scrape_until(tm.admin_addr, |s| {
        value(
            s,
            "tokenmeter_otlp_dropped_total",
            &[("signal", "traces"), ("reason", "queue_full")],
        ) >= 1.0
    })
    .await;
    let queue_full = value(
        &samples,
        "tokenmeter_otlp_dropped_total",
        &[("signal", "metrics"), ("reason", "queue_full")],
    );
    assert!(queue_full >= 1.0, "{queue_full}");
    assert_eq!(
        sum(&samples, "llm_requests_total", &[("outcome", "ok")]),
        12.0
    );
    assert!(served_in < Duration::from_secs(30), "{served_in:?}");
    tm.stop().await;
    held.abort();
}

/// The export configured by the OpenTelemetry SDKs' variables alone (no
/// `otlp` section), in the binary: the metrics over gRPC (their own
/// endpoint and protocol, used as given), the spans over HTTP/protobuf
/// (the generic endpoint, `/v1/traces` added), both carrying the
/// collector's credentials from `OTEL_EXPORTER_OTLP_HEADERS` (gRPC
/// metadata, HTTP headers), in the conventions' boundaries, with the
/// upstream's address. The secret is in no log line, nor in `/config`,
/// nor in `tokenmeter check`'s output, which shows where each setting
/// came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_otel_environment_alone_configures_the_export_needs_tool_otlp_receiver() {
    const SECRET: &str = "s3cr3t-collector-token";
    let receiver = start_receiver();
    let sim = start_sim(schedule(30, 3, 8)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &file,
        format!("routes:\n  - name: env\n    upstream: http://{sim}\n"),
    )
    .unwrap();
    let grpc = format!("http://{}", receiver.grpc);
    let http = format!("http://{}", receiver.http);
    let headers = format!("Authorization=Bearer%20{SECRET},x-collector-tenant=acme");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", http.as_str()),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", grpc.as_str()),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_HEADERS", headers.as_str()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", "tm-from-env"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=it%20env,service.name=overridden",
        ),
    ];

    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&file)
        .envs(env)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    for shown in [
        format!("otlp metrics: {grpc} over grpc (endpoint from OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, protocol from OTEL_EXPORTER_OTLP_METRICS_PROTOCOL)"),
        format!("otlp traces: {http}/v1/traces over http/protobuf (endpoint from OTEL_EXPORTER_OTLP_ENDPOINT, protocol from default)"),
        "headers [authorization=<redacted>, x-collector-tenant=<redacted>] (from OTEL_EXPORTER_OTLP_HEADERS)".to_owned(),
        "timeout 2s (from OTEL_EXPORTER_OTLP_TIMEOUT)".to_owned(),
        "service.name tm-from-env (from OTEL_SERVICE_NAME)".to_owned(),
    ] {
        assert!(text.contains(&shown), "{shown}\n{text}");
    }

    let args = [std::ffi::OsStr::new("--config"), file.as_os_str()];
    let mut served = serve_env(&[], &args, "info,tokenmeter=debug", &env);
    for _ in 0..3 {
        // The answer names the model that served it, not the alias asked.
        let (head, body) = chat_request("m1", true, &[("x-sim-model", "m1-2026-12-01")]);
        assert_eq!(raw_exchange(served.proxy, &head, &body).await.status, 200);
    }
    let shown = admin_json(served.admin, "/config").await;
    assert!(!shown.to_string().contains(SECRET), "{shown}");
    assert_eq!(
        shown["otlp"]["exports"]["metrics"]["headers"]["authorization"], "<redacted>",
        "{shown}"
    );

    let got = received_until(&receiver, |r| {
        points(r, "grpc", "gen_ai.server.time_to_first_token")
            .last()
            .is_some_and(|p| p["count"] == "3")
            && spans(r, "http").len() >= 3
    })
    .await;
    let ttft = points(&got, "grpc", "gen_ai.server.time_to_first_token")
        .last()
        .cloned()
        .unwrap();
    assert_eq!(buckets(&ttft).0, SPEC_TTFT);
    let a = attributes(&ttft);
    assert_eq!(a["server.address"], "127.0.0.1", "{a:?}");
    assert_eq!(a["gen_ai.request.model"], "m1", "{a:?}");
    assert_eq!(a["gen_ai.response.model"], "m1-2026-12-01", "{a:?}");
    assert_eq!(a["server.port"], sim.port().to_string());
    assert_eq!(a["gen_ai.provider.name"], "openai");
    let resource = &got.iter().find(|r| r["signal"] == "metrics").unwrap()["request"]["resourceMetrics"]
        [0]["resource"];
    let resource = attributes(resource);
    assert_eq!(resource["service.name"], "tm-from-env", "{resource:?}");
    assert_eq!(resource["deployment.environment"], "it env", "{resource:?}");
    assert_eq!(spans(&got, "http")[0].1["name"], "chat m1");
    let span = attributes(&spans(&got, "http")[0].1);
    assert_eq!(span["gen_ai.response.model"], "m1-2026-12-01", "{span:?}");
    // Every export carried the credentials, over both protocols.
    for via in ["grpc", "http"] {
        let exports: Vec<&Value> = got.iter().filter(|r| r["via"] == via).collect();
        assert!(!exports.is_empty(), "{via}");
        for r in exports {
            assert_eq!(
                r["headers"]["authorization"],
                format!("Bearer {SECRET}"),
                "{via}: {}",
                r["headers"]
            );
            assert_eq!(r["headers"]["x-collector-tenant"], "acme");
        }
    }

    // The whole log, to the end of a clean stop.
    let _ = Command::new("kill")
        .args(["-TERM", &served.child.0.id().to_string()])
        .status();
    let lines = std::mem::take(&mut served.early)
        .into_iter()
        .chain(served.lines.by_ref().map_while(Result::ok))
        .collect::<Vec<_>>();
    assert!(served.child.0.wait().unwrap().success());
    assert!(
        lines.iter().any(|l| l.contains("exporting OTLP")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| !l.contains(SECRET)), "{lines:?}");
}
