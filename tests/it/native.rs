//! Native histograms, through the protobuf exposition: decoded with the
//! client model's own definition (`tests/data/protobuf/metrics.proto`, by
//! Python's protobuf with grpcio-tools' protoc) it says what the text
//! exposition of the same moment says, and its native buckets add up; a
//! real Prometheus with native histograms on stores TTFT as one and its
//! quantile agrees with the classic buckets' within a bucket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use crate::common::*;
use crate::prometheus::{eventually, query, scalar, start_prometheus_with_features};
use serde_json::Value;

/// The `Accept` of Prometheus 3 with native histograms on.
const PROTOBUF_FIRST: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=underscores;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

/// A class whose TTFT threshold, 120 ms, is no default bucket bound: its
/// `le="0.12"` bucket is there only because the class put it there.
const CLASS: &str =
    "classes:\n  - name: chat\n    objectives:\n      ttft: {threshold: 120ms, target: 0.9}\n";

/// The proxy in front of `sim`, the route's requests judged by [`CLASS`].
async fn proxy(dir: &std::path::Path, sim: SocketAddr) -> tokenmeter::app::Running {
    let main = "slo_files: [slo/*.yaml]\nroutes:\n  - name: chat\n    slo: chat\n";
    start(config_from_files(dir, main, &[("chat.yaml", CLASS)], sim)).await
}

/// `n` streamed requests, request `i` with its first token after
/// `ttft_ms(i)` and an `x-request-id` (so each is an exemplar).
async fn requests(proxy: SocketAddr, n: usize, ttft_ms: impl Fn(usize) -> u64) {
    for i in 0..n {
        let ttft = ttft_ms(i).to_string();
        let id = format!("req-{i}");
        let headers = [("x-sim-ttft-ms", ttft.as_str()), ("x-request-id", &id)];
        let (head, body) = chat_request("m1", true, &headers);
        assert_eq!(raw_exchange(proxy, &head, &body).await.status, 200);
    }
}

/// `GET /metrics` with `accept`.
async fn scrape_as(admin: SocketAddr, accept: &str) -> RawResponse {
    let head = format!(
        "GET /metrics HTTP/1.1\r\nhost: a\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
    );
    let resp = raw_exchange(admin, &head, b"").await;
    assert_eq!(resp.status, 200);
    resp
}

/// The protobuf exposition `bytes` as `tests/data/protobuf/decode.py`
/// decodes it.
fn decode(bytes: &[u8]) -> Vec<Value> {
    use std::io::Write;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/protobuf/decode.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 not found");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "decode.py failed (it needs grpcio-tools in a virtual environment first on PATH, \
         .ci/run's target/venv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn labels(series: &Value) -> BTreeMap<String, String> {
    let pairs = series["labels"].as_object().unwrap();
    let text = |v: &Value| v.as_str().unwrap().to_owned();
    pairs.iter().map(|(k, v)| (k.clone(), text(v))).collect()
}

/// The text sample `name` with exactly `labels` (and `le`, for a bucket).
fn text_value(samples: &[Sample], name: &str, labels: &BTreeMap<String, String>) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && &s.labels == labels)
        .map(|s| s.value)
}

/// The upper bound of native bucket `i` at `schema`.
fn native_bound(i: i64, schema: i64) -> f64 {
    (i as f64 * (-schema as f64).exp2()).exp2()
}

/// Every family of the protobuf exposition is the text one's, with the
/// same series; the request counters and histograms, which nothing moves
/// between the two scrapes, have the same values; each histogram's native
/// buckets (schema 3, the zero threshold 2^-128) add up to its count, and
/// TTFT's lie where the requests' first tokens came; the exemplars ride
/// with their buckets and again in the native histogram's own field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protobuf_exposition_decodes_to_the_text_one_needs_tool_grpc_tools() {
    let sim = start_sim(schedule(30, 2, 10)).await;
    let dir = tempfile::tempdir().unwrap();
    let tm = proxy(dir.path(), sim).await;
    requests(tm.proxy_addr, 12, |i| 20 + 25 * i as u64).await;
    scrape_until(tm.admin_addr, |s| sum(s, "llm_requests_total", &[]) == 12.0).await;

    let resp = scrape_as(tm.admin_addr, PROTOBUF_FIRST).await;
    assert_eq!(
        resp.header("content-type"),
        Some(
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
        )
    );
    let families = decode(&resp.body());
    let (_, text) = scrape(tm.admin_addr).await;

    let mut histograms = 0;
    for family in &families {
        let name = family["name"].as_str().unwrap();
        let kind = family["type"].as_str().unwrap();
        // Figures computed at each scrape (the process's own, the knees)
        // may move between the two: their series are compared, not values.
        let steady = name.starts_with("llm_")
            && matches!(kind, "COUNTER" | "HISTOGRAM")
            && !name.contains("gpu")
            && !name.contains("engine");
        for series in family["metrics"].as_array().unwrap() {
            let l = labels(series);
            let Some(h) = series.get("histogram") else {
                let text = text_value(&text, name, &l);
                let got = text.unwrap_or_else(|| panic!("{name} {l:?} is not in the text"));
                if steady {
                    assert_eq!(series["value"].as_f64(), Some(got), "{name} {l:?}");
                }
                continue;
            };
            histograms += 1;
            let count = h["count"].as_u64().unwrap();
            let sum = h["sum"].as_f64().unwrap();
            let text_count = text_value(&text, &format!("{name}_count"), &l).unwrap();
            let text_sum = text_value(&text, &format!("{name}_sum"), &l).unwrap();
            assert_eq!(count as f64, text_count, "{name} {l:?}");
            // The native buckets keep their own sum, of the same values.
            assert!(
                (sum - text_sum).abs() <= 1e-9 * text_sum.abs().max(1.0),
                "{name} {l:?}: {sum} against {text_sum}"
            );
            let bucket = |le: &str| {
                let mut with_le = l.clone();
                with_le.insert("le".into(), le.into());
                text_value(&text, &format!("{name}_bucket"), &with_le)
            };
            for b in h["buckets"].as_array().unwrap() {
                let cumulative = b[1].as_f64().unwrap();
                let le = match b[0].as_f64() {
                    Some(bound) => bound.to_string(),
                    None => "+Inf".into(),
                };
                assert_eq!(bucket(&le), Some(cumulative), "{name} {l:?} le={le}");
            }
            assert_eq!(bucket("+Inf"), Some(count as f64), "{name} {l:?}");
            // The request's latency and token-count histograms keep native
            // buckets; those by turn and of sessions are classic only.
            let classic_only = names::SESSIONS.iter().any(|f| f.name("llm") == name);
            if classic_only {
                assert_eq!(h["native"], false, "{name} {l:?}");
                continue;
            }
            // The native buckets: schema 3, counts that add up to the count.
            assert_eq!(h["native"], true, "{name} {l:?}");
            assert_eq!(h["schema"], 3, "{name}");
            assert_eq!(h["zero_threshold"].as_f64(), Some((-128.0_f64).exp2()));
            assert_eq!(h["negative_spans"], 0);
            let deltas: Vec<i64> = h["deltas"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect();
            let spans: Vec<(i64, i64)> = h["spans"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s[0].as_i64().unwrap(), s[1].as_i64().unwrap()))
                .collect();
            let length: i64 = spans.iter().map(|s| s.1).sum();
            assert_eq!(length as usize, deltas.len(), "{name} {l:?}");
            let mut counts = Vec::new();
            let (mut running, mut index) = (0_i64, 0_i64);
            let mut deltas = deltas.iter();
            // The first span's offset is its first bucket; each later one's
            // the gap after the span before.
            for (offset, len) in &spans {
                index += offset;
                for _ in 0..*len {
                    running += deltas.next().unwrap();
                    assert!(running >= 0, "{name} {l:?}");
                    counts.push((index, running));
                    index += 1;
                }
            }
            let native_total: i64 = counts.iter().map(|c| c.1).sum();
            let zero = h["zero_count"].as_i64().unwrap();
            assert_eq!(native_total + zero, count as i64, "{name} {l:?}");
            if name == "llm_time_to_first_token_seconds" {
                // First tokens came 20 ms to 295 ms (and a few ms) after
                // their requests: the populated buckets lie there.
                let populated = counts.iter().filter(|c| c.1 > 0);
                for &(i, _) in populated {
                    assert!(native_bound(i, 3) > 0.02, "bucket {i}");
                    assert!(native_bound(i - 1, 3) < 0.4, "bucket {i}");
                }
                let ids: Vec<&Value> = h["exemplars"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| &e["labels"]["request_id"])
                    .collect();
                assert!(!ids.is_empty(), "{h}");
                assert_eq!(h["exemplars"], h["bucket_exemplars"]);
                for e in h["exemplars"].as_array().unwrap() {
                    assert!(e["timestamp"].as_f64().unwrap() > 1.6e9, "{e}");
                }
            }
        }
    }
    // The 14 request histograms of the one label set (some unobserved
    // ones are not made yet), each with native buckets.
    assert!(histograms >= 8, "{histograms}");
    // And the text families are all there.
    let names: Vec<&str> = families
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for s in &text {
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| s.name.strip_suffix(suffix))
            .filter(|f| names.contains(f))
            .unwrap_or(&s.name);
        assert!(names.contains(&family), "{} is not in the protobuf", s.name);
    }
}

/// Prometheus with native histograms on scrapes the protobuf exposition
/// and stores TTFT as a native histogram, whose 90th percentile is within
/// one classic bucket of the classic buckets' (those a Prometheus without
/// them stores, scraping the same proxy); the class's bound is a classic
/// bucket in the text exposition and in that Prometheus. (Debian's
/// Prometheus 2.42 keeps no classic series of a histogram it stores as
/// native: `scrape_classic_histograms`, which keeps both, came in 2.45.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_stores_ttft_as_a_native_histogram_needs_tool_prometheus() {
    let sim = start_sim(schedule(30, 2, 10)).await;
    let dir = tempfile::tempdir().unwrap();
    let tm = proxy(dir.path(), sim).await;
    let native = start_prometheus_with_features(&[tm.admin_addr], "", &["native-histograms"]).await;
    let classic = start_prometheus_with_features(&[tm.admin_addr], "", &[]).await;
    for p in [&native, &classic] {
        eventually(p, "count(up{job=\"tokenmeter\"} == 1)", 1.0).await;
    }
    // TTFTs from 20 ms to 410 ms, 10 ms apart.
    let n = 40;
    requests(tm.proxy_addr, n, |i| 20 + 10 * i as u64).await;
    let n = n as f64;
    eventually(
        &native,
        "sum(histogram_count(llm_time_to_first_token_seconds))",
        n,
    )
    .await;
    eventually(&classic, "sum(llm_time_to_first_token_seconds_count)", n).await;

    // Stored as a native histogram: an instant query answers a histogram.
    let answer = query(&native, "llm_time_to_first_token_seconds").await;
    let result = &answer["data"]["result"][0];
    assert!(result.get("histogram").is_some(), "{answer}");
    let quantile = |answer: &Value| scalar(answer).unwrap();
    let from_native = quantile(
        &query(
            &native,
            "histogram_quantile(0.9, sum(llm_time_to_first_token_seconds))",
        )
        .await,
    );
    let from_classic = quantile(
        &query(
            &classic,
            "histogram_quantile(0.9, sum by (le) (llm_time_to_first_token_seconds_bucket))",
        )
        .await,
    );
    // The classic bucket the classic answer lies in, and its width, from
    // the bounds the text exposition has.
    let (_, text) = scrape(tm.admin_addr).await;
    let mut bounds: Vec<f64> = text
        .iter()
        .filter(|s| s.name == "llm_time_to_first_token_seconds_bucket")
        .filter_map(|s| s.labels.get("le")?.parse().ok())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let upper = bounds.partition_point(|&b| b < from_classic);
    let width = bounds[upper] - bounds[upper.saturating_sub(1)];
    assert!(
        (from_native - from_classic).abs() <= width,
        "native p90 {from_native}, classic p90 {from_classic} (bucket width {width})"
    );
    // The true 90th percentile of the TTFTs sent is about 0.37 s.
    assert!((0.3..0.5).contains(&from_native), "{from_native}");

    // The class's bound is a classic bucket: in the text exposition, and
    // in the Prometheus that stores the classic series (the ten requests
    // whose first token came 20 to 110 ms after them).
    assert!(bounds.contains(&0.12), "no le=0.12 bucket: {bounds:?}");
    eventually(
        &classic,
        "sum(llm_time_to_first_token_seconds_bucket{le=\"0.12\"})",
        10.0,
    )
    .await;
}

/// The generated native rules (`tokenmeter rules --histograms native`),
/// evaluated by a Prometheus that stores native histograms: the share of
/// first tokens within the class's 120 ms, which sits on no native bucket
/// bound (`histogram_fraction`), is the classic `le="0.12"` bucket's share
/// to within the one native bucket that holds 120 ms, and the 90th
/// percentile is within one classic bucket of the classic buckets' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_native_rules_agree_with_the_classic_buckets_needs_tool_prometheus() {
    let sim = start_sim(schedule(30, 2, 10)).await;
    let dir = tempfile::tempdir().unwrap();
    let main = "slo_files: [slo/*.yaml]\nroutes:\n  - name: chat\n    slo: chat\n";
    let config = config_from_files(dir.path(), main, &[("chat.yaml", CLASS)], sim);
    let rules = slo::rules::to_yaml(&slo::rules::RuleFile {
        groups: slo::rules::native_latency_groups(&config.slo_classes, "llm"),
    })
    .unwrap();
    let tm = start(config).await;
    let p = start_prometheus_with_features(&[tm.admin_addr], &rules, &["native-histograms"]).await;
    eventually(&p, "count(up{job=\"tokenmeter\"} == 1)", 1.0).await;
    // One request makes the series, and a scrape stores it before the
    // rest, so the rules' rates cover all of them.
    requests(tm.proxy_addr, 1, |_| 500).await;
    eventually(
        &p,
        "sum(histogram_count(llm_time_to_first_token_seconds))",
        1.0,
    )
    .await;
    let (_, before) = scrape(tm.admin_addr).await;
    // TTFTs from 25 ms to 415 ms, 10 ms apart: 10 of them within 120 ms.
    let n = 40;
    requests(tm.proxy_addr, n, |i| 25 + 10 * i as u64).await;
    eventually(
        &p,
        "sum(histogram_count(llm_time_to_first_token_seconds))",
        n as f64 + 1.0,
    )
    .await;
    let (_, after) = scrape(tm.admin_addr).await;
    let grown = |name: &str, le: Option<&str>| {
        let value = |samples: &[Sample]| {
            let found = samples
                .iter()
                .filter(|s| s.name == name)
                .filter(|s| le.is_none_or(|le| s.labels.get("le").map(String::as_str) == Some(le)));
            found.map(|s| s.value).sum::<f64>()
        };
        value(&after) - value(&before)
    };
    let classic_share = grown("llm_time_to_first_token_seconds_bucket", Some("0.12"))
        / grown("llm_time_to_first_token_seconds_count", None);
    assert!((0.2..0.3).contains(&classic_share), "{classic_share}");

    // The rules are evaluated every second; wait for one after the last
    // scrape.
    let (within, quantile) = slo::rules::latency_names("llm", "5m");
    let rule = |name: &str| format!("{name}{{slo=\"chat\",objective=\"ttft\"}}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let share = loop {
        let share = scalar(&query(&p, &rule(&within)).await);
        if let Some(share) = share.filter(|s| (s - classic_share).abs() <= 1.5 / n as f64) {
            break share;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "native share within 120 ms {share:?} against the classic {classic_share}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    // The native bucket that holds 120 ms, (0.1186, 0.1294] at schema 3,
    // is interpolated: the share is within its one request of the exact.
    assert!(
        (share - classic_share).abs() <= 1.0 / n as f64 + 1e-9,
        "{share}"
    );
    let p90 = scalar(&query(&p, &rule(&quantile)).await).unwrap();
    // The target is 0.9: its percentile of 25..415 ms is about 0.38 s, in
    // the classic bucket (0.25, 0.5].
    assert!((0.25..=0.5).contains(&p90), "{p90}");
}
