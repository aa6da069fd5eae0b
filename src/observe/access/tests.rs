//! The access lines' shape, in both formats, field by field.

#![allow(clippy::unwrap_used)]
use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::config::Route;
use crate::observe::labels::{Bounds, Labels};
use crate::observe::occupancy::{EngineOccupancy, Occupancy};
use crate::observe::request::{Charged, Gaps};
use crate::observe::trace::Trace;
use meter::{Outcome, ServerTimings, Summary, TokenSource, Usage};

fn logged(model: Option<&str>, request_id: Option<&str>) -> Entry {
    let mut request = http::Request::post("/v1/chat/completions");
    if let Some(id) = request_id {
        request = request.header(REQUEST_ID_HEADER, id);
    }
    let (parts, ()) = request.body(()).unwrap().into_parts();
    Entry::new(&started(&route(), &parts, model, None), None)
}

fn route() -> Route {
    crate::observe::request::route("  - name: chat\n    upstream: http://127.0.0.1:8000\n")
}

fn started<'a>(
    route: &'a Route,
    parts: &'a http::request::Parts,
    model: Option<&'a str>,
    trace: Option<Trace>,
) -> Started<'a> {
    // A body naming `model`, for the test's length.
    let body: &'static meter::RequestFacts = Box::leak(Box::new(meter::RequestFacts {
        model: model.map(str::to_owned),
        ..Default::default()
    }));
    Started {
        route,
        api: meter::Api::OpenAi,
        body: Some(body),
        at: tokio::time::Instant::now(),
        parts,
        client: "[::1]:41234".parse().unwrap(),
        trace,
    }
}

/// The labels of the requests logged here: route `chat`, class
/// `interactive`, `chat` (the line names the model and tenant the
/// request gave, not their labels).
fn labels() -> Labels {
    let counter = || prometheus::IntCounter::new("overflow", "overflow").unwrap();
    let bounds = Bounds::new(
        &crate::config::MetricsSettings::default(),
        counter(),
        counter(),
    );
    Labels::resolve(
        &std::sync::Arc::new(bounds),
        "chat",
        None,
        Some("interactive"),
        None,
        meter::Operation::Chat,
    )
}

/// The line of `entry`, ended with `s`, a slow reader's or not.
fn written(entry: &Entry, s: &Summary, slow_reader: bool, format: Format) -> Vec<u8> {
    let labels = labels();
    let finished = Finished {
        turn: meter::Turn::None,
        session: None,
        summary: s,
        labels: &labels,
        judged: None,
        headers: None,
        at: tokio::time::Instant::now(),
        gaps: Gaps::default(),
        slow_reader,
        occupancy: Occupancy {
            in_flight: 3,
            engine: None,
        },
        charged: None,
    };
    let mut buf = Vec::new();
    entry.line(&mut buf, &finished, format, at());
    buf
}

fn summary() -> Summary {
    Summary {
        outcome: Outcome::Ok,
        status: Some(200),
        streamed: true,
        ttft: Some(Duration::from_nanos(2_041_500)),
        ttft_visible: Some(Duration::from_nanos(2_041_500)),
        e2el: Some(Duration::from_millis(1182)),
        elapsed: Duration::from_millis(1182),
        tpot: Some(Duration::from_nanos(19_984_499)),
        output_tokens: Some((50, TokenSource::Usage)),
        usage: Usage {
            input: Some(12),
            output: Some(50),
            ..Usage::default()
        },
        server: ServerTimings::default(),
        client_wait: std::time::Duration::ZERO,
        proxy_time: None,
        response_model: None,
        events: 52,
        token_events: 50,
        first_token_event: Some(1),
        first_visible_event: Some(1),
        terminal_event: None,
        parse_errors: 0,
    }
}

/// 2026-12-01T20:48:00.123456Z.
fn at() -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(1_796_158_080_123_456)
}

fn line(l: &Entry, s: &Summary, format: Format) -> String {
    String::from_utf8(written(l, s, false, format)).unwrap()
}

#[test]
fn json_lines_have_the_shape_of_the_fmt_subscribers() {
    let text = line(&logged(Some("m1"), Some("req-7")), &summary(), Format::Json);
    assert!(
        text.ends_with('\n') && text.matches('\n').count() == 1,
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "timestamp": "2026-12-01T20:48:00.123456Z",
            "level": "INFO",
            "fields": {
                "message": "request",
                "route": "chat",
                "model": "m1",
                "slo": "interactive",
                "operation": "chat",
                "method": "POST",
                "path": "/v1/chat/completions",
                "request_id": "req-7",
                "client": "[::1]:41234",
                "status": 200,
                "outcome": "ok",
                "streamed": true,
                "ttft_ms": 2.042,
                "tpot_ms": 19.984,
                "e2el_ms": 1182.0,
                "elapsed_ms": 1182.0,
                "client_wait_ms": 0.0,
                "output_tokens": 50,
                "output_source": "usage",
                "input_tokens": 12,
                "parse_errors": 0,
                "load": 3,
                "in_flight": 3
            },
            "target": "tokenmeter::access"
        })
    );
}

#[test]
fn a_request_names_its_tenant_and_trace_id() {
    let (parts, ()) = http::Request::post("/v1/chat/completions")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .body(())
        .unwrap()
        .into_parts();
    let mut headers = parts.headers.clone();
    let trace = Trace::of_request(crate::config::TraceSettings::default(), &mut headers);
    let route = route();
    let entry = Entry::new(&started(&route, &parts, None, trace), Some("team-a"));
    let text = line(&entry, &summary(), Format::Json);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["fields"]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(v["fields"]["tenant"], "team-a");
    let text = line(&entry, &summary(), Format::Text { ansi: false });
    assert!(
        text.contains(" trace_id=0af7651916cd43dd8448eb211c80319c "),
        "{text}"
    );
}

#[test]
fn fields_without_a_value_are_left_out() {
    let mut s = summary();
    s.ttft = None;
    s.tpot = None;
    s.e2el = None;
    s.status = None;
    s.output_tokens = None;
    s.usage = Usage::default();
    s.outcome = Outcome::ClientAbort;
    let text = line(&logged(None, None), &s, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let f = v["fields"].as_object().unwrap();
    for key in [
        "model",
        "tenant",
        "response_model",
        "request_id",
        "trace_id",
        "status",
        "ttft_ms",
        "tpot_ms",
        "e2el_ms",
        "output_tokens",
        "output_source",
        "input_tokens",
        "queue_ms",
        "prefill_ms",
        "decode_ms",
        "outside_ms",
        "client_wait_ms",
        "slow_reader",
        "proxy_ms",
    ] {
        assert!(!f.contains_key(key), "{key} in {text}");
    }
    assert_eq!(f["outcome"], "client_abort");
    assert_eq!(f["elapsed_ms"], 1182.0);
}

#[test]
fn the_servers_phases_and_the_outside_time_are_written_when_known() {
    let mut s = summary();
    s.server = ServerTimings {
        queue: Some(0.0005),
        prefill: Some(0.0012),
        decode: Some(0.9),
    };
    let text = line(&logged(None, None), &s, Format::Text { ansi: false });
    assert!(
        text.contains(" queue_ms=0.500 prefill_ms=1.200 decode_ms=900.000 outside_ms=0.342 "),
        "{text}"
    );
    // A server that counts more than the proxy saw: negative, written.
    s.server.prefill = Some(0.0025);
    let text = line(&logged(None, None), &s, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["fields"]["outside_ms"], -0.959);
    // No queue: no outside time.
    s.server.queue = None;
    let text = line(&logged(None, None), &s, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["fields"].get("outside_ms").is_none(), "{text}");
    assert_eq!(v["fields"]["prefill_ms"], 2.5);
}

/// The client's wait is written for every response; a slow reader is
/// marked as one.
#[test]
fn the_clients_wait_is_written_and_a_slow_reader_marked() {
    let mut s = summary();
    s.client_wait = Duration::from_millis(2003);
    let entry = logged(None, None);
    let buf = written(&entry, &s, true, Format::Json);
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    assert_eq!(v["fields"]["client_wait_ms"], 2003.0);
    assert_eq!(v["fields"]["slow_reader"], true);
    let text = line(&entry, &s, Format::Text { ansi: false });
    assert!(text.contains(" client_wait_ms=2003.000 "), "{text}");
    assert!(!text.contains("slow_reader"), "{text}");
}

#[test]
fn any_string_a_client_sends_stays_one_line_and_round_trips() {
    let odd = "a\"b\\c\nd\re\tf\u{1}g\u{7f}h é 字 🦀";
    // A header value is visible ASCII and spaces at most.
    let l = logged(Some(odd), Some("id \"quoted\" \\"));
    let text = line(&l, &summary(), Format::Json);
    assert_eq!(text.matches('\n').count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["fields"]["model"], odd);
    assert_eq!(v["fields"]["request_id"], "id \"quoted\" \\");
    let text = line(&l, &summary(), Format::Text { ansi: false });
    assert_eq!(text.matches('\n').count(), 1, "{text}");
    assert!(!text.contains('\u{1}') && !text.contains('\r'), "{text}");
}

#[test]
fn text_lines_read_like_the_fmt_subscribers() {
    let l = logged(Some("m1"), Some("req-7"));
    assert_eq!(
        line(&l, &summary(), Format::Text { ansi: false }),
        "2026-12-01T20:48:00.123456Z  INFO tokenmeter::access: request route=chat \
         model=\"m1\" slo=\"interactive\" operation=chat method=POST path=/v1/chat/completions \
         request_id=\"req-7\" client=[::1]:41234 status=200 outcome=\"ok\" streamed=true ttft_ms=2.042 \
         tpot_ms=19.984 e2el_ms=1182.000 elapsed_ms=1182.000 client_wait_ms=0.000 output_tokens=50 \
         output_source=\"usage\" input_tokens=12 parse_errors=0 load=3 in_flight=3\n"
    );
    let coloured = line(&l, &summary(), Format::Text { ansi: true });
    assert!(coloured.contains("\x1b[32m INFO\x1b[0m"), "{coloured}");
    assert!(
        coloured.contains("\x1b[3mroute\x1b[0m\x1b[2m=\x1b[0mchat"),
        "{coloured}"
    );
}

/// Where the route's engine is scraped, the line has its figures, and
/// the load is its running plus waiting requests; where the route has
/// GPUs, its share of them, as the shortest decimal that reads back the
/// same (so lines add up to the counters).
#[test]
fn the_load_at_arrival_and_the_gpu_share_are_on_the_line() {
    let labels = labels();
    let s = summary();
    let finished = Finished {
        turn: meter::Turn::None,
        session: None,
        summary: &s,
        labels: &labels,
        judged: None,
        headers: None,
        at: tokio::time::Instant::now(),
        gaps: Gaps::default(),
        slow_reader: false,
        occupancy: Occupancy {
            in_flight: 2,
            engine: Some(EngineOccupancy {
                running: Some(4),
                waiting: Some(1),
                kv_cache_usage: Some(0.875),
            }),
        },
        charged: Some(Charged {
            gpu_seconds: 0.1 + 0.2,
            joules: None,
            cost: Some(1e-7),
        }),
    };
    let entry = logged(None, None);
    let mut buf = Vec::new();
    entry.line(&mut buf, &finished, Format::Text { ansi: false }, at());
    let text = String::from_utf8(buf).unwrap();
    assert!(
        text.ends_with(
            " load=5 in_flight=2 engine_running=4 engine_waiting=1 kv_cache_usage=0.875 gpu_seconds=0.30000000000000004 gpu_cost=0.0000001\n"
        ),
        "{text}"
    );
    let mut buf = Vec::new();
    entry.line(&mut buf, &finished, Format::Json, at());
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    assert_eq!(v["fields"]["kv_cache_usage"], 0.875);
    assert_eq!(v["fields"]["engine_waiting"], 1);
}

#[test]
fn truncated_keeps_the_first_characters() {
    assert_eq!(truncated("/v1/chat", 256), "/v1/chat");
    assert_eq!(truncated("abcdef", 3), "abc");
    assert_eq!(truncated("abc", 3), "abc");
    // Characters, not bytes: "é" is two bytes.
    assert_eq!(truncated("éééé", 3), "ééé");
    assert_eq!(truncated("ééé", 3), "ééé");
    let long = "/".repeat(300);
    assert_eq!(truncated(&long, 256).len(), 256);
}
