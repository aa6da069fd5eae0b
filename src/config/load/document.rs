//! The top of a document: `Config::load`, `parse` and `from_overrides`,
//! which run the one checker over the file (an empty document without
//! one) and apply the command line's overrides after it, and the
//! top-level keys, which hand each section to its own file.

use std::path::Path;

use super::super::error::{ConfigError, ConfigErrors, FLAGS_FILE};
use super::super::keys;
use super::super::raw::{self, RawConfig};
use super::super::{Config, DEFAULT_LISTEN, WebConfig};
use super::checker::{Checker, Origin, Overrides};
use super::validate::Given;

impl Config {
    /// Reads and validates a config file, then applies `overrides`.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Config, ConfigErrors> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, &file, overrides).map(|mut config| {
                config.sources.files.insert(0, path.to_path_buf());
                config
            }),
            Err(error) => Err(ConfigErrors(vec![ConfigError {
                file,
                line: None,
                column: None,
                key: String::new(),
                message: format!("cannot read the file: {error}"),
            }])),
        }
    }

    /// Validates config text; `file` names it in errors.
    pub fn parse(text: &str, file: &str, overrides: &Overrides) -> Result<Config, ConfigErrors> {
        Self::check(Some((text, file)), overrides)
    }

    /// A config with no file: an empty document, checked as a file is,
    /// with the overrides applied as on top of one; `--upstream`
    /// (required) gives it one catch-all route, `default`.
    pub fn from_overrides(overrides: &Overrides) -> Result<Config, ConfigErrors> {
        Self::check(None, overrides)
    }

    /// The one way a config is made: the document's text and the name
    /// errors give it (none without a file), checked, the overrides
    /// applied after it.
    fn check(file: Option<(&str, &str)>, overrides: &Overrides) -> Result<Config, ConfigErrors> {
        let (text, name) = file.unwrap_or(("", FLAGS_FILE));
        let document = match raw::read(text, keys::known) {
            Ok(document) => document,
            Err(error) => {
                return Err(ConfigErrors(vec![ConfigError {
                    file: name.to_owned(),
                    line: error.pos.map(|pos| pos.line),
                    column: error.pos.map(|pos| pos.column),
                    key: error.key,
                    message: error.message,
                }]));
            }
        };
        let mut checker = Checker::new(name);
        checker.locator = file.map(|_| raw::Locator::new(text));
        checker.document_problems(&document);
        // SLO files are named relative to the directory of this file.
        let base = Path::new(name).parent().unwrap_or(Path::new(""));
        let config = checker.config(&document.config, overrides, base);
        checker.finish(config)
    }
}

impl Checker<'_> {
    pub(crate) fn config(&mut self, raw: &RawConfig, overrides: &Overrides, base: &Path) -> Config {
        let slo_classes = match &raw.slo_files {
            Some(list) => {
                let classes = self.slo_classes(list, base);
                self.slo_names = Some(classes.iter().map(|c| c.name.clone()).collect());
                classes
            }
            None => Vec::new(),
        };
        let file_listen = raw.listen.map(|addr| {
            let pos = self.position("listen");
            (addr, Origin::File(pos, "listen"))
        });
        let (listen, listen_origin) = match (overrides.listen, file_listen) {
            (Some(addr), _) => (addr, Origin::Flag("--listen")),
            (None, Some(file)) => file,
            (None, None) => (DEFAULT_LISTEN, Origin::Default),
        };
        let mut admin = raw.admin.clone().unwrap_or_default();
        // A bad address is reported already; the default stands in for it.
        let admin_origin = match overrides.admin_listen {
            Some(addr) => {
                admin.listen = addr;
                Origin::Flag("--admin-listen")
            }
            None if self.given("admin.listen") && !self.reported("admin.listen") => {
                Origin::File(self.position("admin.listen"), "admin.listen")
            }
            None => Origin::Default,
        };
        if let Some(path) = admin.web_config_file.clone() {
            let pos = self.position("admin.web_config_file");
            admin.web = match WebConfig::read(&path, pos, self.file, base) {
                Ok(web) => {
                    self.sources.files.extend(web.files());
                    Some(web)
                }
                Err(errors) => {
                    self.errors.extend(errors);
                    None
                }
            };
        }
        let upstream_override = overrides
            .upstream
            .as_deref()
            .and_then(|url| self.upstream_override(url));
        self.validate(
            raw,
            &Given {
                listen: (listen, listen_origin),
                admin: (admin.listen, admin_origin),
                upstream_flag: overrides.upstream.is_some(),
                upstream: upstream_override.as_ref(),
            },
        );

        let scrape = raw.scrape.unwrap_or_default();
        Config {
            listen,
            admin,
            proxy: raw.proxy.clone().unwrap_or_default(),
            metrics: raw.metrics.clone().unwrap_or_default(),
            routes: self.routes(raw, upstream_override.as_ref(), base),
            slo_classes,
            trace_context: raw.trace_context.unwrap_or_default(),
            otlp: self.otlp(raw.otlp.as_ref(), &overrides.otel_env),
            tls: raw
                .tls
                .as_ref()
                .and_then(|tls| self.listener_tls(tls, base)),
            scrape,
            cost: raw.cost.clone().unwrap_or_default(),
            sessions: raw.sessions.clone().unwrap_or_default(),
            sources: std::mem::take(&mut self.sources),
        }
    }
}

impl Checker<'_> {
    /// The proxy listener's TLS, its files read against `base`; its
    /// problems recorded at `tls.KEY`.
    fn listener_tls(
        &mut self,
        tls: &raw::Spanned<crate::config::server_tls::RawServerTls>,
        base: &Path,
    ) -> Option<crate::config::ServerTls> {
        match tls.value.read(Some(&tls.referenced), base) {
            Ok(read) => {
                self.sources
                    .files
                    .extend(read.files().map(std::path::Path::to_path_buf));
                Some(read)
            }
            Err(problems) => {
                for (at, key, message) in problems {
                    let pos = at.as_ref().and_then(crate::config::located::location_pos);
                    self.at(pos, format!("tls.{key}"), message);
                }
                None
            }
        }
    }
}
