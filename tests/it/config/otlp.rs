//! The `otlp` section and the OpenTelemetry SDKs' environment variables.

use super::*;

/// `otlp`: off without the section; with it, only the endpoint is needed;
/// each bad value is its own error, and no URL is echoed with a secret.
/// The `otlp` settings from the OpenTelemetry SDKs' variables, passed
/// as a map: alone they turn the export on; the file wins where both give
/// a value; a signal's own variable wins over the generic one, and its
/// endpoint is used as it is; bad values are errors that name the
/// variable and never show a header's value.
#[test]
fn otlp_settings_from_the_environment() {
    use tokenmeter::config::{ENV_FILE, OtelEnv, OtlpProtocol};
    const ROUTE: &str = "routes:\n  - name: r\n    upstream: http://127.0.0.1:8000\n";
    let load = |file: &str, env: &[(&str, &str)]| {
        let overrides = Overrides {
            otel_env: OtelEnv::from_pairs(env.iter().copied()),
            ..Default::default()
        };
        Config::parse(&format!("{file}{ROUTE}"), "t.yaml", &overrides)
    };
    // Nothing asks for an export.
    assert_eq!(load("", &[("OTEL_SERVICE_NAME", "x")]).unwrap().otlp, None);
    let o = load(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base/"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/custom/path",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20s3cret",
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-key=m3trics"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "700"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1500"),
            ("OTEL_BSP_SCHEDULE_DELAY", "250"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=ignored,deployment.environment=eu%2Cprod",
            ),
            ("OTEL_SERVICE_NAME", "from-env"),
        ],
    )
    .unwrap()
    .otlp
    .unwrap();
    let (m, t) = (
        o.exports.metrics.clone().unwrap(),
        o.exports.traces.clone().unwrap(),
    );
    assert_eq!(m.endpoint, "http://collector:4318/base/v1/metrics");
    assert_eq!(t.endpoint, "http://traces:4318/custom/path");
    assert_eq!(m.headers.0, [("x-key".to_owned(), "m3trics".to_owned())]);
    assert_eq!(
        t.headers.0,
        [("authorization".to_owned(), "Bearer s3cret".to_owned())]
    );
    assert_eq!(
        (m.timeout, t.timeout),
        (Duration::from_millis(700), Duration::from_millis(2500))
    );
    assert_eq!(m.origins[0], "OTEL_EXPORTER_OTLP_ENDPOINT");
    assert_eq!(t.origins[0], "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    assert_eq!(o.metrics_interval, Duration::from_millis(1500));
    assert_eq!(o.traces_delay, Duration::from_millis(250));
    assert_eq!(o.service_name, "from-env");
    assert_eq!(
        o.resource_attributes,
        [("deployment.environment".to_owned(), "eu,prod".to_owned())]
    );
    // Shown with the headers' names only, in /config as in Debug.
    let config = load(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20s3cret",
            ),
        ],
    )
    .unwrap();
    let shown = config.to_json().to_string();
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains(r#""authorization":"<redacted>""#), "{shown}");
    assert!(!format!("{config:?}").contains("s3cret"));

    // The file wins; gRPC takes the collector's address as it is.
    let o = load(
        "otlp:\n  endpoint: http://file:4317\n  protocol: grpc\n  service_name: f\n  timeout: 3s\n",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "100"),
            ("OTEL_SERVICE_NAME", "e"),
        ],
    )
    .unwrap()
    .otlp
    .unwrap();
    let m = o.exports.metrics.unwrap();
    assert_eq!(
        (m.endpoint.as_str(), m.protocol),
        ("http://file:4317", OtlpProtocol::Grpc)
    );
    assert_eq!(m.timeout, Duration::from_secs(3));
    assert_eq!(o.service_name, "f");
    // Only a signal's endpoint: that signal alone.
    let o = load(
        "",
        &[(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://m:4318/v1/metrics",
        )],
    )
    .unwrap()
    .otlp
    .unwrap();
    assert!(o.exports.metrics.is_some() && o.exports.traces.is_none());
    assert!(o.metrics && !o.traces);
    // Disabled, whatever else says.
    for file in ["", "otlp:\n  endpoint: http://c:4318\n"] {
        let c = load(
            file,
            &[
                ("OTEL_SDK_DISABLED", "TRUE"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ],
        )
        .unwrap();
        assert_eq!(c.otlp, None);
    }

    // Every bad value, by its variable's name; no header value shown.
    let errors = load(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer s3cret,Bearer%20s3cret",
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "10s"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
            ("OTEL_RESOURCE_ATTRIBUTES", "novalue"),
            ("OTEL_SDK_DISABLED", "yes"),
        ],
    )
    .unwrap_err()
    .0;
    let names: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        "OTEL_METRIC_EXPORT_INTERVAL",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_SDK_DISABLED",
    ] {
        assert!(names.contains(&name), "{name}: {errors:?}");
    }
    assert!(errors.iter().all(|e| e.file == ENV_FILE), "{errors:?}");
    let text = tokenmeter::config::ConfigErrors(errors).to_string();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(
        text.contains("<environment>: OTEL_EXPORTER_OTLP_HEADERS: entry 2"),
        "{text}"
    );
}

#[test]
fn otlp_export_settings() {
    const ROUTE: &str = "routes:\n  - name: r\n    upstream: http://127.0.0.1:8000\n";
    assert_eq!(parse(ROUTE).unwrap().otlp, None);
    let c = parse(&format!(
        "otlp:\n  endpoint: http://collector:4318\n{ROUTE}"
    ))
    .unwrap();
    let o = c.otlp.unwrap();
    assert_eq!(o.endpoint.as_deref(), Some("http://collector:4318"));
    assert_eq!(o.protocol, tokenmeter::config::OtlpProtocol::HttpProtobuf);
    assert_eq!(
        o.exports.metrics.unwrap().endpoint,
        "http://collector:4318/v1/metrics"
    );
    assert_eq!(
        o.exports.traces.unwrap().endpoint,
        "http://collector:4318/v1/traces"
    );
    assert_eq!(o.metrics_interval, Duration::from_secs(60));
    assert_eq!(o.traces_delay, Duration::from_secs(5));
    assert_eq!(o.timeout, Duration::from_secs(10));
    assert_eq!((o.queue, o.max_batch), (2048, 512));
    assert_eq!(o.service_name, "tokenmeter");
    let c = parse(&format!(
        "otlp:\n  endpoint: http://127.0.0.1:4317\n  protocol: grpc\n  traces: false\n  queue: 16\n{ROUTE}"
    ))
    .unwrap();
    let o = c.otlp.unwrap();
    assert_eq!(o.protocol, tokenmeter::config::OtlpProtocol::Grpc);
    assert_eq!(o.exports.metrics.unwrap().endpoint, "http://127.0.0.1:4317");
    assert!(o.exports.traces.is_none());
    assert_eq!(o.queue, 16);

    let errors = errors_of(&format!("otlp:\n  protocol: grpc\n{ROUTE}"));
    assert!(
        message_of(&errors, "otlp.endpoint").starts_with("required"),
        "{errors:?}"
    );
    let errors = errors_of(&format!(
        "otlp:\n  endpoint: https://user:secret@collector:4318\n  protocol: thrift\n  queue: 0\n  tracing: true\n{ROUTE}"
    ));
    let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
    assert!(
        [
            "otlp.endpoint",
            "otlp.protocol",
            "otlp.queue",
            "otlp.tracing"
        ]
        .iter()
        .all(|k| keys.contains(k)),
        "{errors:?}"
    );
    assert!(
        errors.iter().all(|e| !e.message.contains("secret")),
        "{errors:?}"
    );
    // There is no `otlp.headers` to send credentials in.
    assert!(
        message_of(&errors, "otlp.endpoint").contains("a collector beside the proxy"),
        "{errors:?}"
    );
    let errors = errors_of(&format!(
        "otlp:\n  endpoint: http://collector:4318/v1/traces\n{ROUTE}"
    ));
    assert!(
        message_of(&errors, "otlp.endpoint").contains("without a path"),
        "{errors:?}"
    );
    let errors = errors_of(&format!(
        "otlp:\n  endpoint: https://collector:4318\n{ROUTE}"
    ));
    assert!(
        message_of(&errors, "otlp.endpoint").contains("only http://"),
        "{errors:?}"
    );
}
