//! What `/slo` and `/slo/history` show of the live windows: the report
//! types, serialized as they are, and how one window's merged aggregate
//! and a class's error budget become them (compliance, goodput, burn rates
//! and the state of each objective).
//!
//! It reads aggregates and counts it is handed; which series and which
//! slots they come from is the live windows' business.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::budget::BudgetCounts;
use crate::aggregate::{Aggregate, Quantiles, kind_index};
use crate::class::SloClass;
use crate::history::PointReport;

/// One series' entry in `/slo/history`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HistoryReport {
    pub route: String,
    pub slo: String,
    /// Empty for the series of all the pair's requests.
    pub tenant: String,
    /// The class's objectives and goodput target, as in `/slo`.
    pub objectives: Vec<ObjectiveInfo>,
    pub goodput_target: Option<f64>,
    /// Width of a point.
    pub point_seconds: f64,
    /// One point per `point_seconds`, oldest first, up to the one being
    /// filled now; points where nothing happened are included.
    pub points: Vec<PointReport>,
    /// `[finished at (seconds since the Unix epoch), input tokens, TTFT
    /// (seconds)]` of the latest requests that had both, oldest first
    /// (at most [`crate::history::SCATTER`]).
    pub scatter: Vec<[f64; 3]>,
}

/// The `/slo` document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Window names, shortest first.
    pub windows: Vec<&'static str>,
    /// One entry per (route, slo), sorted.
    pub series: Vec<SeriesReport>,
}

/// One (route, slo) pair over every window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SeriesReport {
    pub route: String,
    /// The `slo` label (empty when the route has none).
    pub slo: String,
    /// The tenant whose requests these are; empty for all of them.
    pub tenant: String,
    /// The class's objectives; empty when the `slo` names no defined class.
    pub objectives: Vec<ObjectiveInfo>,
    /// The class's goodput target, when set.
    pub goodput_target: Option<f64>,
    /// Requests of the series in flight now.
    pub in_flight: u64,
    /// One entry per window, in [`Report::windows`] order.
    pub windows: Vec<WindowReport>,
    /// Per objective, then goodput (when the class sets a target): where it
    /// stands now, and its error budget over the class's window.
    pub status: Vec<ObjectiveStatus>,
}

/// Where an objective (or goodput) stands: `state` is `breach` when its
/// compliance over the last 5 minutes is below target or its error budget
/// is spent, `warning` when its compliance over the last hour is below
/// target or less than a quarter of its budget is left, `no_data` when
/// nothing was judged in the hour or the budget's span, else `ok`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectiveStatus {
    /// `ttft`, `tpot`, `e2el`, or `goodput`.
    pub objective: &'static str,
    /// `None` for goodput.
    pub threshold_seconds: Option<f64>,
    pub target: f64,
    pub state: &'static str,
    /// Compliance and burn rate over 5 minutes and an hour.
    pub ratio_5m: Option<f64>,
    pub burn_rate_5m: Option<f64>,
    pub ratio_1h: Option<f64>,
    pub burn_rate_1h: Option<f64>,
    pub budget: BudgetReport,
}

/// An objective's error budget over its class's compliance window, as far
/// back as this process has seen it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BudgetReport {
    /// The class's window, and how much of it the counts cover (less while
    /// the process is younger than the window).
    pub window_seconds: f64,
    pub seconds: f64,
    /// Judged requests, and those that met the objective (good ones, for
    /// goodput).
    pub judged: u64,
    pub met: u64,
    /// Share of the budget (`(1 − target) × judged` misses) not spent:
    /// 1 with no misses, 0 or less once spent; `None` when nothing was
    /// judged or the target allows no miss.
    pub left: Option<f64>,
}

/// An objective of the class.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectiveInfo {
    pub objective: &'static str,
    pub threshold_seconds: f64,
    pub target: f64,
}

/// One window of one series.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WindowReport {
    pub window: &'static str,
    /// Seconds the window covers now (less than its span while the process
    /// is younger than it).
    pub seconds: f64,
    /// Finished requests, any outcome, and per second.
    pub requests: u64,
    pub request_rate: f64,
    /// Requests that ended `ok`.
    pub ok: u64,
    /// Output tokens, and per second.
    pub output_tokens: u64,
    pub output_token_rate: f64,
    /// Latency quantiles in seconds (1 % relative error).
    pub ttft: Quantiles,
    pub tpot: Quantiles,
    pub itl: Quantiles,
    pub e2el: Quantiles,
    /// The server's own phases and the time outside the engine, of the
    /// requests that reported them (docs/metrics.md, "Where the time goes").
    pub queue: Quantiles,
    pub prefill: Quantiles,
    pub decode: Quantiles,
    pub outside: Quantiles,
    /// Per objective: share of judged requests within its threshold.
    pub compliance: Vec<Compliance>,
    /// Goodput, when the series has a class.
    pub goodput: Option<GoodputReport>,
}

/// One objective in one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Compliance {
    pub objective: &'static str,
    pub threshold_seconds: f64,
    pub target: f64,
    /// Judged requests (good + bad) and those within the threshold.
    pub judged: u64,
    pub met: u64,
    /// `met / judged`; `None` when nothing was judged.
    pub ratio: Option<f64>,
    /// `(1 − ratio) / (1 − target)`: 1 spends the error budget exactly over
    /// the class's window, above 1 faster.
    pub burn_rate: Option<f64>,
}

/// Goodput in one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GoodputReport {
    pub good: u64,
    pub bad: u64,
    /// `good / (good + bad)`; `None` when nothing was judged.
    pub ratio: Option<f64>,
    /// Good requests per second.
    pub rate: f64,
    /// Output tokens of good requests per second.
    pub token_rate: f64,
    pub target: Option<f64>,
    /// `(1 − ratio) / (1 − target)`, when both are known.
    pub burn_rate: Option<f64>,
}

fn burn(ratio: Option<f64>, target: Option<f64>) -> Option<f64> {
    let (ratio, target) = (ratio?, target?);
    (target < 1.0).then(|| (1.0 - ratio) / (1.0 - target))
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The objectives of `class` as reports show them (none without a class).
pub(super) fn objectives(class: Option<&Arc<SloClass>>) -> Vec<ObjectiveInfo> {
    class.map_or_else(Vec::new, |c| {
        c.objectives
            .iter()
            .map(|o| ObjectiveInfo {
                objective: o.kind.as_str(),
                threshold_seconds: o.threshold.as_secs_f64(),
                target: o.target,
            })
            .collect()
    })
}

/// One window of a series as `/slo` shows it: `a`, the requests of the
/// window `name` merged, over the `covered` span, judged against `class`
/// when it has one.
pub(super) fn window_report(
    name: &'static str,
    a: &Aggregate,
    covered: Duration,
    class: Option<&Arc<SloClass>>,
) -> WindowReport {
    // At least a second, so a window that just started does not
    // divide by almost nothing.
    let seconds = covered.as_secs_f64().max(1.0);
    let per_second = |n: u64| n as f64 / seconds;
    let judged = a.good + a.bad;
    let compliance = class.map_or_else(Vec::new, |c| {
        c.objectives
            .iter()
            .map(|o| {
                let met = judged.saturating_sub(a.violations[kind_index(o.kind)]);
                let r = ratio(met, judged);
                Compliance {
                    objective: o.kind.as_str(),
                    threshold_seconds: o.threshold.as_secs_f64(),
                    target: o.target,
                    judged,
                    met,
                    ratio: r,
                    burn_rate: burn(r, Some(o.target)),
                }
            })
            .collect()
    });
    let goodput = class.map(|c| {
        let r = ratio(a.good, judged);
        GoodputReport {
            good: a.good,
            bad: a.bad,
            ratio: r,
            rate: per_second(a.good),
            token_rate: per_second(a.good_output_tokens),
            target: c.goodput.target,
            burn_rate: burn(r, c.goodput.target),
        }
    });
    WindowReport {
        window: name,
        seconds: covered.as_secs_f64(),
        requests: a.requests,
        request_rate: per_second(a.requests),
        ok: a.ok(),
        output_tokens: a.output_tokens,
        output_token_rate: per_second(a.output_tokens),
        ttft: Quantiles::of(&a.ttft),
        tpot: Quantiles::of(&a.tpot),
        itl: Quantiles::of(&a.itl),
        e2el: Quantiles::of(&a.e2el),
        queue: Quantiles::of(&a.queue),
        prefill: Quantiles::of(&a.prefill),
        decode: Quantiles::of(&a.decode),
        outside: Quantiles::of(&a.outside),
        compliance,
        goodput,
    }
}

/// The status of each objective of `class`, then of its goodput target:
/// see [`ObjectiveStatus`]. `windows` are the series' (5m and 1h are read).
pub(super) fn status(
    class: &SloClass,
    windows: &[WindowReport],
    budget: BudgetCounts,
    covered: Duration,
) -> Vec<ObjectiveStatus> {
    let judged = budget.good + budget.bad;
    let window = |name: &str| windows.iter().find(|w| w.window == name);
    let (five, hour) = (window("5m"), window("1h"));
    let judged_in = |w: Option<&WindowReport>| {
        w.and_then(|w| w.goodput.as_ref())
            .map_or(0, |g| g.good + g.bad)
    };
    let entry = |objective: &'static str,
                 threshold_seconds: Option<f64>,
                 target: f64,
                 met: u64,
                 read: &dyn Fn(&WindowReport) -> Option<f64>| {
        let ratio_5m = five.and_then(read);
        let ratio_1h = hour.and_then(read);
        let left = (judged > 0 && target < 1.0).then(|| {
            let allowed = (1.0 - target) * judged as f64;
            1.0 - judged.saturating_sub(met) as f64 / allowed
        });
        let below = |r: Option<f64>| r.is_some_and(|r| r < target);
        let state = if judged_in(hour) == 0 && judged == 0 {
            "no_data"
        } else if below(ratio_5m) || left.is_some_and(|l| l <= 0.0) {
            "breach"
        } else if below(ratio_1h) || left.is_some_and(|l| l < 0.25) {
            "warning"
        } else {
            "ok"
        };
        ObjectiveStatus {
            objective,
            threshold_seconds,
            target,
            state,
            ratio_5m,
            burn_rate_5m: burn(ratio_5m, Some(target)),
            ratio_1h,
            burn_rate_1h: burn(ratio_1h, Some(target)),
            budget: BudgetReport {
                window_seconds: class.window.as_secs_f64(),
                seconds: covered.as_secs_f64(),
                judged,
                met,
                left,
            },
        }
    };
    let mut out: Vec<ObjectiveStatus> = class
        .objectives
        .iter()
        .map(|o| {
            let name = o.kind.as_str();
            let met = judged.saturating_sub(budget.violations[kind_index(o.kind)]);
            let read = move |w: &WindowReport| {
                w.compliance
                    .iter()
                    .find(|c| c.objective == name)
                    .and_then(|c| c.ratio)
            };
            entry(name, Some(o.threshold.as_secs_f64()), o.target, met, &read)
        })
        .collect();
    if let Some(target) = class.goodput.target {
        let read = |w: &WindowReport| w.goodput.as_ref().and_then(|g| g.ratio);
        out.push(entry("goodput", None, target, budget.good, &read));
    }
    out
}
