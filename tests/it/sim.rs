//! The simulator on a real socket, driven by a plain hyper client: the exact
//! event sequence, one event per body frame, the schedule (lower bounds, with
//! generous upper bounds for noisy machines), and every `x-sim-*` header.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use sim::{self, SimConfig, load};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Slack allowed above a deadline before a test calls the frame late.
const SLACK: Duration = Duration::from_millis(200);

struct Sim {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Sim {
    async fn start(config: SimConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sim::serve(listener, config, async {
            let _ = stopped.await;
        }));
        Self {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
            stop: Some(stop),
            task,
        }
    }

    async fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Response<Incoming> {
        self.try_post(path, headers, body).await.unwrap()
    }

    async fn try_post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        let mut request = Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        self.client.request(request).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Bytes) {
        let request = Request::get(format!("{}{path}", self.base))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    async fn stats(&self) -> Value {
        let (status, body) = self.get("/sim/stats").await;
        assert_eq!(status, StatusCode::OK);
        serde_json::from_slice(&body).unwrap()
    }

    /// Polls `/sim/stats` until `key` reaches `want`, for at most 5 s.
    async fn wait_stat(&self, key: &str, want: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stats = self.stats().await;
            if stats[key] == want {
                return stats;
            }
            assert!(
                Instant::now() < deadline,
                "{key} never reached {want}: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Every body frame with its arrival time, and the body error if it failed.
async fn frames(response: Response<Incoming>) -> (Vec<(Instant, String)>, Option<hyper::Error>) {
    let mut body = response.into_body();
    let mut frames = Vec::new();
    loop {
        match body.frame().await {
            None => return (frames, None),
            Some(Err(error)) => return (frames, Some(error)),
            Some(Ok(frame)) => {
                let at = Instant::now();
                if let Ok(data) = frame.into_data() {
                    frames.push((at, String::from_utf8(data.to_vec()).unwrap()));
                }
            }
        }
    }
}

/// Checks that a frame is exactly one SSE event and returns its payload:
/// JSON, or `None` for `[DONE]`.
fn event(frame: &str) -> Option<Value> {
    let payload = frame
        .strip_prefix("data: ")
        .and_then(|rest| rest.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("not one SSE event: {frame:?}"));
    assert!(
        !payload.contains('\n'),
        "several events in one frame: {frame:?}"
    );
    if payload == "[DONE]" {
        return None;
    }
    Some(serde_json::from_str(payload).unwrap_or_else(|e| panic!("{e}: {payload}")))
}

fn events(frames: &[(Instant, String)]) -> Vec<Option<Value>> {
    frames.iter().map(|(_, frame)| event(frame)).collect()
}

fn content(event: &Value) -> &str {
    event["choices"][0]["delta"]["content"].as_str().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const CHAT: &str = "/v1/chat/completions";
const LEGACY: &str = "/v1/completions";
const SCHEDULE: [(&str, &str); 3] = [
    ("x-sim-ttft-ms", "30"),
    ("x-sim-itl-ms", "5"),
    ("x-sim-tokens", "10"),
];

#[tokio::test]
async fn chat_stream_is_exact_and_on_schedule() {
    let sim = Sim::start(SimConfig::default()).await;
    let body = json!({
        "model": "m1", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "three word prompt"}],
    });
    let start = Instant::now();
    let response = sim.post(CHAT, &SCHEDULE, &body.to_string()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (frames, error) = frames(response).await;
    assert!(error.is_none());
    let events = events(&frames);
    assert_eq!(events.len(), 14, "role, 10 tokens, finish, usage, [DONE]");

    let role = events[0].as_ref().unwrap();
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(role["model"], "m1");
    assert!(role["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(role["created"].is_u64());
    assert_eq!(
        role["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(frames[0].0 < start + ms(30) + SLACK);

    for k in 0..10u64 {
        let (at, _) = &frames[1 + k as usize];
        let token = events[1 + k as usize].as_ref().unwrap();
        assert_eq!(content(token), format!(" tok{k}"));
        assert_eq!(token["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(token["id"], role["id"]);
        let due = start + ms(30 + 5 * k);
        assert!(*at >= due, "token {k} early by {:?}", due - *at);
        assert!(*at < due + SLACK, "token {k} late by {:?}", *at - due);
    }
    let finish = events[11].as_ref().unwrap();
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = events[12].as_ref().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13})
    );
    assert!(events[13].is_none());
    assert_eq!(frames[13].1, "data: [DONE]\n\n");

    let stats = sim.stats().await;
    assert_eq!(
        (stats["requests"].as_u64(), stats["completed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (stats["aborted"].as_u64(), stats["failed"].as_u64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn head_and_role_chunk_come_before_the_first_token() {
    let sim = Sim::start(SimConfig::default()).await;
    let start = Instant::now();
    let headers = [("x-sim-ttft-ms", "400"), ("x-sim-tokens", "1")];
    let response = sim.post(CHAT, &headers, r#"{"stream":true}"#).await;
    assert!(
        Instant::now() < start + ms(400),
        "head waited for the first token"
    );
    let (frames, _) = frames(response).await;
    assert!(frames[0].0 < start + ms(400));
    assert!(frames[1].0 >= start + ms(400));
}

#[tokio::test]
async fn legacy_head_is_not_held_for_the_first_token() {
    let sim = Sim::start(SimConfig::default()).await;
    let start = Instant::now();
    let headers = [("x-sim-ttft-ms", "400"), ("x-sim-tokens", "1")];
    let response = sim.post(LEGACY, &headers, r#"{"stream":true}"#).await;
    assert!(
        Instant::now() < start + ms(400),
        "head waited for the first token"
    );
    let (frames, _) = frames(response).await;
    assert!(frames[0].0 >= start + ms(400));
}

#[tokio::test]
async fn choices_are_interleaved() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "10"),
        ("x-sim-itl-ms", "2"),
        ("x-sim-tokens", "4"),
    ];
    let response = sim.post(CHAT, &headers, r#"{"stream":true,"n":3}"#).await;
    let (frames, _) = frames(response).await;
    let events = events(&frames);
    // 3 roles, 4 tokens x 3 choices, 3 finishes, [DONE]; no usage asked for.
    assert_eq!(events.len(), 3 + 12 + 3 + 1);
    let index = |i: usize| {
        events[i].as_ref().unwrap()["choices"][0]["index"]
            .as_u64()
            .unwrap()
    };
    for (i, event) in events[..3].iter().enumerate() {
        assert_eq!(
            event.as_ref().unwrap()["choices"][0]["delta"]["role"],
            "assistant"
        );
        assert_eq!(index(i), i as u64);
    }
    for k in 0..4 {
        for choice in 0..3 {
            let i = 3 + k * 3 + choice;
            assert_eq!(index(i), choice as u64);
            assert_eq!(content(events[i].as_ref().unwrap()), format!(" tok{k}"));
        }
    }
    for choice in 0..3 {
        let finish = events[15 + choice].as_ref().unwrap();
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        assert_eq!(index(15 + choice), choice as u64);
    }
    assert!(events[18].is_none());
}

#[tokio::test]
async fn usage_chunk_only_when_asked_and_counts_all_choices() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "1"),
        ("x-sim-itl-ms", "1"),
        ("x-sim-tokens", "3"),
    ];
    let without = r#"{"stream":true,"stream_options":{"include_usage":false}}"#;
    let (frames_without, _) = frames(sim.post(CHAT, &headers, without).await).await;
    let events_without = events(&frames_without);
    assert_eq!(events_without.len(), 6);
    assert!(
        events_without
            .iter()
            .flatten()
            .all(|e| e.get("usage").is_none())
    );

    let with = r#"{"stream":true,"n":2,"stream_options":{"include_usage":true},"max_tokens":2}"#;
    let (frames_with, _) = frames(sim.post(CHAT, &headers, with).await).await;
    let events_with = events(&frames_with);
    let usage = events_with[events_with.len() - 2].as_ref().unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    let finish = events_with[events_with.len() - 3].as_ref().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn non_streamed_chat_answers_whole_with_usage() {
    let sim = Sim::start(SimConfig::default()).await;
    let start = Instant::now();
    let headers = [
        ("x-sim-ttft-ms", "30"),
        ("x-sim-itl-ms", "5"),
        ("x-sim-tokens", "3"),
    ];
    let body = r#"{"model":"m2","messages":[{"role":"user","content":"a b"}],"n":2}"#;
    let response = sim.post(CHAT, &headers, body).await;
    assert!(Instant::now() >= start + ms(40));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("content-length"));
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "m2");
    assert_eq!(body["choices"][1]["index"], 1);
    assert_eq!(body["choices"][0]["message"]["content"], " tok0 tok1 tok2");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8})
    );
}

#[tokio::test]
async fn legacy_completions_both_ways() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "5"),
        ("x-sim-itl-ms", "1"),
        ("x-sim-tokens", "3"),
    ];
    let body =
        r#"{"prompt":"once upon a time","stream":true,"stream_options":{"include_usage":true}}"#;
    let (frames, error) = frames(sim.post(LEGACY, &headers, body).await).await;
    assert!(error.is_none());
    let events = events(&frames);
    assert_eq!(events.len(), 3 + 1 + 1 + 1, "no role chunk for legacy");
    for (k, event) in events[..3].iter().enumerate() {
        let event = event.as_ref().unwrap();
        assert_eq!(event["object"], "text_completion");
        assert_eq!(
            event["choices"][0],
            json!({"text": format!(" tok{k}"), "index": 0, "logprobs": null, "finish_reason": null})
        );
    }
    assert_eq!(
        events[3].as_ref().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(events[4].as_ref().unwrap()["usage"]["prompt_tokens"], 4);
    assert!(events[5].is_none());

    let response = sim
        .post(LEGACY, &headers, r#"{"prompt":"hi","max_tokens":2}"#)
        .await;
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], " tok0 tok1");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 2);
}

#[tokio::test]
async fn status_header_answers_an_openai_error() {
    let sim = Sim::start(SimConfig::default()).await;
    let response = sim
        .post(CHAT, &[("x-sim-status", "429")], r#"{"stream":true}"#)
        .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert!(body["error"]["message"].is_string());
    let response = sim.post(CHAT, &[("x-sim-status", "503")], "{}").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn headers_delay_holds_the_head_but_not_the_schedule() {
    let sim = Sim::start(SimConfig::default()).await;
    let start = Instant::now();
    let headers = [
        ("x-sim-headers-delay-ms", "120"),
        ("x-sim-ttft-ms", "150"),
        ("x-sim-itl-ms", "5"),
        ("x-sim-tokens", "2"),
    ];
    let response = sim.post(CHAT, &headers, r#"{"stream":true}"#).await;
    let head = Instant::now();
    assert!(head >= start + ms(120));
    assert!(head < start + ms(120) + SLACK);
    let (frames, _) = frames(response).await;
    assert!(frames[1].0 >= start + ms(150));
    assert!(frames[2].0 >= start + ms(155));

    let start = Instant::now();
    let response = sim
        .post(
            CHAT,
            &[("x-sim-headers-delay-ms", "50"), ("x-sim-status", "500")],
            "{}",
        )
        .await;
    assert!(Instant::now() >= start + ms(50));
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn abort_after_resets_the_connection() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "5"),
        ("x-sim-itl-ms", "1"),
        ("x-sim-tokens", "10"),
        ("x-sim-abort-after", "3"),
    ];
    let (frames, error) = frames(sim.post(CHAT, &headers, r#"{"stream":true}"#).await).await;
    assert!(error.is_some(), "the body must fail, not end");
    let events = events(&frames);
    assert_eq!(events.len(), 4, "role and 3 tokens");
    assert_eq!(content(events[3].as_ref().unwrap()), " tok2");
    let stats = sim.wait_stat("failed", 1).await;
    assert_eq!(
        (stats["aborted"].as_u64(), stats["completed"].as_u64()),
        (Some(0), Some(0))
    );

    // Non-streamed: the head arrives, then the body fails.
    let response = sim.post(CHAT, &headers, "{}").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.into_body().collect().await.is_err());
    sim.wait_stat("failed", 2).await;
}

#[tokio::test]
async fn error_after_sends_an_error_event_and_ends() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "5"),
        ("x-sim-itl-ms", "1"),
        ("x-sim-tokens", "10"),
        ("x-sim-error-after", "2"),
    ];
    let body = r#"{"stream":true,"stream_options":{"include_usage":true}}"#;
    let (frames, error) = frames(sim.post(CHAT, &headers, body).await).await;
    assert!(error.is_none(), "the stream ends normally");
    assert_eq!(frames.len(), 4, "role, 2 tokens, error");
    assert_eq!(
        frames[3].1,
        "data: {\"error\":{\"message\":\"simulated failure\",\"type\":\"server_error\",\"code\":500}}\n\n"
    );
    event(&frames[3].1);
    sim.wait_stat("completed", 1).await;

    let response = sim.post(CHAT, &headers, "{}").await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn stall_after_then_client_leaves_counts_an_abort() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "5"),
        ("x-sim-itl-ms", "1"),
        ("x-sim-tokens", "10"),
        ("x-sim-stall-after", "2"),
    ];
    let response = sim.post(CHAT, &headers, r#"{"stream":true}"#).await;
    let mut body = response.into_body();
    for expected in ["assistant", " tok0", " tok1"] {
        let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&frame).contains(expected));
    }
    assert_eq!(sim.stats().await["aborted"], 0);
    drop(body);
    let stats = sim.wait_stat("aborted", 1).await;
    assert_eq!(
        (stats["completed"].as_u64(), stats["failed"].as_u64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn non_streamed_stall_then_client_leaves_counts_an_abort() {
    let sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "1"),
        ("x-sim-tokens", "3"),
        ("x-sim-stall-after", "1"),
    ];
    let waiting = sim.post(CHAT, &headers, "{}");
    // The request can never be answered; giving up on it closes the connection.
    assert!(tokio::time::timeout(ms(100), waiting).await.is_err());
    let stats = sim.wait_stat("aborted", 1).await;
    assert_eq!(stats["requests"], 1);
}

#[tokio::test]
async fn shutdown_cuts_a_stalled_stream() {
    let mut sim = Sim::start(SimConfig::default()).await;
    let headers = [
        ("x-sim-ttft-ms", "1"),
        ("x-sim-tokens", "5"),
        ("x-sim-stall-after", "0"),
    ];
    let response = sim.post(CHAT, &headers, r#"{"stream":true}"#).await;
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    sim.stop.take().unwrap().send(()).unwrap();
    let rest = body.collect().await;
    assert!(rest.is_err(), "a cut stream must not look complete");
    tokio::time::timeout(Duration::from_secs(5), sim.task)
        .await
        .expect("graceful shutdown finished")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn bad_requests_get_400_with_an_openai_error() {
    let sim = Sim::start(SimConfig::default()).await;
    for (headers, body) in [
        (vec![], "{not json"),
        (vec![], r#"{"stream":"yes"}"#),
        (vec![("x-sim-ttft-ms", "soon")], "{}"),
        (vec![("x-sim-tokens", "-3")], "{}"),
        (vec![("x-sim-status", "200")], "{}"),
        (
            vec![("x-sim-abort-after", "1"), ("x-sim-error-after", "1")],
            "{}",
        ),
    ] {
        let response = sim.post(CHAT, &headers, body).await;
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{headers:?} {body}"
        );
        let error: Value =
            serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes())
                .unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(error["error"]["message"].is_string());
        assert_eq!(error["error"]["param"], Value::Null);
        assert_eq!(error["error"]["code"], Value::Null);
    }
}

#[tokio::test]
async fn models_health_and_unknown_routes() {
    let config = SimConfig {
        model: "tiny-llama".to_owned(),
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await;
    let (status, body) = sim.get("/v1/models").await;
    assert_eq!(status, StatusCode::OK);
    let models: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny-llama");
    assert_eq!(sim.get("/health").await.0, StatusCode::OK);
    assert_eq!(sim.get("/v1/nothing").await.0, StatusCode::NOT_FOUND);
    let response = sim
        .post(CHAT, &[("x-sim-tokens", "1"), ("x-sim-ttft-ms", "0")], "{}")
        .await;
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(
        body["model"], "tiny-llama",
        "the configured model when none is named"
    );
}

#[tokio::test]
async fn role_chunk_can_be_turned_off() {
    let config = SimConfig {
        role_chunk: false,
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await;
    let headers = [("x-sim-ttft-ms", "1"), ("x-sim-tokens", "1")];
    let (frames, _) = frames(sim.post(CHAT, &headers, r#"{"stream":true}"#).await).await;
    let events = events(&frames);
    assert_eq!(events.len(), 3);
    assert_eq!(content(events[0].as_ref().unwrap()), " tok0");
}

#[tokio::test]
async fn router_serves_without_serve() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server =
        tokio::spawn(async move { axum::serve(listener, sim::router(SimConfig::default())).await });
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let request = Request::get(format!("http://{addr}/health"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        client.request(request).await.unwrap().status(),
        StatusCode::OK
    );
    server.abort();
}

#[tokio::test]
async fn load_sends_streams_and_counts_outcomes() {
    let config = SimConfig {
        ttft: ms(5),
        itl: ms(1),
        tokens: 5,
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await;
    // The run length is the load's duration, not a synchronisation point.
    let summary = load::run_load(
        format!("{}/", sim.base),
        100.0,
        Vec::new(),
        Vec::new(),
        tokio::time::sleep(ms(700)),
    )
    .await;
    assert!(summary.sent >= 20, "{summary:?}");
    assert!(summary.ok >= 10, "{summary:?}");
    assert!(summary.ok + summary.failed <= summary.sent);
    let stats = sim.stats().await;
    assert!(stats["requests"].as_u64().unwrap() >= summary.ok + summary.failed);

    let nothing = load::run_load(sim.base.clone(), 0.0, Vec::new(), Vec::new(), async {}).await;
    assert_eq!(nothing, load::LoadSummary::default());
}

#[tokio::test]
async fn stamped_stream_carries_send_times_and_fingerprints() {
    use sim::stamp::{Fnv64, mono_ns, read_stamp};
    let sim = Sim::start(SimConfig::default()).await;
    let mut headers = SCHEDULE.to_vec();
    headers.push(("x-sim-stamp", "1"));
    let before = mono_ns();
    let body = r#"{"stream":true,"stream_options":{"include_usage":true}}"#;
    let response = sim.post(CHAT, &headers, body).await;
    let (frames, error) = frames(response).await;
    let after = mono_ns();
    assert!(error.is_none());
    let mut print = Fnv64::default();
    let mut last = before;
    for (i, (_, frame)) in frames.iter().enumerate() {
        print.update(frame.as_bytes());
        if frame == "data: [DONE]\n\n" {
            assert_eq!(i, frames.len() - 1);
            continue;
        }
        // Each JSON event stays valid JSON, with its send time on the host's
        // monotonic clock, in order.
        let stamp = read_stamp(frame.as_bytes()).unwrap();
        assert!(stamp >= last && stamp <= after, "{frame}");
        last = stamp;
        assert_eq!(event(frame).unwrap()["sim_sent_ns"], stamp);
    }
    let stats = sim.stats().await;
    assert_eq!(stats["stamped_responses"], 1);
    assert_eq!(stats["stamped_frames"], frames.len() as u64);
    let bytes: usize = frames.iter().map(|(_, f)| f.len()).sum();
    assert_eq!(stats["stamped_bytes"], bytes as u64);
    assert_eq!(stats["stamped_hash"], print.value());

    // Unstamped requests are as before.
    let response = sim.post(CHAT, &SCHEDULE, r#"{"stream":true}"#).await;
    let (plain, _) = self::frames(response).await;
    assert!(plain.iter().all(|(_, f)| !f.contains("sim_sent_ns")));
    assert_eq!(sim.stats().await["stamped_responses"], 1);
}

#[tokio::test]
async fn stamped_whole_body_is_stamped_once() {
    use sim::stamp::read_stamp;
    let sim = Sim::start(SimConfig {
        stamp: true,
        ..SimConfig::default()
    })
    .await;
    let response = sim.post(CHAT, &SCHEDULE, "{}").await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let json: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["sim_sent_ns"].as_u64(), read_stamp(&body));
    assert_eq!(json["usage"]["completion_tokens"], 10);
}
