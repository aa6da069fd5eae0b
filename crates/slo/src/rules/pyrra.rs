//! The classes' objectives as Pyrra `ServiceLevelObjective`s
//! (`pyrra.dev/v1alpha1`), one per objective of [`objects`](super::objects):
//! a latency objective as a `latency` indicator on the classic buckets (the
//! bucket of its threshold, a bound of the histogram, over its count) or,
//! with native histograms, a `latencyNative` indicator on the histogram
//! itself; a class's errors as a `ratio` indicator on the outcome
//! counter. Pyrra writes the burn-rate rules from these.
//!
//! No `grouping`: each indicator's selector names its class, and the
//! objectives hold over every route, model, tenant and replica of it, as
//! the Prometheus rules' `sum by (slo)` does. (Pyrra labels its own rules
//! `slo` with the object's name, so grouping by the class's `slo` label
//! would be overwritten.)

use std::collections::BTreeMap;

use serde::Serialize;

use super::histograms::{Histograms, bound_label, prom_duration};
use super::objects::{self, Indicator as Judged};
use crate::class::SloClass;

/// A Pyrra `ServiceLevelObjective`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceLevelObjective {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: Metadata,
    pub spec: Spec,
}

/// The object's name and labels (a Kubernetes object's metadata; its
/// namespace is the one it is applied in).
#[derive(Debug, Serialize)]
pub struct Metadata {
    pub name: String,
    /// `pyrra.dev/`-prefixed labels are copied, without the prefix, onto
    /// the rules Pyrra writes: `class` and `objective`.
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct Spec {
    pub description: String,
    /// A percentage, as a string (`"95"`, `"99.9"`).
    pub target: String,
    /// A Prometheus duration (`28d`).
    pub window: String,
    pub indicator: Indicator,
    pub alerting: Alerting,
}

/// One of Pyrra's indicators; exactly one is set.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Indicator {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<Ratio>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_native: Option<LatencyNative>,
}

/// Errors against all events, each a selector of a counter.
#[derive(Debug, Serialize)]
pub struct Ratio {
    pub errors: Query,
    pub total: Query,
}

/// A classic histogram's bucket of the threshold against its count.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub success: Query,
    pub total: Query,
}

/// A native histogram and the latency its observations should be within.
#[derive(Debug, Serialize)]
pub struct LatencyNative {
    /// A Prometheus duration (`500ms`).
    pub latency: String,
    pub total: Query,
}

/// A series selector (Pyrra takes a selector, not an expression).
#[derive(Debug, Serialize)]
pub struct Query {
    pub metric: String,
}

#[derive(Debug, Serialize)]
pub struct Alerting {
    /// The name of the burn-rate alerts Pyrra writes.
    pub name: String,
}

/// The objects for `classes`, with metrics named under `namespace`.
pub fn pyrra(
    classes: &[SloClass],
    namespace: &str,
    histograms: Histograms,
) -> Vec<ServiceLevelObjective> {
    objects::objectives(classes)
        .into_iter()
        .map(|o| {
            let slo = &o.class.name;
            let indicator = match o.indicator {
                Judged::Latency { family, threshold } => {
                    let metric = family.name(namespace);
                    let class = format!("slo=\"{slo}\"");
                    match histograms {
                        Histograms::Classic => Indicator {
                            latency: Some(Latency {
                                success: query(format!(
                                    "{metric}_bucket{{{class},le=\"{}\"}}",
                                    bound_label(threshold)
                                )),
                                total: query(format!("{metric}_count{{{class}}}")),
                            }),
                            ..Indicator::default()
                        },
                        Histograms::Native => Indicator {
                            latency_native: Some(LatencyNative {
                                latency: prom_duration(threshold),
                                total: query(format!("{metric}{{{class}}}")),
                            }),
                            ..Indicator::default()
                        },
                    }
                }
                Judged::Errors => {
                    let requests = names::REQUESTS.name(namespace);
                    Indicator {
                        ratio: Some(Ratio {
                            errors: query(format!(
                                "{requests}{{slo=\"{slo}\",outcome=~\"{}\"}}",
                                objects::failed_outcomes()
                            )),
                            total: query(format!("{requests}{{slo=\"{slo}\"}}")),
                        }),
                        ..Indicator::default()
                    }
                }
            };
            let class_label = o
                .name
                .strip_suffix(&format!("-{}", o.objective))
                .unwrap_or(&o.name)
                .to_owned();
            ServiceLevelObjective {
                api_version: "pyrra.dev/v1alpha1",
                kind: "ServiceLevelObjective",
                metadata: Metadata {
                    name: o.name,
                    labels: BTreeMap::from([
                        ("pyrra.dev/class".to_owned(), class_label),
                        ("pyrra.dev/objective".to_owned(), o.objective.to_owned()),
                    ]),
                },
                spec: Spec {
                    description: o.description,
                    target: super::burn::round_percent(o.target).to_string(),
                    window: prom_duration(o.class.window),
                    indicator,
                    alerting: Alerting {
                        name: "SloErrorBudgetBurn".to_owned(),
                    },
                },
            }
        })
        .collect()
}

fn query(metric: String) -> Query {
    Query { metric }
}

/// The objects as one YAML stream, a document each, with a header saying
/// where they come from.
pub fn to_yaml(objects: &[ServiceLevelObjective]) -> Result<String, String> {
    let body = serde_saphyr::to_string_multiple(objects).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Generated by `tokenmeter rules --format pyrra` from the SLO classes of a\n# tokenmeter config. Regenerate it instead of editing it.\n{body}"
    ))
}
