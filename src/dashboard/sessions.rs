//! The dashboard's "Sessions" row: the sessions open and ended, TTFT by
//! kind of turn, the follow-up cache-hit ratio, how a session's time splits
//! between the model and outside it, and what sessions cost
//! (docs/metrics.md, "Sessions and turns").
//!
//! The families of turns carry `route`, `model` (and the TTFT's `slo`) and
//! those of sessions `route` only (and `tenant` on the sessions' count), so
//! the row filters by those. Their histograms are classic only, whatever
//! the dashboard's other panels query.

use names;
use slo::rules::Histograms;

use super::builder::{Builder, RATE, q};

/// The filter of the TTFT by turn.
const BY_CLASS: &str = r#"route=~"$route", model=~"$model", slo=~"$slo""#;
/// The filter of the turns' counters.
const BY_MODEL: &str = r#"route=~"$route", model=~"$model""#;
/// The filter of the sessions' families.
const BY_ROUTE: &str = r#"route=~"$route""#;

impl Builder {
    pub(super) fn sessions(&mut self) {
        self.row("Sessions", false);
        let ttft = self.m(names::TURN_TTFT);
        let (active, ended, total) = (
            self.m(names::SESSIONS_ACTIVE),
            self.m(names::SESSIONS_ENDED),
            self.m(names::SESSIONS_TOTAL),
        );
        let (duration, turns, model, gaps) = (
            self.m(names::SESSION_DURATION),
            self.m(names::SESSION_TURNS),
            self.m(names::SESSION_MODEL),
            self.m(names::SESSION_GAPS),
        );
        let (gpu_seconds, cost) = (
            self.m(names::SESSION_GPU_SECONDS),
            self.m(names::SESSION_COST),
        );
        let (prompt, cached) = (
            self.m(names::TURN_PROMPT_TOKENS),
            self.m(names::TURN_CACHED_PROMPT_TOKENS),
        );
        let classic = Histograms::Classic;
        let ttft_by_turn = [("0.5", "p50 {{turn}}"), ("0.9", "p90 {{turn}}")]
            .into_iter()
            .map(|(p, legend)| q(classic.quantile(p, &ttft, BY_CLASS, "turn", RATE), legend))
            .collect();
        let rate =
            |m: &str, filter: &str| format!("sum by (route) (rate({m}{{{filter}}}[{RATE}]))");
        let mean = |m: &str| {
            format!(
                "({} / {})",
                rate(&format!("{m}_sum"), BY_ROUTE),
                rate(&format!("{m}_count"), BY_ROUTE)
            )
        };
        let continued = format!("{BY_MODEL}, turn=~\"follow_up|tool_result\"");
        let panels = vec![
            (
                Self::timeseries(
                    "Sessions open, and ending by reason",
                    "Sessions open now per route, summed over replicas (each replica follows the sessions whose requests pass it), and sessions ending per second: idle (none of its requests for sessions.idle_timeout) or evicted (the table was full, sessions.max_sessions).",
                    "short",
                    vec![
                        q(
                            format!("sum by (route) ({active}{{{BY_ROUTE}}})"),
                            "open {{route}}",
                        ),
                        q(
                            format!("sum by (reason) (rate({ended}[{RATE}]))"),
                            "ending/s {{reason}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "TTFT by kind of turn",
                    "p50 and p90 time to first token by the kind of turn each request's body says it is: first (a fresh conversation), tool_result (after a tool ran), follow_up (any other continuation), none (no conversation). Continued turns slower than fresh ones point at a prefix cache lost.",
                    "s",
                    ttft_by_turn,
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Follow-up cache-hit ratio",
                    "Of the prompt tokens of continued turns (follow_up and tool_result), the share the engine reports as served from its prefix cache; and the generated rule's 5-minute and hourly ratios (group turns), whose fall LlmFollowUpCacheHitRatioFalling alerts on. None where the server reports no cached tokens.",
                    "percentunit",
                    vec![
                        q(
                            format!(
                                "sum by (route, model) (rate({cached}{{{continued}}}[{RATE}])) / (sum by (route, model) (rate({prompt}{{{continued}}}[{RATE}])) > 0)"
                            ),
                            "{{route}} {{model}}",
                        ),
                        q(
                            format!(
                                "{}{{{BY_MODEL}}}",
                                slo::rules::follow_up_cache_ratio(self.ns(), "1h")
                            ),
                            "1h rule {{route}} {{model}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::stacked(Self::timeseries(
                    "Session time: in the model and outside it",
                    "Of the sessions that ended, per second: the time at least one of their requests was in flight (model), and their gaps, from a response's end to the session's next request (outside: tools, the client, people). Stacked, they are the sessions' durations.",
                    "s",
                    vec![
                        q(rate(&format!("{model}_sum"), BY_ROUTE), "model {{route}}"),
                        q(rate(&format!("{gaps}_sum"), BY_ROUTE), "outside {{route}}"),
                    ],
                )),
                8,
            ),
            (
                Self::timeseries(
                    "Mean session: duration, model time and turns",
                    "Of the sessions that ended: their mean duration and model time, in seconds, and their mean number of turns (requests).",
                    "short",
                    vec![
                        q(mean(&duration), "duration s {{route}}"),
                        q(mean(&model), "model s {{route}}"),
                        q(mean(&turns), "turns {{route}}"),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Sessions good ratio",
                    "Of the sessions that ended, the share in which every request was good (judged good, or without a class ended ok), per route and tenant.",
                    "percentunit",
                    vec![q(
                        format!(
                            "sum by (route, tenant) (rate({total}{{{BY_ROUTE}, tenant=~\"$tenant\", good=\"true\"}}[{RATE}])) / (sum by (route, tenant) (rate({total}{{{BY_ROUTE}, tenant=~\"$tenant\"}}[{RATE}])) > 0)"
                        ),
                        "{{route}} {{tenant}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Mean session cost",
                    "Of the sessions that ended on routes with GPUs: their mean GPU-seconds, and on priced routes their mean cost (in the currency of the legend); and the p90 cost.",
                    "short",
                    vec![
                        q(mean(&gpu_seconds), "GPU-s {{route}}"),
                        q(
                            format!(
                                "sum by (route, currency) (rate({cost}_sum{{{BY_ROUTE}}}[{RATE}])) / sum by (route, currency) (rate({cost}_count{{{BY_ROUTE}}}[{RATE}]))"
                            ),
                            "cost {{route}} ({{currency}})",
                        ),
                        q(
                            classic.quantile("0.9", &cost, BY_ROUTE, "route, currency", RATE),
                            "p90 cost {{route}} ({{currency}})",
                        ),
                    ],
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Session gaps",
                    "p50 and p90 of the gaps in sessions (a response's end to the session's next request, with none of its requests in flight): how long tools, clients and people take between turns.",
                    "s",
                    vec![
                        q(
                            classic.quantile("0.5", &gaps, BY_ROUTE, "route", RATE),
                            "p50 {{route}}",
                        ),
                        q(
                            classic.quantile("0.9", &gaps, BY_ROUTE, "route", RATE),
                            "p90 {{route}}",
                        ),
                    ],
                ),
                12,
            ),
        ];
        self.place_all(panels, 8);
    }
}
