//! Agent-like sessions for the `demo` command: each agent runs task after
//! task, each task one session, named in [`SESSION_HEADER`] as coding
//! agents do. A task is a first turn, tool calls whose results come back
//! after the tool ran (a gap of a few hundred milliseconds to seconds),
//! now and then two sub-agents sending at once (overlapping requests), a
//! person reading before a follow-up, all as streamed chat completions
//! bodies carrying the conversation so far: assistant tool calls, `tool`
//! results, assistant answers. The simulator is asked to report, for a
//! continued turn, the previous request's prompt as cached (the prefix an
//! engine keeps), but for one task in five, whose follow-up lost the cache
//! and is slower to its first token, as a session moved to another
//! replica is. Everything is a function of the agent and task numbers, so
//! two runs send the same.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::load::{HttpClient, LoadSummary, TENANT_HEADER, send};

/// The request header that names a request's session.
pub const SESSION_HEADER: &str = "x-session-id";

/// What the agents share.
#[derive(Debug, Clone)]
pub struct Agents {
    /// Agents running at once, each one task at a time.
    pub agents: usize,
    /// Agent `i` names the `i % len`-th tenant (none when empty).
    pub tenants: Vec<String>,
    /// Output tokens each request asks for.
    pub max_tokens: u32,
    /// Pause between an agent's tasks.
    pub between_tasks: Duration,
}

/// Runs `agents` against `{base_url}/v1/chat/completions` until
/// `shutdown` resolves, then abandons what runs and returns the counts.
pub async fn run_agents(
    base_url: String,
    agents: Agents,
    shutdown: impl Future<Output = ()> + Send,
) -> LoadSummary {
    let url = format!("{}/v1/chat/completions", base_url.trim_end_matches('/'));
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let summary = Arc::new(Mutex::new(LoadSummary::default()));
    let mut running = JoinSet::new();
    for agent in 0..agents.agents {
        let (client, url, agents) = (client.clone(), url.clone(), agents.clone());
        let summary = summary.clone();
        running.spawn(async move {
            let tenant = tenant(&agents.tenants, agent);
            // The agents start apart and run tasks of other shapes.
            tokio::time::sleep(Duration::from_millis(700 * agent as u64)).await;
            let n = agents.agents as u64;
            for task in (0u64..).map(|t| t * n + agent as u64) {
                let session = session_id(agent as u64, task);
                let t = Task {
                    client: &client,
                    url: &url,
                    session: &session,
                    tenant,
                    max_tokens: agents.max_tokens,
                    summary: &summary,
                };
                t.run(task).await;
                tokio::time::sleep(agents.between_tasks).await;
            }
        });
    }
    shutdown.await;
    running.abort_all();
    *summary.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tenant(tenants: &[String], agent: usize) -> Option<&str> {
    (!tenants.is_empty()).then(|| tenants[agent % tenants.len()].as_str())
}

/// A session id as agents make them, UUID-shaped, from the agent and task
/// numbers.
pub fn session_id(agent: u64, task: u64) -> String {
    let a = mix(agent.wrapping_mul(0x1_0000) ^ task);
    let b = mix(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// splitmix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Words of a conversation's contents: the simulator's prompt tokens.
fn words(messages: &[Value]) -> u64 {
    messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(|c| c.split_whitespace().count() as u64)
        .sum()
}

struct Task<'a> {
    client: &'a HttpClient,
    url: &'a str,
    session: &'a str,
    tenant: Option<&'a str>,
    max_tokens: u32,
    /// Every agent's counts.
    summary: &'a Mutex<LoadSummary>,
}

impl Task<'_> {
    /// Task `n`: a first turn, one to four tool calls (two sub-agents at
    /// once in the first of them, one task in three), a person's pause and
    /// a follow-up.
    async fn run(&self, n: u64) {
        let tools = ["grep", "read_file", "run_tests", "edit_file"];
        let mut messages = vec![
            json!({"role": "system", "content": "You are a coding agent with tools to search, read and edit the repository and run its tests."}),
            json!({"role": "user", "content": format!("Task {n}: the build fails on the parser's error path; find why and fix it, then run the tests.")}),
        ];
        // A fresh prompt: its whole prefill.
        let mut cached = None;
        self.turn(&messages, 450, cached).await;
        for step in 0..1 + n % 4 {
            let tool = tools[((n + step) % 4) as usize];
            let id = format!("call_{step}");
            messages.push(
                json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": id, "type": "function",
                "function": {"name": tool, "arguments": "{\"path\":\"src/parser.rs\"}"}}]}),
            );
            // The tool runs: 0.3 to 2.5 s.
            tokio::time::sleep(Duration::from_millis(300 + (n * 7 + step * 13) % 23 * 100)).await;
            cached = Some(words(&messages));
            messages.push(json!({"role": "tool", "tool_call_id": id,
                "content": format!("{tool} returned 12 lines: the error path drops the span of token {step}")}));
            if step == 0 && mix(n).is_multiple_of(3) {
                // Two sub-agents read the result at once, the second 150 ms
                // later.
                let first = self.turn_owned(&messages, 150, cached);
                let second = async {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    self.turn_owned(&messages, 150, cached).await
                };
                let (a, b) = tokio::join!(first, second);
                self.count(a);
                self.count(b);
            } else {
                self.turn(&messages, 150, cached).await;
            }
        }
        messages.push(json!({"role": "assistant", "content": "The error path now keeps the span; the tests pass."}));
        // The person reads the answer: 1 to 4 s.
        tokio::time::sleep(Duration::from_millis(1000 + (n * 11) % 31 * 100)).await;
        // One follow-up in five lost the engine's cache: no cached tokens,
        // a slower first token.
        let lost = n % 5 == 4;
        cached = (!lost).then(|| words(&messages));
        messages.push(json!({"role": "user", "content": "Thanks. Does the fix also cover the lexer's error path?"}));
        self.turn(&messages, if lost { 900 } else { 250 }, cached)
            .await;
    }

    async fn turn(&self, messages: &[Value], ttft_ms: u64, cached: Option<u64>) {
        let result = self.turn_owned(messages, ttft_ms, cached).await;
        self.count(result);
    }

    fn count(&self, result: Result<(), String>) {
        let mut summary = self.summary.lock().unwrap_or_else(PoisonError::into_inner);
        summary.sent += 1;
        match result {
            Ok(()) => summary.ok += 1,
            Err(reason) => {
                tracing::debug!(%reason, "agents: request failed");
                summary.failed += 1;
            }
        }
    }

    /// One request of the session with the conversation so far.
    async fn turn_owned(
        &self,
        messages: &[Value],
        ttft_ms: u64,
        cached: Option<u64>,
    ) -> Result<(), String> {
        let body = json!({
            "model": "sim-model",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": self.max_tokens,
            "messages": messages,
        });
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(
                self.url
                    .parse::<Uri>()
                    .map_err(|e| format!("bad base URL: {e}"))?,
            )
            .header(CONTENT_TYPE, "application/json")
            .header(SESSION_HEADER, self.session)
            .header("x-sim-ttft-ms", ttft_ms.to_string());
        if let Some(tenant) = self.tenant {
            builder = builder.header(TENANT_HEADER, tenant);
        }
        if let Some(n) = cached {
            builder = builder.header("x-sim-cached-tokens", n.to_string());
        }
        let request = builder
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| format!("could not build request: {e}"));
        send(self.client, request).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;

    /// Session ids are UUID-shaped, differ by agent and task, and are the
    /// same from run to run.
    #[test]
    fn session_ids_are_uuid_shaped_and_distinct() {
        let ids: Vec<String> = (0..3)
            .flat_map(|a| (0..50).map(move |t| session_id(a, t)))
            .collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
        for id in &ids {
            let parts: Vec<usize> = id.split('-').map(str::len).collect();
            assert_eq!(parts, [8, 4, 4, 4, 12], "{id}");
        }
        assert_eq!(session_id(1, 2), session_id(1, 2));
    }
}
