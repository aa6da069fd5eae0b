//! The latency rules that native histograms make possible: per class
//! objective, the share of its histogram's observations within the
//! threshold (`histogram_fraction`, so a threshold need not be a bucket
//! edge) and the latency at the target's percentile (`histogram_quantile`
//! at the histogram's own resolution), summed over every replica by class.
//!
//! Written only with native histograms: classic buckets give a percentile
//! only to the resolution of their bounds, and the share within a
//! threshold is what the error ratios of `burn.rs` already record, exactly,
//! from the verdict counters (which both kinds of histogram leave as they
//! are).

use std::collections::BTreeMap;

use super::histograms::Histograms;
use super::objects;
use super::{Group, Rule};
use crate::class::SloClass;

/// Windows the latency rules are recorded over.
pub const LATENCY_WINDOWS: [&str; 2] = ["5m", "1h"];

/// The names of the latency recording rules over `window`: the share
/// within each threshold, and the latency at each target's percentile.
pub fn latency_names(namespace: &str, window: &str) -> (String, String) {
    (
        format!("slo:{namespace}_slo_latency_within:ratio_rate{window}"),
        format!("slo:{namespace}_slo_latency_seconds:quantile_rate{window}"),
    )
}

/// One group `latency:<class>` per class with a latency objective: per
/// window of [`LATENCY_WINDOWS`] and objective, `within{slo, objective}`
/// and `quantile{slo, objective, quantile}` (the target, `0.95`) read
/// from the native histograms.
pub fn native_latency_groups(classes: &[SloClass], namespace: &str) -> Vec<Group> {
    let native = Histograms::Native;
    classes
        .iter()
        .filter(|class| !class.objectives.is_empty())
        .map(|class| {
            let slo = &class.name;
            let matchers = format!("slo=\"{slo}\"");
            let mut rules = Vec::new();
            for window in LATENCY_WINDOWS {
                let (within, quantile) = latency_names(namespace, window);
                for o in &class.objectives {
                    let metric = objects::histogram(o.kind).name(namespace);
                    let labels = |extra: Option<String>| {
                        let mut l = BTreeMap::from([
                            ("objective".to_owned(), o.kind.as_str().to_owned()),
                            ("slo".to_owned(), slo.clone()),
                        ]);
                        if let Some(q) = extra {
                            l.insert("quantile".to_owned(), q);
                        }
                        l
                    };
                    rules.push(Rule {
                        record: Some(within.clone()),
                        alert: None,
                        expr: native.fraction_within(
                            o.threshold,
                            &metric,
                            &matchers,
                            "slo",
                            window,
                        ),
                        labels: labels(None),
                        annotations: BTreeMap::new(),
                    });
                    rules.push(Rule {
                        record: Some(quantile.clone()),
                        alert: None,
                        expr: native.quantile(
                            &o.target.to_string(),
                            &metric,
                            &matchers,
                            "slo",
                            window,
                        ),
                        labels: labels(Some(o.target.to_string())),
                        annotations: BTreeMap::new(),
                    });
                }
            }
            Group {
                name: format!("latency:{slo}"),
                rules,
            }
        })
        .collect()
}
