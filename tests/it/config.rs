//! Config loading at the library boundary: the shipped example configs load,
//! and bad configs report every problem at once with file, line and key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokenmeter::config::{
    Buckets, Config, ConfigError, ConfigErrors, Overrides, Protocol, ProxySettings, Timeouts,
};

const CONFIG_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config");

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, "test.yaml", &Overrides::default())
}

fn errors_of(text: &str) -> Vec<ConfigError> {
    match parse(text) {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(ConfigErrors(errors)) => errors,
    }
}

/// `(line, key)` of each error, in order.
fn lines_and_keys(errors: &[ConfigError]) -> Vec<(Option<u64>, &str)> {
    errors.iter().map(|e| (e.line, e.key.as_str())).collect()
}

/// The message of the first error at `key` (empty if there is none).
fn message_of<'a>(errors: &'a [ConfigError], key: &str) -> &'a str {
    errors
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.message.as_str())
        .unwrap_or_default()
}

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("test address")
}

fn example_configs() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(CONFIG_DIR)
        .expect("config/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_example_config_validates() {
    let paths = example_configs();
    assert!(
        paths.len() >= 3,
        "expected the example configs, found {paths:?}"
    );
    for path in paths {
        if let Err(errors) = Config::load(&path, &Overrides::default()) {
            panic!("{} does not validate:\n{errors}", path.display());
        }
    }
}

#[test]
fn reference_config_holds_the_defaults() {
    let path = PathBuf::from(CONFIG_DIR).join("tokenmeter.yaml");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    assert_eq!(config.listen, addr(tokenmeter::config::DEFAULT_LISTEN));
    assert_eq!(
        config.admin_listen,
        addr(tokenmeter::config::DEFAULT_ADMIN_LISTEN)
    );
    assert_eq!(config.proxy, ProxySettings::default());
    assert_eq!(config.metrics.buckets, Buckets::default());
    assert_eq!(config.metrics.namespace, "llm");
    assert_eq!(config.metrics.models.allow, None);
    assert_eq!(config.metrics.models.max_distinct, 100);
    assert_eq!(config.routes[0].timeouts, Timeouts::default());
    assert_eq!(config.routes[0].protocol, Protocol::Auto);
}

#[test]
fn minimal_config_gets_defaults() {
    let config =
        parse("routes:\n  - name: default\n    upstream: http://127.0.0.1:8000/\n").expect("valid");
    assert_eq!(config.listen, addr("0.0.0.0:8080"));
    assert_eq!(config.admin_listen, addr("127.0.0.1:9464"));
    assert_eq!(config.proxy, ProxySettings::default());
    let route = &config.routes[0];
    assert_eq!(route.name, "default");
    assert_eq!(route.matcher.path_prefix, "/");
    assert_eq!(route.matcher.host, None);
    assert_eq!(route.matcher.methods, None);
    assert_eq!(route.upstream.url(), "http://127.0.0.1:8000");
    assert_eq!(route.upstream.base_path, "");
    assert_eq!(route.protocol, Protocol::Auto);
    assert_eq!(route.timeouts, Timeouts::default());
    assert!(!route.preserve_host && !route.strip_prefix);
    assert_eq!(route.max_in_flight, None);
    assert_eq!(route.slo, None);
}

#[test]
fn full_route_is_built() {
    let text = "\
routes:
  - name: chat
    match:
      path_prefix: /v1/
      host: API.Example.com
      methods: [post, GET]
    upstream: https://gpu-1.internal:8443/base/
    protocol: openai
    timeouts: {connect: 250ms, response_headers: 1h, idle: 90s, request_body: 5s, request_body_total: 20s}
    preserve_host: true
    strip_prefix: true
    max_in_flight: 64
    slo: gold
";
    let config = parse(text).expect("valid");
    let route = &config.routes[0];
    assert_eq!(route.matcher.host.as_deref(), Some("api.example.com"));
    assert_eq!(
        route.matcher.methods,
        Some(vec![http::Method::POST, http::Method::GET])
    );
    assert_eq!(route.upstream.scheme, http::uri::Scheme::HTTPS);
    assert_eq!(route.upstream.authority.as_str(), "gpu-1.internal:8443");
    assert_eq!(route.upstream.base_path, "/base");
    assert_eq!(route.protocol, Protocol::Api(meter::Api::OpenAi));
    assert_eq!(
        route.timeouts,
        Timeouts {
            connect: Duration::from_millis(250),
            response_headers: Duration::from_secs(3600),
            idle: Duration::from_secs(90),
            request_body: Duration::from_secs(5),
            request_body_total: Duration::from_secs(20),
        }
    );
    assert!(route.preserve_host && route.strip_prefix);
    assert_eq!(route.max_in_flight, Some(64));
    assert_eq!(route.slo.as_deref(), Some("gold"));
}

#[test]
fn sizes_and_durations_parse_both_forms() {
    let text = "\
proxy:
  max_request_body: 1048576
  max_response_body: 100kB
  shutdown_grace: 1500ms
routes:
  - name: a
    upstream: http://127.0.0.1:1
";
    let proxy = parse(text).expect("valid").proxy;
    assert_eq!(proxy.max_request_body_bytes, 1 << 20);
    assert_eq!(proxy.max_response_body_bytes, 100_000);
    assert_eq!(proxy.shutdown_grace, Duration::from_millis(1500));

    let text = "\
proxy:
  max_request_body: 512KiB
  max_response_body: 1GiB
  shutdown_grace: 2m
  max_request_head: 64KiB
  upstream_idle_connections: 0
  upstream_idle_timeout: 5s
  request_head_timeout: 10s
  max_connections: 1000
  max_retry_body: 16KiB
  overload_threshold: 80%
  overload_timeout: 1500ms
  trusted_proxies: [10.0.0.0/8, \"::1\", 192.168.1.7]
admin:
  max_connections: 8
routes:
  - name: a
    upstream: http://127.0.0.1:1
";
    let config = parse(text).expect("valid");
    assert_eq!(config.admin.max_connections, 8);
    let proxy = config.proxy;
    assert_eq!(proxy.request_head_timeout, Duration::from_secs(10));
    assert_eq!(proxy.max_connections, Some(1000));
    assert_eq!(proxy.max_retry_body_bytes, 16 * 1024);
    assert!((proxy.overload_threshold - 0.8).abs() < 1e-9);
    assert_eq!(proxy.overload_timeout, Duration::from_millis(1500));
    let nets: Vec<String> = proxy
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(nets, ["10.0.0.0/8", "::1/128", "192.168.1.7/32"]);
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let trusted = |s: &str| proxy.trusted_proxies.iter().any(|n| n.contains(ip(s)));
    assert!(trusted("10.200.3.4") && trusted("::ffff:10.0.0.1") && trusted("::1"));
    assert!(!trusted("11.0.0.1") && !trusted("192.168.1.8") && !trusted("::2"));
    assert_eq!(proxy.max_request_body_bytes, 512 * 1024);
    assert_eq!(proxy.max_response_body_bytes, 1 << 30);
    assert_eq!(proxy.shutdown_grace, Duration::from_secs(120));
    assert_eq!(proxy.max_request_head_bytes, 64 * 1024);
    assert_eq!(proxy.upstream_idle_connections, 0);
    assert_eq!(proxy.upstream_idle_timeout, Duration::from_secs(5));
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "\
listen: 0.0.0.0:8080
admin:
  listen: 127.0.0.1:9464
  port: 9000
proxy:
  shutdown_grace: 30
metrics:
  buckets:
    output_tokens: [1, 4, 4, 16]
routes:
  - name: chat
    match:
      path_prefix: /v1/
    upstream: http://127.0.0.1:8000
    timeouts:
      idel: 5m
  - name: chat
    match:
      path_prefix: /v2/
    upstream: ftp://127.0.0.1
  - match:
      path_prefix: /v3/
    upstream: http://127.0.0.1:8002
";
    let errors = errors_of(text);
    assert_eq!(
        lines_and_keys(&errors),
        vec![
            (Some(4), "admin.port"),
            (Some(6), "proxy.shutdown_grace"),
            (Some(9), "metrics.buckets.output_tokens[2]"),
            (Some(16), "routes[0].timeouts.idel"),
            (Some(17), "routes[1].name"),
            (Some(20), "routes[1].upstream"),
            (Some(21), "routes[2].name"),
        ],
        "{}",
        ConfigErrors(errors.clone())
    );
    let message = |key: &str| message_of(&errors, key);
    assert!(message("admin.port").contains("unknown key `port`"));
    assert!(message("routes[0].timeouts.idel").contains("did you mean `idle`"));
    assert!(message("proxy.shutdown_grace").contains("invalid duration `30`"));
    assert!(message("metrics.buckets.output_tokens[2]").contains("strictly increasing"));
    assert!(message("routes[1].name").contains("duplicate route name `chat`"));
    assert!(message("routes[1].upstream").contains("ftp"));
    assert!(message("routes[2].name").contains("required"));

    // Columns point at the value (or key) itself.
    let at = |key: &str| {
        errors
            .iter()
            .find(|e| e.key == key)
            .map(|e| (e.line, e.column))
    };
    assert_eq!(at("admin.port"), Some((Some(4), Some(3))));
    assert_eq!(at("proxy.shutdown_grace"), Some((Some(6), Some(19))));
    assert_eq!(
        at("metrics.buckets.output_tokens[2]"),
        Some((Some(9), Some(27)))
    );
    assert_eq!(at("routes[0].timeouts.idel"), Some((Some(16), Some(7))));

    // The display format is `file:line:col: key: message`.
    assert!(
        errors[0]
            .to_string()
            .starts_with("test.yaml:4:3: admin.port: unknown key `port`"),
        "{}",
        errors[0]
    );
}

#[test]
fn missing_routes_is_reported_without_a_line() {
    let errors = errors_of("listen: 0.0.0.0:8080\n");
    assert_eq!(lines_and_keys(&errors), vec![(None, "routes")]);
    assert_eq!(
        errors[0].to_string(),
        "test.yaml: routes: required key is missing: list at least one route"
    );
    let errors = errors_of("");
    assert_eq!(lines_and_keys(&errors), vec![(None, "routes")]);
    let errors = errors_of("routes: []\n");
    assert_eq!(lines_and_keys(&errors), vec![(Some(1), "routes")]);
}

#[test]
fn many_value_errors_in_one_route() {
    let text = "\
routes:
  - name: 'bad name'
    match:
      path_prefix: v1/
      host: example.com:80
      methods: [POST, 'B@D', post]
    upstream: http://user:pw@example.com/
    protocol: grpc
    timeouts: {connect: 0s, response_headers: soon, idle: -1s}
    preserve_host: yes
    strip_prefix: 1
    slo: 'a b'
    max_in_flight: 0
";
    let errors = errors_of(text);
    assert_eq!(
        lines_and_keys(&errors),
        vec![
            (Some(2), "routes[0].name"),
            (Some(4), "routes[0].match.path_prefix"),
            (Some(5), "routes[0].match.host"),
            (Some(6), "routes[0].match.methods[1]"),
            (Some(6), "routes[0].match.methods[2]"),
            (Some(7), "routes[0].upstream"),
            (Some(8), "routes[0].protocol"),
            (Some(9), "routes[0].timeouts.connect"),
            (Some(9), "routes[0].timeouts.response_headers"),
            (Some(9), "routes[0].timeouts.idle"),
            (Some(10), "routes[0].preserve_host"),
            (Some(11), "routes[0].strip_prefix"),
            (Some(12), "routes[0].slo"),
            (Some(13), "routes[0].max_in_flight"),
        ],
        "{}",
        ConfigErrors(errors.clone())
    );
}

#[test]
fn metrics_and_proxy_values_are_checked() {
    let text = "\
proxy:
  max_request_body: 0
  max_response_body: 4mb
  x_forwarded: maybe
  max_request_head: 4KiB
  upstream_idle_connections: -1
  upstream_idle_timeout: 0s
  overload_threshold: 0.9
  overload_timeout: soon
metrics:
  namespace: 9llm
  models:
    allow: [a, '', a]
    max_distinct: 0
  buckets:
    time_to_first_token: []
    inter_token_latency: [0.1, .inf, -1, x]
routes:
  - name: a
    upstream: http://127.0.0.1:1
";
    let errors = errors_of(text);
    assert_eq!(
        lines_and_keys(&errors),
        vec![
            (Some(2), "proxy.max_request_body"),
            (Some(3), "proxy.max_response_body"),
            (Some(4), "proxy.x_forwarded"),
            (Some(5), "proxy.max_request_head"),
            (Some(6), "proxy.upstream_idle_connections"),
            (Some(7), "proxy.upstream_idle_timeout"),
            (Some(8), "proxy.overload_threshold"),
            (Some(9), "proxy.overload_timeout"),
            (Some(11), "metrics.namespace"),
            (Some(13), "metrics.models.allow[1]"),
            (Some(13), "metrics.models.allow[2]"),
            (Some(14), "metrics.models.max_distinct"),
            (Some(16), "metrics.buckets.time_to_first_token"),
            (Some(17), "metrics.buckets.inter_token_latency[1]"),
            (Some(17), "metrics.buckets.inter_token_latency[2]"),
            (Some(17), "metrics.buckets.inter_token_latency[3]"),
        ],
        "{}",
        ConfigErrors(errors.clone())
    );
    let message = |key: &str| message_of(&errors, key);
    // hyper cannot read a request head into less than 8 KiB (it would panic).
    assert!(message("proxy.max_request_head").contains("from 8KiB to 1MiB"));
    assert!(message("proxy.upstream_idle_connections").contains("invalid count `-1`"));
    assert!(message("proxy.overload_threshold").contains("expected 1% to 100%"));
    for head in ["2MiB", "8191"] {
        let text = format!(
            "proxy:\n  max_request_head: {head}\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:1\n"
        );
        assert_eq!(
            lines_and_keys(&errors_of(&text)),
            vec![(Some(2), "proxy.max_request_head")]
        );
    }
}

#[test]
fn shadowed_routes_are_errors() {
    let text = "\
routes:
  - name: everything
    upstream: http://127.0.0.1:1
  - name: chat
    match:
      path_prefix: /v1/chat/
    upstream: http://127.0.0.1:2
";
    let errors = errors_of(text);
    assert_eq!(lines_and_keys(&errors), vec![(Some(6), "routes[1].match")]);
    assert!(errors[0].message.contains("shadowed by routes[0]"));

    let text = "\
routes:
  - name: a
    match: {path_prefix: /v1/, methods: [POST]}
    upstream: http://127.0.0.1:1
  - name: b
    match: {path_prefix: /v1/, methods: [POST]}
    upstream: http://127.0.0.1:2
";
    let errors = errors_of(text);
    assert_eq!(lines_and_keys(&errors), vec![(Some(6), "routes[1].match")]);

    // Different host, methods or a longer prefix first: all reachable.
    let text = "\
routes:
  - name: a
    match: {path_prefix: /v1/chat/}
    upstream: http://127.0.0.1:1
  - name: b
    match: {path_prefix: /v1/, host: a.example}
    upstream: http://127.0.0.1:2
  - name: c
    match: {path_prefix: /v1/, methods: [GET]}
    upstream: http://127.0.0.1:2
  - name: d
    upstream: http://127.0.0.1:3
";
    assert_eq!(parse(text).map(|c| c.routes.len()), Ok(4));
}

#[test]
fn listen_addresses_must_differ() {
    let text = "\
listen: 127.0.0.1:9000
admin:
  listen: 127.0.0.1:9000
routes:
  - name: a
    upstream: http://127.0.0.1:1
";
    let errors = errors_of(text);
    assert_eq!(lines_and_keys(&errors), vec![(Some(3), "admin.listen")]);

    let errors = errors_of(
        "listen: 127.0.0.1:9464\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:1\n",
    );
    assert_eq!(lines_and_keys(&errors), vec![(Some(1), "listen")]);

    let errors = errors_of(
        "listen: localhost:80\nadmin: {listen: '9464'}\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:1\n",
    );
    assert_eq!(
        lines_and_keys(&errors),
        vec![(Some(1), "listen"), (Some(2), "admin.listen")]
    );
}

#[test]
fn syntax_error_is_reported_with_its_line() {
    let text = "routes:\n  - name: a\n    upstream: [http://x\n";
    let errors = errors_of(text);
    assert_eq!(errors.len(), 1, "{}", ConfigErrors(errors.clone()));
    assert!(errors[0].line.is_some_and(|line| line >= 3));
    assert!(!errors[0].message.is_empty());
    assert!(errors[0].to_string().starts_with("test.yaml:"));

    let errors = errors_of("listen: a\nlisten: b\n");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].line, Some(2));
    assert!(errors[0].message.contains("duplicate"), "{}", errors[0]);
}

#[test]
fn wrong_shape_is_reported_with_its_line_and_key() {
    let text = "routes:\n  - name: a\n    upstream: http://127.0.0.1:1\n    timeouts: 5s\n";
    let errors = errors_of(text);
    assert_eq!(
        lines_and_keys(&errors),
        vec![(Some(4), "routes[0].timeouts")],
        "{}",
        ConfigErrors(errors.clone())
    );
}

#[test]
fn unreadable_file_is_an_error_without_a_line() {
    let path = PathBuf::from(CONFIG_DIR).join("does-not-exist.yaml");
    let errors = Config::load(&path, &Overrides::default()).expect_err("missing file");
    assert_eq!(errors.0.len(), 1);
    assert_eq!(errors.0[0].file, path.display().to_string());
    assert_eq!(errors.0[0].line, None);
    assert!(errors.0[0].message.contains("cannot read"));
}

#[test]
fn load_names_the_file_in_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "routes:\n  - name: a\n    upstrem: http://x\n").expect("write");
    let errors = Config::load(&path, &Overrides::default()).expect_err("bad");
    let file = path.display().to_string();
    assert!(errors.0.iter().all(|e| e.file == file));
    assert_eq!(
        lines_and_keys(&errors.0),
        vec![
            (Some(2), "routes[0].upstream"),
            (Some(3), "routes[0].upstrem")
        ]
    );
}

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
    assert_eq!(config.admin_listen, addr("127.0.0.1:2001"));
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
    assert_eq!(config.admin_listen, addr("127.0.0.1:9464"));
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

// SLO files.

use slo::{ObjectiveKind, SloClass};

/// Writes `files` (name, text) into a fresh directory and loads `main.yaml`.
fn load_files(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Config, ConfigErrors>) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let result = Config::load(&dir.path().join("main.yaml"), &Overrides::default());
    (dir, result)
}

const MAIN_WITH_SLO: &str = "slo_files: [slo/*.yaml]\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo: chat\n";

fn class<'a>(config: &'a Config, name: &str) -> &'a SloClass {
    config
        .slo_classes
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no class {name}"))
}

#[test]
fn shipped_slo_presets_load_with_their_targets() {
    let path = PathBuf::from(CONFIG_DIR).join("multi-upstream.yaml");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    let mut names: Vec<&str> = config.slo_classes.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "batch",
            "chat",
            "code-completion",
            "document-generation",
            "embeddings"
        ]
    );
    let ms = Duration::from_millis;
    let thresholds = |c: &SloClass| -> Vec<(ObjectiveKind, Duration, f64)> {
        c.objectives
            .iter()
            .map(|o| (o.kind, o.threshold, o.target))
            .collect()
    };
    let chat = class(&config, "chat");
    assert_eq!(
        thresholds(chat),
        [
            (ObjectiveKind::Ttft, ms(500), 0.95),
            (ObjectiveKind::Tpot, ms(50), 0.95)
        ]
    );
    assert_eq!(chat.window, Duration::from_secs(28 * 86400));
    assert_eq!(
        chat.goodput.require,
        [ObjectiveKind::Ttft, ObjectiveKind::Tpot]
    );
    assert_eq!(
        thresholds(class(&config, "code-completion")),
        [
            (ObjectiveKind::Ttft, ms(200), 0.95),
            (ObjectiveKind::Tpot, ms(30), 0.95)
        ]
    );
    let doc = class(&config, "document-generation");
    assert_eq!(thresholds(doc), [(ObjectiveKind::Ttft, ms(3000), 0.95)]);
    assert_eq!(doc.goodput.target, Some(0.9));
    let batch = class(&config, "batch");
    assert!(batch.objectives.is_empty() && batch.goodput.require.is_empty());
    assert_eq!(batch.goodput.target, Some(0.99));
    assert_eq!(
        thresholds(class(&config, "embeddings")),
        [(ObjectiveKind::E2el, ms(500), 0.95)]
    );
    let rest = config
        .routes
        .iter()
        .find(|r| r.name == "rest")
        .expect("route");
    assert_eq!(
        rest.slo_by_operation,
        [
            (meter::Operation::Embeddings, "embeddings".to_owned()),
            (meter::Operation::Rerank, "embeddings".to_owned()),
            (meter::Operation::Score, "embeddings".to_owned()),
        ]
    );
    let chat_route = config
        .routes
        .iter()
        .find(|r| r.name == "chat")
        .expect("route");
    assert_eq!(chat_route.slo.as_deref(), Some("chat"));
    assert_eq!(
        chat_route.slo_header.as_ref().map(|h| h.as_str()),
        Some("x-slo-class")
    );
    assert_eq!(chat_route.slo_by_model.len(), 1);
}

#[test]
fn percentile_and_ratio_forms_mean_the_same() {
    let slo = "classes:\n  - name: chat\n    objectives:\n      ttft: {p95: 500ms}\n      e2el: {p99.9: 1m}\n  - name: chat2\n    objectives:\n      ttft: {threshold: 500ms, target: 0.95}\n      e2el: {threshold: 60s, target: 0.999}\n";
    let (_dir, result) = load_files(&[("main.yaml", MAIN_WITH_SLO), ("slo/a.yaml", slo)]);
    let config = result.expect("valid");
    let (a, b) = (class(&config, "chat"), class(&config, "chat2"));
    assert_eq!(a.objectives, b.objectives);
    assert_eq!(a.goodput, b.goodput);
    assert_eq!(a.objectives[1].target, 0.999);
}

#[test]
fn slo_file_errors_name_their_file_line_and_key_all_at_once() {
    let slo = "\
classes:
  - name: chat
    window: 4 fortnights
    objectives:
      ttft: {p95: 500}
      tpot: {threshold: 50ms, target: 95}
      e2el: {p95: 1s, target: 0.9}
      itl: {p95: 1s}
    goodput:
      require: [ttft, e2e]
      target: 1.5
  - name: 'bad name'
    objectives:
      ttft: {threshold: 1s}
  - name: empty
    extra: 1
";
    let (dir, result) = load_files(&[("main.yaml", MAIN_WITH_SLO), ("slo/a.yaml", slo)]);
    let errors = match result {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(ConfigErrors(errors)) => errors,
    };
    let file = dir.path().join("slo/a.yaml").display().to_string();
    let got: Vec<(&str, Option<u64>, &str)> = errors
        .iter()
        .map(|e| (e.file.as_str(), e.line, e.key.as_str()))
        .collect();
    let expected_in_slo_file = [
        (Some(3), "classes[0].window"),
        (Some(5), "classes[0].objectives.ttft.p95"),
        (Some(6), "classes[0].objectives.tpot.target"),
        (Some(7), "classes[0].objectives.e2el"),
        (Some(8), "classes[0].objectives.itl"),
        (Some(10), "classes[0].goodput.require[1]"),
        (Some(11), "classes[0].goodput.target"),
        (Some(12), "classes[1].name"),
        (Some(14), "classes[1].objectives.ttft.target"),
        (Some(15), "classes[2]"),
        (Some(16), "classes[2].extra"),
    ];
    for (line, key) in expected_in_slo_file {
        assert!(
            got.contains(&(file.as_str(), line, key)),
            "no error for {key} at line {line:?}: {errors:#?}"
        );
    }
    // `chat` is not defined (its file has errors), so the route's class is
    // unknown too: reported in the main file.
    assert!(
        errors
            .iter()
            .any(|e| e.file.ends_with("main.yaml") && e.key == "routes[0].slo"),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), expected_in_slo_file.len() + 1, "{errors:#?}");
}

#[test]
fn an_slo_file_must_list_classes() {
    let main =
        "slo_files: [slo/*.yaml]\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n";
    for (text, line, message) in [
        (
            "{}\n",
            None,
            "required key is missing: list at least one SLO class",
        ),
        ("classes: []\n", Some(1), "must list at least one SLO class"),
    ] {
        let (_dir, result) = load_files(&[("main.yaml", main), ("slo/a.yaml", text)]);
        let errors = match result {
            Ok(config) => panic!("expected errors, got {config:#?}"),
            Err(ConfigErrors(errors)) => errors,
        };
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let e = &errors[0];
        assert!(e.file.ends_with("a.yaml"), "{e}");
        assert_eq!(
            (e.line, e.key.as_str(), e.message.as_str()),
            (line, "classes", message)
        );
    }
}

#[test]
fn slo_files_must_exist_and_class_names_be_unique() {
    let class_file = "classes:\n  - name: chat\n    objectives: {ttft: {p95: 1s}}\n";
    let main = "slo_files: [a.yaml, b.yaml, missing.yaml, 'none/*.yaml']\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo: chat\n    slo_by_model: {m: nope}\n";
    let (_dir, result) = load_files(&[
        ("main.yaml", main),
        ("a.yaml", class_file),
        ("b.yaml", class_file),
    ]);
    let errors = match result {
        Ok(_) => panic!("expected errors"),
        Err(ConfigErrors(errors)) => errors,
    };
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let has = |file_end: &str, key: &str, text: &str| {
        assert!(
            errors
                .iter()
                .any(|e| e.file.ends_with(file_end) && e.key == key && e.message.contains(text)),
            "no {key} error with {text:?} in {messages:#?}"
        );
    };
    has("main.yaml", "slo_files[2]", "cannot read");
    has("main.yaml", "slo_files[3]", "matches no file");
    has(
        "main.yaml",
        "routes[0].slo_by_model.m",
        "unknown SLO class `nope`",
    );
    has("b.yaml", "classes[0].name", "duplicate SLO class `chat`");
    assert_eq!(errors.len(), 4, "{messages:#?}");
}

#[test]
fn slo_header_needs_slo_files() {
    let errors = errors_of(
        "routes:\n  - name: a\n    upstream: http://127.0.0.1:8000\n    slo: anything\n    slo_header: x-slo-class\n",
    );
    assert_eq!(lines_and_keys(&errors), [(Some(5), "routes[0].slo_header")]);
}

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
    let (m, t) = (o.metrics.clone().unwrap(), o.traces.clone().unwrap());
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
    let m = o.metrics.unwrap();
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
    assert!(o.metrics.is_some() && o.traces.is_none());
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
        o.metrics.unwrap().endpoint,
        "http://collector:4318/v1/metrics"
    );
    assert_eq!(
        o.traces.unwrap().endpoint,
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
    assert_eq!(o.metrics.unwrap().endpoint, "http://127.0.0.1:4317");
    assert!(o.traces.is_none());
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
