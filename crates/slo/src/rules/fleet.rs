//! The capacity rules of each class with a target: the fleet's
//! latency–load curve, summed over every replica from the counters by
//! load bucket, and its knee and headroom, by the same rule as
//! `capacity::knee` applies to one replica's windows.

use std::collections::BTreeMap;

use super::{Group, Rule};
use crate::class::SloClass;
use names;

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
        .filter(|class| !crate::capacity::knee::promises(class).is_empty())
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
    let targets = knee::promises(class);
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
