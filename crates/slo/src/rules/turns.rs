//! The turns' rules: how much of a continued conversation's prompt the
//! engine served from its prefix cache (docs/metrics.md, "Sessions and
//! turns"), and an alert when it falls.
//!
//! A follow-up or a tool's result resends what the engine saw a moment
//! ago: its prefix should be cached. The ratio is recorded per route and
//! model over 5 minutes and an hour, summed over replicas, named
//! `turns:<metric>:ratio_rate<W>`; the alert fires while the 5-minute
//! ratio is under half the hour's, on enough tokens to tell (the session moved to a replica or an engine without its cache, a
//! cache too small for the sessions in flight). Like the chargeback's, the
//! group is generated whatever the configuration: over series that do not
//! exist it records nothing.

use std::collections::BTreeMap;

use super::{Group, Rule};

/// The windows the ratio is recorded over: the alert's short one, then
/// its baseline.
pub const TURN_WINDOWS: [&str; 2] = ["5m", "1h"];

/// The turns that continue a conversation.
const CONTINUED: &str = "turn=~\"follow_up|tool_result\"";

/// Fewer prompt tokens a second of continued turns than this, and the
/// ratio is not worth an alert.
const MIN_TOKENS_PER_SECOND: u32 = 10;

/// The name of the follow-up cache-hit ratio recorded over `window`.
pub fn follow_up_cache_ratio(namespace: &str, window: &str) -> String {
    format!("turns:{namespace}_turn_cached_prompt_tokens:ratio_rate{window}")
}

/// The group `turns`: the follow-up cache-hit ratio over each of
/// [`TURN_WINDOWS`] per route and model, then the alert
/// `LlmFollowUpCacheHitRatioFalling`.
pub fn turns_group(namespace: &str) -> Group {
    let cached = names::TURN_CACHED_PROMPT_TOKENS.name(namespace);
    let prompt = names::TURN_PROMPT_TOKENS.name(namespace);
    let sum = |name: &str, window: &str| {
        format!("sum by (route, model) (rate({name}{{{CONTINUED}}}[{window}]))")
    };
    let mut rules: Vec<Rule> = TURN_WINDOWS
        .iter()
        .map(|window| Rule {
            record: Some(follow_up_cache_ratio(namespace, window)),
            alert: None,
            expr: format!(
                "{}\n/\n({} > 0)",
                sum(&cached, window),
                sum(&prompt, window)
            ),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        })
        .collect();
    let (short, long) = (
        follow_up_cache_ratio(namespace, TURN_WINDOWS[0]),
        follow_up_cache_ratio(namespace, TURN_WINDOWS[1]),
    );
    let ttft = names::TURN_TTFT.name(namespace);
    rules.push(Rule {
        record: None,
        alert: Some("LlmFollowUpCacheHitRatioFalling".to_owned()),
        expr: format!(
            "(\n  {short} < 0.5 * {long}\n)\nand on (route, model)\n(\n  {} > {MIN_TOKENS_PER_SECOND}\n)",
            sum(&prompt, TURN_WINDOWS[0])
        ),
        labels: BTreeMap::from([("severity".to_owned(), "ticket".to_owned())]),
        annotations: BTreeMap::from([
            (
                "summary".to_owned(),
                "Follow-up turns on {{ $labels.route }} ({{ $labels.model }}) find half as much of their prompt cached as over the last hour".to_owned(),
            ),
            (
                "description".to_owned(),
                format!(
                    "The share of continued turns' prompt tokens served from the engine's prefix cache is {{{{ $value | humanizePercentage }}}} over 5 minutes, under half of the last hour's. Sessions that lose their cache recompute their whole history: compare follow-up and first turns' time to first token in {ttft}, and check the routing of sessions to replicas and the engine's cache size."
                ),
            ),
        ]),
    });
    Group {
        name: "turns".to_owned(),
        rules,
    }
}
