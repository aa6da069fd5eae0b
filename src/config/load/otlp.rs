//! The `otlp` section, and the OpenTelemetry SDKs' environment variables
//! that configure the same export: where both give a value, the file's
//! wins; a signal's own variable wins over the generic one.

use std::time::Duration;

use super::super::raw::RawOtlp;
use super::super::{OtlpExport, OtlpHeaders, OtlpProtocol, OtlpSettings};

use super::super::values::*;
use super::checker::Checker;
use super::otel_env::{
    OtelEnv, parse_disabled, parse_headers, parse_millis, parse_resource_attributes,
};

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";

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
/// variables', with where each came from.
struct Generic {
    endpoint: Option<(Endpoint, &'static str)>,
    protocol: Option<(OtlpProtocol, &'static str)>,
    headers: Option<Vec<(String, String)>>,
    timeout: Option<(Duration, &'static str)>,
    /// The file has an `otlp` section.
    section: bool,
}

const DEFAULT: &str = "default";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl Checker<'_> {
    /// The export settings of the `otlp` section `raw` and the variables
    /// of `env`: `None` when neither asks for an export (no section and
    /// no endpoint variable) or `OTEL_SDK_DISABLED` is `true`.
    pub(crate) fn otlp(&mut self, raw: Option<&RawOtlp>, env: &OtelEnv) -> Option<OtlpSettings> {
        if self.env_value(env, "OTEL_SDK_DISABLED", parse_disabled) == Some(true) {
            return None;
        }
        let asked = [ENDPOINT, METRICS.vars[0], TRACES.vars[0]]
            .iter()
            .any(|var| env.get(var).is_some());
        if raw.is_none() && !asked {
            return None;
        }
        let none = RawOtlp::default();
        let o = raw.unwrap_or(&none);
        // A file's key with a bad value is reported already; it is not
        // looked for in the environment.
        let in_file = |checker: &Self, key: &str| checker.given(key);
        let endpoint = match (&o.endpoint, in_file(self, "otlp.endpoint")) {
            (Some(e), _) => Some(((e.clone(), String::new()), "otlp.endpoint")),
            (None, true) => None,
            (None, false) => self
                .env_value(env, ENDPOINT, parse_env_endpoint)
                .map(|e| (e, ENDPOINT)),
        };
        let protocol = match (o.protocol, in_file(self, "otlp.protocol")) {
            (Some(p), _) => Some((p, "otlp.protocol")),
            (None, true) => None,
            (None, false) => self
                .env_value(env, PROTOCOL, parse_otlp_protocol)
                .map(|p| (p, PROTOCOL)),
        };
        let timeout = match (o.timeout, in_file(self, "otlp.timeout")) {
            (Some(t), _) => Some((t, "otlp.timeout")),
            (None, true) => None,
            (None, false) => self
                .env_value(env, TIMEOUT, parse_millis)
                .map(|t| (t, TIMEOUT)),
        };
        let generic = Generic {
            endpoint,
            protocol,
            headers: self.env_value(env, HEADERS, parse_headers),
            timeout,
            section: raw.is_some(),
        };
        let (metrics_on, traces_on) = (o.metrics.unwrap_or(true), o.traces.unwrap_or(true));
        let metrics = metrics_on
            .then(|| self.signal(&METRICS, &generic, env))
            .flatten();
        let traces = traces_on
            .then(|| self.signal(&TRACES, &generic, env))
            .flatten();
        if generic.section
            && generic.endpoint.is_none()
            && !self.given("otlp.endpoint")
            && ((metrics_on && metrics.is_none()) || (traces_on && traces.is_none()))
        {
            self.at(
                None,
                "otlp.endpoint",
                format!(
                    "required key is missing: the collector's URL, such as http://127.0.0.1:4318 (or set {ENDPOINT})"
                ),
            );
        }
        let mut origins = Vec::new();
        let mut duration = |field: Option<Duration>, key, var, default| {
            let (value, origin) = match (field, self.given(key)) {
                (Some(value), _) => (Some(value), key),
                // Bad, and reported.
                (None, true) => (None, key),
                (None, false) => (self.env_value(env, var, parse_millis), var),
            };
            match value {
                Some(value) => (value, origin),
                None => (default, DEFAULT),
            }
        };
        let (metrics_interval, from) = duration(
            o.metrics_interval,
            "otlp.metrics_interval",
            "OTEL_METRIC_EXPORT_INTERVAL",
            Duration::from_secs(60),
        );
        origins.push(("metrics_interval", from));
        let (traces_delay, from) = duration(
            o.traces_delay,
            "otlp.traces_delay",
            "OTEL_BSP_SCHEDULE_DELAY",
            Duration::from_secs(5),
        );
        origins.push(("traces_delay", from));
        let queue = o.queue.unwrap_or(2048);
        let max_batch = o.max_batch.unwrap_or(512);
        let mut resource_attributes = self
            .env_value(env, "OTEL_RESOURCE_ATTRIBUTES", parse_resource_attributes)
            .unwrap_or_default();
        let from_attributes = resource_attributes
            .iter()
            .rposition(|(k, _)| k == "service.name")
            .map(|i| resource_attributes.swap_remove(i).1);
        resource_attributes.retain(|(k, _)| k != "service.name");
        let (service_name, from) = match (&o.service_name, env.get("OTEL_SERVICE_NAME")) {
            (Some(name), _) => (name.clone(), "otlp.service_name"),
            (None, Some(name)) => (name.to_owned(), "OTEL_SERVICE_NAME"),
            (None, None) => match from_attributes {
                Some(name) => (name, "OTEL_RESOURCE_ATTRIBUTES"),
                None => ("tokenmeter".to_owned(), DEFAULT),
            },
        };
        origins.push(("service_name", from));
        if metrics.is_none() && traces.is_none() {
            return None;
        }
        Some(OtlpSettings {
            endpoint: generic
                .endpoint
                .as_ref()
                .map(|((address, path), _)| format!("{address}{path}")),
            protocol: generic
                .protocol
                .map_or(OtlpProtocol::HttpProtobuf, |(p, _)| p),
            timeout: generic.timeout.map_or(DEFAULT_TIMEOUT, |(t, _)| t),
            metrics,
            traces,
            metrics_interval,
            traces_delay,
            queue,
            max_batch,
            service_name,
            resource_attributes,
            origins,
        })
    }

    /// Where and how `signal` is sent, or `None` when nothing gives it an
    /// endpoint.
    fn signal(&mut self, signal: &Signal, generic: &Generic, env: &OtelEnv) -> Option<OtlpExport> {
        let [endpoint_var, protocol_var, headers_var, timeout_var] = signal.vars;
        let own_protocol = self.env_value(env, protocol_var, parse_otlp_protocol);
        let (protocol, protocol_from) = match (generic.protocol, own_protocol) {
            (Some((p, from)), _) if from.starts_with("otlp.") => (p, from),
            (_, Some(p)) => (p, protocol_var),
            (Some((p, from)), None) => (p, from),
            (None, None) => (OtlpProtocol::HttpProtobuf, DEFAULT),
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
            (Some((t, from)), _) if from.starts_with("otlp.") => (t, from),
            (_, Some(t)) => (t, timeout_var),
            (Some((t, from)), None) => (t, from),
            (None, None) => (DEFAULT_TIMEOUT, DEFAULT),
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
