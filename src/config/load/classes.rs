//! Stage two for SLO files: `slo_files` resolved (paths and globs, relative
//! to the main config's directory), each file read with [`raw::read_slo`]
//! into [`SloClass`]es (`super::super::slo_class`), and the rules across a
//! class's keys checked.
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

use super::super::error::ConfigError;
use super::super::raw::{self, Class, Pos, Spanned};
use super::super::slo_class::objective_kind;
use super::checker::Checker;
use slo::{ObjectiveKind, SloClass};

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
        let locator = raw::Locator::new(text);
        let mut out = Vec::new();
        for (i, class) in list.iter().enumerate() {
            if let Some(class) = self.slo_class(&format!("classes[{i}]"), class, &locator) {
                out.push((class.0, class.1, i));
            }
        }
        out
    }

    /// Checks the rules across one class's keys, as read: a name, each
    /// objective `goodput.require` names declared under `objectives`, and
    /// at least one objective or a goodput target. `None` when anything
    /// about the class is wrong (recorded), its values' problems included.
    fn slo_class(
        &mut self,
        prefix: &str,
        class: &Spanned<Class>,
        locator: &raw::Locator<'_>,
    ) -> Option<(SloClass, Option<Pos>)> {
        let class_pos = raw::pos(class);
        let key = |under: &str| format!("{prefix}.{under}");
        let name_pos = locator.value(&key("name"));
        if !locator.has_value(&key("name")) {
            self.at(class_pos, key("name"), "required key is missing");
        }
        // Kinds written in the file, even when their value is bad, so that
        // `goodput.require` is not reported a second time for them.
        let declared: Vec<ObjectiveKind> = ObjectiveKind::ALL
            .into_iter()
            .filter(|kind| locator.has_value(&key(&format!("objectives.{}", kind.as_str()))))
            .collect();
        let require_written = locator.has_value(&key("goodput.require"));
        if require_written {
            for i in 0.. {
                let item = key(&format!("goodput.require[{i}]"));
                let Some((text, at)) = locator.scalar(&item) else {
                    break;
                };
                let text = text.trim();
                if objective_kind(text).is_some_and(|kind| !declared.contains(&kind)) {
                    self.at(
                        at,
                        item,
                        format!(
                            "`{text}` is not an objective of this class (add it under objectives)"
                        ),
                    );
                }
            }
        }
        if declared.is_empty() && !locator.has_value(&key("goodput.target")) {
            self.at(
                class_pos,
                prefix,
                "a class needs at least one objective (ttft, tpot, e2el) or a goodput.target",
            );
        }

        // A class with any problem (its values' included, recorded as the
        // file was read) is not defined.
        let under = format!("{prefix}.");
        let clean = !self
            .errors
            .iter()
            .any(|e| e.key == prefix || e.key.starts_with(&under));
        let mut read = class.value.0.clone();
        if !require_written {
            read.goodput.require = declared;
        }
        clean.then_some((read, name_pos))
    }
}
