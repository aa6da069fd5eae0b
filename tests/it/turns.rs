//! Each request's kind of turn, read from its body, on real sockets
//! (docs/metrics.md, "Sessions and turns"): an agent-like client's
//! requests over chat completions, Anthropic Messages and Responses are
//! counted under the kinds that were sent; the cached prompt tokens are
//! the usage the upstream reported; a body that cannot be read is `none`
//! and counted, and reaches the upstream unchanged.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::common::*;

/// POSTs `body` to `path` through the proxy with `headers`; the status.
async fn post(proxy: SocketAddr, path: &str, body: &[u8], headers: &[(&str, &str)]) -> u16 {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    raw_exchange(proxy, &head, body).await.status
}

/// A streamed chat completion with `messages`.
fn chat(messages: Value) -> Vec<u8> {
    json!({
        "model": "m1",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    })
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn each_request_is_counted_under_the_turn_its_body_says() {
    let stack = Stack::start(schedule(5, 2, 4), config_for).await;
    let proxy = stack.proxy.proxy_addr;
    let user = json!({"role": "user", "content": "what is the weather"});
    let call = json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": "{}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "c1", "content": "sunny and warm"});
    let answer = json!({"role": "assistant", "content": "it is sunny"});
    let again = json!({"role": "user", "content": "and tomorrow"});
    let first = chat(json!([user]));
    let tool = chat(json!([user, call, result]));
    let follow = chat(json!([user, call, result, answer, again]));
    // An agent's task: a first turn, tool results, follow-ups, each with
    // the prefix cache the engine reports.
    for _ in 0..3 {
        assert_eq!(post(proxy, "/v1/chat/completions", &first, &[]).await, 200);
    }
    for _ in 0..4 {
        let cached = [("x-sim-cached-tokens", "3")];
        assert_eq!(
            post(proxy, "/v1/chat/completions", &tool, &cached).await,
            200
        );
    }
    for _ in 0..2 {
        let cached = [("x-sim-cached-tokens", "7")];
        assert_eq!(
            post(proxy, "/v1/chat/completions", &follow, &cached).await,
            200
        );
    }
    // Anthropic Messages and Responses bodies (the simulator answers
    // neither: the turn is the request's, whatever the answer).
    let anthropic_tool = json!({"model": "m1", "max_tokens": 5, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "w", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "sun"}]}]});
    let anthropic_first = json!({"model": "m1", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]});
    let responses_chain = json!({"model": "m1", "previous_response_id": "resp_1", "input": "and?"});
    let responses_tool = json!({"model": "m1", "previous_response_id": "resp_2",
        "input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]});
    for (path, body) in [
        ("/v1/messages", &anthropic_tool),
        ("/v1/messages", &anthropic_tool),
        ("/v1/messages", &anthropic_first),
        ("/v1/responses", &responses_chain),
        ("/v1/responses", &responses_tool),
    ] {
        post(proxy, path, body.to_string().as_bytes(), &[]).await;
    }
    // Not JSON: none, counted, and forwarded as it was (the simulator
    // refuses it itself).
    let status = post(proxy, "/v1/chat/completions", b"{\"messages\": [oops", &[]).await;
    assert_eq!(status, 400);
    // An API without conversations: none, not counted as unread.
    let embed = json!({"model": "m1", "input": ["a", "b"]}).to_string();
    post(proxy, "/v1/embeddings", embed.as_bytes(), &[]).await;

    let (_, s) = scrape(stack.proxy.admin_addr).await;
    let turns = |turn| sum(&s, "llm_turns_total", &[("route", "test"), ("turn", turn)]);
    assert_eq!(turns("first"), 3.0 + 1.0);
    assert_eq!(turns("tool_result"), 4.0 + 2.0 + 1.0);
    assert_eq!(turns("follow_up"), 2.0 + 1.0);
    assert_eq!(turns("none"), 2.0);
    assert_eq!(
        sum(
            &s,
            "tokenmeter_turn_bodies_unread_total",
            &[("route", "test")]
        ),
        1.0
    );
    // Every metered request is counted once.
    let requests = sum(&s, "llm_requests_total", &[("route", "test")]);
    assert_eq!(sum(&s, "llm_turns_total", &[]), requests);
    // The cached tokens are the usage reported, by turn.
    let cached = |turn| sum(&s, "llm_turn_cached_prompt_tokens_total", &[("turn", turn)]);
    assert_eq!(cached("tool_result"), 4.0 * 3.0);
    assert_eq!(cached("follow_up"), 2.0 * 7.0);
    assert_eq!(cached("first"), 0.0);
    // The prompt tokens by turn add up to the input tokens counted.
    let prompt = sum(&s, "llm_turn_prompt_tokens_total", &[]);
    assert_eq!(prompt, sum(&s, "llm_input_tokens_total", &[]));
    assert!(sum(&s, "llm_turn_prompt_tokens_total", &[("turn", "follow_up")]) > 0.0);
    // A TTFT by turn for each streamed chat request that had one.
    let ttfts = |turn| {
        sum(
            &s,
            "llm_turn_time_to_first_token_seconds_count",
            &[("route", "test"), ("turn", turn), ("model", "m1")],
        )
    };
    assert_eq!(
        (ttfts("first"), ttfts("tool_result"), ttfts("follow_up")),
        (3.0, 4.0, 2.0)
    );
}
