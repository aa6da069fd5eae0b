//! The dashboard's trade-off sections: the latency–load curve with its
//! knee and headroom, and what the engines and GPUs do beside the goodput,
//! with what the good tokens cost in GPU time.
//!
//! The families here carry no `tenant` or `operation` label, so their
//! queries filter by route, model and class only.

use serde_json::{Value, json};

use names;

use super::builder::{Builder, RATE, q};

/// The filter of families labelled by route, model and class.
const BY_CLASS: &str = r#"route=~"$route", model=~"$model", slo=~"$slo""#;
/// The filter of families labelled by route and model.
const BY_MODEL: &str = r#"route=~"$route", model=~"$model""#;
/// The filter of families labelled by route only.
const BY_ROUTE: &str = r#"route=~"$route""#;

impl Builder {
    pub(super) fn capacity(&mut self) {
        self.row("Capacity: latency against load", false);
        let (requests, knee, headroom) = (
            self.m(names::SLO_LOAD_REQUESTS),
            self.m(names::SLO_CAPACITY),
            self.m(names::SLO_HEADROOM),
        );
        let fleet = format!("slo:{}:increase5m", self.m(names::SLO_CAPACITY));
        let panels = vec![
            (
                Self::timeseries(
                    "Knee: most concurrent requests with every objective met",
                    "The largest load at arrival (requests in flight to the route and model, or the engine's running and waiting requests where it is scraped) at which every objective of the class still held over 5 minutes. bound=lower: traffic never reached a break, the knee is at least this. 0: even one request at a time breaks the class. The fleet line is the generated recording rule's, from every replica's counters.",
                    "short",
                    vec![
                        q(
                            format!(
                                "max by (route, model, slo, bound) ({knee}{{{BY_CLASS}, window=\"5m\"}})"
                            ),
                            "{{route}} {{model}} {{slo}} ({{bound}})",
                        ),
                        q(
                            format!("max by (route, model, slo, bound) ({fleet}{{{BY_CLASS}}})"),
                            "fleet {{route}} {{model}} {{slo}} ({{bound}})",
                        ),
                    ],
                ),
                12,
            ),
            (
                Self::timeseries(
                    "Headroom: concurrent requests left before the knee",
                    "The knee minus the load now: 0 at the knee, negative past it (scale out, or lower the engine's batch). A lower bound where the knee is.",
                    "short",
                    vec![q(
                        format!(
                            "min by (route, model, slo, bound) ({headroom}{{{BY_CLASS}, window=\"5m\"}})"
                        ),
                        "{{route}} {{model}} {{slo}} ({{bound}})",
                    )],
                ),
                12,
            ),
            (
                Self::bars(
                    "Goodput by load at arrival (last 5 minutes, every replica)",
                    "Good / judged requests in each bucket of the load they met at arrival (load_le: the bucket's upper bound). Where it falls below the class target is where the SLO breaks.",
                    "percentunit",
                    format!(
                        "sum by (load_le) (increase({requests}{{{BY_CLASS}, verdict=\"good\"}}[5m])) / sum by (load_le) (increase({requests}{{{BY_CLASS}}}[5m]))"
                    ),
                ),
                24,
            ),
        ];
        self.place_all(panels, 8);
    }

    pub(super) fn engine(&mut self) {
        self.row("Engine and GPUs", false);
        let (running, waiting, kv, prefix, cached, input) = (
            self.m(names::ENGINE_RUNNING),
            self.m(names::ENGINE_WAITING),
            self.m(names::ENGINE_KV_CACHE),
            self.m(names::ENGINE_PREFIX_HIT),
            self.m(names::CACHED_INPUT_TOKENS_TOTAL),
            self.m(names::INPUT_TOKENS_TOTAL),
        );
        let (sm, dram, util, fb, gpus, good, out, failures) = (
            self.m(names::GPU_SM_ACTIVE),
            self.m(names::GPU_DRAM_ACTIVE),
            self.m(names::GPU_UTILIZATION),
            self.m(names::GPU_FRAMEBUFFER_USED),
            self.m(names::GPUS),
            self.m(names::SLO_GOOD_OUTPUT_TOKENS),
            self.m(names::OUTPUT_TOKENS_TOTAL),
            self.m(names::SCRAPE_FAILURES),
        );
        // A route's GPUs are its GPU set's (`llm_gpus`, each route of a set
        // showing the set's), their mean over the window its GPU-seconds
        // per second.
        let per_gpu_second = |tokens: &str, by: &str| {
            format!(
                "sum by ({by}) (rate({tokens}{{{BY_CLASS}}}[{RATE}])) / on (route) group_left avg by (route) (avg_over_time({gpus}{{{BY_ROUTE}}}[{RATE}]))"
            )
        };
        let panels = vec![
            (
                Self::timeseries(
                    "Engine queue",
                    "Requests the inference server runs and holds waiting (its own figures, scraped from engine_metrics). Waiting requests that grow while TTFT rises: the engine is past its batch.",
                    "short",
                    vec![
                        q(
                            format!("sum by (route, model) ({running}{{{BY_MODEL}}})"),
                            "running {{route}} {{model}}",
                        ),
                        q(
                            format!("sum by (route, model) ({waiting}{{{BY_MODEL}}})"),
                            "waiting {{route}} {{model}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "KV cache use and prefix cache hits",
                    "The engine's KV cache in use (near 100 %: requests are preempted or queued for memory) and its prefix cache hit ratio, beside the cached share of input tokens the responses report.",
                    "percentunit",
                    vec![
                        q(
                            format!("max by (route, model) ({kv}{{{BY_MODEL}}})"),
                            "KV use {{route}} {{model}}",
                        ),
                        q(
                            format!("max by (route, model) ({prefix}{{{BY_MODEL}}})"),
                            "prefix hits (engine) {{route}} {{model}}",
                        ),
                        q(
                            format!(
                                "sum by (route, model) (rate({cached}{{{BY_CLASS}}}[{RATE}])) / sum by (route, model) (rate({input}{{{BY_CLASS}}}[{RATE}]))"
                            ),
                            "cached input (usage) {{route}} {{model}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "GPU compute and memory bandwidth",
                    "DCGM's SM active (compute occupancy) and DRAM active (memory bandwidth use) over the route's GPUs: mean and busiest. Decode is bound by memory bandwidth, prefill by compute.",
                    "percentunit",
                    vec![
                        q(
                            format!("max by (route, stat) ({sm}{{{BY_ROUTE}}})"),
                            "SM active {{stat}} {{route}}",
                        ),
                        q(
                            format!("max by (route, stat) ({dram}{{{BY_ROUTE}}})"),
                            "DRAM active {{stat}} {{route}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Good output tokens per GPU-second",
                    "Output tokens of good requests per second over the GPUs serving the route (every replica's tokens; the GPU-seconds of the GPUs they share counted once), and all output tokens the same way: what a good token costs in GPU time.",
                    "short",
                    vec![
                        q(
                            per_gpu_second(&good, "route, model, slo"),
                            "good {{route}} {{model}} {{slo}}",
                        ),
                        q(
                            per_gpu_second(&out, "route, model"),
                            "all {{route}} {{model}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "GPU utilisation and memory used",
                    "DCGM's GPU utilisation (busiest GPU of the route) and framebuffer memory used (mean).",
                    "percentunit",
                    vec![
                        q(
                            format!("max by (route) ({util}{{{BY_ROUTE}, stat=\"max\"}})"),
                            "utilisation {{route}}",
                        ),
                        q(
                            format!("max by (route) ({fb}{{{BY_ROUTE}, stat=\"mean\"}}) / 1e9"),
                            "framebuffer GB {{route}}",
                        ),
                    ],
                ),
                8,
            ),
            (
                Self::timeseries(
                    "Engine and GPU scrape failures",
                    "Failed scrapes of the routes' engine_metrics and gpu_metrics pages per second, by reason. Forwarding is unaffected; the figures of a failing page go stale and are removed.",
                    "short",
                    vec![q(
                        format!(
                            "sum by (route, target, reason) (rate({failures}{{{BY_ROUTE}}}[{RATE}]))"
                        ),
                        "{{route}} {{target}} {{reason}}",
                    )],
                ),
                8,
            ),
        ];
        self.place_all(panels, 8);
    }

    /// A bar gauge of an instant query, one bar per series.
    fn bars(title: &str, description: &str, unit: &str, expr: String) -> Value {
        json!({
            "type": "bargauge", "title": title, "description": description,
            "fieldConfig": {"defaults": {"unit": unit, "min": 0, "max": 1}, "overrides": []},
            "options": {"orientation": "vertical", "displayMode": "gradient", "reduceOptions": {"calcs": ["lastNotNull"]}},
            "targets": [{
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": expr, "instant": true, "legendFormat": "load ≤ {{load_le}}", "refId": "A",
            }],
        })
    }
}
