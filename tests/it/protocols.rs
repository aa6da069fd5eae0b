//! Every protocol end to end: each captured stream is served on its API's
//! own path by an upstream that sends one event every 100 ms (a known
//! schedule), through the proxy with `protocol: auto`; the scraped TTFT,
//! ITL, E2EL and token counts match the schedule and `expected.yaml`, and
//! the server's phases are exported as the stream reported them.

use std::collections::BTreeMap;

use crate::common::*;
use serde::Deserialize;

const PACE_MS: u64 = 100;
/// How late a timing may be: below one pace, so stamping the next event
/// instead of the right one fails, yet wide enough for a machine whose
/// cores are busy with other work (tens of milliseconds late).
const LATE: f64 = 0.090;

#[derive(Debug, Deserialize)]
struct Expect {
    token_events: u64,
    first_token_event: Option<u64>,
    first_visible_event: Option<u64>,
    output: Option<u64>,
    output_source: Option<String>,
    outcome: String,
    queue_s: Option<f64>,
    prefill_s: Option<f64>,
    decode_s: Option<f64>,
    #[serde(flatten)]
    _rest: BTreeMap<String, serde_json::Value>,
}

/// The path each API is served on by default.
fn path_for(file: &str) -> &'static str {
    match file.split('-').next().unwrap() {
        "anthropic" => "/v1/messages",
        "gemini" => "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        "llamacpp" if file.contains("chat") => "/v1/chat/completions",
        "llamacpp" => "/completion",
        "sglang" => "/generate",
        "tgi" => "/generate_stream",
        "ollama" if file.contains("chat") => "/api/chat",
        "ollama" => "/api/generate",
        "openai" if file.contains("responses") => "/v1/responses",
        _ => "/v1/chat/completions",
    }
}

/// Index among the paced pieces of the piece holding event `event` (pieces
/// that hold only comments are not events).
fn piece_of_event(pieces: &[Vec<u8>], event: u64) -> usize {
    pieces
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            let text = String::from_utf8_lossy(p);
            !text.trim_start().starts_with(':') || text.contains("\ndata")
        })
        .nth(event as usize)
        .unwrap()
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_is_timed_against_a_paced_upstream() {
    let text = std::fs::read_to_string(fixture_dir().join("expected.yaml")).unwrap();
    let all: BTreeMap<String, Expect> = serde_saphyr::from_str(&text).unwrap();
    let upstream = scripted_upstream().await;
    let mut tasks = Vec::new();
    for (file, expect) in all {
        tasks.push(tokio::spawn(async move {
            let proxy = start(config_for(upstream)).await;
            let bytes = fixture(&file);
            let pieces = split_events(&bytes);
            let head = format!(
                "POST {} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\n\
                 content-length: 14\r\nx-fixture: {file}\r\nx-pace-ms: {PACE_MS}\r\n\r\n",
                path_for(&file)
            );
            let resp = raw_exchange(proxy.proxy_addr, &head, br#"{"model":"m1"}"#).await;
            assert_eq!(resp.body(), bytes, "{file}: bytes");
            assert_eq!(resp.chunks.len(), pieces.len(), "{file}: one frame per paced event");
            let s = scrape_until(proxy.admin_addr, |s| sum(s, "llm_requests_total", &[]) == 1.0).await;
            let route = [("route", "test")];
            assert_eq!(
                sum(&s, "llm_requests_total", &[("outcome", expect.outcome.as_str())]),
                1.0,
                "{file}: outcome"
            );
            let pace = PACE_MS as f64 / 1000.0;
            let (n, ttft) = mean(&s, "llm_time_to_first_token_seconds", &route);
            match expect.first_token_event {
                Some(first) => {
                    let want = pace * (piece_of_event(&pieces, first) + 1) as f64;
                    assert_eq!(n, 1.0, "{file}: TTFT observed once");
                    assert!(ttft >= want - 0.002 && ttft < want + LATE, "{file}: TTFT {ttft} want {want}");
                }
                None => assert_eq!(n, 0.0, "{file}: no token, no TTFT"),
            }
            let (n, visible) = mean(&s, "llm_time_to_first_visible_token_seconds", &route);
            match expect.first_visible_event {
                Some(first) => {
                    let want = pace * (piece_of_event(&pieces, first) + 1) as f64;
                    assert_eq!(n, 1.0, "{file}: visible TTFT observed once");
                    assert!(
                        visible >= want - 0.002 && visible < want + LATE,
                        "{file}: visible TTFT {visible} want {want}"
                    );
                }
                None => assert_eq!(n, 0.0, "{file}: nothing visible, no visible TTFT"),
            }
            let (gaps, _) = mean(&s, "llm_inter_token_latency_seconds", &route);
            assert_eq!(gaps, expect.token_events.saturating_sub(1) as f64, "{file}: one ITL per gap");
            // TPOT = (t_last − t_first) / (N − 1): the ITL gaps add up to
            // t_last − t_first, and N is the reported count.
            let itl_sum = value(&s, "llm_inter_token_latency_seconds_sum", &route);
            let (n_tpot, tpot) = mean(&s, "llm_time_per_output_token_seconds", &route);
            let n_tokens = match expect.output_source.as_deref() {
                Some("events") => expect.token_events,
                _ => expect.output.unwrap_or(0),
            };
            if expect.outcome == "ok" && n_tokens >= 2 && expect.token_events >= 1 {
                assert_eq!(n_tpot, 1.0, "{file}: TPOT observed once");
                let want = itl_sum / (n_tokens - 1) as f64;
                assert!((tpot - want).abs() < 1e-6, "{file}: TPOT {tpot} want {want}");
            } else {
                assert_eq!(n_tpot, 0.0, "{file}: no TPOT");
            }
            if expect.outcome == "ok" {
                let (n, e2el) = mean(&s, "llm_e2e_request_latency_seconds", &route);
                let want = pace * pieces.len() as f64;
                assert_eq!(n, 1.0);
                assert!(e2el >= want - 0.002 && e2el < want + LATE, "{file}: E2EL {e2el} want {want}");
            }
            let source = expect.output_source.as_deref().unwrap_or("usage");
            let want_tokens = match source {
                "usage" => expect.output.unwrap() as f64,
                _ => expect.token_events as f64,
            };
            assert_eq!(
                sum(&s, "llm_output_tokens_total", &[("source", source)]),
                want_tokens,
                "{file}: output tokens"
            );
            assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 0.0, "{file}: parse errors");
            check_phases(&file, &expect, &s);
            proxy.stop().await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// The server's phases are observed once, as reported, and the time
/// outside the engine is the TTFT the proxy measured minus the server's
/// queue and prefill: observed when it is not negative, else counted.
fn check_phases(file: &str, expect: &Expect, s: &[Sample]) {
    let route = [("route", "test")];
    for (family, want) in [
        ("llm_server_queue_seconds", expect.queue_s),
        ("llm_server_prefill_seconds", expect.prefill_s),
        ("llm_server_decode_seconds", expect.decode_s),
    ] {
        let (n, got) = mean(s, family, &route);
        match want {
            Some(want) => {
                assert_eq!(n, 1.0, "{file}: {family} observed once");
                assert!(
                    (got - want).abs() < 1e-9,
                    "{file}: {family} {got} want {want}"
                );
            }
            None => assert_eq!(n, 0.0, "{file}: {family} not reported, not observed"),
        }
    }
    let ttft = value(s, "llm_time_to_first_token_seconds_sum", &route);
    let (n, outside) = mean(s, "llm_time_outside_engine_seconds", &route);
    let negative = sum(s, "llm_outside_engine_negative_total", &[]);
    match (expect.first_token_event, expect.queue_s, expect.prefill_s) {
        (Some(_), Some(queue), Some(prefill)) if ttft >= queue + prefill => {
            assert_eq!(
                (n, negative),
                (1.0, 0.0),
                "{file}: outside time observed once"
            );
            let want = ttft - queue - prefill;
            assert!(
                (outside - want).abs() < 1e-9,
                "{file}: outside {outside} want {want}"
            );
        }
        (Some(_), Some(_), Some(_)) => {
            assert_eq!(
                (n, negative),
                (0.0, 1.0),
                "{file}: negative outside time counted"
            );
        }
        _ => assert_eq!((n, negative), (0.0, 0.0), "{file}: no outside time"),
    }
}

/// Reported timings that are null are not observed; implausible ones are
/// not observed either and count as a parse error; TGI's header is read.
#[tokio::test]
async fn null_and_implausible_timings_are_not_observed() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let usage_chunk = |metrics: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"hi\"}}}}]}}\n\n\
             data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":1}},\"metrics\":{metrics}}}\n\n\
             data: [DONE]\n\n"
        )
    };
    let streams = [
        usage_chunk("null"),
        usage_chunk(
            r#"{"queue_time_ms":null,"time_to_first_token_ms":null,"generation_time_ms":null}"#,
        ),
        usage_chunk(
            r#"{"queue_time_ms":-4.5,"time_to_first_token_ms":20,"generation_time_ms":30}"#,
        ),
        usage_chunk(r#"{"queue_time_ms":"4","time_to_first_token_ms":20,"generation_time_ms":30}"#),
    ];
    for body in &streams {
        let hex: String = body.bytes().map(|b| format!("{b:02x}")).collect();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\n\
             content-length: 14\r\nx-body-hex: {hex}\r\n\r\n"
        );
        let resp = raw_exchange(proxy.proxy_addr, &head, br#"{"model":"m1"}"#).await;
        assert_eq!(resp.body(), body.as_bytes());
    }
    let head = "POST /generate_stream HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\n\
                content-length: 14\r\nx-fixture: tgi-generate-stream.sse\r\nx-send-queue-time: 42\r\n\r\n";
    let resp = raw_exchange(proxy.proxy_addr, head, br#"{"model":"m1"}"#).await;
    assert_eq!(resp.header("x-queue-time"), Some("42"));
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 5.0
    })
    .await;
    assert_eq!(
        sum(
            &s,
            "tokenmeter_stream_parse_errors_total",
            &[("kind", "implausible_timings")]
        ),
        2.0
    );
    assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 2.0);
    // TGI's queue, and nothing else.
    assert_eq!(mean(&s, "llm_server_queue_seconds", &[]), (1.0, 0.042));
    for family in [
        "llm_server_prefill_seconds",
        "llm_server_decode_seconds",
        "llm_time_outside_engine_seconds",
    ] {
        assert_eq!(mean(&s, family, &[]).0, 0.0, "{family}");
    }
    assert_eq!(sum(&s, "llm_outside_engine_negative_total", &[]), 0.0);
    proxy.stop().await;
}

#[test]
fn split_events_keeps_every_byte() {
    for name in fixture_names() {
        let bytes = fixture(&name);
        assert_eq!(split_events(&bytes).concat(), bytes, "{name}");
        assert!(split_events(&bytes).len() > 1, "{name}");
    }
}
