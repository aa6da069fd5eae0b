//! The routes' engines and GPUs, scraped and re-exported, end to end: a
//! DCGM exporter's page (`tests/data/telemetry/dcgm-h100.prom`) and the
//! simulator's own `/metrics` (vLLM's names, batch-limited mode) read
//! through a route's `engine_metrics`, `gpu_metrics` and `gpu_select` into
//! tokenmeter's families, and good tokens per GPU-second; endpoints that
//! refuse, close, answer an error, garbage, names nobody knows, hang or
//! answer 100 MB, with every proxied response unchanged, each failure
//! counted by reason, and figures gone stale removed.
//!
//! The test endpoints are tiny HTTP servers on 127.0.0.1 whose answer the
//! test switches. Nothing sleeps to synchronise: the tests poll `/metrics`
//! until what they wait for is there.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use tokenmeter::config::{Config, Overrides};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const DCGM: &[u8] = include_bytes!("../data/telemetry/dcgm-h100.prom");
const VLLM: &[u8] = include_bytes!("../../crates/telemetry/tests/data/vllm.prom");
/// The model `VLLM` names.
const VLLM_MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// How a test endpoint answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// `200` and this page.
    Page(&'static [u8]),
    Status(u16),
    /// Accepts, reads the request, closes without a byte.
    Close,
    /// Reads the request and never answers.
    Hang,
    /// `200` and 100 MB of a line that never ends, no length declared.
    Huge,
}

/// A tiny HTTP/1.1 server answering every GET as told.
struct Endpoint {
    addr: SocketAddr,
    answer: Arc<Mutex<Answer>>,
}

impl Endpoint {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = Arc::new(Mutex::new(answer));
        let shared = answer.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let answer = *shared.lock().unwrap();
                tokio::spawn(serve(stream, answer));
            }
        });
        Endpoint { addr, answer }
    }

    fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

async fn serve<S>(mut stream: S, answer: Answer)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if !read_head(&mut stream).await {
        return;
    }
    let page = |status: &str, body: &[u8]| {
        let mut out = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    match answer {
        Answer::Page(body) => {
            let _ = stream.write_all(&page("200 OK", body)).await;
        }
        Answer::Status(code) => {
            let _ = stream
                .write_all(&page(&format!("{code} Oops"), b"oops\n"))
                .await;
        }
        Answer::Close => {}
        Answer::Hang => {
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        }
        Answer::Huge => {
            let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nvllm:num_requests_running{model_name=\"";
            if stream.write_all(head).await.is_err() {
                return;
            }
            let chunk = vec![b'a'; 64 * 1024];
            for _ in 0..(100 * 1024 * 1024 / chunk.len()) {
                if stream.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = stream.shutdown().await;
}

/// Writes `main` (with `slo/classes.yaml`: TTFT ≤ 5 s for 90 %) to a
/// temporary directory and loads it as a user's file would be.
fn load(dir: &std::path::Path, main: &str) -> Config {
    std::fs::create_dir_all(dir.join("slo")).unwrap();
    std::fs::write(
        dir.join("slo/classes.yaml"),
        "classes:\n  - name: interactive\n    objectives:\n      ttft: {threshold: 5s, target: 0.9}\n    goodput: {target: 0.8}\n",
    )
    .unwrap();
    std::fs::write(dir.join("main.yaml"), main).unwrap();
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    Config::load(&dir.join("main.yaml"), &overrides).unwrap()
}

/// The simulator in batch-limited mode, which serves `/metrics` in vLLM's
/// names.
async fn batched_sim() -> SocketAddr {
    start_sim(sim::SimConfig {
        slots: NonZeroU32::new(4),
        ..schedule(20, 2, 10)
    })
    .await
}

/// A streamed chat request through `proxy` at `path`, and its answer's body.
async fn chat(addr: SocketAddr, path: &str) -> RawResponse {
    let (head, body) = chat_request("sim-model", true, &[]);
    let head = head.replacen("/v1/chat/completions", path, 1);
    raw_exchange(addr, &head, &body).await
}

/// A simulator's answer with what differs between two requests (the
/// completion's id, numbered by request, and the second it was created)
/// blanked, so that two answers to one request compare equal.
fn normalized(body: &[u8]) -> String {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(|c: char| c.is_ascii_digit()) {
        let (before, digits) = rest.split_at(at);
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        out.push_str(before);
        if before.ends_with("\"created\":") || before.ends_with("chatcmpl-sim") {
            out.push('N');
        } else {
            out.push_str(&digits[..end]);
        }
        rest = &digits[end..];
    }
    out.push_str(rest);
    out
}

/// The good and all output token rates of route `chat`, class
/// `interactive`, over the 1h window, as `/slo` has them.
async fn window_rates(admin: SocketAddr) -> (f64, f64) {
    let slo = admin_json(admin, "/slo").await;
    let series = slo["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["route"] == "chat" && s["slo"] == "interactive" && s["tenant"] == "")
        .unwrap()
        .clone();
    let window = series["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["window"] == "1h")
        .unwrap()
        .clone();
    (
        window["goodput"]["token_rate"].as_f64().unwrap(),
        window["output_token_rate"].as_f64().unwrap(),
    )
}

fn near(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= tolerance * want.abs()
}

#[tokio::test]
async fn a_dcgm_page_and_the_engine_s_own_are_exported_with_the_route() {
    let sim = batched_sim().await;
    let dcgm = Endpoint::start(Answer::Page(DCGM)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = load(
        dir.path(),
        &format!(
            "scrape: {{interval: 200ms, timeout: 150ms}}\nslo_files: [slo/*.yaml]\nroutes:\n  - name: chat\n    match: {{path_prefix: /v1/}}\n    upstream: http://{sim}\n    slo: interactive\n    engine_metrics: http://{sim}/metrics\n    gpu_metrics: {}\n    gpu_select: {{hostname: [node-a], gpu: [\"0\", \"1\"]}}\n",
            dcgm.url()
        ),
    );
    let proxy = start(config).await;

    // Good requests, so that good tokens per GPU-second has tokens.
    for _ in 0..4 {
        let resp = chat(proxy.proxy_addr, "/v1/chat/completions").await;
        assert_eq!(resp.status, 200);
    }
    let route = [("route", "chat")];
    let set = [("gpu_set", "chat")];
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[("verdict", "good")]) >= 4.0
            && sum(s, "llm_gpu_seconds_total", &set) > 0.0
            && !s.iter().all(|x| x.name != "llm_engine_requests_running")
    })
    .await;

    // The selected GPUs only: node-a's 0 and 1, of five on the page.
    assert_eq!(value(&s, "llm_gpus", &route), 2.0);
    let stat = |name: &str, stat: &str| value(&s, name, &[("route", "chat"), ("stat", stat)]);
    let close = |got: f64, want: f64| assert!(near(got, want, 1e-9), "{got} != {want}");
    close(stat("llm_gpu_utilization_ratio", "mean"), 0.8);
    close(stat("llm_gpu_utilization_ratio", "max"), 0.9);
    close(
        stat("llm_gpu_framebuffer_used_bytes", "mean"),
        50000.0 * 1048576.0,
    );
    close(
        stat("llm_gpu_framebuffer_used_bytes", "max"),
        60000.0 * 1048576.0,
    );
    close(stat("llm_gpu_graphics_engine_active_ratio", "mean"), 0.8);
    close(stat("llm_gpu_sm_active_ratio", "mean"), 0.5);
    close(stat("llm_gpu_sm_active_ratio", "max"), 0.6);
    close(stat("llm_gpu_dram_active_ratio", "mean"), 0.4);
    close(stat("llm_gpu_dram_active_ratio", "max"), 0.5);

    // The simulator's own page, in vLLM's names, under ours.
    let model = [("route", "chat"), ("model", "sim-model")];
    assert_eq!(
        value(
            &s,
            "llm_engine_info",
            &[("route", "chat"), ("server", "vllm")]
        ),
        1.0
    );
    assert!(
        s.iter().any(|x| x.name == "llm_engine_requests_running"
            && x.labels.get("model").map(String::as_str) == Some("sim-model")),
        "{s:?}"
    );
    // Once a scrape comes after the requests: nothing running or waiting,
    // the KV cache empty.
    let idle = |s: &[Sample]| {
        s.iter().any(|x| {
            x.name == "llm_engine_requests_running"
                && x.labels.get("model").map(String::as_str) == Some("sim-model")
                && x.value == 0.0
        })
    };
    let s = scrape_until(proxy.admin_addr, idle).await;
    assert!(idle(&s), "{s:?}");
    assert_eq!(value(&s, "llm_engine_requests_waiting", &model), 0.0);
    assert_eq!(value(&s, "llm_engine_kv_cache_usage_ratio", &model), 0.0);
    // A request of 3 prompt tokens, 2 of them found in the prefix cache,
    // between two scrapes: the engine's hit ratio over that span.
    let (head, body) = chat_request("sim-model", true, &[("x-sim-cached-tokens", "2")]);
    assert_eq!(
        raw_exchange(proxy.proxy_addr, &head, &body).await.status,
        200
    );
    let hits = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_engine_prefix_cache_hit_ratio", &model) > 0.0
    })
    .await;
    let ratio = value(&hits, "llm_engine_prefix_cache_hit_ratio", &model);
    assert!(near(ratio, 2.0 / 3.0, 1e-9), "hit ratio {ratio}");
    for reason in ["connect", "timeout", "parse", "too_large"] {
        for target in ["engine", "gpu"] {
            assert_eq!(
                value(
                    &s,
                    "tokenmeter_scrape_failures_total",
                    &[("route", "chat"), ("target", target), ("reason", reason)]
                ),
                0.0
            );
        }
    }

    // GPU-seconds: two GPUs, since about the first scrape.
    let first = sum(&s, "llm_gpu_seconds_total", &set);
    let later = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_gpu_seconds_total", &set) >= first + 0.8
    })
    .await;
    assert!(sum(&later, "llm_gpu_seconds_total", &set) >= first + 0.8);

    // Good output tokens per GPU-second: the window's good token rate over
    // the two GPUs, as /slo has it. With no request since, the window's
    // rates only fall as it covers more time: the exported figures lie
    // between /slo's read before them and /slo's read after.
    let before = window_rates(proxy.admin_addr).await;
    let (_, s) = scrape(proxy.admin_addr).await;
    let after = window_rates(proxy.admin_addr).await;
    assert!(after.0 > 0.0, "{after:?}");
    let labels = [("route", "chat"), ("slo", "interactive"), ("window", "1h")];
    let good = value(&s, "llm_slo_good_output_tokens_per_gpu_second", &labels);
    let all = value(&s, "llm_output_tokens_per_gpu_second", &labels);
    let within =
        |got: f64, low: f64, high: f64| got >= low * (1.0 - 1e-9) && got <= high * (1.0 + 1e-9);
    assert!(
        within(good, after.0 / 2.0, before.0 / 2.0),
        "{good}: {before:?} {after:?}"
    );
    assert!(
        within(all, after.1 / 2.0, before.1 / 2.0),
        "{all}: {before:?} {after:?}"
    );
    assert!(good <= all);
    proxy.stop().await;
}

#[tokio::test]
async fn endpoints_gone_wrong_change_no_byte_and_are_counted_by_reason() {
    let sim = batched_sim().await;
    let (refused, _held) = closed_port();
    let closing = Endpoint::start(Answer::Close).await;
    let status = Endpoint::start(Answer::Status(500)).await;
    let garbage = Endpoint::start(Answer::Page(b"<html>{{ not a page\n")).await;
    let unknown = Endpoint::start(Answer::Page(b"some_other_metric 1\n")).await;
    let hanging = Endpoint::start(Answer::Hang).await;
    let huge = Endpoint::start(Answer::Huge).await;
    let cases: [(&str, String, &str); 7] = [
        ("refusing", format!("http://{refused}/metrics"), "connect"),
        ("closing", closing.url(), "http"),
        ("status", status.url(), "status"),
        ("garbage", garbage.url(), "parse"),
        ("unknown", unknown.url(), "unrecognized"),
        ("hanging", hanging.url(), "timeout"),
        ("huge", huge.url(), "too_large"),
    ];
    let mut main = format!(
        "scrape: {{interval: 400ms, timeout: 300ms, max_body: 16KiB}}\nslo_files: [slo/*.yaml]\nroutes:\n  - name: plain\n    match: {{path_prefix: /plain/}}\n    strip_prefix: true\n    upstream: http://{sim}\n    slo: interactive\n"
    );
    for (name, url, _) in &cases {
        main.push_str(&format!(
            "  - name: {name}\n    match: {{path_prefix: /{name}/}}\n    strip_prefix: true\n    upstream: http://{sim}\n    slo: interactive\n    engine_metrics: {url}\n    gpu_metrics: {url}\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let proxy = start(load(dir.path(), &main)).await;

    // Each failing route's requests are answered as those of a route that
    // scrapes nothing, and as the simulator answers directly.
    let direct = chat(sim, "/v1/chat/completions").await;
    assert_eq!(direct.status, 200);
    let plain = chat(proxy.proxy_addr, "/plain/v1/chat/completions").await;
    let direct = normalized(&direct.body());
    assert!(direct.ends_with("data: [DONE]\n\n"), "{direct}");
    assert_eq!(normalized(&plain.body()), direct);
    let s = scrape_until(proxy.admin_addr, |s| {
        cases.iter().all(|(name, _, reason)| {
            ["engine", "gpu"].iter().all(|target| {
                value(
                    s,
                    "tokenmeter_scrape_failures_total",
                    &[("route", name), ("target", target), ("reason", reason)],
                ) >= 2.0
            })
        })
    })
    .await;
    for (name, _, reason) in &cases {
        let resp = chat(proxy.proxy_addr, &format!("/{name}/v1/chat/completions")).await;
        assert_eq!(resp.status, 200, "{name}");
        assert_eq!(
            normalized(&resp.body()),
            direct,
            "{name}: the bytes changed"
        );
        for target in ["engine", "gpu"] {
            let labels = [("route", *name), ("target", target), ("reason", *reason)];
            assert!(
                value(&s, "tokenmeter_scrape_failures_total", &labels) >= 2.0,
                "{labels:?}"
            );
            // No other reason.
            let all = sum(
                &s,
                "tokenmeter_scrape_failures_total",
                &[("route", name), ("target", target)],
            );
            assert_eq!(
                all,
                value(&s, "tokenmeter_scrape_failures_total", &labels),
                "{name} {target}"
            );
        }
        let route = [("route", *name)];
        for family in ["llm_engine_info", "llm_gpus", "llm_engine_requests_running"] {
            assert_eq!(sum(&s, family, &route), 0.0, "{family} of {name}");
            assert!(
                !s.iter()
                    .any(|x| x.name == family && x.labels.get("route") == Some(&name.to_string())),
                "{family} of {name} has a sample"
            );
        }
    }
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(
        sum(&s, "llm_slo_requests_total", &[("verdict", "bad")]),
        0.0
    );
    assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 0.0);
    proxy.stop().await;
}

#[tokio::test]
async fn figures_of_a_page_that_stops_answering_are_removed_not_frozen() {
    let sim = batched_sim().await;
    let engine = Endpoint::start(Answer::Page(VLLM)).await;
    let gpus = Endpoint::start(Answer::Page(DCGM)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = load(
        dir.path(),
        &format!(
            "scrape: {{interval: 200ms, timeout: 150ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    engine_metrics: {}\n    gpu_metrics: {}\n",
            engine.url(),
            gpus.url()
        ),
    );
    let proxy = start(config).await;
    let model = [("route", "chat"), ("model", VLLM_MODEL)];
    let s = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_engine_requests_running", &model) > 0.0
            && value(s, "llm_gpus", &[("route", "chat")]) == 5.0
    })
    .await;
    // The fixture's two engines of one model: 12 + 9 running, 3 + 0 waiting.
    assert_eq!(value(&s, "llm_engine_requests_running", &model), 21.0);
    assert_eq!(value(&s, "llm_engine_requests_waiting", &model), 3.0);

    engine.set(Answer::Hang);
    gpus.set(Answer::Status(503));
    // The chargeback families are counters that stay; every figure goes.
    let figure = |x: &Sample| {
        (x.name.starts_with("llm_engine_") || x.name.starts_with("llm_gpu"))
            && !names::CHARGEBACK.iter().any(|f| f.name("llm") == x.name)
    };
    let gone = scrape_until(proxy.admin_addr, |s| {
        !s.iter()
            .any(|x| x.labels.get("route").map(String::as_str) == Some("chat") && figure(x))
    })
    .await;
    let leftover: Vec<&Sample> = gone.iter().filter(|x| figure(x)).collect();
    assert!(leftover.is_empty(), "{leftover:?}");
    let failures = |target, reason| {
        value(
            &gone,
            "tokenmeter_scrape_failures_total",
            &[("route", "chat"), ("target", target), ("reason", reason)],
        )
    };
    assert!(failures("engine", "timeout") >= 1.0);
    assert!(failures("gpu", "status") >= 1.0);

    // Back: the figures return, the counts stay.
    engine.set(Answer::Page(VLLM));
    gpus.set(Answer::Page(DCGM));
    let back = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_engine_requests_running", &model) > 0.0
            && value(s, "llm_gpus", &[("route", "chat")]) == 5.0
    })
    .await;
    assert_eq!(value(&back, "llm_engine_requests_running", &model), 21.0);
    let again = value(
        &back,
        "tokenmeter_scrape_failures_total",
        &[
            ("route", "chat"),
            ("target", "engine"),
            ("reason", "timeout"),
        ],
    );
    assert!(again >= failures("engine", "timeout"));
    proxy.stop().await;
}

/// A reload that leaves the targets as they were keeps the running
/// scraper, and so its reading: a page that has stopped answering still
/// has its figures until they go stale. One that changes a target starts a
/// new scraper, which has read nothing yet; the failure counts go on
/// across both.
#[tokio::test]
async fn a_reload_keeps_the_scraper_unless_its_targets_change() {
    let sim = batched_sim().await;
    let engine = Endpoint::start(Answer::Page(VLLM)).await;
    let dir = tempfile::tempdir().unwrap();
    // Readings stay fresh for 3 intervals: 6 s, far longer than a reload.
    let main = |extra: &str| {
        format!(
            "scrape: {{interval: 2s, timeout: 500ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    engine_metrics: {}\n{extra}",
            engine.url()
        )
    };
    let config = load(dir.path(), &main(""));
    let path = dir.path().join("main.yaml");
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    let proxy = tokenmeter::app::start_with(
        config,
        Some(tokenmeter::app::ConfigSource {
            path: path.clone(),
            overrides,
            watch: false,
        }),
        None,
    )
    .await
    .unwrap();
    let model = [("route", "chat"), ("model", VLLM_MODEL)];
    let read = |s: &[Sample]| {
        s.iter().any(|x| {
            x.name == "llm_engine_requests_running"
                && x.labels.get("route").map(String::as_str) == Some("chat")
        })
    };
    let s = scrape_until(proxy.admin_addr, read).await;
    assert_eq!(value(&s, "llm_engine_requests_running", &model), 21.0);
    engine.set(Answer::Hang);

    // A change elsewhere: the same scraper, its reading still fresh.
    std::fs::write(&path, main("    strip_prefix: true\n")).unwrap();
    proxy.reload().await.unwrap();
    let (_, s) = scrape(proxy.admin_addr).await;
    assert_eq!(value(&s, "llm_engine_requests_running", &model), 21.0);
    let failures = |s: &[Sample]| {
        value(
            s,
            "tokenmeter_scrape_failures_total",
            &[
                ("route", "chat"),
                ("target", "engine"),
                ("reason", "timeout"),
            ],
        )
    };
    let before = failures(&s);

    // A changed target: a new scraper, which has read nothing (its page
    // hangs), and whose failures add to the count.
    std::fs::write(
        &path,
        main("    strip_prefix: true\n    scrape_interval: 1500ms\n"),
    )
    .unwrap();
    proxy.reload().await.unwrap();
    let (_, s) = scrape(proxy.admin_addr).await;
    assert!(!read(&s), "a new scraper has no reading yet");
    assert!(failures(&s) >= before);
    let s = scrape_until(proxy.admin_addr, |s| failures(s) >= before + 1.0).await;
    assert!(failures(&s) >= before + 1.0);
    proxy.stop().await;
}

/// A DCGM page over TLS, signed by the test CA (`tests/data/tls/`), the
/// server offering `h2` first: read by the route that trusts that CA
/// (`tls.ca_file`), over HTTP/1.1, and refused as `tls` by the one that
/// trusts another.
#[tokio::test]
async fn an_https_page_is_trusted_with_the_route_s_ca() {
    use pki_types::pem::PemObject;
    use tokio_rustls::rustls::{self, pki_types};
    let tls = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let certs = pki_types::CertificateDer::pem_file_iter(tls.join("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = pki_types::PrivateKeyDer::from_pem_file(tls.join("server.key")).unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(stream).await {
                    serve(stream, Answer::Page(DCGM)).await;
                }
            });
        }
    });
    let sim = batched_sim().await;
    let text = format!(
        "scrape: {{interval: 200ms, timeout: 150ms}}\nroutes:\n  - name: untrusted\n    match: {{path_prefix: /other/}}\n    upstream: http://{sim}\n    gpu_metrics: https://localhost:{port}/metrics\n    tls: {{ca_file: other-ca.pem}}\n  - name: trusted\n    upstream: http://{sim}\n    gpu_metrics: https://localhost:{port}/metrics\n    tls: {{ca_file: ca.pem}}\n",
        port = addr.port()
    );
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    let file = tls.join("tokenmeter.yaml");
    let config = Config::parse(&text, file.to_str().unwrap(), &overrides).unwrap();
    let proxy = start(config).await;
    let tls_failures = [("route", "untrusted"), ("target", "gpu"), ("reason", "tls")];
    let s = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_gpus", &[("route", "trusted")]) == 5.0
            && value(s, "tokenmeter_scrape_failures_total", &tls_failures) >= 1.0
    })
    .await;
    assert_eq!(value(&s, "llm_gpus", &[("route", "trusted")]), 5.0);
    assert!(value(&s, "tokenmeter_scrape_failures_total", &tls_failures) >= 1.0);
    assert_eq!(
        sum(
            &s,
            "tokenmeter_scrape_failures_total",
            &[("route", "trusted")]
        ),
        0.0
    );
    assert_eq!(sum(&s, "llm_gpus", &[("route", "untrusted")]), 0.0);
    proxy.stop().await;
}

/// The families pass `promtool check metrics` in the text format, and are
/// in the OpenMetrics exposition too.
#[tokio::test]
async fn the_exposition_with_engine_and_gpu_families_is_valid_needs_tool_promtool() {
    let sim = batched_sim().await;
    let dcgm = Endpoint::start(Answer::Page(DCGM)).await;
    let (refused, _held) = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let config = load(
        dir.path(),
        &format!(
            "scrape: {{interval: 200ms, timeout: 150ms}}\nslo_files: [slo/*.yaml]\nroutes:\n  - name: down\n    match: {{path_prefix: /down/}}\n    upstream: http://{sim}\n    engine_metrics: http://{refused}/metrics\n  - name: chat\n    upstream: http://{sim}\n    slo: interactive\n    engine_metrics: http://{sim}/metrics\n    gpu_metrics: {}\n",
            dcgm.url()
        ),
    );
    let proxy = start(config).await;
    let resp = chat(proxy.proxy_addr, "/v1/chat/completions").await;
    assert_eq!(resp.status, 200);
    scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_gpus", &[("route", "chat")]) == 5.0
            && s.iter().any(|x| x.name == "llm_engine_requests_running")
            && s.iter()
                .any(|x| x.name == "llm_slo_good_output_tokens_per_gpu_second")
    })
    .await;
    let (text, _) = scrape(proxy.admin_addr).await;
    // The prefix cache's ratio needs lookups between two scrapes: the
    // first test has it.
    for family in names::TELEMETRY
        .iter()
        .filter(|f| **f != names::ENGINE_PREFIX_HIT)
    {
        let name = family.name("llm");
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} missing:\n{text}"
        );
    }
    let (ok, out) = crate::metering::promtool_check_metrics(&text);
    assert!(ok, "promtool check metrics failed:\n{out}");
    let om = raw_exchange(
        proxy.admin_addr,
        "GET /metrics HTTP/1.1\r\nhost: test\r\naccept: application/openmetrics-text;version=1.0.0\r\nconnection: close\r\n\r\n",
        b"",
    )
    .await;
    let om = String::from_utf8(om.body()).unwrap();
    assert!(om.ends_with("# EOF\n"), "{om}");
    for needle in [
        "llm_gpus{route=\"chat\"} 5",
        "tokenmeter_scrape_failures_total{",
        "llm_gpu_seconds_total{",
        "llm_engine_requests_running{",
    ] {
        assert!(om.contains(needle), "{needle} missing:\n{om}");
    }
    proxy.stop().await;
}

/// Two replicas in front of one engine's GPUs, scraped by Prometheus: each
/// counts the route's two GPUs' seconds, and docs/metrics.md's query of
/// good output tokens per GPU-second sums the replicas' good tokens over
/// those GPUs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_tokens_per_gpu_second_over_replicas_in_prometheus_needs_tool_prometheus() {
    use crate::prometheus::{api, encode, eventually, eventually_near, start_prometheus};
    let sim = batched_sim().await;
    let dcgm = Endpoint::start(Answer::Page(DCGM)).await;
    let main = format!(
        "scrape: {{interval: 200ms, timeout: 150ms}}\nslo_files: [slo/*.yaml]\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    slo: interactive\n    gpu_metrics: {}\n    gpu_select: {{hostname: [node-a], gpu: [\"0\", \"1\"]}}\n",
        dcgm.url()
    );
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(load(da.path(), &main)).await;
    let b = start(load(db.path(), &main)).await;
    let p = start_prometheus(&[a.admin_addr, b.admin_addr]).await;
    eventually(&p, "count(up{job=\"tokenmeter\"} == 1)", 2.0).await;
    let gpu_seconds = "avg by (gpu_set) (rate(llm_gpu_seconds_total[5s]))";
    eventually_near(&p, gpu_seconds, &[("gpu_set", "chat")], 2.0, 0.2).await;

    // Clients on both replicas until the check is done.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = [a.proxy_addr, a.proxy_addr, b.proxy_addr]
        .into_iter()
        .map(|addr| {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    assert_eq!(chat(addr, "/v1/chat/completions").await.status, 200);
                }
            })
        })
        .collect();
    let documented = "sum by (route, model, slo) (rate(llm_slo_good_output_tokens_total[10s])) / on (route) group_left avg by (route) (avg_over_time(llm_gpus[10s]))";
    let two_gpus = "sum by (route, model, slo) (rate(llm_slo_good_output_tokens_total[10s])) / 2";
    let labels = [
        ("route", "chat"),
        ("model", "sim-model"),
        ("slo", "interactive"),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (got, want) = loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let at = |expr: &str| format!("query?query={}&time={now}", encode(expr));
        let got = crate::prometheus::series(&api(&p, &at(documented)).await, &labels);
        let want = crate::prometheus::series(&api(&p, &at(two_gpus)).await, &labels);
        if let (Some(got), Some(want)) = (got, want)
            && want > 0.0
            && near(got, want, 0.1)
        {
            break (got, want);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{documented}: {got:?}, {two_gpus}: {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(near(got, want, 0.1), "{got} vs {want}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    a.stop().await;
    b.stop().await;
}
