//! Stage two for SLO files: `slo_files` resolved (paths and globs, relative
//! to the main config's directory), each file read with [`raw::read_slo`] and
//! checked into [`SloClass`]es.
//!
//! Each SLO file is checked by its own [`Checker`], so its errors carry its
//! own file name and lines; they are merged into the main checker's list so
//! that `tokenmeter check` still reports every problem of every file at once.
//! Class names are unique across all files.
//!
//! Like [`super::load`], this module must not read YAML itself or hand raw
//! types to anyone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::error::ConfigError;
use super::super::raw::{self, Entries, Pos, RawSloClass, Spanned};
use super::super::values::{is_label_value, parse_duration};
use super::checker::Checker;
use slo::{DEFAULT_WINDOW, Goodput, Objective, ObjectiveKind, SloClass};

/// One SLO file to read, and where the main config names it.
struct SloFile {
    path: PathBuf,
    pos: Option<Pos>,
    key: String,
}

impl Checker<'_> {
    /// Resolves `slo_files` and checks every class of every file.
    pub(crate) fn slo_classes(&mut self, list: &raw::List, base: &Path) -> Vec<SloClass> {
        let mut files: Vec<SloFile> = Vec::new();
        let add = |files: &mut Vec<SloFile>, file: SloFile| {
            // A file matched by two entries (a path and a glob) is read once.
            if !files.iter().any(|s| s.path == file.path) {
                files.push(file);
            }
        };
        for (i, item) in list.value.iter().enumerate() {
            let key = format!("slo_files[{i}]");
            let pos = raw::pos(item);
            let text = item.value.trim();
            if text.is_empty() {
                self.at(pos, key, "must not be empty");
                continue;
            }
            let joined = base.join(text);
            if !text.contains(['*', '?', '[']) {
                add(
                    &mut files,
                    SloFile {
                        path: joined,
                        pos,
                        key,
                    },
                );
                continue;
            }
            self.sources.patterns.push(joined.clone());
            let Some(pattern) = joined.to_str() else {
                self.at(pos, key, "the pattern is not valid UTF-8");
                continue;
            };
            match glob::glob(pattern) {
                Err(e) => self.at(
                    pos,
                    key,
                    format!("invalid glob pattern `{text}`: {}", e.msg),
                ),
                Ok(paths) => {
                    let mut found: Vec<PathBuf> = paths
                        .filter_map(Result::ok)
                        .filter(|path| path.is_file())
                        .collect();
                    found.sort();
                    if found.is_empty() {
                        self.at(
                            pos,
                            key.clone(),
                            format!("pattern `{text}` matches no file (looked for {pattern})"),
                        );
                    }
                    for path in found {
                        add(
                            &mut files,
                            SloFile {
                                path,
                                pos,
                                key: key.clone(),
                            },
                        );
                    }
                }
            }
        }

        let mut classes: Vec<SloClass> = Vec::new();
        // Where each class name was first defined, for duplicates.
        let mut defined: HashMap<String, (String, Option<u64>)> = HashMap::new();
        self.sources
            .files
            .extend(files.iter().map(|s| s.path.clone()));
        for slo_file in files {
            let file = slo_file.path.display().to_string();
            let text = match std::fs::read_to_string(&slo_file.path) {
                Ok(text) => text,
                Err(e) => {
                    self.at(
                        slo_file.pos,
                        slo_file.key,
                        format!("cannot read `{file}`: {e}"),
                    );
                    continue;
                }
            };
            let mut checker = Checker::new(&file);
            let found = checker.slo_file(&text);
            self.errors.append(&mut checker.errors);
            for (class, name_pos, index) in found {
                if let Some((first_file, first_line)) = defined.get(&class.name) {
                    let at = first_line.map(|l| format!(":{l}")).unwrap_or_default();
                    self.errors.push(ConfigError {
                        file: file.clone(),
                        line: name_pos.map(|p| p.line),
                        column: name_pos.map(|p| p.column),
                        key: format!("classes[{index}].name"),
                        message: format!(
                            "duplicate SLO class `{}` (also defined at {first_file}{at})",
                            class.name
                        ),
                    });
                    continue;
                }
                defined.insert(class.name.clone(), (file.clone(), name_pos.map(|p| p.line)));
                classes.push(class);
            }
        }
        classes
    }

    /// Checks one SLO file: its classes, each with where its name is written
    /// and its index in the file.
    fn slo_file(&mut self, text: &str) -> Vec<(SloClass, Option<Pos>, usize)> {
        let document = match raw::read_slo(text) {
            Ok(document) => document,
            Err(error) => {
                self.at(error.pos, error.key, error.message);
                return Vec::new();
            }
        };
        self.document_problems(&document);
        let Some(list) = self.required_list(&document.config.classes, "classes", "SLO class")
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, class) in list.iter().enumerate() {
            if let Some(class) = self.slo_class(&format!("classes[{i}]"), class) {
                out.push((class.0, class.1, i));
            }
        }
        out
    }

    /// Checks one class; `None` when anything about it is wrong (recorded).
    fn slo_class(
        &mut self,
        prefix: &str,
        raw_class: &Spanned<RawSloClass>,
    ) -> Option<(SloClass, Option<Pos>)> {
        let class_pos = raw::pos(raw_class);
        let c = &raw_class.value;

        let name = match &c.name {
            None => {
                self.at(
                    class_pos,
                    format!("{prefix}.name"),
                    "required key is missing",
                );
                None
            }
            Some(name) => self.value(Some(name), &format!("{prefix}.name"), |text| {
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
            }),
        };
        let name_pos = c.name.as_ref().and_then(raw::pos);
        let description = c.description.as_deref().unwrap_or_default().trim();
        let window = c.window.unwrap_or(DEFAULT_WINDOW);

        // Kinds written in the file, even when their value is bad, so that
        // `goodput.require` is not reported a second time for them.
        let mut declared: Vec<ObjectiveKind> = Vec::new();
        let mut objectives: Vec<Objective> = Vec::new();
        if let Some(raw_objectives) = &c.objectives {
            let o = &raw_objectives.value;
            for (kind, field) in [
                (ObjectiveKind::Ttft, &o.ttft),
                (ObjectiveKind::Tpot, &o.tpot),
                (ObjectiveKind::E2el, &o.e2el),
            ] {
                if let Some(entries) = field {
                    declared.push(kind);
                    let key = format!("{prefix}.objectives.{}", kind.as_str());
                    if let Some(objective) = self.objective(&key, kind, entries) {
                        objectives.push(objective);
                    }
                }
            }
        }

        let mut require = declared.clone();
        let mut target = None;
        if let Some(goodput) = &c.goodput {
            let g = &goodput.value;
            target = self.value(
                g.target.as_ref(),
                &format!("{prefix}.goodput.target"),
                parse_ratio,
            );
            if let Some(list) = &g.require {
                require = self.require(&format!("{prefix}.goodput.require"), list, &declared);
            }
        }
        if declared.is_empty() && c.goodput.as_ref().is_none_or(|g| g.value.target.is_none()) {
            self.at(
                class_pos,
                prefix,
                "a class needs at least one objective (ttft, tpot, e2el) or a goodput.target",
            );
        }

        // A class with any problem (its kinds' included, recorded as the
        // file was read) is not defined.
        let under = format!("{prefix}.");
        let clean = !self
            .errors
            .iter()
            .any(|e| e.key == prefix || e.key.starts_with(&under));
        let name = name?;
        clean.then_some((
            SloClass {
                name,
                description: description.to_owned(),
                window,
                objectives,
                goodput: Goodput { require, target },
                per_tenant_alerts: c.per_tenant_alerts,
                exclude_slow_readers: c.exclude_slow_readers,
            },
            name_pos,
        ))
    }

    /// `{pNN: duration}` or `{threshold: duration, target: ratio}`.
    fn objective(
        &mut self,
        key: &str,
        kind: ObjectiveKind,
        entries: &Spanned<Entries>,
    ) -> Option<Objective> {
        const FORMS: &str = "expected {pNN: duration}, such as {p95: 500ms}, or {threshold: duration, target: ratio}, such as {threshold: 500ms, target: 0.95}";
        if entries.value.0.is_empty() {
            self.at(raw::pos(entries), key, FORMS);
            return None;
        }
        let errors_before = self.errors.len();
        let mut percentile: Option<(Option<f64>, Option<Duration>)> = None;
        let mut threshold: Option<Option<Duration>> = None;
        let mut target: Option<Option<f64>> = None;
        for (k, v) in &entries.value.0 {
            let name = k.trim();
            let entry_key = format!("{key}.{name}");
            match name {
                "threshold" => {
                    threshold = Some(self.value(Some(v), &entry_key, parse_duration));
                }
                "target" => target = Some(self.value(Some(v), &entry_key, parse_ratio)),
                _ => match parse_percentile(name) {
                    None => self.at(
                        raw::pos(v),
                        entry_key,
                        format!(
                            "unknown key `{name}`; expected a percentile (p50 to p99.99), or threshold and target"
                        ),
                    ),
                    Some(_) if percentile.is_some() => self.at(
                        raw::pos(v),
                        entry_key,
                        "only one percentile per objective (write another class for another target)",
                    ),
                    Some(Err(message)) => {
                        self.at(raw::pos(v), entry_key, message);
                        percentile = Some((None, None));
                    }
                    Some(Ok(ratio)) => {
                        let bound = self.value(Some(v), &entry_key, parse_duration);
                        percentile = Some((Some(ratio), bound));
                    }
                },
            }
        }
        if percentile.is_some() && (threshold.is_some() || target.is_some()) {
            self.at(
                raw::pos(entries),
                key,
                "give either a percentile ({p95: 500ms}) or threshold and target, not both",
            );
        } else if percentile.is_none() {
            if threshold.is_none() {
                self.at(
                    raw::pos(entries),
                    format!("{key}.threshold"),
                    "required key is missing (the per-request bound, such as 500ms)",
                );
            }
            if target.is_none() {
                self.at(
                    raw::pos(entries),
                    format!("{key}.target"),
                    "required key is missing (the share of requests that must meet the threshold, such as 0.95)",
                );
            }
        }
        if self.errors.len() != errors_before {
            return None;
        }
        let (threshold, target) = match percentile {
            Some((ratio, bound)) => (bound?, ratio?),
            None => (threshold??, target??),
        };
        Some(Objective {
            kind,
            threshold,
            target,
        })
    }

    /// `goodput.require`: objectives of this class, no duplicates, not empty.
    fn require(
        &mut self,
        key: &str,
        list: &raw::List,
        declared: &[ObjectiveKind],
    ) -> Vec<ObjectiveKind> {
        if list.value.is_empty() {
            self.at(
                raw::pos(list),
                key,
                "must not be empty (leave `require` out to require every objective)",
            );
            return declared.to_vec();
        }
        let mut out: Vec<ObjectiveKind> = Vec::new();
        for (i, item) in list.value.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            let text = item.value.trim();
            let Some(kind) = ObjectiveKind::ALL.into_iter().find(|k| k.as_str() == text) else {
                self.at(
                    raw::pos(item),
                    item_key,
                    format!("unknown objective `{text}`: expected ttft, tpot or e2el"),
                );
                continue;
            };
            if !declared.contains(&kind) {
                self.at(
                    raw::pos(item),
                    item_key,
                    format!("`{text}` is not an objective of this class (add it under objectives)"),
                );
            } else if out.contains(&kind) {
                self.at(
                    raw::pos(item),
                    item_key,
                    format!("`{text}` is listed twice"),
                );
            } else {
                out.push(kind);
            }
        }
        out.sort();
        out
    }
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
