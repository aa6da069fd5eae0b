//! Bad configs report every problem at once with file, line and key.

use super::*;

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
