//! The dashboard's panels, section by section: overview, goodput and
//! error budgets per SLO class, latency, where the time goes, and
//! outcomes (the trade-off sections are `tradeoff.rs`').

use std::time::Duration;

use names;

use slo::rules::prom_duration;

use super::builder::{Builder, RATE, SEL, q};

/// What the dashboard needs to know of one SLO class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassView {
    pub name: String,
    /// Target good ratio, when the class has one.
    pub goodput_target: Option<f64>,
    /// Compliance window (error budget period).
    pub window: Duration,
}

impl Builder {
    pub(super) fn overview(&mut self) {
        self.row("Overview", false);
        let (req, slo, out, flight) = (
            self.m(names::REQUESTS),
            self.m(names::SLO_REQUESTS),
            self.m(names::OUTPUT_TOKENS_TOTAL),
            self.m(names::IN_FLIGHT),
        );
        let panels = [
            Self::stat(
                "Requests / s",
                "All metered requests, every outcome.",
                "reqps",
                q(format!("sum(rate({req}{{{SEL}}}[{RATE}]))"), ""),
            ),
            Self::stat(
                "Goodput ratio",
                "Good / (good + bad) requests against their SLO class (docs/metrics.md).",
                "percentunit",
                q(
                    format!(
                        "sum(rate({slo}{{{SEL}, verdict=\"good\"}}[{RATE}])) / sum(rate({slo}{{{SEL}}}[{RATE}]))"
                    ),
                    "",
                ),
            ),
            Self::stat(
                "Goodput (good req/s)",
                "Requests that met every threshold of their class, per second.",
                "reqps",
                q(
                    format!("sum(rate({slo}{{{SEL}, verdict=\"good\"}}[{RATE}]))"),
                    "",
                ),
            ),
            Self::stat(
                "Output tokens / s",
                "Output tokens (usage when reported, else counted events).",
                "short",
                q(format!("sum(rate({out}{{{SEL}}}[{RATE}]))"), ""),
            ),
            Self::stat(
                "Error ratio",
                "Requests whose outcome is not ok.",
                "percentunit",
                q(
                    format!(
                        "sum(rate({req}{{{SEL}, outcome!=\"ok\"}}[{RATE}])) / sum(rate({req}{{{SEL}}}[{RATE}]))"
                    ),
                    "",
                ),
            ),
            Self::stat(
                "In flight",
                "Metered requests in progress now.",
                "short",
                q(format!("sum({flight}{{{SEL}}})"), ""),
            ),
        ];
        self.place_all(panels.into_iter().map(|p| (p, 4)).collect(), 4);
    }

    pub(super) fn goodput(&mut self, classes: &[ClassView]) {
        self.row("Goodput against SLOs", false);
        let (slo, viol, good_tok, req, out) = (
            self.m(names::SLO_REQUESTS),
            self.m(names::SLO_VIOLATIONS),
            self.m(names::SLO_GOOD_OUTPUT_TOKENS),
            self.m(names::REQUESTS),
            self.m(names::OUTPUT_TOKENS_TOTAL),
        );
        let mut ratio = vec![q(
            format!(
                "sum by (slo) (rate({slo}{{{SEL}, verdict=\"good\"}}[{RATE}])) / sum by (slo) (rate({slo}{{{SEL}}}[{RATE}]))"
            ),
            "{{slo}} good ratio",
        )];
        let mut budget = Vec::new();
        let mut burn = Vec::new();
        for c in classes {
            let Some(target) = c.goodput_target else {
                continue;
            };
            let name = &c.name;
            let window = prom_duration(c.window);
            ratio.push(q(
                format!("vector({target}) and on() (count({slo}{{slo=\"{name}\"}}) > 0)"),
                "target",
            ));
            budget.push(q(
                format!(
                    "1 - (sum(increase({slo}{{slo=\"{name}\", verdict=\"bad\"}}[{window}])) / sum(increase({slo}{{slo=\"{name}\"}}[{window}]))) / (1 - {target})"
                ),
                "budget left",
            ));
            for w in ["1h", "6h"] {
                burn.push(q(
                    format!(
                        "(sum(rate({slo}{{slo=\"{name}\", verdict=\"bad\"}}[{w}])) / sum(rate({slo}{{slo=\"{name}\"}}[{w}]))) / (1 - {target})"
                    ),
                    if w == "1h" { "burn rate 1h" } else { "burn rate 6h" },
                ));
            }
        }
        let panels = vec![
            (
                Self::timeseries(
                    "Goodput ratio by class",
                    "Share of judged requests that met every threshold of their class, with the class target.",
                    "percentunit",
                    ratio,
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Throughput vs goodput",
                    "All completed requests per second against those that met their SLO: the gap is work users did not feel as good.",
                    "reqps",
                    vec![
                        q(
                            format!("sum(rate({req}{{{SEL}, outcome=\"ok\"}}[{RATE}]))"),
                            "throughput (ok req/s)",
                        ),
                        q(
                            format!("sum(rate({slo}{{{SEL}, verdict=\"good\"}}[{RATE}]))"),
                            "goodput (good req/s)",
                        ),
                    ],
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Tokens: throughput vs goodput",
                    "Output tokens per second, all and of good requests.",
                    "short",
                    vec![
                        q(
                            format!("sum(rate({out}{{{SEL}}}[{RATE}]))"),
                            "output tokens/s",
                        ),
                        q(
                            format!("sum(rate({good_tok}{{{SEL}}}[{RATE}]))"),
                            "good output tokens/s",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Error budget remaining",
                    "1 − (bad ratio over the class window) / (1 − target). Below 0: the budget is spent.",
                    "percentunit",
                    budget,
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Burn rate",
                    "Bad ratio / (1 − target). 1 spends the budget exactly over the window; 14.4 over 1 h pages.",
                    "short",
                    burn,
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Violations by objective",
                    "Requests that exceeded each threshold, per second.",
                    "reqps",
                    vec![q(
                        format!("sum by (slo, objective) (rate({viol}{{{SEL}}}[{RATE}]))"),
                        "{{slo}} {{objective}}",
                    )],
                ),
                24,
            ),
        ];
        self.place_all(panels, 8);
    }

    pub(super) fn latency(&mut self) {
        self.row("Latency", false);
        let by = "route, model";
        let ttft = self.quantiles(names::TTFT, by);
        let tpot = self.quantiles(names::TPOT, by);
        let itl = self.quantiles(names::ITL, by);
        let e2el = self.quantiles(names::E2EL, by);
        let headers = self.quantiles(names::RESPONSE_HEADERS, by);
        let heatmaps = [
            self.heatmap(
                "TTFT heatmap",
                "Distribution of TTFT over time.",
                names::TTFT,
            ),
            self.heatmap(
                "ITL heatmap",
                "Distribution of inter-token gaps over time.",
                names::ITL,
            ),
        ];
        let [ttft_heatmap, itl_heatmap] = heatmaps;
        let panels = vec![
            (
                Self::timeseries(
                    "Time to first token (TTFT)",
                    "Request head received → first token event read from the upstream. Streamed responses only.",
                    "s",
                    ttft,
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Time per output token (TPOT)",
                    "(last token − first token) / (N − 1), one observation per completed stream with N ≥ 2.",
                    "s",
                    tpot,
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Inter-token latency (ITL)",
                    "Every gap between consecutive token events, one observation per gap.",
                    "s",
                    itl,
                ),
                12,
            ),
            (
                Self::timeseries(
                    "End-to-end latency (E2EL)",
                    "Request head received → end of the stream (its terminal event, or the end of the body), requests completed ok.",
                    "s",
                    e2el,
                ),
                12,
            ),
            (ttft_heatmap, 8),
            (itl_heatmap, 8),
            (
                Self::timeseries(
                    "Time to response headers",
                    "Request head → upstream response head. Low while TTFT is high: the server queues or prefills after sending headers.",
                    "s",
                    headers,
                ),
                8,
            ),
        ];
        self.place_all(panels, 8);
    }

    pub(super) fn phases(&mut self) {
        self.row("Where the time goes", false);
        let (ttft, e2el) = (
            self.mean(names::TTFT, "route"),
            self.mean(names::E2EL, "route"),
        );
        let input = self.mean(names::INPUT_TOKENS, "route");
        let (cached, inp) = (
            self.m(names::CACHED_INPUT_TOKENS_TOTAL),
            self.m(names::INPUT_TOKENS_TOTAL),
        );
        let (queue, prefill, decode, outside) = (
            self.mean(names::SERVER_QUEUE, "route"),
            self.mean(names::SERVER_PREFILL, "route"),
            self.mean(names::SERVER_DECODE, "route"),
            self.mean(names::OUTSIDE_ENGINE, "route"),
        );
        let client_wait = self.mean(names::CLIENT_WAIT, "route");
        let panels = vec![
            (
                Self::timeseries(
                    "Where the time goes: the server's phases",
                    "Per request, as the server reports them (vLLM per-request metrics, llama.cpp timings, Ollama, SGLang, TGI, Groq): mean time in its queue, prefill and decode, and the mean time outside the engine before the first token (network, HTTP server, tokenization, the proxy). Queue dominating: scale out or batch differently; prefill: shorter or cached prompts; decode: smaller models, speculative decoding, fewer concurrent streams; outside: the path to the server. Empty when the server reports nothing.",
                    "s",
                    vec![
                        q(queue, "{{route}} queue"),
                        q(prefill, "{{route}} prefill"),
                        q(decode, "{{route}} decode"),
                        q(outside, "{{route}} outside the engine"),
                    ],
                ),
                12,
            ),
            (
                Self::timeseries(
                    "The proxy's own time and the clients' wait",
                    "p50 and p99 of the proxy's own time on a request's path (from the request being all there to its being written upstream, connecting included), and the mean time forwarding waited on clients to read what they were sent (in no latency; requests from slow readers are counted in slow_reader_requests_total).",
                    "s",
                    {
                        let mut qs = self.quantiles(names::PROXY_TIME, "route");
                        qs.remove(1);
                        qs.push(q(client_wait, "{{route}} mean client wait"));
                        qs
                    },
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Phase split: first token vs decode",
                    "Mean TTFT (queue + prefill) and mean decode time (E2EL − TTFT) as shares of mean E2EL.",
                    "percentunit",
                    vec![
                        q(
                            format!("{ttft} / {e2el}"),
                            "{{route}} first token (queue + prefill)",
                        ),
                        q(format!("({e2el} - {ttft}) / {e2el}"), "{{route}} decode"),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Input length and TTFT",
                    "Mean prompt tokens against mean TTFT: when TTFT follows input length, shorter prompts (compression) pay off.",
                    "short",
                    vec![
                        q(input, "{{route}} mean input tokens"),
                        q(format!("1000 * {ttft}"), "{{route}} mean TTFT (ms)"),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Prefix cache hit ratio",
                    "Input tokens the upstream served from its prefix (KV) cache, where it reports them.",
                    "percentunit",
                    vec![q(
                        format!(
                            "sum by (route) (rate({cached}{{{SEL}}}[{RATE}])) / sum by (route) (rate({inp}{{{SEL}}}[{RATE}]))"
                        ),
                        "{{route}}",
                    )],
                ),
                8,
            ),
        ];
        self.place_all(panels, 8);
    }

    pub(super) fn outcomes(&mut self) {
        self.row("Outcomes and proxy health", false);
        let (req, out, flight) = (
            self.m(names::REQUESTS),
            self.m(names::OUTPUT_TOKENS_TOTAL),
            self.m(names::IN_FLIGHT),
        );
        let panels = vec![
            (
                Self::timeseries(
                    "Requests by outcome",
                    "ok, upstream_error, timeout, client_abort, client_timeout, proxy_error.",
                    "reqps",
                    vec![q(
                        format!("sum by (outcome) (rate({req}{{{SEL}}}[{RATE}]))"),
                        "{{outcome}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Requests by operation",
                    "chat, text_completion, generate_content, and the calls that generate nothing: embeddings, rerank, score, tokenize, detokenize (E2EL and input tokens only).",
                    "reqps",
                    vec![q(
                        format!("sum by (operation) (rate({req}{{{SEL}}}[{RATE}]))"),
                        "{{operation}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Requests by status class",
                    "HTTP status class the client received (none: no response head was sent).",
                    "reqps",
                    vec![q(
                        format!("sum by (status_class) (rate({req}{{{SEL}}}[{RATE}]))"),
                        "{{status_class}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Output tokens / s by source",
                    "usage: the upstream's count; events: counted token events, a lower bound.",
                    "short",
                    vec![q(
                        format!("sum by (source) (rate({out}{{{SEL}}}[{RATE}]))"),
                        "{{source}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "In flight",
                    "Metered requests in progress.",
                    "short",
                    vec![q(
                        format!("sum by (route) ({flight}{{{SEL}}})"),
                        "{{route}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Metering degraded",
                    "Payload problems (the bytes were forwarded unchanged).",
                    "short",
                    vec![q(
                        format!(
                            "sum by (kind) (rate({}{{route=~\"$route\"}}[{RATE}]))",
                            self.m(names::PARSE_ERRORS)
                        ),
                        "{{kind}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Unmetered and refused traffic",
                    "Requests forwarded without metering, requests that matched no route, and requests refused with 503 at a route's max_in_flight.",
                    "reqps",
                    vec![
                        q(
                            format!(
                                "sum by (route) (rate({}{{route=~\"$route\"}}[{RATE}]))",
                                self.m(names::PASSTHROUGH)
                            ),
                            "passthrough {{route}}",
                        ),
                        q(
                            format!("sum(rate({}[{RATE}]))", self.m(names::UNROUTED)),
                            "unrouted",
                        ),
                        q(
                            format!(
                                "sum by (route) (rate({}{{route=~\"$route\"}}[{RATE}]))",
                                self.m(names::REJECTED)
                            ),
                            "refused {{route}}",
                        ),
                    ],
                ),
                8,
            ),
        ];
        self.place_all(panels, 8);
    }
}
