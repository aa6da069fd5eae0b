//! The dashboard's "Cost" row: who used the GPUs and what their good
//! tokens cost (docs/metrics.md, "Chargeback: who used the GPUs").
//!
//! Like the other rows it queries the raw counters, summed over replicas
//! as the fleet's view is: the tenants' charges are each replica's own, so
//! summed; the GPUs and idle time are every replica's, so averaged by GPU
//! set. The chargeback families carry no `operation` label, so the row
//! filters by route, model, class and tenant only, the good output tokens
//! it divides by too; the GPU sets' own families, which have no route, by
//! `$gpu_set`.

use serde_json::{Value, json};

use names;

use super::builder::{Builder, RATE, q};

/// The filter of the families charged to requests.
const CHARGED: &str = r#"route=~"$route", model=~"$model", slo=~"$slo", tenant=~"$tenant""#;
/// The filter of the families of a GPU set.
const BY_SET: &str = r#"gpu_set=~"$gpu_set""#;

impl Builder {
    pub(super) fn cost(&mut self) {
        self.row("Cost", false);
        let (seconds, cost, joules, good) = (
            self.m(names::REQUEST_GPU_SECONDS),
            self.m(names::REQUEST_GPU_COST),
            self.m(names::REQUEST_GPU_ENERGY),
            self.m(names::SLO_GOOD_OUTPUT_TOKENS),
        );
        let (gpu_seconds, idle_seconds, idle_cost) = (
            self.m(names::GPU_SECONDS),
            self.m(names::GPU_IDLE_SECONDS),
            self.m(names::GPU_IDLE_COST),
        );
        let rate = |metric: &str, filter: &str| format!("rate({metric}{{{filter}}}[{RATE}])");
        // Each tenant's good output tokens where it has some, so that a
        // tenant without one shows no figure rather than +Inf.
        let per_good_token = |charged: &str, by: &str| {
            format!(
                "sum by ({by}) ({}) / on (route, tenant) group_left () (sum by (route, tenant) ({}) > 0)",
                rate(charged, CHARGED),
                rate(&good, CHARGED),
            )
        };
        let panels = vec![
            (
                Self::timeseries(
                    "Cost per hour, per tenant and idle",
                    "The GPU cost charged to each tenant's requests per hour (gpu_hourly_cost, summed over replicas), and the cost of the idle GPU time per GPU set (no request in flight on the engine), in the currency of the legend (cost.currency). Charged when a request ends.",
                    "short",
                    vec![
                        q(
                            format!(
                                "3600 * sum by (route, tenant, currency) ({})",
                                rate(&cost, CHARGED)
                            ),
                            "{{tenant}} {{route}} ({{currency}})",
                        ),
                        q(
                            format!(
                                "3600 * avg by (gpu_set, currency) ({})",
                                rate(&idle_cost, BY_SET)
                            ),
                            "idle {{gpu_set}} ({{currency}})",
                        ),
                    ],
                ),
                12,
            ),
            (
                Self::stacked(Self::timeseries(
                    "GPU time: good, waste and idle",
                    "GPUs in use, stacked: the GPU-seconds per second charged to requests judged good, to the rest (waste: requests that missed their objectives, failed or were abandoned), and idle, per GPU set (the GPUs its routes share). With every request of the engine coming through a replica, the stack is the sets' GPUs.",
                    "short",
                    vec![
                        q(
                            format!(
                                "sum by (gpu_set) ({})",
                                rate(&seconds, &format!("{CHARGED}, good=\"true\""))
                            ),
                            "good {{gpu_set}}",
                        ),
                        q(
                            format!(
                                "sum by (gpu_set) ({})",
                                rate(&seconds, &format!("{CHARGED}, good=\"false\""))
                            ),
                            "waste {{gpu_set}}",
                        ),
                        q(
                            format!("avg by (gpu_set) ({})", rate(&idle_seconds, BY_SET)),
                            "idle {{gpu_set}}",
                        ),
                    ],
                )),
                12,
            ),
            (
                Self::timeseries(
                    "Idle share",
                    "The share of each GPU set's time with no request in flight on its engine: capacity nobody used.",
                    "percentunit",
                    vec![q(
                        format!(
                            "avg by (gpu_set) ({}) / avg by (gpu_set) ({})",
                            rate(&idle_seconds, BY_SET),
                            rate(&gpu_seconds, BY_SET)
                        ),
                        "{{gpu_set}}",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Cost per million good output tokens",
                    "Each tenant's GPU cost, good and waste, over its output tokens of good requests, per million: what a good answer costs. None for a tenant without good tokens.",
                    "short",
                    vec![q(
                        format!(
                            "1e6 * ({})",
                            per_good_token(&cost, "route, tenant, currency")
                        ),
                        "{{tenant}} {{route}} ({{currency}})",
                    )],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Joules per good output token",
                    "Each tenant's GPU energy, good and waste, over its output tokens of good requests (routes with a GPU page only).",
                    "short",
                    vec![q(
                        per_good_token(&joules, "route, tenant"),
                        "{{tenant}} {{route}}",
                    )],
                ),
                8,
            ),
        ];
        self.place_all(panels, 8);
    }

    /// A time series panel whose series are stacked, filled.
    pub(super) fn stacked(mut panel: Value) -> Value {
        let custom = &mut panel["fieldConfig"]["defaults"]["custom"];
        custom["stacking"] = json!({"mode": "normal", "group": "A"});
        custom["fillOpacity"] = json!(40);
        panel
    }
}
