//! How an SLO file's class is read: into `slo::SloClass` itself, the one
//! type of a class (the judge, the live windows and `/config` use it), by
//! serde's remote derive, each field naming its kind.
//!
//! Like every typed key, a bad value is recorded with where it is written
//! and reading goes on (`located.rs`), so every problem of a file is
//! reported at once; a problem under a key that is missing (an objective's
//! `threshold` or `target`) is reported at that key. What spans keys (a
//! required name, `goodput.require` naming objectives of the class, at
//! least one objective or a goodput target) is checked once the file is
//! read, where its keys are located (`load/classes.rs`).
//!
//! The `///` comments on the fields are the user documentation of each
//! key.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use slo::{DEFAULT_WINDOW, Goodput, Objective, ObjectiveKind, SloClass};

use super::kind;
use super::located::{Entries, Item, Pos, Spanned, checked_items, checked_or_empty, pos};
use super::values::{is_label_value, parse_duration};

/// `classes[i]`: one SLO class, read into [`SloClass`].
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub(crate) struct Class(#[serde(with = "SloClassKeys")] pub SloClass);

/// The keys of a class and the kind of each: the fields are
/// [`SloClass`]'s, which the compiler holds them to.
#[derive(Deserialize)]
#[serde(remote = "SloClass")]
pub(crate) struct SloClassKeys {
    /// Class name, the `slo` label value. Required; matches
    /// `[a-zA-Z0-9_.:-]+`; unique across all SLO files.
    #[serde(default, deserialize_with = "name")]
    name: String,
    /// What the class is for, shown in alert annotations. Default: empty.
    #[serde(default, deserialize_with = "description")]
    description: String,
    /// Compliance window of the targets (error budget period). A duration,
    /// default `28d`.
    #[serde(default = "default_window", deserialize_with = "window")]
    window: Duration,
    /// Per-request thresholds and their targets, by metric (`ttft`, `tpot`,
    /// `e2el`). Each is either `{pNN: duration}` ("pNN below the duration",
    /// target NN/100, p50 to p99.99) or `{threshold: duration, target:
    /// ratio}`; `ttft: {p95: 500ms}` and `ttft: {threshold: 500ms, target:
    /// 0.95}` mean the same.
    #[serde(default, deserialize_with = "objectives")]
    objectives: Vec<Objective>,
    /// Which thresholds a request must all meet to be good, and the target
    /// share of good requests.
    #[serde(default = "no_goodput", deserialize_with = "goodput")]
    goodput: Goodput,
    /// Also record the class's error ratios per tenant and alert on each
    /// tenant's burn rate (`tokenmeter rules`), for routes that attribute
    /// requests to tenants. A boolean, default `false`.
    #[serde(default, deserialize_with = "kind::flag")]
    per_tenant_alerts: bool,
    /// Leave slow readers' requests (see `metrics.slow_reader_share`) out
    /// of the class's judging: they are neither good nor bad. A boolean,
    /// default `false`.
    #[serde(default, deserialize_with = "kind::flag")]
    exclude_slow_readers: bool,
}

/// `classes[i].objectives`: each objective as written.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ObjectivesKeys {
    /// Time to first token (streamed responses).
    ttft: Option<Spanned<Entries>>,
    /// Time per output token after the first (streamed responses).
    tpot: Option<Spanned<Entries>>,
    /// End-to-end request latency.
    e2el: Option<Spanned<Entries>>,
}

/// `classes[i].goodput`, read into [`Goodput`]. A `require` left out is
/// empty here: the class's objectives are filled in once they are known.
#[derive(Deserialize)]
#[serde(remote = "Goodput")]
pub(crate) struct GoodputKeys {
    /// The objectives a request must all meet to be good. Default: every
    /// objective of the class.
    #[serde(default, deserialize_with = "require")]
    require: Vec<ObjectiveKind>,
    /// Target share of good requests among judged ones, a ratio in (0, 1)
    /// (`0.9`). Default: none (goodput is counted but has no alerts).
    /// Required for a class without objectives.
    #[serde(default, deserialize_with = "target")]
    target: Option<f64>,
}

/// [`GoodputKeys`] as a type of its own, for an optional section.
#[derive(Deserialize)]
#[serde(transparent)]
struct GoodputSection(#[serde(with = "GoodputKeys")] Goodput);

fn default_window() -> Duration {
    DEFAULT_WINDOW
}

fn no_goodput() -> Goodput {
    Goodput {
        require: Vec::new(),
        target: None,
    }
}

/// The class name; an empty value is as if left out (the name is
/// required, which is checked once the file is read).
fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_or_empty(d, Some(String::new()), String::new(), |text| {
        if text == slo::declared::DECLARED {
            Err(format!(
                "the SLO class name `{text}` is taken: it is the label of requests judged against the objectives their clients declare"
            ))
        } else if is_label_value(text) {
            Ok(text.to_owned())
        } else {
            Err(format!(
                "invalid SLO class name `{text}`: must match [a-zA-Z0-9_.:-]+"
            ))
        }
    })
}

fn description<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(kind::text(d)?.unwrap_or_default().trim().to_owned())
}

fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    Ok(kind::optional_duration(d)?.unwrap_or(DEFAULT_WINDOW))
}

fn goodput<'de, D: Deserializer<'de>>(d: D) -> Result<Goodput, D::Error> {
    Ok(Option::<GoodputSection>::deserialize(d)?.map_or_else(no_goodput, |g| g.0))
}

fn target<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked_or_empty(d, Some(None), None, |text| parse_ratio(text).map(Some))
}

/// `goodput.require`: known objectives, each once, not empty; whether each
/// is an objective of the class is checked once the file is read.
fn require<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ObjectiveKind>, D::Error> {
    checked_items(d, Some(Vec::new()), Vec::new(), |at, items: &[Item<'_>]| {
        if items.is_empty() {
            return Err(vec![(
                at,
                "must not be empty (leave `require` out to require every objective)".to_owned(),
            )]);
        }
        let mut out: Vec<ObjectiveKind> = Vec::new();
        let mut problems = Vec::new();
        for item in items {
            let text = item.text.trim();
            match objective_kind(text) {
                None => problems.push((
                    item.pos,
                    format!("unknown objective `{text}`: expected ttft, tpot or e2el"),
                )),
                Some(kind) if out.contains(&kind) => {
                    problems.push((item.pos, format!("`{text}` is listed twice")));
                }
                Some(kind) => out.push(kind),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        out.sort();
        Ok(out)
    })
}

/// The objective kind named `text` (`ttft`, `tpot`, `e2el`).
pub(crate) fn objective_kind(text: &str) -> Option<ObjectiveKind> {
    ObjectiveKind::ALL.into_iter().find(|k| k.as_str() == text)
}

/// The objectives written, in the order `ttft`, `tpot`, `e2el`; a bad one
/// is recorded and left out.
fn objectives<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Objective>, D::Error> {
    let written = Option::<ObjectivesKeys>::deserialize(d)?.unwrap_or_default();
    let mut out = Vec::new();
    for (kind, entries) in [
        (ObjectiveKind::Ttft, &written.ttft),
        (ObjectiveKind::Tpot, &written.tpot),
        (ObjectiveKind::E2el, &written.e2el),
    ] {
        let Some(entries) = entries else {
            continue;
        };
        match objective(kind, entries) {
            Ok(objective) => out.push(objective),
            Err(problems) => {
                for (at, below, message) in problems {
                    if !super::located::record_below(at, below, message.clone()) {
                        return Err(D::Error::custom(message));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// A problem of an objective: where, the missing key it is about (if
/// any), and what.
type ObjectiveProblem = (Option<Pos>, Option<&'static str>, String);

/// `{pNN: duration}` or `{threshold: duration, target: ratio}`.
fn objective(
    kind: ObjectiveKind,
    entries: &Spanned<Entries>,
) -> Result<Objective, Vec<ObjectiveProblem>> {
    const FORMS: &str = "expected {pNN: duration}, such as {p95: 500ms}, or {threshold: duration, target: ratio}, such as {threshold: 500ms, target: 0.95}";
    let at = pos(entries);
    if entries.value.0.is_empty() {
        return Err(vec![(at, None, FORMS.to_owned())]);
    }
    let mut problems: Vec<ObjectiveProblem> = Vec::new();
    let mut percentile: Option<(Option<f64>, Option<Duration>)> = None;
    let mut threshold: Option<Option<Duration>> = None;
    let mut target: Option<Option<f64>> = None;
    for (k, v) in &entries.value.0 {
        let name = k.trim();
        match name {
            "threshold" => threshold = Some(parsed(&mut problems, v, parse_duration)),
            "target" => target = Some(parsed(&mut problems, v, parse_ratio)),
            _ => match parse_percentile(name) {
                None => problems.push((
                    pos(v),
                    None,
                    format!(
                        "unknown key `{name}`; expected a percentile (p50 to p99.99), or threshold and target"
                    ),
                )),
                Some(_) if percentile.is_some() => problems.push((
                    pos(v),
                    None,
                    "only one percentile per objective (write another class for another target)"
                        .to_owned(),
                )),
                Some(Err(message)) => {
                    problems.push((pos(v), None, message));
                    percentile = Some((None, None));
                }
                Some(Ok(ratio)) => {
                    let bound = parsed(&mut problems, v, parse_duration);
                    percentile = Some((Some(ratio), bound));
                }
            },
        }
    }
    if percentile.is_some() && (threshold.is_some() || target.is_some()) {
        problems.push((
            at,
            None,
            "give either a percentile ({p95: 500ms}) or threshold and target, not both".to_owned(),
        ));
    } else if percentile.is_none() {
        if threshold.is_none() {
            problems.push((
                at,
                Some("threshold"),
                "required key is missing (the per-request bound, such as 500ms)".to_owned(),
            ));
        }
        if target.is_none() {
            problems.push((
                at,
                Some("target"),
                "required key is missing (the share of requests that must meet the threshold, such as 0.95)".to_owned(),
            ));
        }
    }
    let found = match percentile {
        Some((ratio, bound)) => bound.zip(ratio),
        None => threshold.flatten().zip(target.flatten()),
    };
    match found {
        Some((threshold, target)) if problems.is_empty() => Ok(Objective {
            kind,
            threshold,
            target,
        }),
        _ if problems.is_empty() => Err(vec![(at, None, FORMS.to_owned())]),
        _ => Err(problems),
    }
}

/// `value` parsed, or `None` with its problem kept.
fn parsed<T>(
    problems: &mut Vec<ObjectiveProblem>,
    value: &Spanned<String>,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<T> {
    parse(&value.value)
        .map_err(|message| problems.push((pos(value), None, message)))
        .ok()
}

/// A target share of requests: a number strictly between 0 and 1.
pub(super) fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio < 1.0 => Ok(ratio),
        _ => Err(format!(
            "invalid ratio `{text}`: expected a number strictly between 0 and 1, such as 0.95"
        )),
    }
}

/// `p95` → 0.95, `p99.9` → 0.999 (read as a decimal, so the target is the
/// nearest float to what was written). `None` when `name` is not of the
/// form `p` followed by a number.
fn parse_percentile(name: &str) -> Option<Result<f64, String>> {
    let number = name.strip_prefix('p')?;
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    if !(50.0..100.0).contains(&value) {
        return Some(Err(format!(
            "percentile `{name}` out of range: expected p50 to p99.99"
        )));
    }
    Some(
        format!("{number}e-2")
            .parse::<f64>()
            .map_err(|_| format!("invalid percentile `{name}`")),
    )
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        assert_eq!(parse_percentile("p95"), Some(Ok(0.95)));
        assert_eq!(parse_percentile("p99.9"), Some(Ok(0.999)));
        assert_eq!(parse_percentile("p50"), Some(Ok(0.5)));
        assert!(matches!(parse_percentile("p100"), Some(Err(_))));
        assert!(matches!(parse_percentile("p10"), Some(Err(_))));
        assert_eq!(parse_percentile("threshold"), None);
        assert_eq!(parse_percentile("p"), None);
        assert_eq!(parse_percentile("pX"), None);
    }

    #[test]
    fn ratios() {
        assert_eq!(parse_ratio("0.95"), Ok(0.95));
        assert_eq!(parse_ratio(" 0.5 "), Ok(0.5));
        for bad in ["0", "1", "1.5", "-0.1", "95%", "", "nan", "x"] {
            assert!(parse_ratio(bad).is_err(), "{bad}");
        }
    }
}
