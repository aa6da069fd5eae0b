//! The classes' objectives as the SLO tools take them (Pyrra's
//! `ServiceLevelObjective`s in `pyrra.rs`, Sloth's `slos` in `sloth.rs`):
//! one per objective of a class, judged on its latency histogram, and one
//! per class with a goodput target for its errors, judged on the outcome
//! counter. Both tools are built from this one list, so they hold the
//! same objectives under the same names.

use std::time::Duration;

use meter::Outcome;
use names::{self, Family};

use crate::class::{ObjectiveKind, SloClass};

/// One objective for an SLO tool.
pub(super) struct ToolObjective<'a> {
    pub class: &'a SloClass,
    /// A Kubernetes object name (DNS-1123 label): `<class>-<objective>`.
    pub name: String,
    /// `ttft`, `tpot`, `e2el` or `errors`: the `objective` label.
    pub objective: &'static str,
    /// Share of events that must be good, in (0, 1).
    pub target: f64,
    pub indicator: Indicator,
    /// What the objective promises, for people.
    pub description: String,
}

/// What an objective is judged on.
pub(super) enum Indicator {
    /// The share of a latency histogram's observations within `threshold`.
    Latency { family: Family, threshold: Duration },
    /// The share of the class's requests that the upstream or the proxy
    /// failed, on `requests_total{outcome}`.
    Errors,
}

/// The outcomes that count against a class: the upstream's and the
/// proxy's failures. A client that gave up or stalled is no error of the
/// service's (as `judge` does not count it).
pub(super) fn failed_outcomes() -> String {
    let failed: Vec<&str> = Outcome::ALL
        .iter()
        .filter(|o| {
            matches!(
                o,
                Outcome::UpstreamError | Outcome::Timeout | Outcome::ProxyError
            )
        })
        .map(|o| o.as_str())
        .collect();
    failed.join("|")
}

/// The histogram an objective of `kind` is judged on.
pub(super) fn histogram(kind: ObjectiveKind) -> Family {
    match kind {
        ObjectiveKind::Ttft => names::TTFT,
        ObjectiveKind::Tpot => names::TPOT,
        ObjectiveKind::E2el => names::E2EL,
    }
}

/// Every objective of `classes`, class by class: the latency objectives in
/// the class's order, then its errors when it has a goodput target.
pub(super) fn objectives(classes: &[SloClass]) -> Vec<ToolObjective<'_>> {
    let mut out = Vec::new();
    for class in classes {
        let about = if class.description.is_empty() {
            format!("SLO class {}", class.name)
        } else {
            format!(
                "SLO class {}: {}",
                class.name,
                class.description.trim_end_matches('.')
            )
        };
        for o in &class.objectives {
            let kind = o.kind.as_str();
            out.push(ToolObjective {
                class,
                name: object_name(&class.name, kind),
                objective: kind,
                target: o.target,
                indicator: Indicator::Latency {
                    family: histogram(o.kind),
                    threshold: o.threshold,
                },
                description: format!(
                    "{about}. {} % of requests have {} at or below {}.",
                    super::burn::round_percent(o.target),
                    kind.to_uppercase(),
                    humantime::format_duration(o.threshold)
                ),
            });
        }
        if let Some(target) = class.goodput.target {
            out.push(ToolObjective {
                class,
                name: object_name(&class.name, "errors"),
                objective: "errors",
                target,
                indicator: Indicator::Errors,
                description: format!(
                    "{about}. {} % of requests are not failed by the upstream or the proxy ({}).",
                    super::burn::round_percent(target),
                    failed_outcomes().replace('|', ", ")
                ),
            });
        }
    }
    out
}

/// `<class>-<objective>` as a DNS-1123 label: lowercase letters, digits
/// and `-`, starting and ending with a letter or digit, at most 63
/// characters. A class name that is not one already (it may hold
/// capitals, `_`, `.` and `:`) is mapped to one, with a hash of the name
/// appended so that two classes never share an object name.
pub(super) fn object_name(class: &str, objective: &str) -> String {
    let mut name = String::new();
    for c in class.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_matches('-');
    let keep = 63 - objective.len() - 1;
    if name == class && name.len() <= keep {
        return format!("{name}-{objective}");
    }
    // FNV-1a, so the suffix is the same on every build.
    let hash = class.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let hash = format!("{:08x}", hash as u32);
    let head = name[..name.len().min(keep - hash.len() - 1)].trim_end_matches('-');
    if head.is_empty() {
        format!("{hash}-{objective}")
    } else {
        format!("{head}-{hash}-{objective}")
    }
}
