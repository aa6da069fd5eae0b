//! An SLO class as the rest of the program runs on it: already read and
//! checked (the config loader builds it from the SLO files). It serializes
//! as the configuration in force shows it (`/config`), durations in
//! seconds.

use std::time::Duration;

use serde::{Serialize, Serializer};

/// Default compliance window: four weeks, so every window holds the same
/// number of each weekday.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(28 * 24 * 3600);

/// One SLO class: per-request thresholds with target ratios, and what makes a
/// request good.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloClass {
    /// Unique name, the `slo` label value.
    pub name: String,
    /// What the class is for (alert annotations); may be empty.
    pub description: String,
    /// Compliance window the targets are meant over (the error budget period).
    #[serde(serialize_with = "secs")]
    pub window: Duration,
    /// Thresholds, at most one per kind, in the order `ttft`, `tpot`, `e2el`.
    pub objectives: Vec<Objective>,
    /// Which objectives a request must meet to be good, and the target share.
    pub goodput: Goodput,
    /// Whether the rules also record its error ratios and alert per tenant.
    pub per_tenant_alerts: bool,
    /// Whether slow readers' requests are left out of its judging.
    pub exclude_slow_readers: bool,
}

impl SloClass {
    /// The objective of `kind`, when the class has one.
    pub fn objective(&self, kind: ObjectiveKind) -> Option<&Objective> {
        self.objectives.iter().find(|o| o.kind == kind)
    }
}

/// "At least `target` of requests have `kind` at or below `threshold`":
/// `ttft: {p95: 500ms}` is `threshold` 500 ms, `target` 0.95.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Objective {
    #[serde(rename = "objective")]
    pub kind: ObjectiveKind,
    /// Per-request bound, inclusive (a value equal to it holds).
    #[serde(serialize_with = "secs")]
    pub threshold: Duration,
    /// Share of requests that must hold, in (0, 1).
    pub target: f64,
}

/// The per-request numbers an SLO can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectiveKind {
    /// Time to first token (streamed responses).
    Ttft,
    /// Time per output token after the first (streamed responses).
    Tpot,
    /// End-to-end request latency.
    E2el,
}

impl ObjectiveKind {
    /// Every kind, in config and label order.
    pub const ALL: [ObjectiveKind; 3] = [
        ObjectiveKind::Ttft,
        ObjectiveKind::Tpot,
        ObjectiveKind::E2el,
    ];

    /// The config key and `objective` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectiveKind::Ttft => "ttft",
            ObjectiveKind::Tpot => "tpot",
            ObjectiveKind::E2el => "e2el",
        }
    }
}

/// What makes a request of a class good.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goodput {
    /// Objectives a good request meets, all of them. Empty only for a class
    /// without objectives, where a request is good when its outcome is `ok`.
    pub require: Vec<ObjectiveKind>,
    /// Target share of good requests among judged ones, in (0, 1); `None`
    /// when not set (counted, but no alerts).
    pub target: Option<f64>,
}

/// A duration in seconds.
fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
