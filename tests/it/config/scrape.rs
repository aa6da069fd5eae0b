//! The engine and GPU scrape keys: `scrape` and a route's
//! `engine_metrics`, `gpu_metrics`, `gpu_select` and `scrape_interval`,
//! through the binary as an operator meets them.

use std::process::Command;

use crate::common::{BIN, admin_json, serve};

const SECRET: &str = "s3cret";

/// `tokenmeter check` on `text` written to a file: its exit code and its
/// output, with the file's path written `FILE`.
fn check(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenmeter.yaml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        text.replace(&path.display().to_string(), "FILE"),
    )
}

/// The problem lines of `check`'s output (its count line left out).
fn problems(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("FILE:") && !l.starts_with("FILE: "))
        .collect()
}

/// A valid config's scrape settings and pages are in force as written, and
/// `/config` shows them, each URL redacted.
#[tokio::test]
async fn scrape_keys_are_shown_in_force_with_urls_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &path,
        format!(
            "\
scrape:
  interval: 10s
  timeout: 1500ms
  max_body: 1MiB
routes:
  - name: chat
    match: {{path_prefix: /v1/}}
    upstream: http://127.0.0.1:1
    engine_metrics: http://metrics:{SECRET}@127.0.0.1:2/metrics?token={SECRET}#{SECRET}
    gpu_metrics: https://127.0.0.1:3/metrics
    gpu_select: {{gpu: ['0', '1'], hostname: [node-a]}}
    scrape_interval: 2s
  - name: plain
    match: {{path_prefix: /plain/}}
    upstream: http://127.0.0.1:1
"
        ),
    )
    .unwrap();
    let (code, text) = check(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains(SECRET), "{text}");

    let served = serve(&["--config".as_ref(), path.as_os_str()]);
    let shown = admin_json(served.admin, "/config").await;
    assert!(!shown.to_string().contains(SECRET), "{shown}");
    assert_eq!(
        shown["scrape"],
        serde_json::json!({"interval": 10.0, "timeout": 1.5, "max_body": 1048576}),
        "{shown}"
    );
    let chat = &shown["routes"][0];
    assert_eq!(
        chat["engine_metrics"],
        "http://***@127.0.0.1:2/metrics?token=<redacted>#<redacted>"
    );
    assert_eq!(chat["gpu_metrics"], "https://127.0.0.1:3/metrics");
    assert_eq!(
        chat["gpu_select"],
        serde_json::json!({"gpu": ["0", "1"], "uuid": [], "hostname": ["node-a"]})
    );
    assert_eq!(chat["scrape_interval"], 2.0);
    let plain = &shown["routes"][1];
    assert_eq!(plain["engine_metrics"], serde_json::Value::Null);
    assert_eq!(plain["gpu_metrics"], serde_json::Value::Null);
    assert_eq!(plain["scrape_interval"], serde_json::Value::Null);
    assert_eq!(
        plain["gpu_select"],
        serde_json::json!({"gpu": [], "uuid": [], "hostname": []})
    );
}

/// Every bad scrape value is its own error, at its file, line, column and
/// key, all at once, with no URL echoed unredacted.
#[test]
fn bad_scrape_values_are_located() {
    let (code, text) = check(&format!(
        "\
scrape:
  interval: soon
  timeout: 0s
  max_body: 0
  max_bdy: 1MiB
routes:
  - name: a
    match: {{path_prefix: /a/}}
    upstream: http://127.0.0.1:1
    engine_metrics: ftp://u:{SECRET}@h/metrics
    gpu_metrics: /metrics
    gpu_select: {{gpu: []}}
    scrape_interval: 1x
  - name: b
    match: {{path_prefix: /b/}}
    upstream: http://127.0.0.1:1
    gpu_select:
      uuid: [GPU-1]
      hostnam: [n]
  - name: c
    match: {{path_prefix: /c/}}
    upstream: http://127.0.0.1:1
    scrape_interval: 5s
"
    ));
    assert_eq!(code, Some(1), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    let lines = problems(&text);
    let expected = [
        "FILE:2:13: scrape.interval: invalid duration `soon`",
        "FILE:3:12: scrape.timeout: invalid duration `0s`: must be greater than zero",
        "FILE:4:13: scrape.max_body: invalid size `0`: must be greater than zero",
        "FILE:5:3: scrape.max_bdy: unknown key `max_bdy`; did you mean `max_body`?",
        "FILE:10:21: routes[0].engine_metrics: invalid URL `ftp://***@h/metrics`: scheme `ftp` is not supported, use http or https",
        "FILE:11:18: routes[0].gpu_metrics: invalid URL `/metrics`: expected an absolute URL",
        "FILE:12:23: routes[0].gpu_select.gpu: must not be empty",
        "FILE:13:22: routes[0].scrape_interval: invalid duration `1x`",
        "FILE:18:7: routes[1].gpu_select: needs `gpu_metrics`",
        "FILE:19:7: routes[1].gpu_select.hostnam: unknown key `hostnam`; did you mean `hostname`?",
        "FILE:23:22: routes[2].scrape_interval: needs `engine_metrics` or `gpu_metrics`",
    ];
    assert_eq!(lines.len(), expected.len(), "{text}");
    for (line, expected) in lines.iter().zip(expected) {
        assert!(line.starts_with(expected), "{line}\nnot {expected}\n{text}");
    }
}

/// A scrape must end before the next starts: `scrape.timeout` below the
/// interval of every scraped route, reported where the interval that is
/// too short is written (or at the timeout, for the shared interval).
#[test]
fn the_scrape_timeout_is_below_every_interval() {
    let route = |name: &str, extra: &str| {
        format!(
            "  - name: {name}\n    match: {{path_prefix: /{name}/}}\n    upstream: http://127.0.0.1:1\n    engine_metrics: http://127.0.0.1:2/metrics\n{extra}"
        )
    };
    let (code, text) = check(&format!(
        "scrape:\n  interval: 3s\n  timeout: 3s\nroutes:\n{}{}{}",
        route("a", ""),
        route("b", "    scrape_interval: 2s\n"),
        route("c", "    scrape_interval: 4s\n"),
    ));
    assert_eq!(code, Some(1), "{text}");
    let lines = problems(&text);
    assert_eq!(
        lines,
        [
            "FILE:3:12: scrape.timeout: 3s is not below scrape.interval (3s): a scrape must end before the next one starts",
            "FILE:13:22: routes[1].scrape_interval: 2s is not longer than scrape.timeout (3s): a scrape must end before the next one starts",
        ],
        "{text}"
    );

    // The default timeout against a short shared interval: at the interval.
    let (code, text) = check(&format!(
        "scrape:\n  interval: 1s\nroutes:\n{}",
        route("a", "")
    ));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FILE:2:13: scrape.interval: 1s is not longer than scrape.timeout (2s)"),
        "{text}"
    );

    // Routes on their own longer intervals need no longer shared one, and
    // a route scraping nothing is not held to it.
    let (code, text) = check(&format!(
        "scrape:\n  interval: 1s\nroutes:\n{}{}",
        route("a", "    scrape_interval: 3s\n"),
        "  - name: z\n    match: {path_prefix: /z/}\n    upstream: http://127.0.0.1:1\n",
    ));
    assert_eq!(code, Some(0), "{text}");
}

/// `tls` applies to a route whose upstream or either page is `https`, and
/// is refused where all three are `http`.
#[test]
fn tls_applies_to_an_https_page_too() {
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tls/ca.pem");
    let route = |pages: &str| {
        format!(
            "routes:\n  - name: a\n    upstream: http://127.0.0.1:1\n{pages}    tls: {{ca_file: {ca}}}\n"
        )
    };
    for pages in [
        "    engine_metrics: https://127.0.0.1:2/metrics\n",
        "    gpu_metrics: https://127.0.0.1:2/metrics\n",
    ] {
        let (code, text) = check(&route(pages));
        assert_eq!(code, Some(0), "{pages}{text}");
    }
    let (code, text) = check(&route(""));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FILE:4:10: routes[0].tls: applies only to an https upstream\n"),
        "{text}"
    );
    let (code, text) = check(&route("    engine_metrics: http://127.0.0.1:2/metrics\n"));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(
            "FILE:5:10: routes[0].tls: applies only to an https upstream, engine_metrics or gpu_metrics"
        ),
        "{text}"
    );
}

/// The chargeback keys: every bad GPU count, price (one above the bound
/// too) and currency is its own error at its line and column, and the keys
/// that cannot go together say which to keep.
#[test]
fn bad_gpu_counts_prices_and_currencies_are_located() {
    let (code, text) = check(
        "\
cost: {currency: US Dollars}
routes:
  - name: a
    match: {path_prefix: /a/}
    upstream: http://127.0.0.1:1
    gpus: 0
    gpu_hourly_cost: -1
  - name: b
    match: {path_prefix: /b/}
    upstream: http://127.0.0.1:1
    gpus: two
    gpu_hourly_cost: .nan
  - name: c
    match: {path_prefix: /c/}
    upstream: http://127.0.0.1:1
    gpus: 1
    gpu_metrics: http://127.0.0.1:2/metrics
  - name: d
    match: {path_prefix: /d/}
    upstream: http://127.0.0.1:1
    gpu_hourly_cost: 2
  - name: e
    match: {path_prefix: /e/}
    upstream: http://127.0.0.1:1
    gpus: 1
    gpu_hourly_cost: 1e308
",
    );
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        problems(&text),
        [
            "FILE:1:18: cost.currency: invalid currency `US Dollars`: expected 1 to 16 letters, digits, `_` or `-`, like `USD`",
            "FILE:6:11: routes[0].gpus: invalid GPU count `0`: expected a whole number, at least 1 (leave the key out when the route's GPUs are not counted)",
            "FILE:7:22: routes[0].gpu_hourly_cost: invalid price `-1`: expected a number from 0 to 1000000, per GPU-hour in `cost.currency`",
            "FILE:11:11: routes[1].gpus: invalid GPU count `two`: expected a whole number, at least 1 (leave the key out when the route's GPUs are not counted)",
            "FILE:12:22: routes[1].gpu_hourly_cost: invalid price `.nan`: expected a number from 0 to 1000000, per GPU-hour in `cost.currency`",
            "FILE:16:11: routes[2].gpus: not with `gpu_metrics`, which counts the route's GPUs: give one of the two",
            "FILE:21:22: routes[3].gpu_hourly_cost: needs `gpus` or `gpu_metrics`: it prices the route's GPU-seconds",
            "FILE:26:22: routes[4].gpu_hourly_cost: invalid price `1e308`: expected a number from 0 to 1000000, per GPU-hour in `cost.currency`",
        ],
        "{text}"
    );

    // Together as they may go, at either end of the price's range: `check`
    // passes.
    for price in ["0", "1000000"] {
        let (code, text) = check(&format!(
            "cost: {{currency: EUR}}\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:1\n    gpus: 8\n    gpu_hourly_cost: {price}\n",
        ));
        assert_eq!(code, Some(0), "{price}: {text}");
    }
}

/// GPU sets: the routes of one set (one `gpu_set`, or one page and
/// selection) that disagree on its GPUs or price are each an error at the
/// later route's key, as are a set name that is a route's outside it, a
/// `gpu_set` on a route without GPUs, and one that is no label value.
#[test]
fn gpu_sets_whose_routes_disagree_are_located() {
    let (code, text) = check(
        "\
routes:
  - name: a
    match: {path_prefix: /a/}
    upstream: http://127.0.0.1:1
    gpus: 2
    gpu_set: pool
  - name: b
    match: {path_prefix: /b/}
    upstream: http://127.0.0.1:1
    gpus: 4
    gpu_set: pool
  - name: c
    match: {path_prefix: /c/}
    upstream: http://127.0.0.1:1
    gpu_metrics: http://127.0.0.1:2/metrics
    gpu_select: {gpu: [\"0\", \"1\"]}
    gpu_hourly_cost: 2
  - name: d
    match: {path_prefix: /d/}
    upstream: http://127.0.0.1:1
    gpu_metrics: http://127.0.0.1:2/metrics
    gpu_select: {gpu: [\"1\", \"0\"]}
    gpu_hourly_cost: 3
  - name: e
    match: {path_prefix: /e/}
    upstream: http://127.0.0.1:1
    gpu_set: lonely
  - name: f
    match: {path_prefix: /f/}
    upstream: http://127.0.0.1:1
    gpus: 1
    gpu_set: a
  - name: g
    match: {path_prefix: /g/}
    upstream: http://127.0.0.1:1
    gpus: 1
    gpu_set: two words
",
    );
    assert_eq!(code, Some(1), "{text}");
    let same = "in the same GPU set: the routes of a set (the same `gpu_set`, or the same `gpu_metrics` and `gpu_select`) share its GPUs and price";
    assert_eq!(
        problems(&text),
        [
            format!("FILE:10:11: routes[1].gpus: differs from routes[0] (`a`), {same}"),
            // The same GPUs of one page, listed in another order.
            format!("FILE:23:22: routes[3].gpu_hourly_cost: differs from routes[2] (`c`), {same}"),
            "FILE:27:14: routes[4].gpu_set: needs `gpus` or `gpu_metrics`: it names the GPUs the route shares".to_owned(),
            "FILE:32:14: routes[5].gpu_set: `a` is the name of routes[0], which is not in the set: name the set apart".to_owned(),
            "FILE:37:14: routes[6].gpu_set: invalid GPU set `two words`: expected 1 to 64 of [a-zA-Z0-9_.:-]".to_owned(),
        ],
        "{text}"
    );

    // Two routes that agree, by name or by page: `check` passes.
    let (code, text) = check(
        "routes:\n  - name: a\n    match: {path_prefix: /a/}\n    upstream: http://127.0.0.1:1\n    gpus: 2\n    gpu_set: pool\n  - name: b\n    upstream: http://127.0.0.1:1\n    gpus: 2\n    gpu_set: pool\n",
    );
    assert_eq!(code, Some(0), "{text}");
}
