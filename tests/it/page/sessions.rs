//! The page's "Sessions" section, drawn in headless Chromium from the
//! binary's `/slo`: two agent-like sessions (a first turn, a tool's result
//! and a follow-up with cached prompt tokens; a first turn and two
//! sub-agents at once) through `tokenmeter serve`, ended by a short idle
//! timeout. The section shows the sessions ended, their model and outside
//! shares, the follow-up cache-hit ratio, TTFT by kind of turn with the
//! requests sent of each, and the two sessions as the costliest, the long
//! key shortened and never shown whole.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::Browser;
use crate::common::*;

/// The long key: shown as its first 8 characters and "…".
const LONG_KEY: &str = "agent-task-0123456789abcdef";

/// A streamed chat request with `messages` in session `key`, its first
/// token `ttft_ms` late, the upstream reporting `cached` prompt tokens
/// from its cache.
async fn turn(proxy: SocketAddr, key: &str, messages: &Value, ttft_ms: u64, cached: Option<u64>) {
    let body = json!({"model": "m1", "stream": true, "stream_options": {"include_usage": true},
        "messages": messages})
    .to_string();
    let mut head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-session-id: {key}\r\nx-tenant: team-a\r\nx-sim-ttft-ms: {ttft_ms}\r\n",
        body.len()
    );
    if let Some(n) = cached {
        head.push_str(&format!("x-sim-cached-tokens: {n}\r\n"));
    }
    head.push_str("\r\n");
    let answer = raw_exchange(proxy, &head, body.as_bytes()).await;
    assert_eq!(answer.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_draws_the_sessions_that_ended_with_ttft_by_turn_and_the_costliest_needs_tools_chromium_and_node()
 {
    let sim = start_sim(schedule(30, 5, 5)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = sessions_config(dir.path(), sim);
    let child = serve(&[OsStr::new("--config"), path.as_os_str()]);
    let (proxy, admin) = (child.proxy, child.admin);

    let task = "fix the failing parser test in the repository and explain the cause of the failure briefly";
    let user = json!({"role": "user", "content": task});
    let call = json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "grep", "arguments": "{}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "c", "content": "found the error path in the parser"});
    let answer = json!({"role": "assistant", "content": "the error path dropped its span"});
    let again = json!({"role": "user", "content": "and the lexer?"});
    // The long key's task: first, a tool's result, a follow-up.
    turn(proxy, LONG_KEY, &json!([user]), 200, None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    turn(proxy, LONG_KEY, &json!([user, call, result]), 50, Some(10)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let history = json!([user, call, result, answer, again]);
    turn(proxy, LONG_KEY, &history, 100, Some(20)).await;
    // Another: a first turn, then two sub-agents at once.
    turn(proxy, "s2", &json!([user]), 200, None).await;
    let tool = json!([user, call, result]);
    let first = tokio::spawn({
        let tool = tool.clone();
        async move { turn(proxy, "s2", &tool, 50, None).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    turn(proxy, "s2", &tool, 50, None).await;
    first.await.unwrap();

    // Both end once idle (the sweep runs every second).
    scrape_until(admin, |s| {
        sum(s, "tokenmeter_sessions_ended_total", &[("reason", "idle")]) == 2.0
    })
    .await;
    let slo = admin_json(admin, "/slo").await;
    let route = &slo["sessions"]["routes"][0];
    assert_eq!(route["route"], "chat", "{route}");
    assert_eq!(route["active"], 0, "{route}");
    let window = &route["windows"][1];
    assert_eq!(window["window"], "5m", "{window}");
    assert_eq!(window["ended"]["sessions"], 2, "{window}");
    assert_eq!(window["ended"]["turns"], 6, "{window}");
    let by_turn = |name: &str| -> &Value {
        window["turns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["turn"] == name)
            .unwrap_or_else(|| panic!("no {name}: {window}"))
    };
    for (name, sent) in [
        ("first", 2),
        ("tool_result", 3),
        ("follow_up", 1),
        ("none", 0),
    ] {
        assert_eq!(by_turn(name)["requests"], sent, "{name}: {window}");
    }
    // The cached tokens are the upstream's, as it reported them.
    assert_eq!(by_turn("tool_result")["cached_prompt_tokens"], 10);
    assert_eq!(by_turn("follow_up")["cached_prompt_tokens"], 20);
    let prompt = by_turn("tool_result")["prompt_tokens"].as_u64().unwrap()
        + by_turn("follow_up")["prompt_tokens"].as_u64().unwrap();
    let ratio = window["follow_up_cache_hit_ratio"].as_f64().unwrap();
    assert!(
        (ratio - 30.0 / prompt as f64).abs() < 1e-12,
        "{ratio} {prompt}"
    );
    // The scheduled first tokens, as the proxy measured them.
    let first_p50 = by_turn("first")["ttft"]["p50"].as_f64().unwrap();
    let tool_p90 = by_turn("tool_result")["ttft"]["p90"].as_f64().unwrap();
    assert!((0.19..0.4).contains(&first_p50), "{first_p50}");
    assert!(tool_p90 < first_p50, "{tool_p90} {first_p50}");

    let url = format!("http://{admin}/#route=chat&slo=");
    let loaded = Browser::loaded_once(url, None).await;
    assert_eq!(loaded["event"], "loaded", "{loaded}");
    let drawn = &loaded["sessions"];
    assert_eq!(drawn["hidden"], false, "{drawn}");
    assert_eq!(
        (&drawn["route"], &drawn["window"]),
        (&json!("chat"), &json!("5m"))
    );
    let stat = |name: &str| drawn["stats"][name]["value"].clone();
    assert_eq!(stat("active"), 0, "{drawn}");
    assert_eq!(stat("ended"), 2, "{drawn}");
    // Its shares and ratio are /slo's, and the model and outside shares
    // make the whole.
    let near = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
    let model = window["model_share"].as_f64().unwrap();
    assert!(near(&stat("model_share"), model), "{drawn}");
    assert!(near(&stat("outside_share"), 1.0 - model), "{drawn}");
    assert!(near(&stat("cache_hit"), ratio), "{drawn}");
    // A row per kind of turn sent, with /slo's counts and percentiles.
    let rows = drawn["turns"].as_array().unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r["turn"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["first", "tool_result", "follow_up"], "{drawn}");
    for row in rows {
        let want = by_turn(row["turn"].as_str().unwrap());
        assert_eq!(row["requests"], want["requests"], "{row}");
        assert_eq!(row["p50"], want["ttft"]["p50"], "{row}");
        assert_eq!(row["p90"], want["ttft"]["p90"], "{row}");
    }
    // The costliest: both sessions, as /slo ranks them, the long key
    // shortened and nowhere whole.
    let costliest = drawn["costliest"].as_array().unwrap();
    let want = window["costliest"].as_array().unwrap();
    assert_eq!(costliest.len(), 2, "{drawn}");
    for (row, want) in costliest.iter().zip(want) {
        assert_eq!(row["key"], want["key"], "{row}");
        assert_eq!(row["turns"], 3, "{row}");
        assert_eq!(row["tenant"], "team-a", "{row}");
        assert_eq!(row["cost"], want["cost"], "{row}");
        assert!(row["cost"].as_f64().unwrap() > 0.0, "{row}");
    }
    let mut keys: Vec<&str> = costliest
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["agent-ta…", "s2"]);
    assert!(
        !drawn["text"].as_str().unwrap().contains(LONG_KEY),
        "{drawn}"
    );
    assert!(!slo.to_string().contains(LONG_KEY));
}
