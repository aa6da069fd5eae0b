//! The `otlp` section, and the OpenTelemetry SDKs' environment variables
//! that configure the same export: where both give a value, the file's
//! wins; a signal's own variable wins over the generic one.

use std::time::Duration;

use super::super::{GenAiNames, OtlpExport, OtlpExports, OtlpHeaders, OtlpProtocol, OtlpSettings};

use super::super::values::*;
use super::checker::Checker;
use super::otel_env::{
    OtelEnv, parse_disabled, parse_headers, parse_millis, parse_resource_attributes,
};

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
/// Which semantic conventions' names to emit, for every signal and domain
/// (the GenAI ones: [`GenAiNames::from_opt_in`]).
const OPT_IN: &str = "OTEL_SEMCONV_STABILITY_OPT_IN";

/// A signal's path on an OTLP/HTTP collector, and its own variables:
/// endpoint, protocol, headers, timeout.
struct Signal {
    path: &'static str,
    vars: [&'static str; 4],
}

const METRICS: Signal = Signal {
    path: "/v1/metrics",
    vars: [
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    ],
};

const TRACES: Signal = Signal {
    path: "/v1/traces",
    vars: [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    ],
};

/// A collector's address, `http://host:port`, and the path after it (an
/// environment variable's; the file's has none).
type Endpoint = (String, String);

/// The values given for every signal: the file's or the generic
/// variables' (else the defaults), with where each came from.
struct Generic {
    endpoint: Option<(Endpoint, &'static str)>,
    protocol: (OtlpProtocol, &'static str),
    headers: Option<Vec<(String, String)>>,
    timeout: (Duration, &'static str),
}

const DEFAULT: &str = "default";

impl Checker<'_> {
    /// The export settings of the file's `otlp` section and the variables
    /// of `env`: `None` when neither asks for an export (no section and no
    /// endpoint variable) or `OTEL_SDK_DISABLED` is `true`. A key the file
    /// gives is the file's (a bad value is reported already); another is
    /// the variable's, else its default.
    pub(crate) fn otlp(
        &mut self,
        file: Option<&OtlpSettings>,
        env: &OtelEnv,
    ) -> Option<OtlpSettings> {
        if self.env_value(env, "OTEL_SDK_DISABLED", parse_disabled) == Some(true) {
            return None;
        }
        let asked = [ENDPOINT, METRICS.vars[0], TRACES.vars[0]]
            .iter()
            .any(|var| env.get(var).is_some());
        if file.is_none() && !asked {
            return None;
        }
        let mut o = file.cloned().unwrap_or_default();
        let endpoint = match (&o.endpoint, self.given("otlp.endpoint")) {
            (Some(e), _) => Some(((e.clone(), String::new()), "otlp.endpoint")),
            (None, true) => None,
            (None, false) => self
                .env_value(env, ENDPOINT, parse_env_endpoint)
                .map(|e| (e, ENDPOINT)),
        };
        let mut protocol = (o.protocol, DEFAULT);
        self.setting(
            env,
            "otlp.protocol",
            PROTOCOL,
            parse_otlp_protocol,
            &mut protocol,
        );
        let mut timeout = (o.timeout, DEFAULT);
        self.setting(env, "otlp.timeout", TIMEOUT, parse_millis, &mut timeout);
        let generic = Generic {
            endpoint,
            protocol,
            headers: self.env_value(env, HEADERS, parse_headers),
            timeout,
        };
        let metrics = o.metrics.then(|| self.signal(&METRICS, &generic, env));
        let traces = o.traces.then(|| self.signal(&TRACES, &generic, env));
        let (metrics, traces) = (metrics.flatten(), traces.flatten());
        if file.is_some()
            && generic.endpoint.is_none()
            && !self.given("otlp.endpoint")
            && ((o.metrics && metrics.is_none()) || (o.traces && traces.is_none()))
        {
            self.at(
                None,
                "otlp.endpoint",
                format!(
                    "required key is missing: the collector's URL, such as http://127.0.0.1:4318 (or set {ENDPOINT})"
                ),
            );
        }
        let mut interval = (o.metrics_interval, DEFAULT);
        let var = "OTEL_METRIC_EXPORT_INTERVAL";
        self.setting(
            env,
            "otlp.metrics_interval",
            var,
            parse_millis,
            &mut interval,
        );
        let mut delay = (o.traces_delay, DEFAULT);
        let var = "OTEL_BSP_SCHEDULE_DELAY";
        self.setting(env, "otlp.traces_delay", var, parse_millis, &mut delay);
        let mut resource_attributes = self
            .env_value(env, "OTEL_RESOURCE_ATTRIBUTES", parse_resource_attributes)
            .unwrap_or_default();
        let from_attributes = resource_attributes
            .iter()
            .rposition(|(k, _)| k == "service.name")
            .map(|i| resource_attributes.swap_remove(i).1);
        resource_attributes.retain(|(k, _)| k != "service.name");
        let given_name = self.given("otlp.service_name");
        let service_from = match (env.get("OTEL_SERVICE_NAME"), from_attributes) {
            _ if given_name => "otlp.service_name",
            (Some(name), _) => {
                o.service_name = name.to_owned();
                "OTEL_SERVICE_NAME"
            }
            (None, Some(name)) => {
                o.service_name = name;
                "OTEL_RESOURCE_ATTRIBUTES"
            }
            (None, None) => DEFAULT,
        };
        if metrics.is_none() && traces.is_none() {
            return None;
        }
        Some(OtlpSettings {
            endpoint: generic
                .endpoint
                .as_ref()
                .map(|((address, path), _)| format!("{address}{path}")),
            protocol: generic.protocol.0,
            timeout: generic.timeout.0,
            metrics: metrics.is_some(),
            traces: traces.is_some(),
            metrics_interval: interval.0,
            traces_delay: delay.0,
            resource_attributes,
            exports: OtlpExports { metrics, traces },
            gen_ai_names: GenAiNames::from_opt_in(env.get(OPT_IN)),
            origins: vec![
                ("metrics_interval", interval.1),
                ("traces_delay", delay.1),
                ("service_name", service_from),
                (
                    "gen_ai_names",
                    if env.get(OPT_IN).is_some() {
                        OPT_IN
                    } else {
                        DEFAULT
                    },
                ),
            ],
            ..o
        })
    }

    /// One setting of the section: the file's at `key` when it gives one,
    /// else the variable `var`'s when it is set and good; `value` holds
    /// the default and is left with the setting and where it came from.
    fn setting<T>(
        &mut self,
        env: &OtelEnv,
        key: &'static str,
        var: &'static str,
        parse: impl FnOnce(&str) -> Result<T, String>,
        value: &mut (T, &'static str),
    ) {
        if self.given(key) {
            value.1 = key;
        } else if let Some(from_env) = self.env_value(env, var, parse) {
            *value = (from_env, var);
        }
    }

    /// Where and how `signal` is sent, or `None` when nothing gives it an
    /// endpoint.
    fn signal(&mut self, signal: &Signal, generic: &Generic, env: &OtelEnv) -> Option<OtlpExport> {
        let [endpoint_var, protocol_var, headers_var, timeout_var] = signal.vars;
        let own_protocol = self.env_value(env, protocol_var, parse_otlp_protocol);
        let (protocol, protocol_from) = match (generic.protocol, own_protocol) {
            ((p, from), _) if from.starts_with("otlp.") => (p, from),
            (_, Some(p)) => (p, protocol_var),
            (given, None) => given,
        };
        // Each variable is checked, whether or not the signal has an
        // endpoint.
        let own_endpoint = self.env_value(env, endpoint_var, parse_env_endpoint);
        let own_headers = self.env_value(env, headers_var, parse_headers);
        let own_timeout = self.env_value(env, timeout_var, parse_millis);
        let (endpoint, endpoint_from) = match (&generic.endpoint, own_endpoint) {
            (Some((e, from)), _) if from.starts_with("otlp.") => {
                (join(e, signal.path, protocol), *from)
            }
            // A signal's own endpoint is used as it is.
            (_, Some((address, path))) => (
                match protocol {
                    OtlpProtocol::HttpProtobuf => format!("{address}{path}"),
                    OtlpProtocol::Grpc => {
                        if !path.is_empty() {
                            self.env(
                                endpoint_var,
                                "a gRPC endpoint is `http://host:port`, without a path",
                            );
                        }
                        address
                    }
                },
                endpoint_var,
            ),
            (Some((e, from)), None) => {
                if protocol == OtlpProtocol::Grpc && !e.1.is_empty() {
                    self.env(
                        from,
                        "a gRPC endpoint is `http://host:port`, without a path",
                    );
                }
                (join(e, signal.path, protocol), *from)
            }
            (None, None) => return None,
        };
        let (headers, headers_from) = match (own_headers, &generic.headers) {
            (Some(h), _) => (h, headers_var),
            (None, Some(h)) => (h.clone(), HEADERS),
            (None, None) => (Vec::new(), DEFAULT),
        };
        let (timeout, timeout_from) = match (generic.timeout, own_timeout) {
            ((t, from), _) if from.starts_with("otlp.") => (t, from),
            (_, Some(t)) => (t, timeout_var),
            (given, None) => given,
        };
        Some(OtlpExport {
            endpoint,
            protocol,
            headers: OtlpHeaders(headers),
            timeout,
            origins: [endpoint_from, protocol_from, headers_from, timeout_from],
        })
    }

    /// The variable `name` of `env` parsed, or `None` when it is unset or
    /// bad (recorded, under its name).
    fn env_value<T>(
        &mut self,
        env: &OtelEnv,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let text = env.get(name)?;
        match parse(text) {
            Ok(value) => Some(value),
            Err(message) => {
                self.env(name, message);
                None
            }
        }
    }
}

/// The URL a signal is sent to from a generic endpoint: OTLP/HTTP's adds
/// the signal's path, gRPC's is the collector's address.
fn join((address, path): &Endpoint, signal_path: &str, protocol: OtlpProtocol) -> String {
    match protocol {
        OtlpProtocol::HttpProtobuf => format!("{address}{path}{signal_path}"),
        OtlpProtocol::Grpc => address.clone(),
    }
}

/// An endpoint variable's URL: `http://host:port`, and a path after it
/// (kept). Errors show the URL redacted.
fn parse_env_endpoint(text: &str) -> Result<Endpoint, String> {
    let url = parse_base_url(
        text,
        "give a collector's credentials in OTEL_EXPORTER_OTLP_HEADERS",
    )?;
    if url.scheme != http::uri::Scheme::HTTP {
        return Err(format!(
            "`{}`: only http:// is supported; run an OpenTelemetry Collector beside the proxy to forward over TLS",
            redact_url(text)
        ));
    }
    Ok((format!("http://{}", url.authority), url.base_path))
}
