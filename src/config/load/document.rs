//! The top of a document: `Config::load`, `parse` and `from_overrides`,
//! which run the checker over the file and apply the command line's
//! overrides after it, and the top-level keys, which hand each section to
//! its own file.

use std::path::Path;

use super::super::raw::{self, RawConfig};
use super::super::values::*;
use super::super::{
    AdminSettings, Config, MetricsSettings, Protocol, ProxySettings, Route, RouteMatch, Timeouts,
    TraceSettings, WebConfig,
};
use super::checker::{Checker, Origin, Overrides, default_admin_listen, default_listen};
use super::error::{ConfigError, ConfigErrors, FLAGS_FILE};

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
        // Port 0 asks the OS for a free port each, so it can be shared.
        if listen == admin_listen && listen.port() != 0 {
            let flag = if overrides.admin_listen.is_some() {
                "--admin-listen"
            } else {
                "--listen"
            };
            checker.flag(
                flag,
                format!("the proxy and the admin listener cannot share the address {listen}"),
            );
        }
        let otlp = checker.otlp(None, &overrides.otel_env);
        let config = upstream.map(|upstream| Config {
            listen,
            admin_listen,
            admin: AdminSettings::default(),
            proxy: ProxySettings::default(),
            metrics: MetricsSettings::default(),
            routes: vec![Route {
                name: "default".to_owned(),
                matcher: RouteMatch {
                    path_prefix: "/".to_owned(),
                    host: None,
                    methods: None,
                },
                upstream,
                protocol: Protocol::Auto,
                timeouts: Timeouts::default(),
                preserve_host: false,
                strip_prefix: false,
                max_in_flight: None,
                tls_roots: None,
                slo: None,
                slo_by_model: Vec::new(),
                slo_by_operation: Vec::new(),
                slo_header: None,
                slo_request_max: None,
                tenant: None,
                otel_provider_name: None,
            }],
            slo_classes: Vec::new(),
            trace_context: TraceSettings::default(),
            otlp,
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
        let listen_field = raw.listen.as_ref();
        let admin_field = raw.admin.as_ref().and_then(|admin| admin.listen.as_ref());
        let listen_file = self.value(listen_field, "listen", parse_addr);
        let admin_file = self.value(admin_field, "admin.listen", parse_addr);

        let (listen, listen_origin) = match (overrides.listen, listen_file) {
            (Some(addr), _) => (addr, Origin::Flag("--listen")),
            (None, Some(addr)) => (
                addr,
                Origin::File(listen_field.and_then(raw::pos), "listen"),
            ),
            (None, None) => (default_listen(), Origin::Default),
        };
        let (admin_listen, admin_origin) = match (overrides.admin_listen, admin_file) {
            (Some(addr), _) => (addr, Origin::Flag("--admin-listen")),
            (None, Some(addr)) => (
                addr,
                Origin::File(admin_field.and_then(raw::pos), "admin.listen"),
            ),
            (None, None) => (default_admin_listen(), Origin::Default),
        };
        if listen == admin_listen && listen.port() != 0 {
            // Point at the admin address if one was given (file or flag),
            // else at the proxy address, which then collides with the default.
            let origin = match admin_origin {
                Origin::Default => listen_origin,
                given => given,
            };
            self.report(
                origin,
                format!("the proxy and the admin listener cannot share the address {listen}"),
            );
        }

        let upstream_override = overrides
            .upstream
            .as_deref()
            .and_then(|url| self.upstream_override(url));

        let admin_defaults = AdminSettings::default();
        let admin = AdminSettings {
            max_connections: raw
                .admin
                .as_ref()
                .and_then(|admin| admin.max_connections)
                .unwrap_or(admin_defaults.max_connections),
            web: raw
                .admin
                .as_ref()
                .and_then(|admin| admin.web_config_file.as_ref())
                .and_then(|field| match WebConfig::read(field, self.file, base) {
                    Ok(web) => {
                        self.sources.files.extend(web.files());
                        Some(web)
                    }
                    Err(errors) => {
                        self.errors.extend(errors);
                        None
                    }
                }),
        };

        Config {
            listen,
            admin_listen,
            admin,
            proxy: raw.proxy.clone().unwrap_or_default(),
            metrics: raw.metrics.clone().unwrap_or_default(),
            routes: self.routes(raw, overrides.upstream.is_some(), upstream_override, base),
            slo_classes,
            trace_context: raw.trace_context.unwrap_or_default(),
            otlp: self.otlp(raw.otlp.as_ref(), &overrides.otel_env),
            sources: std::mem::take(&mut self.sources),
        }
    }
}
