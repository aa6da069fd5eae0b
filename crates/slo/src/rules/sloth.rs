//! The classes' objectives as a Sloth `prometheus/v1` spec: the objectives
//! of [`objects`](super::objects) as `slos`, each an events SLI whose
//! queries Sloth fills in with each of its windows (`{{.window}}`), with
//! a page and a ticket alert labelled as the Prometheus rules' are.
//!
//! A latency objective's errors are the observations above its threshold:
//! the count less the threshold's bucket (a bound of the classic
//! histogram), or with native histograms the count times the share above
//! it (`histogram_fraction`). A class's errors are its requests the
//! upstream or the proxy failed. The queries sum by `slo`, as the
//! Prometheus rules do.
//!
//! Sloth's compliance period is a flag of `sloth generate`
//! (`--default-slo-period`), not a key of the spec, so the classes are
//! written one spec per window, each after a comment naming its period.

use std::collections::BTreeMap;

use serde::Serialize;

use super::histograms::{Histograms, bound_label, prom_duration};
use super::objects::{self, Indicator};
use crate::class::SloClass;

/// Sloth's template of a query's window.
const WINDOW: &str = "{{.window}}";

/// A Sloth `prometheus/v1` spec.
#[derive(Debug, Serialize)]
pub struct Spec {
    pub version: &'static str,
    pub service: &'static str,
    pub slos: Vec<Slo>,
}

#[derive(Debug, Serialize)]
pub struct Slo {
    pub name: String,
    /// A percentage (`95`, `99.9`).
    pub objective: f64,
    pub description: String,
    /// On every rule Sloth writes for it: `slo` and `objective`.
    pub labels: BTreeMap<String, String>,
    pub sli: Sli,
    pub alerting: Alerting,
}

#[derive(Debug, Serialize)]
pub struct Sli {
    pub events: Events,
}

#[derive(Debug, Serialize)]
pub struct Events {
    pub error_query: String,
    pub total_query: String,
}

#[derive(Debug, Serialize)]
pub struct Alerting {
    pub name: String,
    pub annotations: BTreeMap<String, String>,
    pub page_alert: Alert,
    pub ticket_alert: Alert,
}

#[derive(Debug, Serialize)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
}

/// The specs for `classes`, with metrics named under `namespace`: one per
/// window of the classes, shortest first, with that window.
pub fn sloth(
    classes: &[SloClass],
    namespace: &str,
    histograms: Histograms,
) -> Vec<(std::time::Duration, Spec)> {
    let mut specs: BTreeMap<std::time::Duration, Vec<Slo>> = BTreeMap::new();
    for o in objects::objectives(classes) {
        let slo = &o.class.name;
        let class = format!("slo=\"{slo}\"");
        let (error_query, total_query) = match o.indicator {
            Indicator::Latency { family, threshold } => {
                let metric = family.name(namespace);
                let total = histograms.count_rate(&metric, &class, "slo", WINDOW);
                let errors = match histograms {
                    Histograms::Classic => format!(
                        "{total}\n-\nsum by (slo) (rate({metric}_bucket{{{class},le=\"{}\"}}[{WINDOW}]))",
                        bound_label(threshold)
                    ),
                    Histograms::Native => format!(
                        "{total}\n*\n(1 - {})",
                        histograms.fraction_within(threshold, &metric, &class, "slo", WINDOW)
                    ),
                };
                (errors, total)
            }
            Indicator::Errors => {
                let requests = names::REQUESTS.name(namespace);
                (
                    format!(
                        "sum by (slo) (rate({requests}{{{class},outcome=~\"{}\"}}[{WINDOW}]))",
                        objects::failed_outcomes()
                    ),
                    format!("sum by (slo) (rate({requests}{{{class}}}[{WINDOW}]))"),
                )
            }
        };
        let severity = |s: &str| Alert {
            labels: BTreeMap::from([("severity".to_owned(), s.to_owned())]),
        };
        specs.entry(o.class.window).or_default().push(Slo {
            name: o.name,
            objective: super::burn::round_percent(o.target),
            description: o.description.clone(),
            labels: BTreeMap::from([
                ("objective".to_owned(), o.objective.to_owned()),
                ("slo".to_owned(), slo.clone()),
            ]),
            sli: Sli {
                events: Events {
                    error_query,
                    total_query,
                },
            },
            alerting: Alerting {
                name: "SloErrorBudgetBurn".to_owned(),
                annotations: BTreeMap::from([
                    (
                        "summary".to_owned(),
                        format!("SLO {slo}: {} error budget burning", o.objective),
                    ),
                    ("description".to_owned(), o.description),
                ]),
                page_alert: severity("page"),
                ticket_alert: severity("ticket"),
            },
        });
    }
    specs
        .into_iter()
        .map(|(window, slos)| {
            (
                window,
                Spec {
                    version: "prometheus/v1",
                    service: "tokenmeter",
                    slos,
                },
            )
        })
        .collect()
}

/// The specs as one YAML stream, each after a comment with the
/// `sloth generate` flag of its window.
pub fn to_yaml(specs: &[(std::time::Duration, Spec)]) -> Result<String, String> {
    let mut out = String::from(
        "# Generated by `tokenmeter rules --format sloth` from the SLO classes of a\n# tokenmeter config. Regenerate it instead of editing it.\n",
    );
    for (window, spec) in specs {
        let body = serde_saphyr::to_string(spec).map_err(|e| e.to_string())?;
        out.push_str(&format!(
            "---\n# Classes with a {w} window: sloth generate --default-slo-period={w}\n{body}",
            w = prom_duration(*window)
        ));
    }
    Ok(out)
}
