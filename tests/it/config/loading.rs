//! The shipped example configs load, and omitted keys get their defaults.

use super::*;

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
    assert_eq!(config.listen, tokenmeter::config::DEFAULT_LISTEN);
    assert_eq!(
        config.admin.listen,
        tokenmeter::config::DEFAULT_ADMIN_LISTEN
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
    assert_eq!(config.admin.listen, addr("127.0.0.1:9464"));
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

/// A route from flags alone (`Route::with_defaults`) is what a file's
/// route giving only its name and upstream reads as: the defaults are the
/// ones `Route`'s fields declare, in one place.
#[test]
fn a_route_with_defaults_is_a_file_route_without_other_keys() {
    let config =
        parse("routes:\n  - name: r\n    upstream: http://127.0.0.1:8000/v1\n").expect("valid");
    let upstream = config.routes[0].upstream.clone();
    let built = tokenmeter::config::Route::with_defaults("r", upstream).expect("reads no keys");
    assert_eq!(built, config.routes[0]);
    let flags = Overrides {
        upstream: Some("http://127.0.0.1:8000/v1".to_owned()),
        ..Default::default()
    };
    let from_flags = Config::from_overrides(&flags).expect("valid");
    assert_eq!(
        from_flags.routes[0],
        tokenmeter::config::Route {
            name: "default".to_owned(),
            ..config.routes[0].clone()
        }
    );
}
