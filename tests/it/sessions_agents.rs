//! Agents over Anthropic Messages and the Responses API, on real sockets
//! (docs/metrics.md, "Sessions and turns"), against the spans their
//! clients measured: a Messages agent keyed by a header, a Responses agent
//! keyed by its `previous_response_id` chain (its first request a
//! candidate until the second names its response), and one keyed by its
//! `conversation`; each with tool gaps of known length and overlapping
//! requests. Then two replicas in front of one upstream, each session's
//! turns alternating between them, and the join that docs/operations.md
//! documents, run over both replicas' access-log files.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::agent::{AGENT_INPUT, AGENT_TOKENS, Sent, agent_upstream, send};
use crate::common::*;

/// What a client sent: the request's answer, its turn's kind and the
/// cached tokens the upstream was told to report.
struct Turn {
    sent: Sent,
    kind: &'static str,
    cached: u64,
}

/// A client's own figures of one session: its duration (first send to
/// last byte), model time (the union of its spans) and gaps.
struct Measured {
    turns: usize,
    duration: f64,
    model: f64,
    /// Stretches with none of its requests in flight.
    gaps: usize,
    cached: u64,
}

fn measured(turns: &[Turn]) -> Measured {
    let mut spans: Vec<_> = turns.iter().map(|t| t.sent.span()).collect();
    spans.sort();
    let mut gaps = 0;
    let mut open = spans[0].1;
    for &(start, end) in &spans[1..] {
        gaps += usize::from(start > open);
        open = open.max(end);
    }
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    Measured {
        turns: turns.len(),
        duration: (last - first).as_secs_f64(),
        model: union(&spans).as_secs_f64(),
        gaps,
        cached: turns.iter().map(|t| t.cached).sum(),
    }
}

/// `got` seconds within `widening` (the clients' spans less the proxy's
/// own, summed over the session's requests) and a tenth of a
/// millisecond per request (the lines' rounding) of the clients' `want`.
#[track_caller]
fn assert_measured(got: f64, want: f64, widening: f64, turns: usize, what: &str) {
    assert!(
        (got - want).abs() <= widening + 1e-4 * turns as f64,
        "{what}: {got} s against the clients' {want} s (their spans {widening} s longer than the proxy's)"
    );
}

/// The clients' spans of `turns` less the proxy's own, summed.
fn widening(turns: &[Turn], access: &[&Value]) -> f64 {
    turns.iter().map(|t| t.sent.widening(access)).sum()
}

/// A tool's (or a person's) time between two requests.
async fn outside(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn cached(n: u64) -> String {
    n.to_string()
}

/// The Messages conversation so far, as an agent resends it: a user's
/// task, then for each of `tools` a tool call and its result, then, with
/// `follow`, the model's answer and the user's next message.
fn conversation(tools: usize, follow: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "fix the failing test"})];
    for i in 0..tools {
        let id = format!("toolu_{i}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "grep", "input": {"q": "fn"}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "found"}]}));
    }
    if follow {
        messages.push(json!({"role": "assistant", "content": "fixed it"}));
        messages.push(json!({"role": "user", "content": "and the docs?"}));
    }
    json!({"model": "m1", "max_tokens": 64, "stream": true, "messages": messages})
}

/// One Messages request of session `key` with `body`, reporting `hit`
/// cached tokens; a `slow` one has its first token after 300 ms.
async fn message(
    proxy: SocketAddr,
    key: &str,
    body: Value,
    kind: &'static str,
    hit: u64,
    slow: bool,
) -> Turn {
    let c = cached(hit);
    let mut headers = vec![("x-session-id", key), ("x-sim-cached-tokens", &c)];
    if slow {
        headers.push(("x-sim-ttft-ms", "300"));
    }
    let sent = send(proxy, "/v1/messages", &body, &headers).await;
    Turn {
        sent,
        kind,
        cached: hit,
    }
}

/// One streamed Responses request with the body's other fields `fields`
/// and `input`, reporting `hit` cached tokens, with `headers` besides.
async fn respond(
    proxy: SocketAddr,
    fields: Value,
    input: Value,
    kind: &'static str,
    hit: u64,
    headers: &[(&str, &str)],
) -> Turn {
    let mut body = json!({"model": "m1", "stream": true, "input": input});
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    let c = cached(hit);
    let mut all = vec![("x-sim-cached-tokens", c.as_str())];
    all.extend_from_slice(headers);
    Turn {
        sent: send(proxy, "/v1/responses", &body, &all).await,
        kind,
        cached: hit,
    }
}

fn tool_output() -> Value {
    json!([{"type": "function_call_output", "call_id": "call_1", "output": "42"}])
}

/// The Messages agent: a first turn, a 200 ms tool, two sub-agents' tool
/// results 40 ms apart (the first slow, so that they overlap by far), a
/// person's 150 ms, a follow-up.
async fn messages_agent(proxies: [SocketAddr; 2], key: &str) -> Vec<Turn> {
    let mut turns = vec![message(proxies[0], key, conversation(0, false), "first", 0, false).await];
    outside(200).await;
    let sub = tokio::spawn({
        let key = key.to_owned();
        async move {
            message(
                proxies[1],
                &key,
                conversation(1, false),
                "tool_result",
                8,
                true,
            )
            .await
        }
    });
    outside(40).await;
    turns.push(
        message(
            proxies[0],
            key,
            conversation(1, false),
            "tool_result",
            8,
            false,
        )
        .await,
    );
    turns.push(sub.await.unwrap());
    outside(150).await;
    turns.push(
        message(
            proxies[1],
            key,
            conversation(1, true),
            "follow_up",
            12,
            false,
        )
        .await,
    );
    turns
}

/// The Responses agent on its `previous_response_id` chain (with
/// `headers` besides): a first request, a 200 ms tool, its output, then a
/// 100 ms tool, a follow-up and a tool output on the same response 40 ms
/// apart (the first slow, so that they overlap by far), a person's 150 ms,
/// a follow-up on the first branch.
async fn responses_agent(proxies: [SocketAddr; 2], headers: &[(&str, &str)]) -> Vec<Turn> {
    let chain = |id: String| json!({"previous_response_id": id});
    let h: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut turns = vec![
        respond(
            proxies[0],
            json!({}),
            json!("fix the failing test"),
            "first",
            0,
            headers,
        )
        .await,
    ];
    outside(200).await;
    let r1 = turns[0].sent.response_id();
    turns.push(
        respond(
            proxies[1],
            chain(r1),
            tool_output(),
            "tool_result",
            6,
            headers,
        )
        .await,
    );
    let r2 = turns[1].sent.response_id();
    outside(100).await;
    let branch = tokio::spawn({
        let (fields, h) = (chain(r2.clone()), h.clone());
        async move {
            let mut h: Vec<(&str, &str)> =
                h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            h.push(("x-sim-ttft-ms", "300"));
            respond(
                proxies[0],
                fields,
                json!("and the docs?"),
                "follow_up",
                9,
                &h,
            )
            .await
        }
    });
    outside(40).await;
    turns.push(
        respond(
            proxies[1],
            chain(r2),
            tool_output(),
            "tool_result",
            9,
            headers,
        )
        .await,
    );
    turns.push(branch.await.unwrap());
    outside(150).await;
    let r3 = turns[3].sent.response_id();
    turns.push(
        respond(
            proxies[0],
            chain(r3),
            json!("thanks"),
            "follow_up",
            5,
            headers,
        )
        .await,
    );
    turns
}

/// The Responses agent on a `conversation`: every request continues it; a
/// 200 ms tool between the first two, 100 ms before the last.
async fn conversation_agent(proxy: SocketAddr, id: &str) -> Vec<Turn> {
    let c = json!({"conversation": id});
    let mut turns = vec![respond(proxy, c.clone(), json!("hello"), "follow_up", 4, &[]).await];
    outside(200).await;
    turns.push(respond(proxy, c.clone(), tool_output(), "tool_result", 4, &[]).await);
    outside(100).await;
    turns.push(respond(proxy, c, json!("thanks"), "follow_up", 4, &[]).await);
    turns
}

/// A `tokenmeter serve` in front of `upstream` whose sessions end after
/// 300 ms idle.
fn replica(upstream: SocketAddr, dir: &Path, name: &str) -> Served {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "sessions: {{idle_timeout: 300ms}}\nroutes:\n  - name: agents\n    upstream: http://{upstream}\n"
        ),
    )
    .unwrap();
    serve(&[OsStr::new("--config"), path.as_os_str()])
}

/// Reads `child`'s log until it has written `requests` access lines and
/// `sessions` session lines; every line read, as JSON.
fn read_lines(child: &mut Served, requests: usize, sessions: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let (mut r, mut s) = (0, 0);
    while r < requests || s < sessions {
        let line = child.lines.next().expect("serve exited").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        match v["target"].as_str() {
            Some("tokenmeter::access") => r += 1,
            Some("tokenmeter::session") => s += 1,
            _ => {}
        }
        all.push(v);
    }
    all
}

fn of_target<'a>(lines: &'a [Value], target: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|v| v["target"] == target)
        .map(|v| &v["fields"])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_over_messages_and_responses_are_sessions_with_their_clients_figures() {
    let upstream = agent_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = replica(upstream, dir.path(), "one");
    let proxy = child.proxy;
    let (a, b, c) = tokio::join!(
        messages_agent([proxy, proxy], "agent-a"),
        responses_agent([proxy, proxy], &[]),
        conversation_agent(proxy, "conv_agent_c"),
    );
    let chain = b[0].sent.response_id();
    let sessions = [("agent-a", &a), (chain.as_str(), &b), ("conv_agent_c", &c)];
    let requests: usize = sessions.iter().map(|(_, t)| t.len()).sum();
    let lines = read_lines(&mut child, requests, sessions.len());
    let ended = of_target(&lines, "tokenmeter::session");
    let access = of_target(&lines, "tokenmeter::access");

    for (key, turns) in sessions {
        let want = measured(turns);
        let line = ended
            .iter()
            .find(|l| l["session"] == key)
            .unwrap_or_else(|| panic!("no session line of {key}: {ended:?}"));
        let ms = |field: &str| line[field].as_f64().unwrap() / 1e3;
        assert_eq!(line["turns"], want.turns, "{line}");
        assert_eq!(line["reason"], "idle");
        let w = widening(turns, &access);
        eprintln!(
            "{key}: clients' spans {:.3} ms a request longer than the proxy's",
            w * 1e3 / want.turns as f64
        );
        let n = want.turns;
        assert_measured(ms("duration_ms"), want.duration, w, n, "duration");
        assert_measured(ms("model_ms"), want.model, w, n, "model time");
        assert_measured(ms("gap_ms"), want.duration - want.model, 2.0 * w, n, "gaps");
        // The overlapping requests make no gap.
        assert_eq!(line["gaps"], want.gaps, "{line}");
        assert_eq!(line["cached_input_tokens"], want.cached, "{line}");
        let input = AGENT_INPUT * turns.len() as u64 + want.cached;
        assert_eq!(line["input_tokens"], input, "{line}");
        assert_eq!(line["output_tokens"], AGENT_TOKENS * turns.len() as u64);
    }
    // Each request's line has the kind it was sent as; the chain's first
    // request was a candidate until the second named its response.
    let mut kinds: Vec<_> = access.iter().map(|l| l["turn"].as_str().unwrap()).collect();
    let mut sent: Vec<_> = sessions
        .iter()
        .flat_map(|(_, t)| t.iter().map(|t| t.kind))
        .collect();
    kinds.sort_unstable();
    sent.sort_unstable();
    assert_eq!(kinds, sent);
    for l in &access {
        assert!(l["session"].is_string(), "a request in no session: {l}");
    }

    let (_, s) = scrape(child.admin).await;
    let route = ("route", "agents");
    for kind in ["first", "tool_result", "follow_up"] {
        let of_kind = sessions
            .iter()
            .flat_map(|(_, t)| t.iter())
            .filter(|t| t.kind == kind);
        let (n, hits) = of_kind.fold((0, 0), |(n, h), t| (n + 1, h + t.cached));
        let labels = [route, ("turn", kind)];
        assert_eq!(sum(&s, "llm_turns_total", &labels), f64::from(n), "{kind}");
        assert_eq!(
            sum(&s, "llm_turn_cached_prompt_tokens_total", &labels),
            hits as f64,
            "{kind}"
        );
        assert_eq!(
            sum(&s, "llm_turn_time_to_first_token_seconds_count", &labels),
            f64::from(n),
            "{kind}"
        );
    }
    assert_eq!(sum(&s, "llm_turns_total", &[route]), requests as f64);
    assert_eq!(
        sum(&s, "tokenmeter_sessions_ended_total", &[("reason", "idle")]),
        3.0
    );
    assert_eq!(sum(&s, "llm_session_turns_sum", &[route]), requests as f64);
    let line_sum = |field: &str| {
        ended
            .iter()
            .map(|l| l[field].as_f64().unwrap())
            .sum::<f64>()
            / 1e3
    };
    let family = |name: &str| sum(&s, name, &[route]);
    assert!((line_sum("duration_ms") - family("llm_session_duration_seconds_sum")).abs() < 1e-5);
    assert!((line_sum("model_ms") - family("llm_session_model_seconds_sum")).abs() < 1e-5);
    assert!((line_sum("gap_ms") - family("llm_session_gap_seconds_sum")).abs() < 1e-5);
    let gaps: usize = sessions.iter().map(|(_, t)| measured(t).gaps).sum();
    assert_eq!(family("llm_session_gap_seconds_count"), gaps as f64);
}

/// The documented join (docs/operations.md, the SQL block) run by DuckDB
/// (Python's `duckdb`, from `target/venv`) in `dir`, over the access-log
/// files there: a row per session, by column name.
fn documented_join(dir: &Path) -> Vec<Value> {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let (_, rest) = docs
        .split_once("```sql\n")
        .expect("the join in docs/operations.md");
    let (sql, _) = rest.split_once("```").unwrap();
    let script = "import duckdb, json, sys\n\
                  r = duckdb.sql(sys.argv[1])\n\
                  print(json.dumps([dict(zip(r.columns, row)) for row in r.fetchall()], default=float))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, sql])
        .current_dir(dir)
        .output()
        .expect("python3 with duckdb (the venv's, on PATH)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two replicas in front of one upstream; a Messages agent's and a
/// Responses agent's turns (both keyed by a header) alternate between
/// them. Every request's turn is the kind it was sent as, on either
/// replica; the join docs/operations.md documents, run over both
/// replicas' access-log files, gives each session's whole figures (turns,
/// duration, model time, gaps, tokens) as its client measured them, which
/// neither replica's own session line can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_and_the_documented_join_give_each_sessions_figures_needs_tool_duckdb() {
    let upstream = agent_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let mut children = [
        replica(upstream, dir.path(), "a"),
        replica(upstream, dir.path(), "b"),
    ];
    let proxies = [children[0].proxy, children[1].proxy];
    let (x, y) = tokio::join!(
        messages_agent(proxies, "fleet-x"),
        responses_agent(proxies, &[("x-session-id", "fleet-y")]),
    );
    // Which replica each request went to, as the agents send them.
    let on_x = [0, 0, 1, 1];
    let on_y = [0, 1, 1, 0, 0];
    for (r, child) in children.iter_mut().enumerate() {
        let mut sent: Vec<_> = (x.iter().zip(on_x))
            .chain(y.iter().zip(on_y))
            .filter(|(_, on)| *on == r)
            .map(|(t, _)| t.kind)
            .collect();
        let lines = read_lines(child, sent.len(), 2);
        let access = of_target(&lines, "tokenmeter::access");
        let mut kinds: Vec<_> = access.iter().map(|l| l["turn"].as_str().unwrap()).collect();
        kinds.sort_unstable();
        sent.sort_unstable();
        assert_eq!(kinds, sent, "replica {r}");
        let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(dir.path().join(format!("access-{r}.log")), text).unwrap();
    }

    let mut access = Vec::new();
    for r in 0..2 {
        let text = std::fs::read_to_string(dir.path().join(format!("access-{r}.log"))).unwrap();
        access.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    let access = of_target(&access, "tokenmeter::access");
    let rows = documented_join(dir.path());
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (key, turns) in [("fleet-x", &x), ("fleet-y", &y)] {
        let want = measured(turns);
        let row = rows
            .iter()
            .find(|r| r["session"] == key)
            .unwrap_or_else(|| panic!("no row of {key}: {rows:?}"));
        let f = |column: &str| row[column].as_f64().unwrap();
        assert_eq!(f("turns"), want.turns as f64, "{row}");
        let (w, n) = (widening(turns, &access), want.turns);
        eprintln!(
            "{key}: clients' spans {:.3} ms a request longer than the proxy's",
            w * 1e3 / n as f64
        );
        assert_measured(f("duration_s"), want.duration, w, n, "duration");
        assert_measured(f("model_s"), want.model, w, n, "model time");
        assert_measured(f("gap_s"), want.duration - want.model, 2.0 * w, n, "gaps");
        let input = AGENT_INPUT * turns.len() as u64 + want.cached;
        assert_eq!(f("input_tokens"), input as f64, "{row}");
        assert_eq!(
            f("output_tokens"),
            (AGENT_TOKENS * turns.len() as u64) as f64,
            "{row}"
        );
    }
}
