//! The chargeback rules: the fleet's view of the GPU time, energy and
//! money the replicas divide among their requests (docs/metrics.md,
//! "Chargeback: who used the GPUs"), and what a good token costs.
//!
//! They are named by what they record, under the prefix `chargeback:`
//! (they are no SLO figures), in Prometheus' `level:metric:operations`
//! form: `chargeback:llm_gpu_seconds:rate5m`.
//!
//! Every replica counts the same GPUs, so the fleet's GPU time and idle
//! time are the mean over replicas, per GPU set (`avg by (gpu_set)`), and
//! its tenants' charges the sum, per set, route and tenant (`sum by
//! (gpu_set, route, tenant)`, so that `sum by (gpu_set)` of them closes
//! against the set's GPU time). The group is generated whatever the
//! configuration: rules over series that do not exist record nothing, and
//! a route that a reload gives GPUs is covered without a new rule file.

use std::collections::BTreeMap;

use super::{Group, Rule};
use names::{self, Family};

/// Windows the chargeback rules are recorded over.
pub const CHARGEBACK_WINDOWS: [&str; 2] = ["5m", "1h"];

/// The level of every chargeback recording rule's name.
const PREFIX: &str = "chargeback";

/// The names of the chargeback recording rules over one window.
pub struct ChargebackNames {
    /// The fleet's GPU-seconds per second, per GPU set.
    pub gpu_seconds: String,
    /// GPU-seconds per second charged to each tenant, per set and route.
    pub tenant_seconds: String,
    /// The fleet's idle GPU-seconds per second, per GPU set.
    pub idle_seconds: String,
    /// The cost per second charged to each tenant, per set, route and
    /// currency.
    pub tenant_cost: String,
    /// Idle over the set's GPU-seconds.
    pub idle_share: String,
    /// A tenant's GPU-seconds with `good="false"` over all of its own.
    pub waste_share: String,
    /// A tenant's cost per million of its good output tokens.
    pub cost_per_million_good_tokens: String,
    /// A tenant's joules per good output token.
    pub joules_per_good_token: String,
}

impl ChargebackNames {
    pub fn new(namespace: &str, window: &str) -> Self {
        // A rate of a counter is named after the counter, without `_total`.
        let rate = |family: Family| {
            let name = family.name(namespace);
            format!(
                "{PREFIX}:{}:rate{window}",
                name.strip_suffix("_total").unwrap_or(&name)
            )
        };
        let ratio = |metric: &str| format!("{PREFIX}:{namespace}_{metric}:ratio_rate{window}");
        Self {
            gpu_seconds: rate(names::GPU_SECONDS),
            tenant_seconds: rate(names::REQUEST_GPU_SECONDS),
            idle_seconds: rate(names::GPU_IDLE_SECONDS),
            tenant_cost: rate(names::REQUEST_GPU_COST),
            idle_share: ratio("gpu_idle"),
            waste_share: ratio("request_gpu_waste"),
            cost_per_million_good_tokens: ratio("request_gpu_cost_per_million_good_output_tokens"),
            joules_per_good_token: ratio("request_gpu_joules_per_good_output_token"),
        }
    }
}

/// The group `chargeback`: per window of `windows`, in evaluation order
/// (the shares read the rates recorded before them in the same
/// evaluation):
///
/// - `gpu_seconds{gpu_set}`, `idle_seconds{gpu_set}`: the mean over
///   replicas of the rate of `llm_gpu_seconds_total` and
///   `llm_gpu_idle_seconds_total`;
/// - `tenant_seconds{gpu_set, route, tenant}`: the sum over replicas of the
///   rate of `llm_request_gpu_seconds_total`, so that the fleet's tenants
///   plus idle are its GPU time, per set;
/// - `tenant_cost{gpu_set, route, tenant, currency}`: the sum over replicas
///   of the rate of `llm_request_gpu_cost_total`, each tenant's bill per
///   second;
/// - `idle_share{gpu_set}`: idle over GPU time, where the set has GPUs;
/// - `waste_share{gpu_set, route, tenant}`: `good="false"` over all the tenant's
///   GPU time, 0 where it has none not good (no such series), none where it
///   has no GPU time;
/// - `cost_per_million_good_tokens{route, tenant, currency}` and
///   `joules_per_good_token{route, tenant}`: the tenant's cost and energy,
///   good and waste, over its good output tokens, where it has some.
pub fn chargeback_group(namespace: &str, windows: &[&str]) -> Group {
    Group {
        name: "chargeback".to_owned(),
        rules: windows
            .iter()
            .flat_map(|window| chargeback_rules(namespace, window))
            .collect(),
    }
}

fn chargeback_rules(namespace: &str, window: &str) -> Vec<Rule> {
    let names = ChargebackNames::new(namespace, window);
    let rate = |family: Family, matchers: &str| {
        let name = family.name(namespace);
        if matchers.is_empty() {
            format!("rate({name}[{window}])")
        } else {
            format!("rate({name}{{{matchers}}}[{window}])")
        }
    };
    let record = |name: &str, expr: String| Rule {
        record: Some(name.to_owned()),
        alert: None,
        expr,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    let tenant_seconds = &names.tenant_seconds;
    // The good output tokens of each tenant where it has some: a tenant
    // whose every request missed has no cost per good token (not +Inf).
    // Parenthesised, so after `group_left` it reads as an empty list of
    // labels to copy, then this.
    let good_tokens = format!(
        "(\n  sum by (route, tenant) ({}) > 0\n)",
        rate(names::SLO_GOOD_OUTPUT_TOKENS, "")
    );
    vec![
        record(
            &names.gpu_seconds,
            format!("avg by (gpu_set) ({})", rate(names::GPU_SECONDS, "")),
        ),
        record(
            &names.tenant_seconds,
            format!(
                "sum by (gpu_set, route, tenant) ({})",
                rate(names::REQUEST_GPU_SECONDS, "")
            ),
        ),
        record(
            &names.idle_seconds,
            format!("avg by (gpu_set) ({})", rate(names::GPU_IDLE_SECONDS, "")),
        ),
        record(
            &names.tenant_cost,
            format!(
                "sum by (gpu_set, route, tenant, currency) ({})",
                rate(names::REQUEST_GPU_COST, "")
            ),
        ),
        record(
            &names.idle_share,
            format!("{}\n/\n({} > 0)", names.idle_seconds, names.gpu_seconds),
        ),
        record(
            &names.waste_share,
            format!(
                "(\n  sum by (gpu_set, route, tenant) ({})\nor\n  {tenant_seconds} * 0\n)\n/\n({tenant_seconds} > 0)",
                rate(names::REQUEST_GPU_SECONDS, "good=\"false\"")
            ),
        ),
        record(
            &names.cost_per_million_good_tokens,
            format!(
                "1e6 * (\n  sum by (route, tenant, currency) ({})\n  / on (route, tenant) group_left ()\n  {}\n)",
                rate(names::REQUEST_GPU_COST, ""),
                good_tokens.replace('\n', "\n  ")
            ),
        ),
        record(
            &names.joules_per_good_token,
            format!(
                "sum by (route, tenant) ({})\n/ on (route, tenant)\n{good_tokens}",
                rate(names::REQUEST_GPU_ENERGY, "")
            ),
        ),
    ]
}
