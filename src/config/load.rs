//! Stage two of loading: raw values checked and turned into runtime types,
//! every problem collected with its file, line, column and key.
//!
//! Checking never stops at the first problem: each value is checked on its
//! own, a bad one is recorded and replaced by its default so the rest can
//! still be checked, and only when nothing was recorded is a [`Config`]
//! returned. Command-line overrides are applied here too, after the file, and
//! checked like any other value (their errors name the file `<flags>`).
//!
//! This module must not read YAML itself (that is [`super::raw`]'s job) and
//! must not hand raw types to anyone.

use http::HeaderName;
use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::raw::{self, Pos, RawConfig, RawRoute, Spanned};
use super::{
    AdminSettings, ApiKeys, Config, DEFAULT_ADMIN_LISTEN, DEFAULT_LISTEN, IpNet, LabelBounds,
    MetricsSettings, OtlpProtocol, OtlpSettings, Protocol, ProxySettings, Route, RouteMatch,
    TenantLabels, TenantSource, Timeouts, TraceSettings, Upstream,
};

/// File name used in errors about command-line values.
pub const FLAGS_FILE: &str = "<flags>";

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File the problem is in (as given by the user), or `<flags>`.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column (in characters), when known.
    pub column: Option<u64>,
    /// Dotted key path, e.g. `routes[1].timeouts.idle`.
    pub key: String,
    /// What is wrong, as a sentence fragment.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if self.key.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.key, self.message)
        }
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

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
}

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
        for unknown in &document.unknown {
            checker.at(
                unknown.pos,
                raw::dotted(&unknown.path),
                unknown_key_message(unknown),
            );
        }
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
                slo_header: None,
                tenant: None,
            }],
            slo_classes: Vec::new(),
            trace_context: TraceSettings::default(),
            otlp: None,
            sources: super::Sources::default(),
        });
        match config {
            Some(config) => checker.finish(config),
            None => Err(checker.into_errors()),
        }
    }
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN
        .parse()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 8080)))
}

fn default_admin_listen() -> SocketAddr {
    DEFAULT_ADMIN_LISTEN
        .parse()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9464)))
}

pub(super) fn unknown_key_message(unknown: &raw::UnknownKey) -> String {
    let Some(raw::Segment::Key(key)) = unknown.path.last() else {
        return "unknown key".to_owned();
    };
    if let Some(near) = unknown
        .expected
        .iter()
        .filter(|known| strsim::levenshtein(key, known) <= 2 || key.eq_ignore_ascii_case(known))
        .min_by_key(|known| strsim::levenshtein(key, known))
    {
        return format!("unknown key `{key}`; did you mean `{near}`?");
    }
    if unknown.expected.is_empty() {
        format!("unknown key `{key}`")
    } else {
        format!(
            "unknown key `{key}`; expected one of: {}",
            unknown.expected.join(", ")
        )
    }
}

/// Collects errors while building the runtime config.
pub(super) struct Checker<'a> {
    file: &'a str,
    pub(super) errors: Vec<ConfigError>,
    /// Names of the defined SLO classes, once `slo_files` were read; `None`
    /// without `slo_files`.
    slo_names: Option<Vec<String>>,
    /// SLO files and globs named by `slo_files`, as resolved.
    pub(super) sources: super::Sources,
}

/// A route's checked match, and where to report it as shadowed.
struct MatchSite {
    matcher: RouteMatch,
    pos: Option<Pos>,
    key: String,
}

/// Where a value in the final config came from, to point an error at it.
#[derive(Clone, Copy)]
enum Origin<'k> {
    File(Option<Pos>, &'k str),
    Flag(&'static str),
    Default,
}

impl<'a> Checker<'a> {
    pub(super) fn new(file: &'a str) -> Self {
        Self {
            file,
            errors: Vec::new(),
            slo_names: None,
            sources: super::Sources::default(),
        }
    }

    /// Records a problem in the file.
    pub(super) fn at(
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

    /// The elements of a required list, or `None` after saying that it is
    /// missing or empty.
    pub(super) fn required_list<'l, T>(
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

    /// Records a problem with a command-line value.
    fn flag(&mut self, flag: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: FLAGS_FILE.to_owned(),
            line: None,
            column: None,
            key: flag.to_owned(),
            message: message.into(),
        });
    }

    fn report(&mut self, origin: Origin<'_>, message: String) {
        match origin {
            Origin::File(pos, key) => self.at(pos, key, message),
            Origin::Flag(flag) => self.flag(flag, message),
            Origin::Default => self.at(None, "", message),
        }
    }

    /// Errors in file order: this file first, then the SLO files by name,
    /// then flags; within a file, those without a position (missing
    /// top-level keys) last.
    fn into_errors(mut self) -> ConfigErrors {
        let main = self.file;
        self.errors.sort_by(|a, b| {
            let key = |e: &ConfigError| {
                (
                    e.file == FLAGS_FILE,
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

    fn finish(self, config: Config) -> Result<Config, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(config)
        } else {
            Err(self.into_errors())
        }
    }

    /// Checks one optional value: `None` when it is absent or bad (bad values
    /// are recorded).
    pub(super) fn value<T>(
        &mut self,
        field: Option<&Spanned<String>>,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let field = field?;
        match parse(&field.value) {
            Ok(value) => Some(value),
            Err(message) => {
                self.at(raw::pos(field), key, message);
                None
            }
        }
    }

    fn upstream_override(&mut self, url: &str) -> Option<Upstream> {
        match parse_upstream(url) {
            Ok(upstream) => Some(upstream),
            Err(message) => {
                self.flag("--upstream", message);
                None
            }
        }
    }

    fn config(&mut self, raw: &RawConfig, overrides: &Overrides, base: &Path) -> Config {
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
            max_connections: self
                .value(
                    raw.admin.as_ref().and_then(|a| a.max_connections.as_ref()),
                    "admin.max_connections",
                    parse_positive_count,
                )
                .unwrap_or(admin_defaults.max_connections),
        };

        Config {
            listen,
            admin_listen,
            admin,
            proxy: self.proxy(raw),
            metrics: self.metrics(raw),
            routes: self.routes(raw, overrides.upstream.is_some(), upstream_override, base),
            slo_classes,
            trace_context: self.trace_context(raw),
            otlp: self.otlp(raw),
            sources: std::mem::take(&mut self.sources),
        }
    }

    fn trace_context(&mut self, raw: &RawConfig) -> TraceSettings {
        let Some(trace) = &raw.trace_context else {
            return TraceSettings::default();
        };
        TraceSettings {
            join: self
                .value(trace.join.as_ref(), "trace_context.join", parse_bool)
                .unwrap_or(false),
            start: self
                .value(trace.start.as_ref(), "trace_context.start", parse_bool)
                .unwrap_or(false),
        }
    }

    fn otlp(&mut self, raw: &RawConfig) -> Option<OtlpSettings> {
        let o = raw.otlp.as_ref()?;
        let Some(endpoint_field) = &o.endpoint else {
            self.at(
                None,
                "otlp.endpoint",
                "required key is missing: the collector's URL, such as http://127.0.0.1:4318",
            );
            return None;
        };
        let endpoint = self.value(Some(endpoint_field), "otlp.endpoint", parse_otlp_endpoint);
        let protocol = self
            .value(o.protocol.as_ref(), "otlp.protocol", |text| match text {
                "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
                "grpc" => Ok(OtlpProtocol::Grpc),
                other => Err(format!(
                    "unknown protocol `{other}`: use http/protobuf or grpc"
                )),
            })
            .unwrap_or(OtlpProtocol::HttpProtobuf);
        let mut flag = |field: &Option<Spanned<String>>, key| {
            self.value(field.as_ref(), key, parse_bool).unwrap_or(true)
        };
        let (metrics, traces) = (
            flag(&o.metrics, "otlp.metrics"),
            flag(&o.traces, "otlp.traces"),
        );
        let mut duration = |field: &Option<Spanned<String>>, key, default| {
            self.value(field.as_ref(), key, parse_duration)
                .filter(|d: &Duration| !d.is_zero())
                .unwrap_or(default)
        };
        let metrics_interval = duration(
            &o.metrics_interval,
            "otlp.metrics_interval",
            Duration::from_secs(60),
        );
        let traces_delay = duration(&o.traces_delay, "otlp.traces_delay", Duration::from_secs(5));
        let timeout = duration(&o.timeout, "otlp.timeout", Duration::from_secs(10));
        let queue = self
            .value(o.queue.as_ref(), "otlp.queue", parse_positive_count)
            .unwrap_or(2048);
        let max_batch = self
            .value(o.max_batch.as_ref(), "otlp.max_batch", parse_positive_count)
            .unwrap_or(512);
        let service_name = o
            .service_name
            .as_ref()
            .map_or_else(|| "tokenmeter".to_owned(), |s| s.value.clone());
        Some(OtlpSettings {
            endpoint: endpoint?,
            protocol,
            metrics,
            traces,
            metrics_interval,
            traces_delay,
            timeout,
            queue,
            max_batch,
            service_name,
        })
    }

    fn proxy(&mut self, raw: &RawConfig) -> ProxySettings {
        let defaults = ProxySettings::default();
        let Some(proxy) = &raw.proxy else {
            return defaults;
        };
        ProxySettings {
            max_request_body_bytes: self
                .value(
                    proxy.max_request_body.as_ref(),
                    "proxy.max_request_body",
                    parse_size,
                )
                .unwrap_or(defaults.max_request_body_bytes),
            max_retry_body_bytes: self
                .value(
                    proxy.max_retry_body.as_ref(),
                    "proxy.max_retry_body",
                    parse_size,
                )
                .unwrap_or(defaults.max_retry_body_bytes),
            max_request_head_bytes: self
                .value(
                    proxy.max_request_head.as_ref(),
                    "proxy.max_request_head",
                    |text| match parse_size(text)? {
                        n if (8 * 1024..=1024 * 1024).contains(&n) => Ok(n),
                        n => Err(format!("{n} bytes: must be from 8KiB to 1MiB")),
                    },
                )
                .unwrap_or(defaults.max_request_head_bytes),
            request_head_timeout: self
                .value(
                    proxy.request_head_timeout.as_ref(),
                    "proxy.request_head_timeout",
                    parse_duration,
                )
                .unwrap_or(defaults.request_head_timeout),
            max_connections: self.value(
                proxy.max_connections.as_ref(),
                "proxy.max_connections",
                parse_positive_count,
            ),
            overload_threshold: self
                .value(
                    proxy.overload_threshold.as_ref(),
                    "proxy.overload_threshold",
                    parse_percentage,
                )
                .unwrap_or(defaults.overload_threshold),
            overload_timeout: self
                .value(
                    proxy.overload_timeout.as_ref(),
                    "proxy.overload_timeout",
                    parse_duration,
                )
                .unwrap_or(defaults.overload_timeout),
            upstream_idle_connections: self
                .value(
                    proxy.upstream_idle_connections.as_ref(),
                    "proxy.upstream_idle_connections",
                    |text| {
                        text.trim().parse::<usize>().map_err(|_| {
                            format!(
                                "invalid count `{text}`: expected a whole number (0 keeps none)"
                            )
                        })
                    },
                )
                .unwrap_or(defaults.upstream_idle_connections),
            upstream_idle_timeout: self
                .value(
                    proxy.upstream_idle_timeout.as_ref(),
                    "proxy.upstream_idle_timeout",
                    parse_duration,
                )
                .unwrap_or(defaults.upstream_idle_timeout),
            max_response_body_bytes: self
                .value(
                    proxy.max_response_body.as_ref(),
                    "proxy.max_response_body",
                    parse_size,
                )
                .unwrap_or(defaults.max_response_body_bytes),
            x_forwarded: self
                .value(proxy.x_forwarded.as_ref(), "proxy.x_forwarded", parse_bool)
                .unwrap_or(defaults.x_forwarded),
            trusted_proxies: proxy
                .trusted_proxies
                .as_ref()
                .map_or_else(Vec::new, |list| {
                    list.value
                        .iter()
                        .enumerate()
                        .filter_map(|(i, item)| {
                            self.value(
                                Some(item),
                                &format!("proxy.trusted_proxies[{i}]"),
                                parse_ip_net,
                            )
                        })
                        .collect()
                }),
            shutdown_grace: self
                .value(
                    proxy.shutdown_grace.as_ref(),
                    "proxy.shutdown_grace",
                    parse_duration,
                )
                .unwrap_or(defaults.shutdown_grace),
        }
    }

    fn metrics(&mut self, raw: &RawConfig) -> MetricsSettings {
        let defaults = MetricsSettings::default();
        let Some(metrics) = &raw.metrics else {
            return defaults;
        };
        let namespace = self
            .value(metrics.namespace.as_ref(), "metrics.namespace", |text| {
                if is_metric_namespace(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(
                        "invalid namespace `{text}`: must match [a-zA-Z_][a-zA-Z0-9_]*"
                    ))
                }
            })
            .unwrap_or(defaults.namespace);

        let models = match &metrics.models {
            Some(raw) => self.label_bounds(
                "metrics.models",
                "model",
                raw.allow.as_ref(),
                raw.max_distinct.as_ref(),
                &defaults.models,
            ),
            None => defaults.models,
        };
        let tenants = match &metrics.tenants {
            Some(raw) => TenantLabels {
                bounds: self.label_bounds(
                    "metrics.tenants",
                    "tenant",
                    raw.allow.as_ref(),
                    raw.max_distinct.as_ref(),
                    &defaults.tenants.bounds,
                ),
                histograms: self
                    .value(
                        raw.histograms.as_ref(),
                        "metrics.tenants.histograms",
                        parse_bool,
                    )
                    .unwrap_or(defaults.tenants.histograms),
            },
            None => defaults.tenants,
        };

        let max_usage_tokens = self
            .value(
                metrics.max_usage_tokens.as_ref(),
                "metrics.max_usage_tokens",
                |text| match text.trim().parse::<u64>() {
                    Ok(n) if n >= 1 => Ok(n),
                    _ => Err(format!(
                        "invalid count `{text}`: expected a whole number, at least 1"
                    )),
                },
            )
            .unwrap_or(defaults.max_usage_tokens);

        let mut buckets = defaults.buckets;
        if let Some(raw_buckets) = &metrics.buckets {
            let lists: [(&str, &Option<raw::List>, &mut Vec<f64>); 7] = [
                (
                    "time_to_first_token",
                    &raw_buckets.time_to_first_token,
                    &mut buckets.time_to_first_token,
                ),
                (
                    "time_to_response_headers",
                    &raw_buckets.time_to_response_headers,
                    &mut buckets.time_to_response_headers,
                ),
                (
                    "time_per_output_token",
                    &raw_buckets.time_per_output_token,
                    &mut buckets.time_per_output_token,
                ),
                (
                    "inter_token_latency",
                    &raw_buckets.inter_token_latency,
                    &mut buckets.inter_token_latency,
                ),
                (
                    "e2e_request_latency",
                    &raw_buckets.e2e_request_latency,
                    &mut buckets.e2e_request_latency,
                ),
                (
                    "output_tokens",
                    &raw_buckets.output_tokens,
                    &mut buckets.output_tokens,
                ),
                (
                    "input_tokens",
                    &raw_buckets.input_tokens,
                    &mut buckets.input_tokens,
                ),
            ];
            for (name, raw_list, target) in lists {
                if let Some(list) = raw_list
                    && let Some(bounds) = self.bucket_list(&format!("metrics.buckets.{name}"), list)
                {
                    *target = bounds;
                }
            }
        }

        MetricsSettings {
            namespace,
            models,
            tenants,
            max_usage_tokens,
            buckets,
        }
    }

    /// The bounds of a label clients choose (`model`, `tenant`), under
    /// `key`.
    fn label_bounds(
        &mut self,
        key: &str,
        what: &str,
        allow: Option<&raw::List>,
        max_distinct: Option<&Spanned<String>>,
        defaults: &LabelBounds,
    ) -> LabelBounds {
        LabelBounds {
            allow: allow.and_then(|list| self.allow_list(&format!("{key}.allow"), what, list)),
            max_distinct: self
                .value(
                    max_distinct,
                    &format!("{key}.max_distinct"),
                    parse_positive_count,
                )
                .unwrap_or(defaults.max_distinct),
        }
    }

    fn allow_list(&mut self, key: &str, what: &str, list: &raw::List) -> Option<Vec<String>> {
        if list.value.is_empty() {
            self.at(
                raw::pos(list),
                key,
                format!(
                    "must not be empty (leave `allow` out to bound {what}s by max_distinct instead)"
                ),
            );
            return None;
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut names = Vec::with_capacity(list.value.len());
        let mut ok = true;
        for (i, name) in list.value.iter().enumerate() {
            let item = format!("{key}[{i}]");
            if name.value.is_empty() {
                self.at(
                    raw::pos(name),
                    item,
                    format!("{what} name must not be empty"),
                );
                ok = false;
            } else if let Some(first) = seen.insert(&name.value, i) {
                self.at(
                    raw::pos(name),
                    item,
                    format!(
                        "duplicate {what} name `{}` (also {key}[{first}])",
                        name.value
                    ),
                );
                ok = false;
            } else {
                names.push(name.value.clone());
            }
        }
        ok.then_some(names)
    }

    fn bucket_list(&mut self, key: &str, list: &raw::List) -> Option<Vec<f64>> {
        if list.value.is_empty() {
            self.at(raw::pos(list), key, "must list at least one bucket bound");
            return None;
        }
        let mut bounds = Vec::with_capacity(list.value.len());
        let mut ok = true;
        let mut previous: Option<f64> = None;
        for (i, item) in list.value.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            match parse_bound(&item.value) {
                Err(message) => {
                    self.at(raw::pos(item), item_key, message);
                    ok = false;
                }
                Ok(bound) => {
                    if let Some(before) = previous.filter(|before| bound <= *before) {
                        self.at(
                            raw::pos(item),
                            item_key,
                            format!(
                                "bucket bounds must be strictly increasing: {} is not greater than the previous bound {}",
                                item.value.trim(),
                                before
                            ),
                        );
                        ok = false;
                    }
                    previous = Some(bound);
                    bounds.push(bound);
                }
            }
        }
        ok.then_some(bounds)
    }

    fn routes(
        &mut self,
        raw: &RawConfig,
        upstream_overridden: bool,
        upstream_override: Option<Upstream>,
        base: &Path,
    ) -> Vec<Route> {
        let Some(raw_routes) = self.required_list(&raw.routes, "routes", "route") else {
            return Vec::new();
        };

        let mut names: HashMap<&str, usize> = HashMap::new();
        // Match of each route that checked out, for the shadowing check.
        let mut matches: Vec<Option<MatchSite>> = Vec::new();
        let mut routes = Vec::with_capacity(raw_routes.len());
        for (i, raw_route) in raw_routes.iter().enumerate() {
            let prefix = format!("routes[{i}]");
            let route_pos = raw::pos(raw_route);
            let route = &raw_route.value;

            if let Some(name) = &route.name
                && let Some(first) = names.insert(&name.value, i)
            {
                self.at(
                    raw::pos(name),
                    format!("{prefix}.name"),
                    format!(
                        "duplicate route name `{}` (also routes[{first}])",
                        name.value
                    ),
                );
            }
            let (built, matcher) = self.route(
                &prefix,
                route_pos,
                route,
                upstream_overridden,
                &upstream_override,
                base,
            );
            if let Some(route) = built {
                routes.push(route);
            }
            matches.push(matcher);
        }

        for (j, later) in matches.iter().enumerate() {
            let Some(later) = later else {
                continue;
            };
            let shadowing = matches[..j].iter().enumerate().find_map(|(i, earlier)| {
                earlier
                    .as_ref()
                    .filter(|earlier| covers(&earlier.matcher, &later.matcher))
                    .map(|_| i)
            });
            if let Some(i) = shadowing {
                self.at(
                    later.pos,
                    later.key.clone(),
                    format!(
                        "route can never match: shadowed by routes[{i}], which accepts every request this one does (put the more specific route first)"
                    ),
                );
            }
        }
        routes
    }

    /// Builds one route; also returns its match (with where to report
    /// shadowing) when the match itself checked out.
    fn route(
        &mut self,
        prefix: &str,
        route_pos: Option<Pos>,
        route: &RawRoute,
        upstream_overridden: bool,
        upstream_override: &Option<Upstream>,
        base: &Path,
    ) -> (Option<Route>, Option<MatchSite>) {
        let name = match &route.name {
            None => {
                self.at(
                    route_pos,
                    format!("{prefix}.name"),
                    "required key is missing",
                );
                None
            }
            Some(name) => self.value(Some(name), &format!("{prefix}.name"), |text| {
                if is_label_value(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(
                        "invalid route name `{text}`: must match [a-zA-Z0-9_.:-]+"
                    ))
                }
            }),
        };

        let matcher = self.route_match(prefix, route);
        let matcher_report = matcher.clone().map(|matcher| match &route.matcher {
            Some(raw_match) => MatchSite {
                matcher,
                pos: raw::pos(raw_match),
                key: format!("{prefix}.match"),
            },
            None => MatchSite {
                matcher,
                pos: route_pos,
                key: prefix.to_owned(),
            },
        });

        let upstream_key = format!("{prefix}.upstream");
        let own_upstream = match &route.upstream {
            None if !upstream_overridden => {
                self.at(route_pos, upstream_key, "required key is missing");
                None
            }
            None => None,
            Some(url) => self.value(Some(url), &upstream_key, parse_upstream),
        };
        // A file upstream is checked even when overridden: the file should be
        // valid on its own.
        let upstream = upstream_override.clone().or(own_upstream);

        let protocol = self
            .value(
                route.protocol.as_ref(),
                &format!("{prefix}.protocol"),
                parse_protocol,
            )
            .unwrap_or(Protocol::Auto);

        let defaults = Timeouts::default();
        let timeouts = match &route.timeouts {
            None => defaults,
            Some(raw) => Timeouts {
                connect: self
                    .value(
                        raw.connect.as_ref(),
                        &format!("{prefix}.timeouts.connect"),
                        parse_duration,
                    )
                    .unwrap_or(defaults.connect),
                response_headers: self
                    .value(
                        raw.response_headers.as_ref(),
                        &format!("{prefix}.timeouts.response_headers"),
                        parse_duration,
                    )
                    .unwrap_or(defaults.response_headers),
                idle: self
                    .value(
                        raw.idle.as_ref(),
                        &format!("{prefix}.timeouts.idle"),
                        parse_duration,
                    )
                    .unwrap_or(defaults.idle),
                request_body: self
                    .value(
                        raw.request_body.as_ref(),
                        &format!("{prefix}.timeouts.request_body"),
                        parse_duration,
                    )
                    .unwrap_or(defaults.request_body),
                request_body_total: self
                    .value(
                        raw.request_body_total.as_ref(),
                        &format!("{prefix}.timeouts.request_body_total"),
                        parse_duration,
                    )
                    .unwrap_or(defaults.request_body_total),
            },
        };

        let preserve_host = self
            .value(
                route.preserve_host.as_ref(),
                &format!("{prefix}.preserve_host"),
                parse_bool,
            )
            .unwrap_or(false);
        let strip_prefix = self
            .value(
                route.strip_prefix.as_ref(),
                &format!("{prefix}.strip_prefix"),
                parse_bool,
            )
            .unwrap_or(false);
        let max_in_flight = self.value(
            route.max_in_flight.as_ref(),
            &format!("{prefix}.max_in_flight"),
            |text| match text.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!(
                    "invalid limit `{text}`: expected a whole number, at least 1 (leave the key out for no limit)"
                )),
            },
        );
        let tls_roots = route.tls.as_ref().and_then(|tls| {
            if upstream
                .as_ref()
                .is_some_and(|u| u.scheme != http::uri::Scheme::HTTPS)
            {
                self.at(
                    raw::pos(tls),
                    format!("{prefix}.tls"),
                    "applies only to an https upstream",
                );
                return None;
            }
            self.value(
                tls.value.ca_file.as_ref(),
                &format!("{prefix}.tls.ca_file"),
                |text| read_roots(base, text),
            )
        });
        let names = self.slo_names.clone();
        let names = names.as_deref();
        let slo = self.value(route.slo.as_ref(), &format!("{prefix}.slo"), |text| {
            check_class(names, text)
        });
        let slo_by_model = match &route.slo_by_model {
            None => Vec::new(),
            Some(entries) => self.slo_by_model(&format!("{prefix}.slo_by_model"), entries, names),
        };
        let slo_header = route.slo_header.as_ref().and_then(|field| {
            let key = format!("{prefix}.slo_header");
            if names.is_none() {
                self.at(
                    raw::pos(field),
                    key,
                    "needs `slo_files`: a client may only declare a class defined there",
                );
                return None;
            }
            self.value(Some(field), &key, |text| {
                http::HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
                    .map_err(|_| format!("invalid header name `{text}`"))
            })
        });

        let tenant = route
            .tenant
            .as_ref()
            .and_then(|field| self.tenant(&format!("{prefix}.tenant"), field));

        let built = match (name, matcher, upstream) {
            (Some(name), Some(matcher), Some(upstream)) => Some(Route {
                name,
                matcher,
                upstream,
                protocol,
                timeouts,
                preserve_host,
                strip_prefix,
                max_in_flight,
                tls_roots,
                slo,
                slo_by_model,
                slo_header,
                tenant,
            }),
            _ => None,
        };
        (built, matcher_report)
    }

    /// `routes[i].tenant`: a header, or API keys by their hashes. A key
    /// path or message here never holds what is written as a key of
    /// `keys`: it may be an API key pasted by mistake.
    fn tenant(&mut self, key: &str, field: &Spanned<raw::RawTenant>) -> Option<TenantSource> {
        let tenant = &field.value;
        match (&tenant.header, &tenant.api_keys) {
            (Some(header), None) => self
                .value(Some(header), &format!("{key}.header"), parse_tenant_header)
                .map(TenantSource::Header),
            (None, Some(api_keys)) => self.api_keys(&format!("{key}.api_keys"), field, api_keys),
            (Some(_), Some(_)) => {
                self.at(
                    raw::pos(field),
                    key,
                    "give `header` or `api_keys`, not both",
                );
                None
            }
            (None, None) => {
                self.at(
                    raw::pos(field),
                    key,
                    "needs `header` (a request header naming the tenant) or `api_keys`",
                );
                None
            }
        }
    }

    fn api_keys(
        &mut self,
        key: &str,
        tenant: &Spanned<raw::RawTenant>,
        raw: &raw::RawApiKeys,
    ) -> Option<TenantSource> {
        let mut ok = true;
        let headers = match &raw.headers {
            None => vec![
                http::header::AUTHORIZATION,
                HeaderName::from_static("x-api-key"),
            ],
            Some(list) if list.value.is_empty() => {
                self.at(
                    raw::pos(list),
                    format!("{key}.headers"),
                    "must not be empty",
                );
                ok = false;
                Vec::new()
            }
            Some(list) => list
                .value
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let header = self.value(Some(item), &format!("{key}.headers[{i}]"), |text| {
                        HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
                            .map_err(|_| format!("invalid header name `{text}`"))
                    });
                    ok &= header.is_some();
                    header
                })
                .collect(),
        };
        let keys_key = format!("{key}.keys");
        let Some(entries) = &raw.keys else {
            self.at(raw::pos(tenant), keys_key, "required key is missing");
            return None;
        };
        if entries.value.0.is_empty() {
            self.at(
                raw::pos(entries),
                keys_key,
                "must list at least one key hash",
            );
            return None;
        }
        let mut tenants = HashMap::with_capacity(entries.value.0.len());
        for (hash, field) in &entries.value.0 {
            let Some(digest) = parse_key_hash(hash) else {
                self.at(
                    raw::pos(field),
                    &keys_key,
                    "a key of `keys` must be the SHA-256 of an API key, 64 hex digits \
                     (`tokenmeter hash-key` prints it), never the key itself",
                );
                ok = false;
                continue;
            };
            let name = self.value(Some(field), &keys_key, |text| {
                let text = text.trim();
                if is_tenant_name(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(
                        "invalid tenant name `{text}`: 1 to 64 visible ASCII characters, no spaces"
                    ))
                }
            });
            let Some(name) = name else {
                ok = false;
                continue;
            };
            if tenants.insert(digest, name).is_some() {
                self.at(
                    raw::pos(field),
                    &keys_key,
                    "the same key hash is listed twice",
                );
                ok = false;
            }
        }
        ok.then_some(TenantSource::ApiKeys(ApiKeys { headers, tenants }))
    }

    fn route_match(&mut self, prefix: &str, route: &RawRoute) -> Option<RouteMatch> {
        let Some(raw_match) = &route.matcher else {
            return Some(RouteMatch {
                path_prefix: "/".to_owned(),
                host: None,
                methods: None,
            });
        };
        let raw_match = &raw_match.value;
        let mut ok = true;

        let path_key = format!("{prefix}.match.path_prefix");
        let path_prefix = match &raw_match.path_prefix {
            None => Some("/".to_owned()),
            Some(field) => self.value(Some(field), &path_key, parse_path_prefix),
        };
        ok &= path_prefix.is_some();

        let host = match &raw_match.host {
            None => None,
            Some(field) => {
                let host = self.value(Some(field), &format!("{prefix}.match.host"), parse_host);
                ok &= host.is_some();
                host
            }
        };

        let methods = match &raw_match.methods {
            None => None,
            Some(list) => {
                let key = format!("{prefix}.match.methods");
                let methods = self.methods(&key, list);
                ok &= methods.is_some();
                methods
            }
        };

        match path_prefix {
            Some(path_prefix) if ok => Some(RouteMatch {
                path_prefix,
                host,
                methods,
            }),
            _ => None,
        }
    }

    fn slo_by_model(
        &mut self,
        key: &str,
        entries: &Spanned<raw::Entries>,
        names: Option<&[String]>,
    ) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::with_capacity(entries.value.0.len());
        for (model, class) in &entries.value.0 {
            let entry_key = format!("{key}.{model}");
            if model.is_empty() {
                self.at(raw::pos(class), entry_key, "model name must not be empty");
                continue;
            }
            if out.iter().any(|(m, _)| m == model) {
                self.at(
                    raw::pos(class),
                    entry_key,
                    format!("model `{model}` is listed twice"),
                );
                continue;
            }
            if let Some(class) =
                self.value(Some(class), &entry_key, |text| check_class(names, text))
            {
                out.push((model.clone(), class));
            }
        }
        out
    }

    fn methods(&mut self, key: &str, list: &raw::List) -> Option<Vec<http::Method>> {
        if list.value.is_empty() {
            self.at(
                raw::pos(list),
                key,
                "must not be empty (leave `methods` out to accept any method)",
            );
            return None;
        }
        let mut methods: Vec<http::Method> = Vec::with_capacity(list.value.len());
        let mut ok = true;
        for (i, item) in list.value.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            match parse_method(&item.value) {
                Err(message) => {
                    self.at(raw::pos(item), item_key, message);
                    ok = false;
                }
                Ok(method) if methods.contains(&method) => {
                    self.at(
                        raw::pos(item),
                        item_key,
                        format!("method {method} is listed twice"),
                    );
                    ok = false;
                }
                Ok(method) => methods.push(method),
            }
        }
        ok.then_some(methods)
    }
}

/// Whether every request `later` accepts is also accepted by `earlier`, so
/// that `later`, listed after it, can never be chosen.
fn covers(earlier: &RouteMatch, later: &RouteMatch) -> bool {
    let prefix = later.path_prefix.starts_with(&earlier.path_prefix);
    let host = match (&earlier.host, &later.host) {
        (None, _) => true,
        (Some(a), Some(b)) => a == b,
        (Some(_), None) => false,
    };
    let methods = match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(a), Some(b)) => b.iter().all(|method| a.contains(method)),
        (Some(_), None) => false,
    };
    prefix && host && methods
}

/// `IP:port`.
fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("invalid address `{text}`: expected IP:port, such as 0.0.0.0:8080 or [::1]:8080")
    })
}

/// Bytes, as a whole number with an optional unit: `B`, decimal `kB`/`KB`,
/// `MB`, `GB`, `TB` (powers of 1000) or binary `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024). Greater than zero.
/// Reads a PEM file of certificate authorities (`tls.ca_file`, relative to
/// `base`), each of which must be usable as a trust anchor.
fn read_roots(base: &Path, text: &str) -> Result<super::TlsRoots, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let file = base.join(text.trim());
    let pem = std::fs::read(&file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "`{}` is not a PEM file of certificates: {e}",
                file.display()
            )
        })?;
    if certificates.is_empty() {
        return Err(format!(
            "`{}` holds no certificate (expected PEM `BEGIN CERTIFICATE` blocks)",
            file.display()
        ));
    }
    let mut store = rustls::RootCertStore::empty();
    for (i, cert) in certificates.iter().enumerate() {
        store.add(cert.clone()).map_err(|e| {
            format!(
                "certificate {} of `{}` cannot be a trust anchor: {e}",
                i + 1,
                file.display()
            )
        })?;
    }
    Ok(super::TlsRoots {
        file,
        certificates: certificates.into_iter().map(|c| c.to_vec()).collect(),
    })
}

pub(super) fn parse_size(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let bad = || {
        format!(
            "invalid size `{text}`: expected a whole number of bytes, optionally with a unit (B, kB, MB, GB, KiB, MiB, GiB), such as 4MiB"
        )
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let multiplier: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "kB" | "KB" => 1000,
        "MB" => 1000 * 1000,
        "GB" => 1000 * 1000 * 1000,
        "TB" => 1000 * 1000 * 1000 * 1000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    let too_large = || format!("invalid size `{text}`: too large");
    let count: u64 = digits.parse().map_err(|_| too_large())?;
    let bytes = count.checked_mul(multiplier).ok_or_else(too_large)?;
    let bytes = usize::try_from(bytes).map_err(|_| too_large())?;
    if bytes == 0 {
        return Err(format!("invalid size `{text}`: must be greater than zero"));
    }
    Ok(bytes)
}

/// A humantime duration (`500ms`, `30s`, `10m`, `1h 30m`), greater than zero.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(duration) if duration.is_zero() => Err(format!(
            "invalid duration `{text}`: must be greater than zero"
        )),
        Ok(duration) => Ok(duration),
        Err(_) => Err(format!(
            "invalid duration `{text}`: expected a number with a unit, such as 500ms, 30s, 10m or 1h"
        )),
    }
}

/// YAML 1.2 core booleans.
pub(super) fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" | "True" | "TRUE" => Ok(true),
        "false" | "False" | "FALSE" => Ok(false),
        _ => Err(format!("invalid boolean `{text}`: expected true or false")),
    }
}

/// Every accepted `protocol` value, for error messages.
fn parse_protocol(text: &str) -> Result<Protocol, String> {
    match text.trim() {
        "auto" => Ok(Protocol::Auto),
        "none" => Ok(Protocol::None),
        name => meter::Api::from_name(name)
            .map(Protocol::Api)
            .ok_or_else(|| {
                let names: Vec<&str> = std::iter::once("auto")
                    .chain(meter::Api::NAMED.iter().map(|(name, _)| *name))
                    .chain(std::iter::once("none"))
                    .collect();
                format!(
                    "invalid protocol `{text}`: expected one of {}",
                    names.join(", ")
                )
            }),
    }
}

/// A bucket bound: a finite number greater than zero.
fn parse_bound(text: &str) -> Result<f64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        ".inf" | "inf" | "infinity" | ".nan" | "nan"
    ) {
        return Err(format!("invalid bucket bound `{text}`: must be finite"));
    }
    match trimmed.parse::<f64>() {
        Ok(bound) if !bound.is_finite() => {
            Err(format!("invalid bucket bound `{text}`: must be finite"))
        }
        Ok(bound) if bound <= 0.0 => Err(format!(
            "invalid bucket bound `{text}`: must be greater than zero"
        )),
        Ok(bound) => Ok(bound),
        Err(_) => Err(format!("invalid bucket bound `{text}`: expected a number")),
    }
}

fn parse_path_prefix(text: &str) -> Result<String, String> {
    if !text.starts_with('/') {
        return Err(format!("invalid path prefix `{text}`: must start with `/`"));
    }
    if text.contains(['?', '#']) || text.contains(char::is_whitespace) {
        return Err(format!(
            "invalid path prefix `{text}`: must be a plain path, without query, fragment or spaces"
        ));
    }
    Ok(text.to_owned())
}

/// A host name or IP address without port, stored lowercase.
fn parse_host(text: &str) -> Result<String, String> {
    let host = text.trim();
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner
            .parse::<Ipv6Addr>()
            .map(|_| host.to_ascii_lowercase())
            .map_err(|_| format!("invalid host `{text}`: not an IPv6 address"));
    }
    if host.contains(':') {
        return Err(format!(
            "invalid host `{text}`: give the host without a port (IPv6 addresses in brackets)"
        ));
    }
    let valid = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if valid {
        Ok(host.to_ascii_lowercase())
    } else {
        Err(format!(
            "invalid host `{text}`: expected a host name such as api.example.com"
        ))
    }
}

fn parse_method(text: &str) -> Result<http::Method, String> {
    let upper = text.trim().to_ascii_uppercase();
    if upper.is_empty() {
        return Err("method must not be empty".to_owned());
    }
    http::Method::from_bytes(upper.as_bytes()).map_err(|_| format!("invalid HTTP method `{text}`"))
}

/// A whole number, at least 1.
/// The header of `routes[i].tenant.header`: any but those that carry
/// credentials, whose values must never become label values.
fn parse_tenant_header(text: &str) -> Result<HeaderName, String> {
    let name = HeaderName::from_bytes(text.trim().to_ascii_lowercase().as_bytes())
        .map_err(|_| format!("invalid header name `{text}`"))?;
    if CREDENTIAL_HEADERS.contains(&name.as_str()) {
        return Err(format!(
            "`{name}` carries credentials, which must not become label values: \
             use `api_keys` to attribute requests by key"
        ));
    }
    Ok(name)
}

/// Headers whose values are secrets.
const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "x-goog-api-key",
];

/// 32 bytes from 64 hex digits (either case).
fn parse_key_hash(text: &str) -> Option<[u8; 32]> {
    let text = text.trim().as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// A tenant name usable as a label value and in a log line: 1 to 64
/// visible ASCII characters.
pub fn is_tenant_name(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_graphic())
}

/// A share written as a percentage, `1%` to `100%`, as a fraction.
fn parse_percentage(text: &str) -> Result<f64, String> {
    let invalid = || format!("invalid percentage `{text}`: expected 1% to 100%, like `90%`");
    let number = text.trim().strip_suffix('%').ok_or_else(invalid)?;
    match number.trim().parse::<f64>() {
        Ok(n) if (1.0..=100.0).contains(&n) => Ok(n / 100.0),
        _ => Err(invalid()),
    }
}

fn parse_positive_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "invalid count `{text}`: expected a whole number, at least 1"
        )),
    }
}

/// An address (`10.1.2.3`, `::1`) or a CIDR range (`10.0.0.0/8`,
/// `fd00::/8`).
pub(super) fn parse_ip_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let addr: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("invalid address `{text}`: expected an IP address or CIDR range"))?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => bits,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= bits => n,
            _ => {
                return Err(format!(
                    "invalid range `{text}`: the prefix length must be 0 to {bits}"
                ));
            }
        },
    };
    Ok(IpNet { addr, prefix })
}

/// `text`, a URL as written (valid or not), made safe to show in an error
/// or a log line: the user info masked (`http://***@host`), each non-empty
/// query value replaced (`?api_key=<redacted>`; the keys are kept, but a
/// bare item without `=` is replaced whole, as it may be a token itself)
/// and a non-empty fragment replaced whole (`#<redacted>`). The query
/// starts at the first `?` and the fragment at the first `#`, wherever
/// they are, and the user info runs to the last `@` before them (even past
/// a `/`, which a password may hold unencoded), so a URL that fails to
/// parse is redacted as much as one that parses.
pub(crate) fn redact_url(text: &str) -> std::borrow::Cow<'_, str> {
    const REDACTED: &str = "<redacted>";
    let (before_fragment, fragment) = match text.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (text, None),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (before_fragment, None),
    };
    let start = before_query
        .find("://")
        .map(|i| i + 3)
        .or_else(|| before_query.starts_with("//").then_some(2))
        .unwrap_or(0);
    let at = before_query[start..].rfind('@').map(|i| start + i);
    let mut shown = String::with_capacity(text.len() + 16);
    match at {
        Some(at) => {
            shown.push_str(&before_query[..start]);
            shown.push_str("***");
            shown.push_str(&before_query[at..]);
        }
        None => shown.push_str(before_query),
    }
    if let Some(query) = query {
        shown.push('?');
        for (i, item) in query.split('&').enumerate() {
            if i > 0 {
                shown.push('&');
            }
            match item.split_once('=') {
                Some((key, "")) => {
                    shown.push_str(key);
                    shown.push('=');
                }
                Some((key, _)) => {
                    shown.push_str(key);
                    shown.push('=');
                    shown.push_str(REDACTED);
                }
                None if item.is_empty() => {}
                None => shown.push_str(REDACTED),
            }
        }
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        if !fragment.is_empty() {
            shown.push_str(REDACTED);
        }
    }
    if shown == text {
        text.into()
    } else {
        shown.into()
    }
}

/// An OTLP collector's URL: `http://host:port`, nothing after the port
/// (the signals' paths are the exporter's). TLS is not spoken: a collector
/// or agent beside the proxy receives, and forwards over TLS if need be.
/// Errors show the URL redacted (`redact_url`).
fn parse_otlp_endpoint(text: &str) -> Result<String, String> {
    let upstream = parse_base_url(text, "a collector beside the proxy holds the credentials")?;
    if upstream.scheme != http::uri::Scheme::HTTP {
        return Err(format!(
            "`{}`: only http:// is supported; run an OpenTelemetry Collector beside the proxy to forward over TLS",
            redact_url(text)
        ));
    }
    if !upstream.base_path.is_empty() {
        return Err(format!(
            "`{}`: give the collector's address without a path (the exporter adds /v1/metrics and /v1/traces)",
            redact_url(text)
        ));
    }
    Ok(format!("http://{}", upstream.authority))
}

/// An upstream base URL: `http`/`https`, a host, no user info, query or
/// fragment; the path is kept without its trailing `/`. Errors show the
/// URL redacted (`redact_url`).
pub(super) fn parse_upstream(text: &str) -> Result<Upstream, String> {
    parse_base_url(text, "send credentials as headers")
}

/// An `http`/`https` base URL with neither user info, query nor fragment;
/// a URL with user info is refused with `credentials`, where they go
/// instead. Every error shows the URL as `redact_url` makes it, never as
/// written, whichever check it fails.
fn parse_base_url(text: &str, credentials: &str) -> Result<Upstream, String> {
    let shown = redact_url(text);
    let uri: http::Uri = text
        .parse()
        .map_err(|error| format!("invalid URL `{shown}`: {error}"))?;
    let scheme = match uri.scheme() {
        Some(s) if *s == http::uri::Scheme::HTTP => http::uri::Scheme::HTTP,
        Some(s) if *s == http::uri::Scheme::HTTPS => http::uri::Scheme::HTTPS,
        Some(s) => {
            return Err(format!(
                "invalid URL `{shown}`: scheme `{s}` is not supported, use http or https"
            ));
        }
        None => {
            return Err(format!(
                "invalid URL `{shown}`: expected an absolute URL such as http://127.0.0.1:8000"
            ));
        }
    };
    let Some(authority) = uri.authority().cloned() else {
        return Err(format!("invalid URL `{shown}`: missing host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "invalid URL `{shown}`: must not contain user info; {credentials}"
        ));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(format!("invalid URL `{shown}`: missing host"));
    }
    let after_host = authority.as_str().get(host.len()..).unwrap_or("");
    if !after_host.is_empty() && !matches!(authority.port_u16(), Some(port) if port > 0) {
        return Err(format!("invalid URL `{shown}`: invalid port"));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!(
            "invalid URL `{shown}`: must not have a query or fragment"
        ));
    }
    Ok(Upstream {
        scheme,
        authority,
        base_path: uri.path().trim_end_matches('/').to_owned(),
    })
}

/// Prometheus-safe metric name prefix.
fn is_metric_namespace(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An SLO class named by a route: a label value, and a defined class when
/// SLO files are configured (`names`).
fn check_class(names: Option<&[String]>, text: &str) -> Result<String, String> {
    if !is_label_value(text) {
        return Err(format!(
            "invalid SLO class `{text}`: must match [a-zA-Z0-9_.:-]+"
        ));
    }
    match names {
        Some(names) if !names.iter().any(|n| n == text) => Err(if names.is_empty() {
            format!("unknown SLO class `{text}`: the slo_files define no class")
        } else {
            format!(
                "unknown SLO class `{text}`: not defined in slo_files (defined: {})",
                names.join(", ")
            )
        }),
        _ => Ok(text.to_owned()),
    }
}

/// Route names and SLO classes: bounded, readable label values.
pub(super) fn is_label_value(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;

    #[test]
    fn default_addresses_parse() {
        assert_eq!(
            DEFAULT_LISTEN.parse::<SocketAddr>().ok(),
            Some(default_listen())
        );
        assert_eq!(
            DEFAULT_ADMIN_LISTEN.parse::<SocketAddr>().ok(),
            Some(default_admin_listen())
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4194304"), Ok(4 << 20));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4MB"), Ok(4_000_000));
        assert_eq!(parse_size("100kB"), Ok(100_000));
        assert_eq!(parse_size("100KB"), Ok(100_000));
        assert_eq!(parse_size("16 MiB"), Ok(16 << 20));
        assert_eq!(parse_size("7B"), Ok(7));
        for bad in [
            "",
            "MiB",
            "0",
            "0MiB",
            "1.5MiB",
            "4mb",
            "4 M",
            "-1",
            "99999999999999999999",
            "20000000TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "30", "0s", "-5s", "soon"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn upstreams() {
        let up = parse_upstream("http://127.0.0.1:8000").expect("valid");
        assert_eq!(up.url(), "http://127.0.0.1:8000");
        assert_eq!(up.base_path, "");
        let up = parse_upstream("HTTPS://Example.com/v1/").expect("valid");
        assert_eq!(up.scheme, http::uri::Scheme::HTTPS);
        assert_eq!(up.base_path, "/v1");
        let up = parse_upstream("http://[::1]:8080/a/b").expect("valid");
        assert_eq!(up.authority.as_str(), "[::1]:8080");
        assert_eq!(up.base_path, "/a/b");
        for bad in [
            "127.0.0.1:8000",
            "ftp://h/",
            "http://u:p@h/",
            "http://h/?x=1",
            "http://h/?",
            "http://h/#frag",
            "http://:80/",
            "http://h:99999/",
            "http://h:0/",
            "http://h:/",
            "http://h/a b",
            "",
        ] {
            assert!(parse_upstream(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redact_url_hides_user_info_query_values_and_fragment() {
        for (text, shown) in [
            ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
            ("http://h/?api_key=s3cret", "http://h/?api_key=<redacted>"),
            (
                "http://h/v1?a=1&key=s3cret&b=",
                "http://h/v1?a=<redacted>&key=<redacted>&b=",
            ),
            ("http://h/?a=b=s3cret", "http://h/?a=<redacted>"),
            // A bare item may be a token itself: it goes whole.
            ("http://h/?s3cret", "http://h/?<redacted>"),
            ("http://h/?&&", "http://h/?&&"),
            ("http://h/?", "http://h/?"),
            ("http://h/#s3cret", "http://h/#<redacted>"),
            ("http://h/#", "http://h/#"),
            (
                "http://h/?k=s3cret#s3cret?x=s3cret",
                "http://h/?k=<redacted>#<redacted>",
            ),
            ("http://u:s3cret@h/", "http://***@h/"),
            ("https://s3cret@h:8443", "https://***@h:8443"),
            (
                "http://u:s3cret@h/?k=v#f",
                "http://***@h/?k=<redacted>#<redacted>",
            ),
            // Past a `/` a password may hold unencoded; a `?` or `#` in one
            // starts the query or fragment, which are hidden anyway.
            ("http://u:s3/cret@h/", "http://***@h/"),
            ("http://u:s3?cret@h/", "http://u:s3?<redacted>"),
            ("http://u:s3#cret@h/", "http://u:s3#<redacted>"),
            // Not URLs, or not valid ones, alike.
            ("http://h:bad/?key=s3cret", "http://h:bad/?key=<redacted>"),
            ("h:8000/?key=s3cret", "h:8000/?key=<redacted>"),
            ("u:s3cret@h:8000", "***@h:8000"),
            ("//u:s3cret@h/", "//***@h/"),
            ("", ""),
        ] {
            assert_eq!(redact_url(text), shown, "{text}");
        }
        assert!(matches!(
            redact_url("http://h/?k="),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    /// Every refusal of an upstream or OTLP endpoint names its problem and
    /// shows the URL redacted, whichever check refused it.
    #[test]
    fn url_errors_never_echo_secrets() {
        for (text, problem, shown) in [
            (
                "http://h/?api_key=s3cret",
                "must not have a query or fragment",
                "`http://h/?api_key=<redacted>`",
            ),
            (
                "http://h/#s3cret",
                "must not have a query or fragment",
                "`http://h/#<redacted>`",
            ),
            (
                "http://u:s3cret@h/",
                "must not contain user info",
                "`http://***@h/`",
            ),
            (
                "http://h:bad/?key=s3cret",
                "invalid port",
                "`http://h:bad/?key=<redacted>`",
            ),
            (
                "http://h:0/?key=s3cret",
                "invalid port",
                "`http://h:0/?key=<redacted>`",
            ),
            (
                "ftp://u:s3cret@h/?key=s3cret",
                "scheme `ftp` is not supported",
                "`ftp://***@h/?key=<redacted>`",
            ),
            (
                "/v1?key=s3cret",
                "expected an absolute URL",
                "`/v1?key=<redacted>`",
            ),
            (
                "h:8000/?key=s3cret",
                "invalid format",
                "`h:8000/?key=<redacted>`",
            ),
            (
                "http://h/a b?key=s3cret",
                "invalid URL",
                "`http://h/a b?key=<redacted>`",
            ),
        ] {
            for error in [
                parse_upstream(text).expect_err(text),
                parse_otlp_endpoint(text).expect_err(text),
            ] {
                assert!(!error.contains("s3cret"), "{error}");
                assert!(error.contains(problem), "{error}");
                assert!(error.contains(shown), "{error}");
            }
        }
    }

    /// An upstream or OTLP endpoint that parses has nothing to redact, so
    /// what shows it whole (the `route` and OTLP log lines at start,
    /// `/config`) shows no secret.
    #[test]
    fn parsed_upstream_urls_have_nothing_to_redact() {
        for text in [
            "http://127.0.0.1:8000",
            "HTTPS://Example.com/v1/",
            "http://[::1]:8080/a/b",
        ] {
            let url = parse_upstream(text).expect(text).url();
            assert_eq!(redact_url(&url), url.as_str());
        }
        for text in ["http://collector:4318", "http://127.0.0.1:4317/"] {
            let endpoint = parse_otlp_endpoint(text).expect(text);
            assert_eq!(redact_url(&endpoint), endpoint.as_str());
        }
    }

    #[test]
    fn hosts_methods_bounds() {
        assert_eq!(
            parse_host("API.Example.com"),
            Ok("api.example.com".to_owned())
        );
        assert_eq!(parse_host("[::1]"), Ok("[::1]".to_owned()));
        assert!(parse_host("example.com:80").is_err());
        assert!(parse_host("a..b").is_err());
        assert!(parse_host("").is_err());
        assert_eq!(parse_method("post"), Ok(http::Method::POST));
        assert!(parse_method("PO ST").is_err());
        assert_eq!(parse_bound("1e-3"), Ok(0.001));
        for bad in [".inf", "-.Inf", ".nan", "NaN", "0", "-1", "x"] {
            assert!(parse_bound(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names() {
        assert!(is_metric_namespace("llm"));
        assert!(is_metric_namespace("_x9"));
        assert!(!is_metric_namespace("9x"));
        assert!(!is_metric_namespace("a-b"));
        assert!(!is_metric_namespace(""));
        assert!(is_label_value("chat-v1.2:a_b"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value(""));
    }

    #[test]
    fn shadowing() {
        let m = |prefix: &str, host: Option<&str>, methods: Option<Vec<http::Method>>| RouteMatch {
            path_prefix: prefix.to_owned(),
            host: host.map(str::to_owned),
            methods,
        };
        assert!(covers(&m("/", None, None), &m("/v1/", Some("h"), None)));
        assert!(covers(&m("/v1/", None, None), &m("/v1/", None, None)));
        assert!(!covers(&m("/v1/", None, None), &m("/v2/", None, None)));
        assert!(!covers(&m("/", Some("a"), None), &m("/", None, None)));
        assert!(!covers(
            &m("/", None, Some(vec![http::Method::POST])),
            &m("/", None, None)
        ));
        assert!(covers(
            &m("/", None, Some(vec![http::Method::POST, http::Method::GET])),
            &m("/x", None, Some(vec![http::Method::GET]))
        ));
    }

    #[test]
    fn did_you_mean() {
        let unknown = raw::UnknownKey {
            path: vec![raw::Segment::Key("idel".into())],
            pos: None,
            expected: &["connect", "response_headers", "idle"],
        };
        assert_eq!(
            unknown_key_message(&unknown),
            "unknown key `idel`; did you mean `idle`?"
        );
        let unknown = raw::UnknownKey {
            path: vec![raw::Segment::Key("zzz".into())],
            pos: None,
            expected: &["a", "b"],
        };
        assert_eq!(
            unknown_key_message(&unknown),
            "unknown key `zzz`; expected one of: a, b"
        );
    }
}
