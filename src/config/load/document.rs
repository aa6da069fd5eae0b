//! The top of a document: `Config::load`, `parse` and `from_overrides`,
//! which run the checker over the file and apply the command line's
//! overrides after it, and the top-level keys, which hand each section to
//! its own file.

use std::path::Path;

use super::super::error::{ConfigError, ConfigErrors, FLAGS_FILE};
use super::super::raw::{self, RawConfig};
use super::super::{
    AdminSettings, Config, MetricsSettings, ProxySettings, Route, ScrapeSettings, TraceSettings,
    WebConfig,
};
use super::super::{default_admin_listen, default_listen};
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
        let document = match raw::read(text) {
            Ok(document) => document,
            Err(error) => {
                return Err(ConfigErrors(vec![ConfigError {
                    file: file.to_owned(),
                    line: error.pos.map(|pos| pos.line),
                    column: error.pos.map(|pos| pos.column),
                    key: error.key,
                    message: error.message,
                }]));
            }
        };
        let mut checker = Checker::new(file);
        checker.locator = Some(raw::Locator::new(text));
        checker.document_problems(&document);
        // SLO files are named relative to the directory of this file.
        let base = Path::new(file).parent().unwrap_or(Path::new(""));
        let config = checker.config(&document.config, overrides, base);
        checker.finish(config)
    }

    /// A config with no file: one catch-all route to `overrides.upstream`
    /// (required) and defaults for everything else.
    pub fn from_overrides(overrides: &Overrides) -> Result<Config, ConfigErrors> {
        let mut checker = Checker::new(FLAGS_FILE);
        let upstream = match &overrides.upstream {
            Some(url) => checker.upstream_override(url),
            None => {
                checker.flag(
                    "--upstream",
                    "required when no config file is given (an upstream base URL such as http://127.0.0.1:8000)",
                );
                None
            }
        };
        let listen = overrides.listen.unwrap_or_else(default_listen);
        let admin_listen = overrides.admin_listen.unwrap_or_else(default_admin_listen);
        let origin = |given: bool, flag| match given {
            true => Origin::Flag(flag),
            false => Origin::Default,
        };
        checker.validate(
            None,
            &Given {
                listen: (listen, origin(overrides.listen.is_some(), "--listen")),
                admin: (
                    admin_listen,
                    origin(overrides.admin_listen.is_some(), "--admin-listen"),
                ),
                upstream_flag: true,
                upstream: upstream.as_ref(),
            },
        );
        let otlp = checker.otlp(None, &overrides.otel_env);
        let route = upstream.and_then(|upstream| {
            Route::with_defaults("default", upstream)
                .map_err(|error| checker.flag("--upstream", error.to_string()))
                .ok()
        });
        let config = route.map(|route| Config {
            listen,
            admin: AdminSettings {
                listen: admin_listen,
                ..AdminSettings::default()
            },
            proxy: ProxySettings::default(),
            metrics: MetricsSettings::default(),
            routes: vec![route],
            slo_classes: Vec::new(),
            trace_context: TraceSettings::default(),
            otlp,
            tls: None,
            scrape: ScrapeSettings::default(),
            sources: super::super::Sources::default(),
        });
        match config {
            Some(config) => checker.finish(config),
            None => Err(checker.into_errors()),
        }
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
            (None, None) => (default_listen(), Origin::Default),
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
            Some(raw),
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
