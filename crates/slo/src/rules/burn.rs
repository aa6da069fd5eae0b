//! The SLO rules of each class, one group per class: the error ratio of
//! each objective and of goodput recorded over every window of
//! [`WINDOWS`], then the multi-window, multi-burn-rate alerts that read
//! them (a page and a ticket per objective with a target), and the same
//! per tenant for a class with `per_tenant_alerts`.

use std::collections::BTreeMap;

use super::{Group, Rule, RuleFile};
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

/// A share as a percentage for text, without float noise (`5`, `0.1`).
pub(super) fn round_percent(share: f64) -> f64 {
    (share * 100.0 * 1e6).round() / 1e6
}
