//! Prometheus recording and alerting rules for SLO classes, as the Google
//! SRE workbook ("Alerting on SLOs") builds them: error ratios over the
//! standard windows, and multi-window, multi-burn-rate alerts.
//!
//! Per class, for each objective (`ttft`, `tpot`, `e2el`) and for goodput:
//!
//! - recording rules `slo:<ns>_slo_errors:ratio_rate<W>{slo, objective}`
//!   for W in 5m, 30m, 1h, 2h, 6h, 1d, 3d: the share of judged requests
//!   that violated the objective (for goodput: that were bad), summed over
//!   every replica (`sum by (slo)`);
//! - a paging alert (14.4× the budget rate over 1h and 5m, or 6× over 6h
//!   and 30m) and a ticket alert (3× over 1d and 2h, or 1× over 3d and 6h);
//! - for a class with `per_tenant_alerts`, the same per tenant:
//!   `slo:<ns>_slo_errors_by_tenant:ratio_rate<W>{slo, objective, tenant}`
//!   (`sum by (slo, tenant)`, requests with a tenant only) and the alerts
//!   `SloErrorBudgetBurnFastPerTenant` and `SloErrorBudgetBurnSlowPerTenant`,
//!   which fire for each tenant burning its share of the budget.
//!
//! And per class with a target, [`capacity_groups`]: the latency–load
//! curve summed over every replica, and the fleet's knee and headroom.
//!
//! This module builds the rule file as data and text; it must not do I/O
//! (the CLI writes the file).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::class::SloClass;
use names;

/// Windows every error ratio is recorded over.
pub const WINDOWS: [&str; 7] = ["5m", "30m", "1h", "2h", "6h", "1d", "3d"];

/// One multi-window burn-rate condition: the long window says the budget is
/// burning this fast, the short one that it still is (so the alert resets
/// soon after the problem stops).
struct Burn {
    factor: f64,
    long: &'static str,
    short: &'static str,
}

/// One alert: its severity and the conditions, any of which fires it.
struct Severity {
    alert: &'static str,
    severity: &'static str,
    burns: [Burn; 2],
    what: &'static str,
}

const SEVERITIES: [Severity; 2] = [
    Severity {
        alert: "SloErrorBudgetBurnFast",
        severity: "page",
        burns: [
            Burn {
                factor: 14.4,
                long: "1h",
                short: "5m",
            },
            Burn {
                factor: 6.0,
                long: "6h",
                short: "30m",
            },
        ],
        what: "fast (14.4x the sustainable rate over 1h and 5m, or 6x over 6h and 30m: 2 % or 5 % of a 30-day budget spent in that time)",
    },
    Severity {
        alert: "SloErrorBudgetBurnSlow",
        severity: "ticket",
        burns: [
            Burn {
                factor: 3.0,
                long: "1d",
                short: "2h",
            },
            Burn {
                factor: 1.0,
                long: "3d",
                short: "6h",
            },
        ],
        what: "steadily (3x the sustainable rate over 1d and 2h, or 1x over 3d and 6h: 10 % of a 30-day budget spent in that time)",
    },
];

/// A Prometheus rule file.
#[derive(Debug, Serialize)]
pub struct RuleFile {
    pub groups: Vec<Group>,
}

/// A rule group.
#[derive(Debug, Serialize)]
pub struct Group {
    pub name: String,
    pub rules: Vec<Rule>,
}

/// A recording rule (`record`) or an alerting rule (`alert`).
#[derive(Debug, Serialize)]
pub struct Rule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert: Option<String>,
    pub expr: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The name of the recorded error ratio over `window`.
pub fn ratio_name(namespace: &str, window: &str) -> String {
    Scope::Class.ratio_name(namespace, window)
}

/// Whose error ratios a rule reads: a class's, or each of its tenants'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Class,
    Tenant,
}

impl Scope {
    fn ratio_name(self, namespace: &str, window: &str) -> String {
        match self {
            Scope::Class => format!("slo:{namespace}_slo_errors:ratio_rate{window}"),
            Scope::Tenant => format!("slo:{namespace}_slo_errors_by_tenant:ratio_rate{window}"),
        }
    }

    /// The labels the ratios keep.
    fn by(self) -> &'static str {
        match self {
            Scope::Class => "slo",
            Scope::Tenant => "slo, tenant",
        }
    }

    /// Matchers added to the counters' selectors.
    fn matchers(self) -> &'static str {
        match self {
            Scope::Class => "",
            Scope::Tenant => ",tenant!=\"\"",
        }
    }

    fn alert_name(self, base: &str) -> String {
        match self {
            Scope::Class => base.to_owned(),
            Scope::Tenant => format!("{base}PerTenant"),
        }
    }
}

/// One thing a class promises: an objective or goodput, with what counts
/// as an error and the target.
struct Sli {
    objective: &'static str,
    /// The error counter and its matchers, without braces.
    errors: (String, String),
    target: f64,
    /// What an error is, for people.
    meaning: String,
}

/// The rules for `classes`, with metrics named under `namespace`.
pub fn rules(classes: &[SloClass], namespace: &str) -> RuleFile {
    let mut groups = Vec::new();
    let requests = names::SLO_REQUESTS.name(namespace);
    for class in classes {
        let slo = &class.name;
        let mut slis: Vec<Sli> = class
            .objectives
            .iter()
            .map(|o| Sli {
                objective: o.kind.as_str(),
                errors: (
                    names::SLO_VIOLATIONS.name(namespace),
                    format!("slo=\"{slo}\",objective=\"{}\"", o.kind.as_str()),
                ),
                target: o.target,
                meaning: format!(
                    "{} above {}",
                    o.kind.as_str().to_uppercase(),
                    humantime::format_duration(o.threshold)
                ),
            })
            .collect();
        let required: Vec<&str> = class.goodput.require.iter().map(|k| k.as_str()).collect();
        slis.push(Sli {
            objective: "goodput",
            errors: (requests.clone(), format!("slo=\"{slo}\",verdict=\"bad\"")),
            // Without a target the ratio is still recorded (dashboards) but
            // nothing alerts on it.
            target: class.goodput.target.unwrap_or(f64::NAN),
            meaning: if required.is_empty() {
                "failed by the upstream or the proxy".to_owned()
            } else {
                format!("bad (exceeded a threshold of: {})", required.join(", "))
            },
        });

        let scopes: &[Scope] = if class.per_tenant_alerts {
            &[Scope::Class, Scope::Tenant]
        } else {
            &[Scope::Class]
        };
        // One group per class, recordings first: rules of a group are
        // evaluated in order, so each alert reads the ratios recorded in
        // the same evaluation. (Across groups the order is not fixed, and an
        // alert could lag its recordings by one interval.)
        let mut rules = Vec::new();
        for &scope in scopes {
            let (by, extra) = (scope.by(), scope.matchers());
            let judged = format!("{requests}{{slo=\"{slo}\"{extra}}}");
            for sli in &slis {
                let (metric, matchers) = &sli.errors;
                for window in WINDOWS {
                    rules.push(Rule {
                        record: Some(scope.ratio_name(namespace, window)),
                        alert: None,
                        expr: format!(
                            "sum by ({by}) (rate({metric}{{{matchers}{extra}}}[{window}]))\n/\nsum by ({by}) (rate({judged}[{window}]))",
                        ),
                        // `slo` is also set by `sum by (slo)`; written out so
                        // each rule is distinct for `promtool check rules`.
                        labels: BTreeMap::from([
                            ("objective".to_owned(), sli.objective.to_owned()),
                            ("slo".to_owned(), slo.clone()),
                        ]),
                        annotations: BTreeMap::new(),
                    });
                }
            }
        }
        for &scope in scopes {
            for sli in slis.iter().filter(|sli| sli.target.is_finite()) {
                for severity in &SEVERITIES {
                    rules.push(alert(namespace, class, sli, severity, scope));
                }
            }
        }
        groups.push(Group {
            name: format!("slo:{slo}"),
            rules,
        });
    }
    RuleFile { groups }
}

fn alert(namespace: &str, class: &SloClass, sli: &Sli, severity: &Severity, scope: Scope) -> Rule {
    let slo = &class.name;
    let selector = format!("{{slo=\"{slo}\",objective=\"{}\"}}", sli.objective);
    // `1 - target` is written out in PromQL rather than computed here, so
    // the rule reads like the SLO it comes from (and no float noise).
    let budget = format!("(1 - {})", sli.target);
    let conditions: Vec<String> = severity
        .burns
        .iter()
        .map(|burn| {
            format!(
                "(\n  {long}{selector} > ({factor} * {budget})\nand\n  {short}{selector} > ({factor} * {budget})\n)",
                long = scope.ratio_name(namespace, burn.long),
                short = scope.ratio_name(namespace, burn.short),
                factor = burn.factor,
            )
        })
        .collect();
    let window = humantime::format_duration(class.window).to_string();
    let allowed = format!("{}", round_percent(1.0 - sli.target));
    let whose = match scope {
        Scope::Class => String::new(),
        Scope::Tenant => " for tenant {{ $labels.tenant }}".to_owned(),
    };
    let description = format!(
        "Too many requests of SLO class {slo}{}{whose} are {}: the SLO allows {allowed} % of judged requests over {window}, and the error budget is burning {}.",
        if class.description.is_empty() {
            String::new()
        } else {
            format!(" ({})", class.description)
        },
        sli.meaning,
        severity.what,
    );
    let runbook = format!(
        "1. Check which routes, models and tenants burn the budget: sum by (route, model, tenant) (rate({violations}{{slo=\"{slo}\"}}[1h])) and sum by (route, model, tenant) (rate({judged}{{slo=\"{slo}\",verdict=\"bad\"}}[1h])).\n\
         2. Compare with load: sum(rate({requests}{{slo=\"{slo}\"}}[5m])) and {in_flight}; a queue on the inference server shows as TTFT first, a saturated batch as TPOT.\n\
         3. Check failures: sum by (outcome) (rate({requests}{{slo=\"{slo}\"}}[5m])); requests failing before a threshold are not in this ratio.\n\
         4. Mitigate (shed or reroute load, scale the upstream, roll back a model or server change), then watch the 5m ratio {ratio} fall below the alert threshold.",
        violations = names::SLO_VIOLATIONS.name(namespace),
        judged = names::SLO_REQUESTS.name(namespace),
        requests = names::REQUESTS.name(namespace),
        in_flight = names::IN_FLIGHT.name(namespace),
        ratio = scope.ratio_name(namespace, "5m"),
    );
    Rule {
        record: None,
        alert: Some(scope.alert_name(severity.alert)),
        expr: conditions.join("\nor\n"),
        labels: BTreeMap::from([
            ("objective".to_owned(), sli.objective.to_owned()),
            ("severity".to_owned(), severity.severity.to_owned()),
            ("slo".to_owned(), slo.clone()),
        ]),
        annotations: BTreeMap::from([
            (
                "summary".to_owned(),
                format!(
                    "SLO {slo}{whose}: {} error budget burning {}",
                    sli.objective,
                    if severity.severity == "page" {
                        "fast"
                    } else {
                        "steadily"
                    }
                ),
            ),
            ("description".to_owned(), description),
            ("runbook".to_owned(), runbook),
        ]),
    }
}

/// Windows the fleet's latency–load curve is recorded over: the live
/// windows of `/slo` but the minute, which a few scrapes cannot cover.
pub const CAPACITY_WINDOWS: [&str; 2] = ["5m", "1h"];

/// The names of the capacity recording rules over `window`: judged
/// requests per load bucket, the share that met each target, whether the
/// bucket holds, the knee (any bound), the knee with its bound, and the
/// headroom.
pub struct CapacityNames {
    pub judged: String,
    pub met: String,
    pub holds: String,
    pub knee: String,
    pub capacity: String,
    pub headroom: String,
}

impl CapacityNames {
    pub fn new(namespace: &str, window: &str) -> Self {
        let name = |metric: &str, op: &str| format!("slo:{namespace}_{metric}:{op}{window}");
        Self {
            judged: name("slo_load_judged", "increase"),
            met: name("slo_load_met", "ratio_increase"),
            holds: name("slo_load_holds", "increase"),
            knee: name("slo_load_knee", "increase"),
            capacity: name("slo_capacity_concurrency", "increase"),
            headroom: name("slo_headroom_concurrency", "increase"),
        }
    }
}

/// Recording rules for the fleet's latency–load curve and knee of each
/// class with a target, one group per class (`capacity:<slo>`), from the
/// counters by load bucket summed over every replica (docs/metrics.md,
/// "The latency–load curve and its knee"). Per window of
/// [`CAPACITY_WINDOWS`], in evaluation order:
///
/// - `judged`: judged requests per (route, model, slo, load_le);
/// - `met{objective}`: the share of them that met each objective's
///   threshold (`goodput`: that were good);
/// - `holds`: 1 where the bucket has at least `min_judged` requests and
///   every share reaches its target, 0 where it has that many and one
///   does not, absent with fewer (the rule of `capacity::knee`);
/// - `knee`: per (route, model, slo), the upper bound of the highest
///   holding bucket with no breaking bucket below it, or 0 when the bucket
///   of load 1 breaks. PromQL cannot read a number from a label, so the
///   rule has one term per bucket, its bound written in: the term of
///   bucket `i` is its bound where it holds, `unless` a bucket below it
///   breaks, and the knee is the largest term;
/// - `capacity{bound}`: the knee, `measured` when some bucket breaks,
///   `lower` when none does;
/// - `headroom{bound}`: the knee minus the requests in flight to the route
///   and model now, summed over every replica and class.
pub fn capacity_groups(classes: &[SloClass], namespace: &str) -> Vec<Group> {
    classes
        .iter()
        .filter(|class| !crate::capacity::knee::targets(class).is_empty())
        .map(|class| Group {
            name: format!("capacity:{}", class.name),
            rules: CAPACITY_WINDOWS
                .iter()
                .flat_map(|window| capacity_rules(class, namespace, window))
                .collect(),
        })
        .collect()
}

fn capacity_rules(class: &SloClass, namespace: &str, window: &str) -> Vec<Rule> {
    use crate::capacity::knee::{self, BUCKETS, LABELS};

    let slo = &class.name;
    let names = CapacityNames::new(namespace, window);
    let by = names::LOAD_LABELS.join(", ");
    let labels = |extra: &[(&str, &str)]| {
        let mut l = BTreeMap::from([("slo".to_owned(), slo.clone())]);
        for (k, v) in extra {
            l.insert((*k).to_owned(), (*v).to_owned());
        }
        l
    };
    let record = |name: &str, expr: String, labels: BTreeMap<String, String>| Rule {
        record: Some(name.to_owned()),
        alert: None,
        expr,
        labels,
        annotations: BTreeMap::new(),
    };
    let requests = names::SLO_LOAD_REQUESTS.name(namespace);
    let violations = names::SLO_LOAD_VIOLATIONS.name(namespace);
    let judged = format!("{}{{slo=\"{slo}\"}}", names.judged);
    // A bucket without a violation (or a good request) has no such series:
    // its count is 0, not absent.
    let or_zero = |sum: String| format!("(\n  {sum}\nor\n  {judged} * 0\n)");
    let mut rules = vec![record(
        &names.judged,
        format!("sum by ({by}) (increase({requests}{{slo=\"{slo}\"}}[{window}]))"),
        labels(&[]),
    )];
    let targets = knee::targets(class);
    for t in &targets {
        let expr = match t.kind {
            Some(kind) => format!(
                "(\n  {judged}\n-\n  {}\n)\n/\n{judged}",
                or_zero(format!(
                    "sum by ({by}) (increase({violations}{{slo=\"{slo}\",objective=\"{}\"}}[{window}]))",
                    kind.as_str()
                ))
                .replace('\n', "\n  ")
            ),
            None => format!(
                "{}\n/\n{judged}",
                or_zero(format!(
                    "sum by ({by}) (increase({requests}{{slo=\"{slo}\",verdict=\"good\"}}[{window}]))"
                ))
            ),
        };
        rules.push(record(
            &names.met,
            expr,
            labels(&[("objective", t.label())]),
        ));
    }
    let missed: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "{}{{slo=\"{slo}\",objective=\"{}\"}} < bool {}",
                names.met,
                t.label(),
                t.target
            )
        })
        .collect();
    rules.push(record(
        &names.holds,
        format!(
            "(\n  max by ({by}) (\n    {}\n  )\n  == bool 0\n)\nand on ({by})\n{judged} >= {}",
            missed.join("\n  or\n    "),
            knee::min_judged(class)
        ),
        labels(&[]),
    ));
    let holds = |matcher: &str| format!("{}{{slo=\"{slo}\",{matcher}}}", names.holds);
    let keys = "route, model, slo";
    let mut terms = vec![format!("{} == 0", holds("load_le=\"1\""))];
    for i in 0..BUCKETS {
        let value = knee::upper_bound(i).unwrap_or_else(|| knee::lower_bound(i));
        let term = format!(
            "({} == 1) * {value}",
            holds(&format!("load_le=\"{}\"", LABELS[i]))
        );
        terms.push(if i == 0 {
            term
        } else {
            format!(
                "{term} unless on ({keys}) {} == 0",
                holds(&format!("load_le=~\"{}\"", LABELS[..i].join("|")))
            )
        });
    }
    rules.push(record(
        &names.knee,
        format!("max by ({keys}) (\n    {}\n)", terms.join("\n  or\n    ")),
        labels(&[]),
    ));
    let knee_of = format!("{}{{slo=\"{slo}\"}}", names.knee);
    let broken = format!("{}{{slo=\"{slo}\"}} == 0", names.holds);
    for (bound, op) in [("measured", "and"), ("lower", "unless")] {
        rules.push(record(
            &names.capacity,
            format!("{knee_of}\n{op} on ({keys})\n{broken}"),
            labels(&[("bound", bound)]),
        ));
    }
    rules.push(record(
        &names.headroom,
        format!(
            "{}{{slo=\"{slo}\"}}\n- on (route, model) group_left\nsum by (route, model) ({})",
            names.capacity,
            names::IN_FLIGHT.name(namespace)
        ),
        labels(&[]),
    ));
    rules
}

/// A share as a percentage for text, without float noise (`5`, `0.1`).
fn round_percent(share: f64) -> f64 {
    (share * 100.0 * 1e6).round() / 1e6
}

/// The rule file as YAML, with a header saying where it comes from.
pub fn to_yaml(file: &RuleFile) -> Result<String, String> {
    let body = serde_saphyr::to_string(file).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Generated by `tokenmeter rules` from the SLO classes of a tokenmeter\n# config. Regenerate it instead of editing it.\n{body}"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::capacity::knee;
    use crate::class::{Goodput, Objective, ObjectiveKind};

    fn class(goodput_target: Option<f64>) -> SloClass {
        SloClass {
            name: "chat".into(),
            description: "chat".into(),
            window: crate::class::DEFAULT_WINDOW,
            objectives: vec![Objective {
                kind: ObjectiveKind::Ttft,
                threshold: Duration::from_millis(500),
                target: 0.95,
            }],
            goodput: Goodput {
                require: vec![ObjectiveKind::Ttft],
                target: goodput_target,
            },
            per_tenant_alerts: false,
            exclude_slow_readers: false,
        }
    }

    #[test]
    fn every_sli_is_recorded_over_every_window_and_alerts_need_a_target() {
        let file = rules(&[class(None)], "llm");
        assert_eq!(file.groups.len(), 1);
        let group = &file.groups[0].rules;
        // ttft and goodput, seven windows each, recorded before any alert
        // reads them.
        let recorded = 2 * WINDOWS.len();
        assert!(group[..recorded].iter().all(|r| r.record.is_some()));
        // Only ttft has a target: page and ticket.
        let alerts = &group[recorded..];
        assert_eq!(alerts.len(), 2);
        assert!(alerts[0].expr.contains("(14.4 * (1 - 0.95))"));
        assert!(
            alerts[0]
                .expr
                .contains("slo:llm_slo_errors:ratio_rate5m{slo=\"chat\",objective=\"ttft\"}")
        );
        assert_eq!(alerts[1].labels["severity"], "ticket");
        let with_goodput = rules(&[class(Some(0.9))], "llm");
        assert_eq!(with_goodput.groups[0].rules.len(), recorded + 4);
        assert!(
            with_goodput.groups[0]
                .rules
                .iter()
                .all(|r| !r.expr.contains("tenant"))
        );
    }

    #[test]
    fn per_tenant_alerts_add_ratios_and_alerts_by_tenant() {
        let mut c = class(Some(0.9));
        c.per_tenant_alerts = true;
        let file = rules(&[c], "llm");
        let group = &file.groups[0].rules;
        let recorded = 2 * 2 * WINDOWS.len();
        assert_eq!(group.len(), recorded + 2 * 4);
        assert!(group[..recorded].iter().all(|r| r.record.is_some()));
        let by_tenant: Vec<&Rule> = group
            .iter()
            .filter(|r| r.record.as_deref() == Some("slo:llm_slo_errors_by_tenant:ratio_rate5m"))
            .collect();
        assert_eq!(by_tenant.len(), 2);
        assert_eq!(
            by_tenant[0].expr,
            "sum by (slo, tenant) (rate(llm_slo_violations_total{slo=\"chat\",objective=\"ttft\",tenant!=\"\"}[5m]))\n/\nsum by (slo, tenant) (rate(llm_slo_requests_total{slo=\"chat\",tenant!=\"\"}[5m]))"
        );
        let alerts: Vec<&str> = group.iter().filter_map(|r| r.alert.as_deref()).collect();
        assert_eq!(
            alerts,
            [
                "SloErrorBudgetBurnFast",
                "SloErrorBudgetBurnSlow",
                "SloErrorBudgetBurnFast",
                "SloErrorBudgetBurnSlow",
                "SloErrorBudgetBurnFastPerTenant",
                "SloErrorBudgetBurnSlowPerTenant",
                "SloErrorBudgetBurnFastPerTenant",
                "SloErrorBudgetBurnSlowPerTenant",
            ]
        );
        let last = group.last().unwrap();
        assert!(last.expr.contains(
            "slo:llm_slo_errors_by_tenant:ratio_rate1d{slo=\"chat\",objective=\"goodput\"}"
        ));
        assert!(last.annotations["description"].contains("for tenant {{ $labels.tenant }}"));
    }

    #[test]
    fn capacity_rules_write_out_the_knee_rule_bucket_by_bucket() {
        let mut without = class(None);
        without.name = "none".into();
        without.objectives.clear();
        let groups = capacity_groups(&[class(Some(0.9)), without], "llm");
        // A class without a target has no knee.
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].name, "capacity:chat");
        let rules = &groups[0].rules;
        let names: Vec<&str> = rules.iter().filter_map(|r| r.record.as_deref()).collect();
        // Per window: judged, ttft and goodput met, holds, knee, capacity
        // measured and lower, headroom.
        assert_eq!(names.len(), 2 * 8);
        assert_eq!(
            &names[..8],
            [
                "slo:llm_slo_load_judged:increase5m",
                "slo:llm_slo_load_met:ratio_increase5m",
                "slo:llm_slo_load_met:ratio_increase5m",
                "slo:llm_slo_load_holds:increase5m",
                "slo:llm_slo_load_knee:increase5m",
                "slo:llm_slo_capacity_concurrency:increase5m",
                "slo:llm_slo_capacity_concurrency:increase5m",
                "slo:llm_slo_headroom_concurrency:increase5m",
            ]
        );
        assert!(names[8..].iter().all(|n| n.ends_with("increase1h")));
        assert_eq!(
            rules[0].expr,
            "sum by (route, model, slo, load_le) (increase(llm_slo_load_requests_total{slo=\"chat\"}[5m]))"
        );
        assert_eq!(rules[1].labels["objective"], "ttft");
        assert!(rules[1].expr.contains(
            "sum by (route, model, slo, load_le) (increase(llm_slo_load_violations_total{slo=\"chat\",objective=\"ttft\"}[5m]))\n  or\n    slo:llm_slo_load_judged:increase5m{slo=\"chat\"} * 0"
        ));
        assert_eq!(rules[2].labels["objective"], "goodput");
        assert!(rules[2].expr.contains("verdict=\"good\""));
        let holds = &rules[3].expr;
        assert!(holds.contains(
            "slo:llm_slo_load_met:ratio_increase5m{slo=\"chat\",objective=\"ttft\"} < bool 0.95"
        ));
        assert!(holds.contains("objective=\"goodput\"} < bool 0.9"));
        // At least 20 (one miss of p95), and enough for one miss of 90 %.
        assert!(holds.ends_with("slo:llm_slo_load_judged:increase5m{slo=\"chat\"} >= 20"));
        let knee = &rules[4].expr;
        assert!(knee.starts_with(
            "max by (route, model, slo) (\n    slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=\"1\"} == 0\n  or\n    (slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=\"1\"} == 1) * 1\n  or"
        ));
        assert!(knee.contains(
            "(slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=\"6\"} == 1) * 6 unless on (route, model, slo) slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=~\"1|2|3|4\"} == 0"
        ));
        // The overflow bucket stands for its lowest load.
        assert!(knee.contains("load_le=\"+Inf\"} == 1) * 2049 unless"));
        assert_eq!(knee.matches(" unless ").count(), knee::BUCKETS - 1);
        assert_eq!(
            rules[5].expr,
            "slo:llm_slo_load_knee:increase5m{slo=\"chat\"}\nand on (route, model, slo)\nslo:llm_slo_load_holds:increase5m{slo=\"chat\"} == 0"
        );
        assert_eq!(rules[5].labels["bound"], "measured");
        assert_eq!(rules[6].labels["bound"], "lower");
        assert!(rules[6].expr.contains("\nunless on (route, model, slo)\n"));
        assert_eq!(
            rules[7].expr,
            "slo:llm_slo_capacity_concurrency:increase5m{slo=\"chat\"}\n- on (route, model) group_left\nsum by (route, model) (llm_requests_in_flight)"
        );
    }

    /// Two replicas in front of one engine, each counting requests by the
    /// engine's load: summed, their counters give the fleet's knee, which
    /// neither replica's own counts would (each has too few at load 4).
    /// `promtool test rules` checks the generated rules on those series.
    #[test]
    fn capacity_rules_give_the_fleets_knee_needs_tool_promtool() {
        let dir = std::env::temp_dir().join(format!("slo-capacity-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // And a class of every objective and a goodput target, for
        // `promtool check rules`.
        let mut every = class(Some(0.9));
        every.name = "every".into();
        for (kind, target) in [(ObjectiveKind::Tpot, 0.99), (ObjectiveKind::E2el, 0.999)] {
            every.objectives.push(Objective {
                kind,
                threshold: Duration::from_secs(1),
                target,
            });
        }
        let classes = [class(None), every];
        let mut file = rules(&classes, "llm");
        file.groups.extend(capacity_groups(&classes, "llm"));
        assert_eq!(file.groups.len(), 4);
        std::fs::write(dir.join("rules.yml"), to_yaml(&file).unwrap()).unwrap();
        std::fs::write(dir.join("capacity.test.yaml"), CAPACITY_TEST).unwrap();
        for args in [
            &["check", "rules", "rules.yml"][..],
            &["test", "rules", "capacity.test.yaml"][..],
        ] {
            let out = std::process::Command::new("promtool")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("promtool not found: install Debian's `prometheus` package (see README)");
            assert!(
                out.status.success(),
                "promtool {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Per minute and replica (a, b), by load bucket: model `m` holds TTFT
    /// p95 up to 4 and breaks from 5 (knee 4; at 4 each replica has 15
    /// requests in 5 minutes, too few alone, 30 together); `m2` saw loads
    /// 1 and 2 only (a lower bound, 2); `m3` breaks at 1 (0); `m4` has too
    /// few requests (nothing). In flight now: 3 to `m`, 1 to `m2` and `m3`.
    const CAPACITY_TEST: &str = r#"rule_files:
  - rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="1",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="1",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="2",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="3",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="4",verdict="good"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="4",verdict="good"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="6",verdict="good"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="6",verdict="bad"}', values: '0+1x10'}
      - {series: 'llm_slo_load_violations_total{instance="a",route="r",model="m",slo="chat",load_le="6",objective="ttft"}', values: '0+1x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="8",verdict="good"}', values: '0+2x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="8",verdict="bad"}', values: '0+2x10'}
      - {series: 'llm_slo_load_violations_total{instance="b",route="r",model="m",slo="chat",load_le="8",objective="ttft"}', values: '0+2x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m2",slo="chat",load_le="1",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m2",slo="chat",load_le="2",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m3",slo="chat",load_le="1",verdict="good"}', values: '0+2x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m3",slo="chat",load_le="1",verdict="bad"}', values: '0+3x10'}
      - {series: 'llm_slo_load_violations_total{instance="a",route="r",model="m3",slo="chat",load_le="1",objective="ttft"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m4",slo="chat",load_le="1",verdict="good"}', values: '0+1x10'}
      - {series: 'llm_requests_in_flight{instance="a",route="r",model="m",slo="chat"}', values: '2x10'}
      - {series: 'llm_requests_in_flight{instance="b",route="r",model="m",slo="chat"}', values: '1x10'}
      - {series: 'llm_requests_in_flight{instance="a",route="r",model="m2",slo="chat"}', values: '1x10'}
      - {series: 'llm_requests_in_flight{instance="b",route="r",model="m3",slo="chat"}', values: '1x10'}
    promql_expr_test:
      - expr: slo:llm_slo_load_holds:increase5m{model="m"}
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="1"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="2"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="3"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="4"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="6"}', value: 0}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="8"}', value: 0}
      - expr: slo:llm_slo_capacity_concurrency:increase5m
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_capacity_concurrency:increase5m{route="r",model="m",slo="chat",bound="measured"}', value: 4}
          - {labels: 'slo:llm_slo_capacity_concurrency:increase5m{route="r",model="m2",slo="chat",bound="lower"}', value: 2}
          - {labels: 'slo:llm_slo_capacity_concurrency:increase5m{route="r",model="m3",slo="chat",bound="measured"}', value: 0}
      - expr: slo:llm_slo_headroom_concurrency:increase5m
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_headroom_concurrency:increase5m{route="r",model="m",slo="chat",bound="measured"}', value: 1}
          - {labels: 'slo:llm_slo_headroom_concurrency:increase5m{route="r",model="m2",slo="chat",bound="lower"}', value: 1}
          - {labels: 'slo:llm_slo_headroom_concurrency:increase5m{route="r",model="m3",slo="chat",bound="measured"}', value: -1}
      - expr: slo:llm_slo_capacity_concurrency:increase1h{model="m"}
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_capacity_concurrency:increase1h{route="r",model="m",slo="chat",bound="measured"}', value: 4}
"#;

    #[test]
    fn percent_text_has_no_float_noise() {
        assert_eq!(round_percent(1.0 - 0.95).to_string(), "5");
        assert_eq!(round_percent(1.0 - 0.999).to_string(), "0.1");
    }
}
