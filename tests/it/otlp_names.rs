//! Which GenAI names the OTLP export uses, as `OTEL_SEMCONV_STABILITY_OPT_IN`
//! in the proxy process's environment says, against the real receiver of
//! `otlp.rs`: the names of semantic-conventions v1.41.0 without it; with
//! `gen_ai_latest_experimental`, the newest (semantic-conventions-genai:
//! `gen_ai.client.inference.*`, the usage counters with
//! `gen_ai.token.modality`, counted for a failed request too) and not
//! `gen_ai.client.token.usage`; with `gen_ai_latest_experimental/dup`,
//! both, each instrument once.

use std::collections::BTreeSet;

use serde_json::Value;

use super::otlp::{
    Receiver, SPEC_DURATION, SPEC_TOKENS, attributes, buckets, metrics, points, received_until,
    spans, start_receiver,
};
use crate::common::*;

/// The names of the newest conventions the export has for chat requests.
const LATEST: [&str; 7] = [
    "gen_ai.client.inference.duration",
    "gen_ai.client.inference.time_to_first_chunk",
    "gen_ai.client.inference.time_per_output_chunk",
    "gen_ai.client.inference.usage.input_tokens",
    "gen_ai.client.inference.usage.output_tokens",
    "gen_ai.client.inference.operation.input_tokens",
    "gen_ai.client.inference.operation.output_tokens",
];
/// Those of v1.41.0 that the newest conventions replaced for them.
const RELEASED: [&str; 2] = [
    "gen_ai.client.operation.duration",
    "gen_ai.client.token.usage",
];

/// Three requests that end ok (8 tokens each, usage reported) and one
/// whose stream fails after 4 tokens (an error event, no usage), through
/// a `tokenmeter serve` whose environment has `opt_in`; what the receiver
/// got once the export had all four, and the proxy's own metrics.
async fn export_with(opt_in: Option<&str>) -> (Receiver, Vec<Value>, Vec<Sample>) {
    let receiver = start_receiver();
    let sim = start_sim(schedule(30, 3, 8)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &file,
        format!(
            "routes:\n  - name: names\n    upstream: http://{sim}\notlp:\n  endpoint: http://{}\n  metrics_interval: 300ms\n  traces_delay: 100ms\n",
            receiver.http
        ),
    )
    .unwrap();
    let env: Vec<(&str, &str)> = opt_in
        .map(|v| ("OTEL_SEMCONV_STABILITY_OPT_IN", v))
        .into_iter()
        .collect();
    let args = [std::ffi::OsStr::new("--config"), file.as_os_str()];
    let served = serve_env(&[], &args, "info", &env);
    for headers in [&[][..], &[], &[], &[("x-sim-error-after", "4")]] {
        let (head, body) = chat_request("m1", true, headers);
        assert_eq!(raw_exchange(served.proxy, &head, &body).await.status, 200);
    }
    let samples = scrape_until(served.admin, |s| sum(s, "llm_requests_total", &[]) == 4.0).await;
    assert_eq!(
        sum(
            &samples,
            "llm_requests_total",
            &[("outcome", "upstream_error")]
        ),
        1.0
    );
    // Every set has a duration of each request.
    let duration = match opt_in {
        Some(_) => "gen_ai.client.inference.duration",
        None => "gen_ai.client.operation.duration",
    };
    let got = received_until(&receiver, |r| {
        count(&latest(r, duration)) == 4 && spans(r, "http").len() >= 4
    })
    .await;
    drop(served);
    (receiver, got, samples)
}

/// The metric names of every export received.
fn names(received: &[Value]) -> BTreeSet<String> {
    let all = metrics(received, |_| true).into_iter();
    all.map(|m| m["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The points of `name` in the last export that has it (cumulative: the
/// totals so far, one point per set of attributes).
fn latest(received: &[Value], name: &str) -> Vec<Value> {
    received
        .iter()
        .rev()
        .map(|r| points(std::slice::from_ref(r), "http", name))
        .find(|p| !p.is_empty())
        .unwrap_or_default()
}

/// The observations of histogram points, or the total of sum points.
fn count(points: &[Value]) -> u64 {
    points
        .iter()
        .map(|p| match p.get("count") {
            Some(n) => n.as_str().unwrap().parse::<u64>().unwrap(),
            None => p["asInt"].as_str().unwrap().parse::<u64>().unwrap(),
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_opt_in_the_names_are_v1_41s_needs_tool_otlp_receiver() {
    let (_receiver, got, samples) = export_with(None).await;
    let names = names(&got);
    for name in RELEASED {
        assert!(names.contains(name), "{name}: {names:?}");
    }
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("gen_ai.client.inference.")),
        "{names:?}"
    );
    // Tokens of completed requests only, as Prometheus's histograms.
    let usage = latest(&got, "gen_ai.client.token.usage");
    assert_eq!(count(&usage), 6, "{usage:?}");
    assert_eq!(sum(&samples, "llm_output_tokens_count", &[]), 3.0);
    let span = attributes(&spans(&got, "http")[0].1);
    assert!(
        !span.contains_key("gen_ai.response.time_to_first_chunk"),
        "{span:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_opt_in_the_names_are_the_newest_needs_tool_otlp_receiver() {
    let (_receiver, got, samples) = export_with(Some("http,gen_ai_latest_experimental")).await;
    let names = names(&got);
    for name in LATEST {
        assert!(names.contains(name), "{name}: {names:?}");
    }
    for name in RELEASED {
        assert!(!names.contains(name), "{name}: {names:?}");
    }

    // The first chunk of every stream, the failed one's too, in the
    // conventions' boundaries.
    let first = latest(&got, "gen_ai.client.inference.time_to_first_chunk");
    assert_eq!(count(&first), 4, "{first:?}");
    assert_eq!(buckets(&first[0]).0, SPEC_DURATION);
    // Each gap of each stream, as Prometheus's ITL observed them.
    let chunks = latest(&got, "gen_ai.client.inference.time_per_output_chunk");
    let gaps = sum(&samples, "llm_inter_token_latency_seconds_count", &[]);
    assert_eq!(count(&chunks) as f64, gaps, "{chunks:?}");
    assert_eq!(gaps, 3.0 * 7.0 + 3.0);
    let chunk_sum: f64 = chunks.iter().map(|p| p["sum"].as_f64().unwrap()).sum();
    let itl_sum = sum(&samples, "llm_inter_token_latency_seconds_sum", &[]);
    assert!(
        (chunk_sum - itl_sum).abs() <= 0.01 * itl_sum,
        "{chunk_sum} against {itl_sum}"
    );

    // The usage counters carry the modality (a chat's is unknown: it may
    // carry images), and count the failed request's 4 tokens too.
    for (name, family, total) in [
        (
            "gen_ai.client.inference.usage.output_tokens",
            "llm_output_tokens_total",
            Some(3 * 8 + 4),
        ),
        (
            "gen_ai.client.inference.usage.input_tokens",
            "llm_input_tokens_total",
            None,
        ),
    ] {
        let usage = latest(&got, name);
        assert!(!usage.is_empty(), "{name}");
        for point in &usage {
            assert_eq!(
                attributes(point)["gen_ai.token.modality"],
                "unknown",
                "{point}"
            );
            assert!(!attributes(point).contains_key("error.type"), "{point}");
        }
        let prometheus = sum(&samples, family, &[]);
        assert_eq!(count(&usage) as f64, prometheus, "{name}");
        if let Some(total) = total {
            assert_eq!(count(&usage), total, "{name}");
        }
    }
    // Per request, the failed one apart under its error.type.
    let output = latest(&got, "gen_ai.client.inference.operation.output_tokens");
    let failed: Vec<&Value> = output
        .iter()
        .filter(|p| attributes(p).get("error.type").map(String::as_str) == Some("upstream_error"))
        .collect();
    assert_eq!(failed.len(), 1, "{output:?}");
    assert_eq!(
        (failed[0]["count"].as_str(), failed[0]["sum"].as_f64()),
        (Some("1"), Some(4.0))
    );
    assert_eq!(count(&output), 4);
    assert_eq!(buckets(&output[0]).0, SPEC_TOKENS);

    let span = spans(&got, "http")
        .into_iter()
        .map(|(_, s)| attributes(&s))
        .find(|a| a["tokenmeter.outcome"] == "ok")
        .unwrap();
    let ttfc: f64 = span["gen_ai.response.time_to_first_chunk"].parse().unwrap();
    assert!((0.03..1.0).contains(&ttfc), "{span:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_dup_both_names_each_once_needs_tool_otlp_receiver() {
    let (_receiver, got, _) = export_with(Some("gen_ai_latest_experimental/dup")).await;
    let names = names(&got);
    for name in LATEST.iter().chain(&RELEASED) {
        assert!(names.contains(*name), "{name}: {names:?}");
    }
    // Each request once in each duration, never twice in one.
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.inference.duration",
    ] {
        assert_eq!(count(&latest(&got, name)), 4, "{name}");
    }
    let span = attributes(&spans(&got, "http")[0].1);
    assert!(
        span.contains_key("gen_ai.response.time_to_first_chunk"),
        "{span:?}"
    );
}
