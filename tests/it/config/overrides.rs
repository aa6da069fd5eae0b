//! Command-line overrides, unknown keys and the protocol names.

use super::*;

#[test]
fn overrides_win_over_the_file() {
    let text = "\
listen: 0.0.0.0:1000
admin: {listen: 127.0.0.1:1001}
routes:
  - name: a
    match: {path_prefix: /a/}
    upstream: http://127.0.0.1:1/base
  - name: b
    upstream: http://127.0.0.1:2
";
    let overrides = Overrides {
        listen: Some(addr("127.0.0.1:2000")),
        admin_listen: Some(addr("127.0.0.1:2001")),
        upstream: Some("https://upstream.example:8443/v1/".to_owned()),
        ..Default::default()
    };
    let config = Config::parse(text, "test.yaml", &overrides).expect("valid");
    assert_eq!(config.listen, addr("127.0.0.1:2000"));
    assert_eq!(config.admin.listen, addr("127.0.0.1:2001"));
    assert_eq!(config.routes.len(), 2);
    for route in &config.routes {
        assert_eq!(route.upstream.url(), "https://upstream.example:8443/v1");
    }
    // Route matches are untouched.
    assert_eq!(config.routes[0].matcher.path_prefix, "/a/");

    // Without overrides the file's values stand.
    let config = Config::parse(text, "test.yaml", &Overrides::default()).expect("valid");
    assert_eq!(config.listen, addr("0.0.0.0:1000"));
    assert_eq!(config.routes[0].upstream.url(), "http://127.0.0.1:1/base");
}

#[test]
fn upstream_override_makes_file_upstreams_optional() {
    let text = "routes:\n  - name: a\n";
    assert!(parse(text).is_err());
    let overrides = Overrides {
        upstream: Some("http://127.0.0.1:9".to_owned()),
        ..Overrides::default()
    };
    let config = Config::parse(text, "test.yaml", &overrides).expect("valid");
    assert_eq!(config.routes[0].upstream.url(), "http://127.0.0.1:9");
}

#[test]
fn invalid_override_is_an_error_like_any_other() {
    let text = "routes:\n  - name: a\n    upstream: http://127.0.0.1:1\n    protocol: grpc\n";
    let overrides = Overrides {
        upstream: Some("not a url".to_owned()),
        ..Overrides::default()
    };
    let errors = Config::parse(text, "test.yaml", &overrides).expect_err("bad");
    let found: Vec<(&str, &str)> = errors
        .0
        .iter()
        .map(|e| (e.file.as_str(), e.key.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("test.yaml", "routes[0].protocol"),
            ("<flags>", "--upstream")
        ]
    );

    // An override that collides with the file's admin address.
    let overrides = Overrides {
        listen: Some(addr("127.0.0.1:9464")),
        ..Overrides::default()
    };
    let text = "routes:\n  - name: a\n    upstream: http://127.0.0.1:1\n";
    let errors = Config::parse(text, "test.yaml", &overrides).expect_err("bad");
    assert_eq!(errors.0.len(), 1);
    assert_eq!(errors.0[0].file, "<flags>");
    assert_eq!(errors.0[0].key, "--listen");
}

#[test]
fn from_overrides_with_upstream() {
    let overrides = Overrides {
        listen: Some(addr("127.0.0.1:7000")),
        admin_listen: None,
        upstream: Some("http://127.0.0.1:8000/".to_owned()),
        ..Default::default()
    };
    let config = Config::from_overrides(&overrides).expect("valid");
    assert_eq!(config.listen, addr("127.0.0.1:7000"));
    assert_eq!(config.admin.listen, addr("127.0.0.1:9464"));
    assert_eq!(config.proxy, ProxySettings::default());
    assert_eq!(config.metrics.buckets, Buckets::default());
    assert_eq!(config.routes.len(), 1);
    let route = &config.routes[0];
    assert_eq!(route.name, "default");
    assert_eq!(route.matcher.path_prefix, "/");
    assert_eq!(route.matcher.host, None);
    assert_eq!(route.matcher.methods, None);
    assert_eq!(route.protocol, Protocol::Auto);
    assert_eq!(route.upstream.url(), "http://127.0.0.1:8000");
    assert_eq!(route.timeouts, Timeouts::default());
}

/// A configuration from flags alone is made the way a file's is: it is
/// the one a file holding only the route `default` gives under the same
/// flags and `OTEL_*` variables.
#[test]
fn from_overrides_is_a_file_with_only_the_default_route() {
    let overrides = Overrides {
        listen: Some(addr("127.0.0.1:7000")),
        admin_listen: Some(addr("127.0.0.1:7001")),
        upstream: Some("http://127.0.0.1:8000/v1".to_owned()),
        otel_env: tokenmeter::config::OtelEnv::from_pairs([(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318",
        )]),
    };
    let from_flags = Config::from_overrides(&overrides).expect("valid");
    let from_file =
        Config::parse("routes: [{name: default}]\n", "test.yaml", &overrides).expect("valid");
    assert_eq!(from_flags, from_file);
    assert!(from_flags.otlp.is_some());
    // The rules across keys hold for flags alone too.
    let colliding = Overrides {
        admin_listen: Some(addr("127.0.0.1:7000")),
        ..overrides
    };
    let errors = Config::from_overrides(&colliding).expect_err("one address");
    assert_eq!(
        errors.to_string(),
        "<flags>: --admin-listen: the proxy and the admin listener cannot share the address 127.0.0.1:7000"
    );
}

#[test]
fn from_overrides_without_or_with_a_bad_upstream() {
    let errors = Config::from_overrides(&Overrides::default()).expect_err("no upstream");
    assert_eq!(errors.0.len(), 1);
    assert_eq!(errors.0[0].file, "<flags>");
    assert_eq!(errors.0[0].key, "--upstream");
    assert_eq!(errors.0[0].line, None);
    assert!(
        errors.0[0]
            .to_string()
            .starts_with("<flags>: --upstream: required")
    );

    for bad in ["127.0.0.1:8000", "ftp://h/", "http://h/?q=1", "http://u@h/"] {
        let overrides = Overrides {
            upstream: Some(bad.to_owned()),
            ..Overrides::default()
        };
        let errors = Config::from_overrides(&overrides).expect_err(bad);
        assert_eq!(errors.0.len(), 1, "{bad}");
        assert_eq!(errors.0[0].key, "--upstream");
        assert_eq!(errors.0[0].file, "<flags>");
    }
}

#[test]
fn unknown_keys_at_every_level() {
    let text = "\
lisen: 0.0.0.0:1
proxy: {max_body: 1}
metrics:
  models: {allowed: [a]}
  buckets: {ttft: [1]}
routes:
  - name: a
    upstream: http://127.0.0.1:1
    match: {prefix: /}
    retries: 3
";
    let errors = errors_of(text);
    assert_eq!(
        lines_and_keys(&errors),
        vec![
            (Some(1), "lisen"),
            (Some(2), "proxy.max_body"),
            (Some(4), "metrics.models.allowed"),
            (Some(5), "metrics.buckets.ttft"),
            (Some(9), "routes[0].match.prefix"),
            (Some(10), "routes[0].retries"),
        ],
        "{}",
        ConfigErrors(errors.clone())
    );
    assert!(errors[0].message.contains("did you mean `listen`"));
    assert!(
        errors[5]
            .message
            .contains("expected one of: name, match, upstream")
    );
}

#[test]
fn every_protocol_name_is_accepted() {
    for (name, protocol) in [
        ("auto", Protocol::Auto),
        ("openai", Protocol::Api(meter::Api::OpenAi)),
        ("responses", Protocol::Api(meter::Api::Responses)),
        ("anthropic", Protocol::Api(meter::Api::Anthropic)),
        ("tgi", Protocol::Api(meter::Api::Tgi)),
        ("ollama", Protocol::Api(meter::Api::Ollama)),
        ("llamacpp", Protocol::Api(meter::Api::LlamaCpp)),
        ("gemini", Protocol::Api(meter::Api::Gemini)),
        ("sglang", Protocol::Api(meter::Api::Sglang)),
        ("triton", Protocol::Api(meter::Api::Triton)),
        ("none", Protocol::None),
    ] {
        let text = format!(
            "routes:\n  - name: a\n    upstream: http://127.0.0.1:1\n    protocol: {name}\n"
        );
        let config = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(config.routes[0].protocol, protocol, "{name}");
    }
    let errors = errors_of(
        "routes:\n  - name: a\n    upstream: http://127.0.0.1:1\n    protocol: OpenAI-ish\n",
    );
    let message = errors[0].to_string();
    assert!(
        message.contains("anthropic") && message.contains("triton"),
        "{message}"
    );
}
