//! Who and why, on real sockets:
//!
//! - tenants: by a request header and by hashed API keys, their counters
//!   and SLO verdicts apart, a storm of made-up tenant names bounded, and no
//!   API key (nor its hash) anywhere the proxy writes: metrics, access log,
//!   `/config`, `check`'s errors;
//! - the W3C trace context a metered request carries and what the upstream
//!   is told of it (against the scripted upstream, which echoes the request
//!   it received).

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::common::*;
use serde_json::Value;
use tokenmeter::config::TraceSettings;

const SLO_FILE: &str = "\
classes:
  - name: interactive
    objectives:
      ttft: {threshold: 600ms, target: 0.9}
";

/// `n` streamed chat requests through `proxy` with `headers`, four at a
/// time; each must get `status`.
async fn send(proxy: std::net::SocketAddr, n: usize, headers: &[(&str, &str)], status: u16) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (head, body) = chat_request("m1", true, headers);
        tasks.spawn(async move { raw_exchange(proxy, &head, &body).await.status });
        if tasks.len() == 4 {
            assert_eq!(tasks.join_next().await.unwrap().unwrap(), status);
        }
    }
    while let Some(got) = tasks.join_next().await {
        assert_eq!(got.unwrap(), status);
    }
}

/// The distinct values of `label` among `name`'s samples.
fn values(samples: &[Sample], name: &str, label: &str) -> std::collections::BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter_map(|s| s.labels.get(label).cloned())
        .collect()
}

#[tokio::test]
async fn tenants_by_header_are_counted_and_judged_apart_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let main = "\
slo_files: [slo/*.yaml]
metrics:
  tenants: {max_distinct: 4}
routes:
  - name: chat
    upstream: http://127.0.0.1:1
    slo: interactive
    tenant: {header: x-tenant}
";
    let Stack { proxy, .. } = Stack::start(schedule(10, 2, 5), |sim| {
        config_from_files(dir.path(), main, &[("classes.yaml", SLO_FILE)], sim)
    })
    .await;
    let (addr, admin) = (proxy.proxy_addr, proxy.admin_addr);
    // A tenant whose requests the upstream refuses takes no slot.
    send(
        addr,
        1,
        &[("x-tenant", "ghost"), ("x-sim-status", "503")],
        503,
    )
    .await;
    send(addr, 3, &[("x-tenant", "team-a")], 200).await;
    // team-b's first tokens come after the class's 600 ms.
    send(
        addr,
        2,
        &[("x-tenant", "team-b"), ("x-sim-ttft-ms", "700")],
        200,
    )
    .await;
    send(addr, 1, &[], 200).await;
    let s = scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= 7.0).await;
    let of = |name: &str, tenant: &str, more: &[(&str, &str)]| {
        let mut labels = vec![("tenant", tenant)];
        labels.extend_from_slice(more);
        sum(&s, name, &labels)
    };
    assert_eq!(
        of("llm_requests_total", "team-a", &[("outcome", "ok")]),
        3.0
    );
    assert_eq!(
        of("llm_requests_total", "team-b", &[("outcome", "ok")]),
        2.0
    );
    assert_eq!(
        of("llm_requests_total", "unknown", &[("outcome", "ok")]),
        1.0
    );
    assert_eq!(
        of("llm_requests_total", "other", &[("status_class", "5xx")]),
        1.0
    );
    assert_eq!(of("llm_output_tokens_total", "team-a", &[]), 15.0);
    assert_eq!(of("llm_output_tokens_total", "team-b", &[]), 10.0);
    assert!(of("llm_input_tokens_total", "team-a", &[]) > 0.0);
    assert_eq!(
        of("llm_slo_requests_total", "team-a", &[("verdict", "good")]),
        3.0
    );
    assert_eq!(
        of("llm_slo_requests_total", "team-a", &[("verdict", "bad")]),
        0.0
    );
    assert_eq!(
        of("llm_slo_requests_total", "team-b", &[("verdict", "good")]),
        0.0
    );
    assert_eq!(
        of("llm_slo_requests_total", "team-b", &[("verdict", "bad")]),
        2.0
    );
    assert_eq!(
        of(
            "llm_slo_violations_total",
            "team-b",
            &[("objective", "ttft")]
        ),
        2.0
    );
    assert_eq!(of("llm_slo_good_output_tokens_total", "team-a", &[]), 15.0);
    // The histograms keep an empty tenant unless asked.
    assert_eq!(
        values(&s, "llm_time_to_first_token_seconds_count", "tenant"),
        [String::new()].into()
    );
    assert_eq!(
        sum(
            &s,
            "llm_time_to_first_token_seconds_count",
            &[("tenant", "")]
        ),
        6.0
    );

    // `/slo` per tenant: team-b's requests alone, all bad.
    let b = admin_json(admin, "/slo?tenant=team-b").await;
    let series = b["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{b}");
    assert_eq!(series[0]["tenant"], "team-b");
    let minute = &series[0]["windows"][0];
    assert_eq!(minute["requests"], 2, "{b}");
    assert_eq!(minute["goodput"]["bad"], 2, "{b}");
    assert_eq!(series[0]["in_flight"], 0);
    let a = admin_json(admin, "/slo?tenant=team-a").await;
    assert_eq!(a["series"][0]["windows"][0]["goodput"]["good"], 3, "{a}");
    let all = admin_json(admin, "/slo").await;
    assert_eq!(all["series"].as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all["series"][0]["tenant"], "");
    assert_eq!(all["series"][0]["windows"][0]["requests"], 7, "{all}");
    let history = admin_json(admin, "/slo/history?tenant=unknown").await;
    let points = history["series"][0]["points"].as_array().unwrap();
    let requests: u64 = points.iter().map(|p| p["requests"].as_u64().unwrap()).sum();
    assert_eq!(requests, 1, "{history}");

    // A storm of made-up tenants: two more take the last slots, the rest
    // are `other`, counted.
    let overflow_before = sum(&s, "tokenmeter_tenant_label_overflow_total", &[]);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..120 {
        let tenant = format!("storm-{i:03}-{:x}", fastrand_like(i));
        let (head, body) = chat_request("m1", true, &[("x-tenant", tenant.as_str())]);
        tasks.spawn(async move { raw_exchange(addr, &head, &body).await.status });
        if tasks.len() == 8 {
            assert_eq!(tasks.join_next().await.unwrap().unwrap(), 200);
        }
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    let s = scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= 127.0).await;
    let tenants = values(&s, "llm_requests_total", "tenant");
    let storm: Vec<&String> = tenants.iter().filter(|t| t.starts_with("storm-")).collect();
    assert_eq!(storm.len(), 2, "{tenants:?}");
    assert!(!tenants.contains("ghost"), "{tenants:?}");
    // team-a, team-b, unknown, other and the two.
    assert_eq!(tenants.len(), 6, "{tenants:?}");
    for name in [
        "llm_output_tokens_total",
        "llm_slo_requests_total",
        "llm_slo_violations_total",
    ] {
        assert!(values(&s, name, "tenant").is_subset(&tenants), "{name}");
    }
    assert_eq!(
        sum(
            &s,
            "llm_requests_total",
            &[("tenant", "other"), ("outcome", "ok")]
        ),
        118.0
    );
    // The first storm requests may each have been pending together: every
    // request that ended as `other` was counted once.
    assert_eq!(
        sum(&s, "tokenmeter_tenant_label_overflow_total", &[]) - overflow_before,
        118.0
    );
    proxy.stop().await;
}

/// A spread of numbers for made-up names (no two alike).
fn fastrand_like(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
}

/// `tokenmeter hash-key` of each key, read from standard input.
fn hash_keys(keys: &[&str]) -> Vec<String> {
    let mut child = Command::new(BIN)
        .arg("hash-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for key in keys {
        writeln!(stdin, "{key}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let hashes: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(hashes.len(), keys.len());
    hashes
}

const ALPHA: &str = "sk-alpha-3f9a0c7e51d2b8a4";
const BETA: &str = "sk-beta-77e1d04c2a9f3b65";
const GAMMA: &str = "sk-gamma-0b5c8e2f9d1a7436";

#[tokio::test]
async fn tenants_by_api_key_and_no_key_anywhere() {
    let hashes = hash_keys(&[ALPHA, BETA]);
    // FIPS 180-2's example, through the command.
    assert_eq!(
        hash_keys(&["abc"]),
        ["ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"]
    );
    let sim = start_sim(schedule(5, 1, 4)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("main.yaml");
    std::fs::write(
        &path,
        format!(
            "routes:\n  - name: chat\n    upstream: http://{sim}\n    tenant:\n      api_keys:\n        keys:\n          {}: team-alpha\n          {}: team-beta\n",
            hashes[0], hashes[1]
        ),
    )
    .unwrap();
    let Served {
        child,
        proxy,
        admin,
        mut lines,
        ..
    } = serve(&["--config".as_ref(), path.as_os_str()]);
    let (alpha, gamma) = (format!("Bearer {ALPHA}"), format!("bearer {GAMMA}"));
    send(proxy, 2, &[("authorization", alpha.as_str())], 200).await;
    send(proxy, 1, &[("x-api-key", BETA)], 200).await;
    send(proxy, 1, &[("authorization", gamma.as_str())], 200).await;
    let s = scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= 4.0).await;
    let tenant = |t: &str| sum(&s, "llm_requests_total", &[("tenant", t)]);
    assert_eq!(
        (tenant("team-alpha"), tenant("team-beta"), tenant("unknown")),
        (2.0, 1.0, 1.0)
    );
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("tenant", "team-alpha")]),
        8.0
    );

    // Nowhere a key, nor its hash.
    let secrets = [ALPHA, BETA, GAMMA, &hashes[0], &hashes[1]];
    let metrics = String::from_utf8(get(admin, "/metrics").await.body()).unwrap();
    let config = String::from_utf8(get(admin, "/config").await.body()).unwrap();
    let config_json: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        config_json["routes"][0]["tenant"]["api_keys"]["tenants"],
        serde_json::json!(["team-alpha", "team-beta"])
    );
    assert_eq!(config_json["routes"][0]["tenant"]["api_keys"]["keys"], 2);
    let mut log = Vec::new();
    let mut access = Vec::new();
    while access.len() < 4 {
        let line = lines.next().expect("serve exited").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["target"] == "tokenmeter::access" {
            access.push(v["fields"]["tenant"].as_str().unwrap().to_owned());
        }
        log.push(line);
    }
    access.sort();
    assert_eq!(access, ["team-alpha", "team-alpha", "team-beta", "unknown"]);
    for secret in secrets {
        for (what, text) in [("metrics", &metrics), ("/config", &config)] {
            assert!(!text.contains(secret), "{what} holds {secret}");
        }
        assert!(
            log.iter().all(|l| !l.contains(secret)),
            "the log holds {secret}"
        );
    }
    stop_child(child).await;

    // A key pasted where its hash belongs is refused without repeating it.
    std::fs::write(
        &path,
        format!("routes:\n  - name: chat\n    upstream: http://{sim}\n    tenant:\n      api_keys:\n        keys: {{{ALPHA}: team-alpha}}\n"),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("routes[0].tenant.api_keys.keys"), "{text}");
    assert!(text.contains("hash-key"), "{text}");
    assert!(!text.contains(ALPHA), "{text}");
}

/// Sends SIGTERM to a served child and waits for it to exit.
async fn stop_child(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || child.0.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status}");
}

const CLIENT_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The headers the upstream received for a metered request with `extra`
/// headers, through a proxy whose trace settings are `trace`.
async fn upstream_headers(trace: TraceSettings, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.trace_context = trace;
    let proxy = start(config).await;
    let mut headers = vec![("x-echo", "1")];
    headers.extend_from_slice(extra);
    let (head, body) = chat_request("m1", false, &headers);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 200);
    proxy.stop().await;
    let echo: Value = serde_json::from_slice(&resp.body()).unwrap();
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().unwrap().to_owned(),
                pair[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn all<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `(version, trace id, parent id, flags)` of a `traceparent`.
fn fields(traceparent: &str) -> (&str, &str, &str, &str) {
    let f: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(f.len(), 4, "{traceparent}");
    (f[0], f[1], f[2], f[3])
}

#[tokio::test]
async fn a_clients_trace_context_reaches_the_upstream_as_sent_by_default() {
    let extra = [
        ("traceparent", CLIENT_PARENT),
        ("tracestate", "congo=t61rcWkgMzE"),
    ];
    let got = upstream_headers(TraceSettings::default(), &extra).await;
    assert_eq!(all(&got, "traceparent"), [CLIENT_PARENT]);
    assert_eq!(all(&got, "tracestate"), ["congo=t61rcWkgMzE"]);
    // Starting traces does not touch a request that has one.
    let start = TraceSettings {
        join: false,
        start: true,
    };
    let got = upstream_headers(start, &extra).await;
    assert_eq!(all(&got, "traceparent"), [CLIENT_PARENT]);
}

#[tokio::test]
async fn joining_sends_the_same_trace_with_the_proxys_span_as_parent() {
    let join = TraceSettings {
        join: true,
        start: false,
    };
    let extra = [
        ("traceparent", CLIENT_PARENT),
        ("tracestate", "congo=t61rcWkgMzE"),
    ];
    let got = upstream_headers(join, &extra).await;
    let sent = all(&got, "traceparent");
    assert_eq!(sent.len(), 1, "{got:?}");
    let (version, trace_id, parent, flags) = fields(sent[0]);
    assert_eq!(
        (version, trace_id, flags),
        ("00", "0af7651916cd43dd8448eb211c80319c", "01")
    );
    assert_ne!(parent, "b7ad6b7169203331");
    assert!(
        parent.len() == 16 && parent != "0000000000000000",
        "{parent}"
    );
    assert_eq!(all(&got, "tracestate"), ["congo=t61rcWkgMzE"]);
    // Each request is a span of its own.
    let again = upstream_headers(join, &extra).await;
    assert_ne!(fields(all(&again, "traceparent")[0]).2, parent);
    // Without a valid parent there is nothing to join.
    let got = upstream_headers(join, &[("traceparent", "00-bad"), ("tracestate", "a=b")]).await;
    assert_eq!(all(&got, "traceparent"), ["00-bad"]);
    assert_eq!(all(&got, "tracestate"), ["a=b"]);
}

#[tokio::test]
async fn a_request_without_a_trace_starts_one_when_asked() {
    let start = TraceSettings {
        join: false,
        start: true,
    };
    let got = upstream_headers(start, &[("tracestate", "orphan=1")]).await;
    let sent = all(&got, "traceparent");
    assert_eq!(sent.len(), 1, "{got:?}");
    let (version, trace_id, parent, flags) = fields(sent[0]);
    assert_eq!((version, flags), ("00", "01"));
    assert!(
        trace_id.len() == 32 && trace_id.bytes().any(|b| b != b'0'),
        "{trace_id}"
    );
    assert!(
        parent.len() == 16 && parent.bytes().any(|b| b != b'0'),
        "{parent}"
    );
    assert!(all(&got, "tracestate").is_empty(), "{got:?}");
    let off = upstream_headers(TraceSettings::default(), &[]).await;
    assert!(all(&off, "traceparent").is_empty(), "{off:?}");
}
