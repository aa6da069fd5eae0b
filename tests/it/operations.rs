//! The calls that generate nothing (embeddings, rerank, scoring, the
//! tokenizer), each API's answer served by a scripted upstream through the
//! proxy on real sockets: counted once under its operation and outcome,
//! with its E2EL and the input tokens its answer reports, never a TTFT or
//! output tokens; judged against a class of their own by its E2EL bound.

use crate::common::*;
use tokenmeter::config::Protocol;

/// How long the scripted upstream waits before answering.
const PACE_MS: u64 = 60;
/// How much later than the pace an answer may be measured on a loaded
/// machine.
const LATE: f64 = 0.5;

/// One API's call: its path, the answer its server sends, the operation
/// and the input tokens the answer reports.
struct Call {
    server: &'static str,
    path: &'static str,
    answer: &'static str,
    operation: &'static str,
    input: Option<u64>,
}

const CALLS: &[Call] = &[
    Call {
        server: "OpenAI, vLLM, TEI, llama.cpp /v1",
        path: "/v1/embeddings",
        answer: r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023064255,-0.009327292,-0.0028842222]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}"#,
        operation: "embeddings",
        input: Some(8),
    },
    Call {
        server: "TEI native",
        path: "/embed",
        answer: "[[0.038483366,0.032268655,-0.0051837],[0.0167,-0.0135,0.0429]]",
        operation: "embeddings",
        input: None,
    },
    Call {
        server: "Ollama",
        path: "/api/embed",
        answer: r#"{"model":"all-minilm","embeddings":[[0.010071029,-0.0017594862,0.05007221]],"total_duration":14143917,"load_duration":1019500,"prompt_eval_count":8}"#,
        operation: "embeddings",
        input: Some(8),
    },
    Call {
        server: "Ollama (legacy)",
        path: "/api/embeddings",
        answer: r#"{"embedding":[0.5670403838157654,0.009260174818336964,0.23178744316101074]}"#,
        operation: "embeddings",
        input: None,
    },
    Call {
        server: "llama.cpp native",
        path: "/embedding",
        answer: r#"[{"index":0,"embedding":[[0.01153,-0.02513,0.00327]]}]"#,
        operation: "embeddings",
        input: None,
    },
    Call {
        server: "Cohere",
        path: "/v2/embed",
        answer: r#"{"id":"da6e531f","embeddings":{"float":[[0.016296387,-0.008354187]]},"texts":["hello"],"meta":{"api_version":{"version":"2"},"billed_units":{"input_tokens":2}}}"#,
        operation: "embeddings",
        input: Some(2),
    },
    Call {
        server: "Gemini",
        path: "/v1beta/models/text-embedding-004:embedContent",
        answer: r#"{"embedding":{"values":[0.013168523,-0.008711934,-0.046782676]}}"#,
        operation: "embeddings",
        input: None,
    },
    Call {
        server: "vLLM, Jina",
        path: "/v1/rerank",
        answer: r#"{"id":"rerank-7d3","model":"BAAI/bge-reranker-base","usage":{"total_tokens":31},"results":[{"index":1,"document":{"text":"Paris is the capital of France."},"relevance_score":0.99853515625},{"index":0,"document":{"text":"Berlin."},"relevance_score":0.0005860328674316406}]}"#,
        operation: "rerank",
        input: Some(31),
    },
    Call {
        server: "vLLM (Cohere-compatible)",
        path: "/v2/rerank",
        answer: r#"{"id":"rerank-9a1","model":"BAAI/bge-reranker-base","usage":{"total_tokens":17},"results":[{"index":0,"relevance_score":0.9}]}"#,
        operation: "rerank",
        input: Some(17),
    },
    Call {
        server: "TEI native",
        path: "/rerank",
        answer: r#"[{"index":0,"score":0.9982},{"index":1,"score":0.0001}]"#,
        operation: "rerank",
        input: None,
    },
    Call {
        server: "llama.cpp",
        path: "/reranking",
        answer: r#"{"model":"bge-reranker-v2-m3","object":"list","usage":{"prompt_tokens":24,"total_tokens":24},"results":[{"index":0,"relevance_score":-2.9}]}"#,
        operation: "rerank",
        input: Some(24),
    },
    Call {
        server: "vLLM",
        path: "/score",
        answer: r#"{"id":"score-4b2","object":"list","created":1733400000,"model":"BAAI/bge-reranker-v2-m3","data":[{"index":0,"object":"score","score":0.0010}],"usage":{"prompt_tokens":15,"total_tokens":15,"completion_tokens":0,"prompt_tokens_details":null}}"#,
        operation: "score",
        input: Some(15),
    },
    Call {
        server: "vLLM",
        path: "/tokenize",
        answer: r#"{"count":4,"max_model_len":8192,"tokens":[128000,9906,1917,0],"token_strs":null}"#,
        operation: "tokenize",
        input: None,
    },
    Call {
        server: "vLLM",
        path: "/detokenize",
        answer: r#"{"prompt":"Hello world!"}"#,
        operation: "detokenize",
        input: None,
    },
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A request for `path`, naming `model`, which the scripted upstream
/// answers with `answer`, as JSON, `PACE_MS` after the request (or with
/// `status` and a JSON error at once).
fn request(
    path: &str,
    model: &str,
    answer: &str,
    pace_ms: u64,
    status: Option<u16>,
) -> (String, Vec<u8>) {
    let body = format!(r#"{{"model":"{model}","input":["hello"]}}"#).into_bytes();
    let script = match status {
        Some(status) => format!("x-status: {status}\r\n"),
        None => format!(
            "x-body-hex: {}\r\nx-content-type: application/json\r\nx-pace-ms: {pace_ms}\r\n",
            hex(answer.as_bytes())
        ),
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n{script}\r\n",
        body.len()
    );
    (head, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_counted_with_its_operation_latency_and_input_tokens() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, call) in CALLS.iter().enumerate() {
        let (head, body) = request(call.path, &format!("m{i}"), call.answer, PACE_MS, None);
        let addr = proxy.proxy_addr;
        tasks.spawn(async move { (i, raw_exchange(addr, &head, &body).await) });
    }
    while let Some(done) = tasks.join_next().await {
        let (i, resp) = done.unwrap();
        assert_eq!(resp.status, 200, "{}", CALLS[i].path);
        assert_eq!(
            resp.body(),
            CALLS[i].answer.as_bytes(),
            "{}: the answer, untouched",
            CALLS[i].path
        );
    }
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == CALLS.len() as f64
    })
    .await;
    let pace = PACE_MS as f64 / 1000.0;
    for (i, call) in CALLS.iter().enumerate() {
        let model = format!("m{i}");
        let what = format!("{} {} ({})", call.operation, call.path, call.server);
        let of = [("model", model.as_str()), ("operation", call.operation)];
        let ok = [of[0], of[1], ("outcome", "ok")];
        assert_eq!(
            sum(&s, "llm_requests_total", &ok),
            1.0,
            "{what}: counted once, ok"
        );
        let (n, e2el) = mean(&s, "llm_e2e_request_latency_seconds", &of);
        assert_eq!(n, 1.0, "{what}: one E2EL");
        assert!(
            e2el >= pace - 0.002 && e2el < pace + LATE,
            "{what}: E2EL {e2el}"
        );
        let (n, headers) = mean(&s, "llm_time_to_response_headers_seconds", &of);
        assert_eq!(n, 1.0, "{what}: one time to response headers");
        assert!(headers <= e2el, "{what}");
        assert_eq!(
            sum(&s, "llm_input_tokens_total", &of),
            call.input.unwrap_or(0) as f64,
            "{what}: input tokens"
        );
        let (n, _) = mean(&s, "llm_input_tokens", &of);
        assert_eq!(n, if call.input.is_some() { 1.0 } else { 0.0 }, "{what}");
        for family in [
            "llm_time_to_first_token_seconds",
            "llm_time_per_output_token_seconds",
            "llm_inter_token_latency_seconds",
            "llm_output_tokens",
        ] {
            assert_eq!(mean(&s, family, &of).0, 0.0, "{what}: no {family}");
        }
        assert_eq!(
            sum(&s, "llm_output_tokens_total", &of),
            0.0,
            "{what}: no output tokens"
        );
    }
    assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 0.0);
    assert_eq!(sum(&s, "tokenmeter_passthrough_requests_total", &[]), 0.0);
    proxy.stop().await;
}

/// A failed call is counted under its operation with its outcome, without
/// an E2EL; a route whose protocol names an API still reads these calls
/// as what they are.
#[tokio::test]
async fn failures_and_fixed_protocol_routes_keep_the_operation() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.routes[0].protocol = Protocol::Api(meter::Api::OpenAi);
    let proxy = start(config).await;
    let (head, body) = request("/v1/embeddings", "e", "", 0, Some(503));
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        503
    );
    let answer = CALLS[0].answer;
    let (head, body) = request("/v1/embeddings", "f", answer, 10, None);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 2.0
    })
    .await;
    // Its model is `other`: a name is a label only once the upstream
    // answered it with a 2xx.
    let failed = [("model", "other"), ("operation", "embeddings")];
    assert_eq!(
        sum(
            &s,
            "llm_requests_total",
            &[failed[0], failed[1], ("outcome", "upstream_error")]
        ),
        1.0
    );
    assert_eq!(mean(&s, "llm_e2e_request_latency_seconds", &failed).0, 0.0);
    let fixed = [
        ("model", "f"),
        ("operation", "embeddings"),
        ("outcome", "ok"),
    ];
    assert_eq!(
        sum(&s, "llm_requests_total", &fixed),
        1.0,
        "read as embeddings, not chat"
    );
    assert_eq!(sum(&s, "llm_input_tokens_total", &[("model", "f")]), 8.0);
    proxy.stop().await;
}

/// With the preset embeddings class and `slo_by_operation`, an embeddings
/// call is good within the class's E2EL bound and bad past it, while the
/// route's chat stays in its own class; `/slo` shows the class's E2EL and
/// no TTFT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_are_judged_by_their_own_class() {
    let dir = tempfile::tempdir().unwrap();
    let preset = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/slo/embeddings.yaml"),
    )
    .unwrap();
    let main = "\
slo_files: [slo/*.yaml]
routes:
  - name: api
    upstream: http://127.0.0.1:1
    slo: chat
    slo_by_operation: {embeddings: embeddings, rerank: embeddings}
";
    let chat = "classes:\n  - name: chat\n    objectives:\n      ttft: {p95: 2s}\n";
    let upstream = scripted_upstream().await;
    let config = config_from_files(
        dir.path(),
        main,
        &[("embeddings.yaml", &preset), ("chat.yaml", chat)],
        upstream,
    );
    let proxy = start(config).await;
    // The preset's bound is 500 ms: 20 ms is far within it, 1.5 s far past.
    for (model, pace) in [("fast", 20), ("slow", 1500)] {
        let (head, body) = request("/v1/embeddings", model, CALLS[0].answer, pace, None);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    }
    let (head, body) = request("/v1/rerank", "fast", CALLS[7].answer, 20, None);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\
                content-type: application/json\r\ncontent-length: 14\r\n\
                x-fixture: openai-chat-basic-usage.sse\r\n\r\n";
    assert_eq!(
        raw_exchange(proxy.proxy_addr, head, br#"{"model":"cc"}"#)
            .await
            .status,
        200
    );

    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[]) == 4.0
    })
    .await;
    let class = ("slo", "embeddings");
    let verdict = |model, v| {
        sum(
            &s,
            "llm_slo_requests_total",
            &[class, ("model", model), ("verdict", v)],
        )
    };
    assert_eq!(
        (verdict("fast", "good"), verdict("fast", "bad")),
        (2.0, 0.0)
    );
    assert_eq!(
        (verdict("slow", "good"), verdict("slow", "bad")),
        (0.0, 1.0)
    );
    assert_eq!(
        sum(
            &s,
            "llm_slo_violations_total",
            &[class, ("objective", "e2el")]
        ),
        1.0
    );
    assert_eq!(
        sum(
            &s,
            "llm_slo_requests_total",
            &[("slo", "chat"), ("operation", "chat"), ("verdict", "good")]
        ),
        1.0
    );

    let report = admin_json(proxy.admin_addr, "/slo").await;
    let series = report["series"].as_array().unwrap();
    let embeddings = series
        .iter()
        .find(|s| s["slo"] == "embeddings")
        .unwrap_or_else(|| panic!("no embeddings series: {report}"));
    let w = &embeddings["windows"][0];
    assert_eq!(w["requests"], 3, "{w}");
    assert_eq!(w["e2el"]["count"], 3, "{w}");
    assert_eq!(w["ttft"]["count"], 0, "{w}");
    assert_eq!(w["output_tokens"], 0, "{w}");
    let e2el = &w["compliance"][0];
    assert_eq!(e2el["objective"], "e2el", "{w}");
    assert_eq!(
        (e2el["judged"].as_u64(), e2el["met"].as_u64()),
        (Some(3), Some(2)),
        "{w}"
    );
    proxy.stop().await;
}
