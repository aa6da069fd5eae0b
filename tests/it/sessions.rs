//! Sessions on real sockets (docs/metrics.md, "Sessions and turns"): an
//! agent-like client's task (a first turn, a tool's gap, two overlapping
//! requests, a person's gap, a follow-up) through the binary, against the
//! spans its client measured; the session ends when idle; its line adds up
//! to the families; a request with no key is in no session.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::agent::{Sent, send};
use crate::common::*;

/// Sends a streamed chat request with `messages` and `headers`, and reads
/// the whole answer: the request as its client saw it.
async fn chat(proxy: SocketAddr, messages: Value, headers: &[(&str, &str)]) -> Sent {
    let body = json!({"model": "m1", "stream": true, "messages": messages});
    send(proxy, "/v1/chat/completions", &body, headers).await
}

#[track_caller]
fn assert_close(got: f64, want: f64, within: f64, what: &str) {
    assert!((got - want).abs() <= within, "{what}: {got} against {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_task_is_one_session_with_its_model_time_and_gaps() {
    let sim = start_sim(schedule(30, 10, 10)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = sessions_config(dir.path(), sim);
    let mut child = serve(&[OsStr::new("--config"), path.as_os_str()]);
    let proxy = child.proxy;
    let task = [("x-session-id", "task-1"), ("x-tenant", "team-a")];
    let user = json!({"role": "user", "content": "fix the bug"});
    let call = json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "grep", "arguments": "{}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "c", "content": "found it"});
    let answer = json!({"role": "assistant", "content": "fixed"});
    let again = json!({"role": "user", "content": "thanks, and the test?"});
    let mut spans = Vec::new();
    // Turn 1, then the tool runs for 200 ms.
    spans.push(chat(proxy, json!([user]), &task).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Two sub-agents at once, 40 ms apart.
    let tool = json!([user, call, result]);
    let first = tokio::spawn({
        let tool = tool.clone();
        async move {
            chat(
                proxy,
                tool,
                &[("x-session-id", "task-1"), ("x-tenant", "team-a")],
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(40)).await;
    spans.push(chat(proxy, tool, &task).await);
    spans.push(first.await.unwrap());
    // The person reads for 150 ms.
    tokio::time::sleep(Duration::from_millis(150)).await;
    spans.push(chat(proxy, json!([user, call, result, answer, again]), &task).await);
    // Another session of one request, and a request with no key.
    chat(
        proxy,
        json!([user]),
        &[("x-claude-code-session-id", "task-2")],
    )
    .await;
    chat(proxy, json!([user]), &[]).await;

    // Both end once idle (the sweep runs every second).
    let admin = child.admin;
    let s = scrape_until(admin, |s| {
        sum(s, "tokenmeter_sessions_ended_total", &[("reason", "idle")]) == 2.0
    })
    .await;
    assert_eq!(
        sum(&s, "tokenmeter_sessions_ended_total", &[("reason", "idle")]),
        2.0
    );
    assert_eq!(sum(&s, "llm_sessions_active", &[]), 0.0);
    let route = [("route", "chat")];
    assert_eq!(sum(&s, "llm_session_turns_count", &route), 2.0);
    assert_eq!(sum(&s, "llm_session_turns_sum", &route), 5.0);
    let totals: Vec<_> = s
        .iter()
        .filter(|x| x.name == "llm_sessions_total")
        .collect();
    let good = [("tenant", "team-a"), ("good", "true")];
    assert_eq!(sum(&s, "llm_sessions_total", &good), 1.0, "{totals:?}");
    // The session lines: one per session, adding up to the families.
    let mut lines = Vec::new();
    let mut requests = Vec::new();
    while lines.len() < 2 {
        let line = child.lines.next().expect("serve exited").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        match v["target"].as_str() {
            Some("tokenmeter::session") => lines.push(v["fields"].clone()),
            Some("tokenmeter::access") => requests.push(v["fields"].clone()),
            _ => {}
        }
    }
    // The task's figures against what its client measured: two gaps (the
    // tool's, the person's; the sub-agents overlapped), its model time the
    // union of its spans, its duration from its first send to its last
    // byte; each within how much longer the client's spans were than the
    // proxy's own (each request's elapsed_ms), and the lines' rounding.
    let first_start = spans.iter().map(|s| s.start).min().unwrap();
    let last_end = spans.iter().map(|s| s.end).max().unwrap();
    let duration = (last_end - first_start).as_secs_f64();
    let model = union(&spans.iter().map(Sent::span).collect::<Vec<_>>()).as_secs_f64();
    let gaps = duration - model;
    let access: Vec<&Value> = requests.iter().collect();
    let within = spans.iter().map(|s| s.widening(&access)).sum::<f64>() + 4e-4;
    assert_eq!(sum(&s, "llm_session_gap_seconds_count", &route), 2.0);
    assert_close(
        sum(&s, "llm_session_gap_seconds_sum", &route),
        gaps,
        2.0 * within,
        "gaps",
    );
    let model_sum = sum(&s, "llm_session_model_seconds_sum", &route);
    let duration_sum = sum(&s, "llm_session_duration_seconds_sum", &route);
    // The second session's one request adds the same to both.
    assert_close(
        duration_sum - model_sum,
        gaps,
        2.0 * within,
        "duration - model",
    );

    let task1 = lines.iter().find(|l| l["session"] == "task-1").unwrap();
    assert_eq!(task1["turns"], 4);
    assert_eq!(task1["gaps"], 2);
    assert_eq!(task1["tenant"], "team-a");
    assert_eq!(task1["reason"], "idle");
    assert_close(
        task1["duration_ms"].as_f64().unwrap() / 1e3,
        duration,
        within,
        "duration",
    );
    assert_close(
        task1["model_ms"].as_f64().unwrap() / 1e3,
        model,
        within,
        "model",
    );
    let of = |field: &str| {
        lines
            .iter()
            .map(|l| l[field].as_f64().unwrap())
            .sum::<f64>()
    };
    assert_close(
        of("duration_ms") / 1e3,
        duration_sum,
        1e-6,
        "lines' durations",
    );
    assert_close(of("model_ms") / 1e3, model_sum, 1e-6, "lines' model time");
    assert_close(
        of("gpu_seconds"),
        sum(&s, "llm_session_gpu_seconds_sum", &route),
        1e-9,
        "lines' GPU-seconds",
    );
    assert_close(
        of("gpu_cost"),
        sum(&s, "llm_session_cost_sum", &route),
        1e-9,
        "lines' cost",
    );
    // The sessions' GPU-seconds are their requests', as the chargeback
    // charged them.
    let in_sessions: f64 = requests
        .iter()
        .filter(|r| r.get("session").is_some())
        .map(|r| r["gpu_seconds"].as_f64().unwrap())
        .sum();
    assert_close(
        of("gpu_seconds"),
        in_sessions,
        1e-9,
        "sessions against requests",
    );
    // Each request's line names its session and its number there.
    let numbered: Vec<u64> = requests
        .iter()
        .filter(|r| r["session"] == "task-1")
        .map(|r| r["session_turn"].as_u64().unwrap())
        .collect();
    let mut sorted = numbered.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 2, 3, 4]);
    assert!(requests.iter().any(|r| r.get("session").is_none()));
}
