//! The wire shapes of OpenAI-compatible responses and the ordered, timed list
//! of SSE events of one streamed response (a [`Script`]).
//!
//! A script is generated lazily, one step at a time, so that a response of a
//! million tokens costs no memory up front. Each step is one SSE event, and
//! is sent as its own body frame; this module only decides what and when,
//! never waits.

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::plan::{Api, FaultKind, Plan};

/// The in-stream error event of `x-sim-error-after`.
pub(crate) const ERROR_EVENT: &str = "data: {\"error\":{\"message\":\"simulated failure\",\"type\":\"server_error\",\"code\":500}}\n\n";

/// The last event of a complete stream.
const DONE_EVENT: &str = "data: [DONE]\n\n";

/// Identity fields shared by every chunk of one response.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// `chatcmpl-…` or `cmpl-…`, unique per simulator.
    pub(crate) id: String,
    /// Unix seconds, as OpenAI's `created`.
    pub(crate) created: u64,
}

/// The text of token `k`; deterministic so tests can compare bodies.
pub(crate) fn token_text(k: u32) -> String {
    format!(" tok{k}")
}

/// What happens when a step is due.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Send one SSE event as one body frame.
    Frame(Bytes),
    /// Fail the body, which makes the server reset the connection.
    Reset,
    /// Send nothing more and keep the connection open.
    Stall,
}

/// One step of a script: an action and the instant it is due.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub(crate) at: Instant,
    pub(crate) action: Action,
}

/// Where a script is: the next event to produce.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cursor {
    Role { choice: u32 },
    Token { k: u32, choice: u32 },
    Fault,
    Finish { choice: u32 },
    Usage,
    Done,
    Ended,
}

/// The events of one streamed response, in order, with their deadlines.
#[derive(Debug)]
pub(crate) struct Script {
    plan: Plan,
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`; every
    /// chunk starts with it, so it is serialised once per response.
    prefix: String,
    cursor: Cursor,
}

impl Script {
    pub(crate) fn new(plan: Plan, identity: &Identity) -> Self {
        let object = match plan.api {
            Api::Chat => "chat.completion.chunk",
            Api::Completions => "text_completion",
        };
        // serde_json escapes the model name, which comes from the client.
        let head = json!({
            "id": identity.id,
            "object": object,
            "created": identity.created,
            "model": plan.model,
        })
        .to_string();
        let prefix = format!(
            "data: {},\"choices\":[",
            head.strip_suffix('}').unwrap_or(&head)
        );
        let cursor = if plan.api == Api::Chat && plan.role_chunk {
            Cursor::Role { choice: 0 }
        } else {
            Cursor::Token { k: 0, choice: 0 }.checked(&plan)
        };
        Self {
            plan,
            prefix,
            cursor,
        }
    }

    /// Starts the schedule at `start` instead of the request's arrival: a
    /// request that waited for a slot is prefilled from when it got one.
    /// Only meaningful before the first step.
    pub(crate) fn begin(&mut self, start: Instant) {
        self.plan.schedule.start = start;
    }

    /// Whether every step has been produced.
    pub(crate) fn is_ended(&self) -> bool {
        self.cursor == Cursor::Ended
    }

    /// Produces the next step, or `None` when the stream is over.
    pub(crate) fn next_step(&mut self) -> Option<Step> {
        let plan = &self.plan;
        let s = &plan.schedule;
        let (at, action, next) = match self.cursor {
            Cursor::Ended => return None,
            Cursor::Role { choice } => (
                // The role chunk is not a token: vLLM sends it at once.
                s.start,
                Action::Frame(self.chunk(&format!(
                    r#"{{"index":{choice},"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}"#
                ))),
                if choice + 1 < plan.n {
                    Cursor::Role { choice: choice + 1 }
                } else {
                    Cursor::Token { k: 0, choice: 0 }.checked(plan)
                },
            ),
            Cursor::Token { k, choice } => {
                let text = token_text(k);
                let body = match plan.api {
                    Api::Chat => format!(
                        r#"{{"index":{choice},"delta":{{"content":"{text}"}},"logprobs":null,"finish_reason":null}}"#
                    ),
                    Api::Completions => format!(
                        r#"{{"text":"{text}","index":{choice},"logprobs":null,"finish_reason":null}}"#
                    ),
                };
                let next = if choice + 1 < plan.n {
                    Cursor::Token { k, choice: choice + 1 }
                } else {
                    Cursor::Token { k: k + 1, choice: 0 }.checked(plan)
                };
                (s.slot(k), Action::Frame(self.chunk(&body)), next)
            }
            Cursor::Fault => {
                let Some(fault) = plan.fault else {
                    // `checked` only moves here when there is a fault.
                    return None;
                };
                let action = match fault.kind {
                    FaultKind::Abort => Action::Reset,
                    FaultKind::Stall => Action::Stall,
                    FaultKind::Error => Action::Frame(Bytes::from_static(ERROR_EVENT.as_bytes())),
                };
                (s.fault_at(fault.after), action, Cursor::Ended)
            }
            Cursor::Finish { choice } => {
                let reason = plan.finish_reason;
                let body = match plan.api {
                    Api::Chat => format!(
                        r#"{{"index":{choice},"delta":{{}},"logprobs":null,"finish_reason":"{reason}"}}"#
                    ),
                    Api::Completions => format!(
                        r#"{{"text":"","index":{choice},"logprobs":null,"finish_reason":"{reason}"}}"#
                    ),
                };
                let next = if choice + 1 < plan.n {
                    Cursor::Finish { choice: choice + 1 }
                } else if plan.include_usage {
                    Cursor::Usage
                } else {
                    Cursor::Done
                };
                (s.end(), Action::Frame(self.chunk(&body)), next)
            }
            Cursor::Usage => {
                let usage = usage(plan);
                let event = match metrics(plan) {
                    Some(m) => format!("{}],\"usage\":{usage},\"metrics\":{m}}}\n\n", self.prefix),
                    None => format!("{}],\"usage\":{usage}}}\n\n", self.prefix),
                };
                (s.end(), Action::Frame(Bytes::from(event)), Cursor::Done)
            }
            Cursor::Done => (
                s.end(),
                Action::Frame(Bytes::from_static(DONE_EVENT.as_bytes())),
                Cursor::Ended,
            ),
        };
        self.cursor = next;
        Some(Step { at, action })
    }

    /// One `data:` event carrying a single choice.
    fn chunk(&self, choice: &str) -> Bytes {
        Bytes::from(format!("{}{choice}]}}\n\n", self.prefix))
    }
}

impl Cursor {
    /// Redirects a move to token `k` when that token does not exist or a fault
    /// is due before it: the fault replaces token `k` and everything after.
    fn checked(self, plan: &Plan) -> Self {
        let Cursor::Token { k, choice: 0 } = self else {
            return self;
        };
        match plan.fault {
            Some(fault) if fault.after == k => Cursor::Fault,
            _ if k >= plan.schedule.tokens => Cursor::Finish { choice: 0 },
            _ => self,
        }
    }
}

/// The `usage` object: `completion_tokens` counts every choice; the
/// prompt tokens `x-sim-cached-tokens` found in the prefix cache are its
/// `prompt_tokens_details.cached_tokens`, as OpenAI's and vLLM's.
pub(crate) fn usage(plan: &Plan) -> Value {
    let completion = plan.completion_tokens();
    let mut usage = json!({
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.prompt_tokens + completion,
    });
    if plan.cached_tokens > 0 {
        usage["prompt_tokens_details"] = json!({"cached_tokens": plan.cached_tokens});
    }
    usage
}

/// vLLM's per-request `metrics` (`--enable-per-request-metrics`), when the
/// request asked for them with `x-sim-queue-ms`: the queue, the rest of the
/// time to the first token as prefill, and the decode, in milliseconds.
pub(crate) fn metrics(plan: &Plan) -> Option<Value> {
    let queue = plan.queue?;
    let s = &plan.schedule;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let decode = s.itl * s.tokens.saturating_sub(1);
    Some(json!({
        "queue_time_ms": ms(queue),
        "time_to_first_token_ms": ms(s.ttft.saturating_sub(queue)),
        "generation_time_ms": ms(decode),
    }))
}

/// The whole body of a non-streamed response.
pub(crate) fn full_response(plan: &Plan, identity: &Identity) -> Value {
    let text: String = (0..plan.schedule.tokens).map(token_text).collect();
    let choices: Vec<Value> = (0..plan.n)
        .map(|index| match plan.api {
            Api::Chat => json!({
                "index": index,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": plan.finish_reason,
            }),
            Api::Completions => json!({
                "text": text,
                "index": index,
                "logprobs": null,
                "finish_reason": plan.finish_reason,
            }),
        })
        .collect();
    let object = match plan.api {
        Api::Chat => "chat.completion",
        Api::Completions => "text_completion",
    };
    let mut body = json!({
        "id": identity.id,
        "object": object,
        "created": identity.created,
        "model": plan.model,
        "choices": choices,
        "usage": usage(plan),
    });
    if let Some(m) = metrics(plan) {
        body["metrics"] = m;
    }
    body
}

#[cfg(test)]
// Panicking on unexpected input is how a test fails.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::SimConfig;
    use crate::plan::Overrides;

    fn script(api: Api, headers: &[(&'static str, &str)], body: &str) -> (Instant, Vec<Step>) {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        let start = Instant::now();
        let overrides = Overrides::from_headers(&map).unwrap();
        let plan = Plan::new(
            api,
            &SimConfig::default(),
            &overrides,
            start,
            body.as_bytes(),
        )
        .unwrap();
        let identity = Identity {
            id: "x".to_owned(),
            created: 1,
        };
        let mut script = Script::new(plan, &identity);
        let mut steps = Vec::new();
        while let Some(step) = script.next_step() {
            steps.push(step);
        }
        assert!(script.is_ended());
        (start, steps)
    }

    fn text(step: &Step) -> String {
        match &step.action {
            Action::Frame(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn chat_stream_order_and_deadlines() {
        let headers = [
            ("x-sim-tokens", "3"),
            ("x-sim-ttft-ms", "10"),
            ("x-sim-itl-ms", "4"),
        ];
        let (start, steps) = script(
            Api::Chat,
            &headers,
            r#"{"stream":true,"n":2,"stream_options":{"include_usage":true},"model":"m\"x"}"#,
        );
        // 2 role + 3*2 tokens + 2 finish + usage + done
        assert_eq!(steps.len(), 12);
        assert!(text(&steps[0]).contains(r#""delta":{"role":"assistant","content":""}"#));
        assert!(text(&steps[1]).contains(r#""index":1,"delta":{"role""#));
        assert_eq!(steps[0].at, start);
        let ms = |n| start + Duration::from_millis(n);
        let tokens: Vec<_> = steps[2..8].iter().map(|s| (s.at, text(s))).collect();
        assert_eq!(tokens[0].0, ms(10));
        assert_eq!(tokens[1].0, ms(10));
        assert_eq!(tokens[5].0, ms(18));
        assert!(
            tokens[3]
                .1
                .contains(r#""index":1,"delta":{"content":" tok1"}"#)
        );
        assert!(text(&steps[8]).contains(r#""delta":{},"logprobs":null,"finish_reason":"stop""#));
        assert!(text(&steps[10]).contains(r#""choices":[],"usage":{"#));
        assert!(text(&steps[10]).contains(r#""completion_tokens":6"#));
        assert_eq!(text(&steps[11]), "data: [DONE]\n\n");
        for step in &steps[..11] {
            let line = text(step);
            let json = line
                .strip_prefix("data: ")
                .unwrap()
                .strip_suffix("\n\n")
                .unwrap();
            let value: Value = serde_json::from_str(json).unwrap();
            assert_eq!(value["model"], "m\"x");
        }
    }

    /// `x-sim-queue-ms` adds vLLM's per-request metrics to the usage chunk:
    /// the queue (capped at the TTFT), the rest of the TTFT, the decode.
    #[test]
    fn a_queue_header_reports_vllms_per_request_metrics() {
        let headers = [
            ("x-sim-tokens", "5"),
            ("x-sim-ttft-ms", "100"),
            ("x-sim-itl-ms", "20"),
            ("x-sim-queue-ms", "30"),
        ];
        let body = r#"{"stream":true,"stream_options":{"include_usage":true}}"#;
        let (_, steps) = script(Api::Chat, &headers, body);
        let usage = text(&steps[steps.len() - 2]);
        let json = usage.strip_prefix("data: ").unwrap().trim_end();
        let value: Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            value["metrics"],
            serde_json::json!({"queue_time_ms": 30.0, "time_to_first_token_ms": 70.0, "generation_time_ms": 80.0})
        );
        let capped = [("x-sim-ttft-ms", "10"), ("x-sim-queue-ms", "30")];
        let (_, steps) = script(Api::Chat, &capped, body);
        assert!(text(&steps[steps.len() - 2]).contains(r#""queue_time_ms":10.0,"#));
        let (_, steps) = script(Api::Chat, &headers[..3], body);
        assert!(!text(&steps[steps.len() - 2]).contains("metrics"));
    }

    #[test]
    fn legacy_stream_has_no_role_chunk() {
        let (_, steps) = script(
            Api::Completions,
            &[("x-sim-tokens", "2")],
            r#"{"stream":true}"#,
        );
        assert_eq!(steps.len(), 4);
        assert!(
            text(&steps[0])
                .contains(r#"{"text":" tok0","index":0,"logprobs":null,"finish_reason":null}"#)
        );
        assert!(text(&steps[2]).contains(r#""finish_reason":"stop""#));
    }

    #[test]
    fn faults_replace_the_rest() {
        let (start, steps) = script(
            Api::Chat,
            &[
                ("x-sim-tokens", "5"),
                ("x-sim-error-after", "2"),
                ("x-sim-ttft-ms", "10"),
                ("x-sim-itl-ms", "1"),
            ],
            "{}",
        );
        assert_eq!(steps.len(), 4);
        assert_eq!(text(&steps[3]), ERROR_EVENT);
        assert_eq!(steps[3].at, start + Duration::from_millis(12));
        let (_, steps) = script(
            Api::Chat,
            &[("x-sim-tokens", "5"), ("x-sim-abort-after", "0")],
            "{}",
        );
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1].action, Action::Reset);
        let (_, steps) = script(
            Api::Chat,
            &[("x-sim-tokens", "2"), ("x-sim-stall-after", "7")],
            "{}",
        );
        assert_eq!(steps.len(), 4);
        assert_eq!(steps[3].action, Action::Stall);
    }

    #[test]
    fn zero_tokens_still_finish() {
        let (_, steps) = script(Api::Chat, &[("x-sim-tokens", "0")], "{}");
        assert_eq!(steps.len(), 3);
        assert!(text(&steps[1]).contains("finish_reason\":\"stop"));
    }
}
