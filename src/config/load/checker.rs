//! The checker: where problems are collected, the top of the config,
//! and the command line's overrides applied after the file.

use std::net::SocketAddr;

use super::super::raw::{self, Pos, Spanned};
use super::super::{Config, Upstream};

use super::super::error::{ConfigError, ConfigErrors, FLAGS_FILE};
use super::super::values::*;

/// Values given on the command line (or by environment variables), which
/// take precedence over the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Replaces `listen` (`--listen`).
    pub listen: Option<SocketAddr>,
    /// Replaces `admin.listen` (`--admin-listen`).
    pub admin_listen: Option<SocketAddr>,
    /// Upstream base URL. Without a file: one catch-all route to it. With a
    /// file: replaces the upstream of every route.
    pub upstream: Option<String>,
    /// The OpenTelemetry SDKs' `OTEL_*` variables, for the `otlp`
    /// settings (the file wins where both give a value).
    pub otel_env: super::otel_env::OtelEnv,
}

/// Collects errors while building the runtime config.
pub(crate) struct Checker<'a> {
    pub(crate) file: &'a str,
    pub(crate) errors: Vec<ConfigError>,
    /// Names of the defined SLO classes, once `slo_files` were read; `None`
    /// without `slo_files`.
    pub(crate) slo_names: Option<Vec<String>>,
    /// SLO files and globs named by `slo_files`, as resolved.
    pub(crate) sources: super::super::Sources,
    /// Where the file's values are written, for the rules across keys;
    /// `None` without a file.
    pub(crate) locator: Option<raw::Locator<'a>>,
}

/// Where a value in the final config came from, to point an error at it.
#[derive(Clone, Copy)]
pub(crate) enum Origin<'k> {
    File(Option<Pos>, &'k str),
    Flag(&'static str),
    Default,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(file: &'a str) -> Self {
        Self {
            file,
            errors: Vec::new(),
            slo_names: None,
            sources: super::super::Sources::default(),
            locator: None,
        }
    }

    /// Records a problem in the file.
    pub(crate) fn at(
        &mut self,
        pos: Option<Pos>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.errors.push(ConfigError {
            file: self.file.to_owned(),
            line: pos.map(|pos| pos.line),
            column: pos.map(|pos| pos.column),
            key: key.into(),
            message: message.into(),
        });
    }

    /// Whether a problem was reported at `key`.
    pub(crate) fn reported(&self, key: &str) -> bool {
        self.errors.iter().any(|e| e.key == key)
    }

    /// Whether the file gives `key` a value (a bad one included; `key:`
    /// gives none).
    pub(crate) fn given(&self, key: &str) -> bool {
        self.locator
            .as_ref()
            .is_some_and(|locator| locator.has_value(key))
    }

    /// Where the value at `key` is written, if it is.
    pub(crate) fn position(&self, key: &str) -> Option<Pos> {
        self.locator.as_ref()?.value(key)
    }

    /// Where the value at `within`, under the value at `key`, is written:
    /// for a path whose keys the user chose (a model name may hold a `.`).
    pub(crate) fn position_under(&self, key: &str, within: &[raw::Segment]) -> Option<Pos> {
        let mut path = raw::segments(key)?;
        path.extend_from_slice(within);
        self.locator.as_ref()?.at(&path)
    }

    /// Records a problem with the value at `key`, located in the file.
    pub(crate) fn at_key(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        let pos = self.position(&key);
        self.at(pos, key, message);
    }

    /// The elements of a required list, or `None` after saying that it is
    /// missing or empty.
    pub(crate) fn required_list<'l, T>(
        &mut self,
        list: &'l Option<Spanned<Vec<T>>>,
        key: &str,
        what: &str,
    ) -> Option<&'l [T]> {
        let Some(list) = list else {
            self.at(
                None,
                key,
                format!("required key is missing: list at least one {what}"),
            );
            return None;
        };
        if list.value.is_empty() {
            self.at(
                raw::pos(list),
                key,
                format!("must list at least one {what}"),
            );
            return None;
        }
        Some(&list.value)
    }

    /// Records what reading a document found: every unknown key (with the
    /// key meant, when one is near) and every value its typed fields could
    /// not read.
    pub(crate) fn document_problems<T>(&mut self, document: &raw::Document<T>) {
        for unknown in &document.unknown {
            self.at(
                unknown.pos,
                raw::dotted(&unknown.path),
                super::error::unknown_key_message(unknown),
            );
        }
        for bad in &document.bad_values {
            self.at(bad.pos, bad.key.clone(), bad.message.clone());
        }
    }

    /// Records a problem with an environment variable's value.
    pub(crate) fn env(&mut self, name: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: super::otel_env::ENV_FILE.to_owned(),
            line: None,
            column: None,
            key: name.to_owned(),
            message: message.into(),
        });
    }

    /// Records a problem with a command-line value.
    pub(crate) fn flag(&mut self, flag: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: FLAGS_FILE.to_owned(),
            line: None,
            column: None,
            key: flag.to_owned(),
            message: message.into(),
        });
    }

    pub(crate) fn report(&mut self, origin: Origin<'_>, message: String) {
        match origin {
            Origin::File(pos, key) => self.at(pos, key, message),
            Origin::Flag(flag) => self.flag(flag, message),
            Origin::Default => self.at(None, "", message),
        }
    }

    /// Errors in file order: this file first, then the SLO files by name,
    /// then flags; within a file, those without a position (missing
    /// top-level keys) last.
    pub(crate) fn into_errors(mut self) -> ConfigErrors {
        let main = self.file;
        self.errors.sort_by(|a, b| {
            let key = |e: &ConfigError| {
                (
                    e.file == FLAGS_FILE || e.file == super::otel_env::ENV_FILE,
                    e.file != main,
                    e.file.clone(),
                    e.line.is_none(),
                    e.line,
                    e.column,
                )
            };
            key(a).cmp(&key(b))
        });
        ConfigErrors(self.errors)
    }

    pub(crate) fn finish(self, config: Config) -> Result<Config, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(config)
        } else {
            Err(self.into_errors())
        }
    }

    pub(crate) fn upstream_override(&mut self, url: &str) -> Option<Upstream> {
        match parse_upstream(url) {
            Ok(upstream) => Some(upstream),
            Err(message) => {
                self.flag("--upstream", message);
                None
            }
        }
    }
}
