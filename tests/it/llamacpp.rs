//! llama.cpp's own server behind the proxy: `llama-server`, built from the
//! llama.cpp that the llama-cpp-python sdist vendors
//! (`tests/llamacpp/build.sh`, as .ci/run does), serving a tiny random
//! model that `tests/llamacpp/tiny_model.py` writes, on a loopback port.
//!
//! Through the proxy (a route with `protocol: auto`, as a user's would be):
//! a streamed `/v1/chat/completions` with and without
//! `stream_options.include_usage`, and llama.cpp's native `/completion`,
//! streamed and not. Each answer is a well-formed stream (or body), and the
//! proxy's figures are llama.cpp's own: the prefill and decode histograms
//! hold exactly the `timings.prompt_ms` and `timings.predicted_ms` that
//! llama-server reported (and no queue, which it does not report), and the
//! token counters its usage (`predicted_n`), or the token events where it
//! sent no usage.
//!
//! A missing `llama-server`, Python or `gguf` package fails the test with
//! what to run.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

/// Tokens each request asks for.
const MAX_TOKENS: u64 = 8;

/// How long llama-server may live at most: `timeout` ends it then even if
/// this test's process died without dropping [`LlamaServer`].
const LIFETIME: &str = "300";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where `tests/llamacpp/build.sh` puts the binary: `$LLAMA_SERVER_DIR`
/// (relative to the repository's root), `target/llama-server/` by default.
fn llama_server_bin() -> PathBuf {
    let dir = std::env::var_os("LLAMA_SERVER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/llama-server"));
    repo().join(dir).join("llama-server")
}

/// Writes the tiny model to `out` with `tests/llamacpp/tiny_model.py`.
fn write_model(out: &Path) {
    const INSTALL: &str = "install gguf==0.19.0 into a virtual environment first on PATH \
                           (.ci/run's is target/venv)";
    let output = match Command::new("python3")
        .arg("-B")
        .arg(repo().join("tests/llamacpp/tiny_model.py"))
        .arg(out)
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("`python3` not found: {INSTALL}")
        }
        Err(e) => panic!("cannot run `python3`: {e}"),
    };
    assert!(
        output.status.success(),
        "tests/llamacpp/tiny_model.py failed ({}): {INSTALL}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// llama-server as a child process (under `timeout`, which bounds its
/// life); stopped when dropped.
struct LlamaServer {
    addr: SocketAddr,
    child: Child,
    log: Arc<Mutex<String>>,
}

impl LlamaServer {
    /// llama-server serving `model` in `parallel` slots, with `extra`
    /// arguments.
    fn start(model: &Path, parallel: u32, extra: &[&str]) -> LlamaServer {
        let bin = llama_server_bin();
        assert!(
            bin.is_file(),
            "{} not found: build it with `bash tests/llamacpp/build.sh` (as .ci/run does; \
             7 to 14 minutes on 2 cores; LLAMA_SERVER_DIR moves it)",
            bin.display()
        );
        // `-k 5`: a llama-server that ignores the TERM is killed 5 s later.
        let mut child = Command::new("timeout")
            .args(["-k", "5", LIFETIME])
            .arg(&bin)
            .arg("--model")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--threads", "1", "--threads-batch", "1"])
            .args(["--ctx-size", "256", "--parallel", &parallel.to_string()])
            .args(["--n-predict", &MAX_TOKENS.to_string()])
            .args(["--no-webui", "--no-warmup", "--offline"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `timeout {}`: {e}", bin.display()));
        // Its log, kept for failures; the port from the line that says
        // where it listens, once the model is loaded.
        let log = Arc::new(Mutex::new(String::new()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let log = log.clone();
            let port_tx = port_tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some((_, rest)) = line.split_once("listening on http://127.0.0.1:")
                        && let Ok(port) = rest.trim().parse::<u16>()
                    {
                        let _ = port_tx.send(port);
                    }
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let mut server = LlamaServer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child,
            log,
        };
        match port_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(port) => server.addr.set_port(port),
            Err(_) => panic!(
                "llama-server did not start ({:?}):\n{}",
                server.child.try_wait(),
                server.log()
            ),
        }
        server
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Polls `GET /health` until it answers 200 (llama-server answers 503
    /// while it loads the model).
    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let resp = get(self.addr, "/health").await;
            if resp.status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not healthy: {resp:?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // `timeout` passes the TERM on to llama-server (and kills it 5 s
            // later if it is still there): a KILL would end `timeout` alone.
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Ok(None) = self.child.try_wait() {
                if Instant::now() > deadline {
                    let _ = self.child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.wait();
        }
    }
}

/// One request and what llama-server said of it.
struct Exchange {
    what: &'static str,
    /// The event (or body) that carried `timings`.
    last: String,
    prompt_ms: f64,
    predicted_ms: f64,
    predicted_n: u64,
    /// `usage.completion_tokens` or `tokens_predicted`, where reported.
    usage_output: Option<u64>,
    /// `usage.prompt_tokens` or `tokens_evaluated`, where reported.
    usage_input: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens` or `timings.cache_n`,
    /// where the proxy reads it (not `timings.cache_n` of a `/v1` stream).
    cached_input: Option<u64>,
    /// Its chunks with non-empty generated text (streams).
    token_events: u64,
    streamed: bool,
}

async fn post(proxy: SocketAddr, path: &str, body: &Value) -> RawResponse {
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: llama\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    raw_exchange(proxy, &head, body.as_bytes()).await
}

/// The data of each event of a well-formed SSE body: every event is one
/// `data: ` line (or a comment: llama-server's keep-alive ping).
fn sse_data(what: &str, body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    let mut data = Vec::new();
    for event in split_events(body) {
        let event = std::str::from_utf8(&event).unwrap();
        assert!(
            event.ends_with("\n\n"),
            "{what}: unterminated event {event:?} in\n{text}"
        );
        if event.starts_with(':') {
            continue;
        }
        let line = event.trim_end_matches('\n');
        assert!(
            !line.contains('\n'),
            "{what}: one line per event: {event:?}"
        );
        let payload = line
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("{what}: not a data line: {event:?}"));
        data.push(payload.to_owned());
    }
    assert!(!data.is_empty(), "{what}: no events");
    data
}

fn parse(what: &str, data: &str) -> Value {
    serde_json::from_str(data).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {data}"))
}

fn timings_of(what: &'static str, last: &str, v: &Value) -> (f64, f64, u64) {
    let t = &v["timings"];
    let ms = |key: &str| {
        t[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no timings.{key} in {last}"))
    };
    let n = t["predicted_n"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: no timings.predicted_n in {last}"));
    (ms("prompt_ms"), ms("predicted_ms"), n)
}

/// A streamed chat completion: role chunk, content chunks, the finish
/// chunk, the usage chunk (when asked for), `[DONE]`; `timings` on the
/// last chunk before `[DONE]` and on no other.
async fn chat(proxy: SocketAddr, usage: bool) -> Exchange {
    let what = if usage {
        "chat, stream, include_usage"
    } else {
        "chat, stream"
    };
    let mut body = json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": if usage { "Tell me a story." } else { "Say hi." }}],
        "stream": true,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    });
    if usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    let resp = post(proxy, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert!(!resp.truncated, "{what}: truncated");
    assert!(
        resp.header("content-type")
            .is_some_and(|ct| ct.starts_with("text/event-stream")),
        "{what}: {resp:?}"
    );
    let data = sse_data(what, &resp.body());
    let (done, chunks) = data.split_last().unwrap();
    assert_eq!(done, "[DONE]", "{what}: ends with [DONE]");
    let chunks: Vec<Value> = chunks.iter().map(|d| parse(what, d)).collect();
    let with_timings: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i].get("timings").is_some())
        .collect();
    assert_eq!(
        with_timings,
        [chunks.len() - 1],
        "{what}: timings on the last chunk alone"
    );
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{what}: {c}");
    }
    let last = data[data.len() - 2].clone();
    let final_chunk = chunks.last().unwrap();
    let (prompt_ms, predicted_ms, predicted_n) = timings_of(what, &last, final_chunk);
    let token_events = chunks
        .iter()
        .filter(|c| {
            c["choices"].as_array().unwrap().iter().any(|choice| {
                choice["delta"]["content"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
            })
        })
        .count() as u64;
    let usage_chunks: Vec<&Value> = chunks.iter().filter(|c| !c["usage"].is_null()).collect();
    let (usage_output, usage_input, cached_input) = if usage {
        assert_eq!(usage_chunks.len(), 1, "{what}: one usage chunk");
        let u = &usage_chunks[0]["usage"];
        (
            u["completion_tokens"].as_u64(),
            u["prompt_tokens"].as_u64(),
            u["prompt_tokens_details"]["cached_tokens"].as_u64(),
        )
    } else {
        assert!(usage_chunks.is_empty(), "{what}: usage not asked for");
        (None, None, None)
    };
    Exchange {
        what,
        last,
        prompt_ms,
        predicted_ms,
        predicted_n,
        usage_output,
        usage_input,
        cached_input,
        token_events,
        streamed: true,
    }
}

/// llama.cpp's native `/completion`: streamed, a chunk per token and a
/// final one with `stop: true` (no `[DONE]`); else one JSON body of the
/// final chunk's shape.
async fn completion(proxy: SocketAddr, stream: bool) -> Exchange {
    let what = if stream {
        "/completion, stream"
    } else {
        "/completion"
    };
    let body = json!({
        "prompt": if stream { "Once upon a time" } else { "The quick brown fox" },
        "n_predict": MAX_TOKENS,
        "stream": stream,
        "temperature": 0,
    });
    let resp = post(proxy, "/completion", &body).await;
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert!(!resp.truncated, "{what}: truncated");
    let (last, final_chunk, token_events) = if stream {
        assert!(
            resp.header("content-type")
                .is_some_and(|ct| ct.starts_with("text/event-stream")),
            "{what}: {resp:?}"
        );
        let data = sse_data(what, &resp.body());
        let chunks: Vec<Value> = data.iter().map(|d| parse(what, d)).collect();
        let (final_chunk, partial) = chunks.split_last().unwrap();
        assert_eq!(final_chunk["stop"], true, "{what}: ends with stop: true");
        for c in partial {
            assert_eq!(c["stop"], false, "{what}: {c}");
            assert!(
                c.get("timings").is_none(),
                "{what}: timings on the last chunk alone"
            );
        }
        let token_events = partial
            .iter()
            .filter(|c| c["content"].as_str().is_some_and(|s| !s.is_empty()))
            .count() as u64;
        (
            data.last().unwrap().clone(),
            final_chunk.clone(),
            token_events,
        )
    } else {
        assert!(
            resp.header("content-type")
                .is_some_and(|ct| ct.starts_with("application/json")),
            "{what}: {resp:?}"
        );
        let text = String::from_utf8(resp.body()).unwrap();
        let v = parse(what, &text);
        assert_eq!(v["stop"], true, "{what}: {text}");
        (text, v, 0)
    };
    let (prompt_ms, predicted_ms, predicted_n) = timings_of(what, &last, &final_chunk);
    Exchange {
        what,
        prompt_ms,
        predicted_ms,
        predicted_n,
        usage_output: final_chunk["tokens_predicted"].as_u64(),
        usage_input: final_chunk["tokens_evaluated"].as_u64(),
        cached_input: final_chunk["timings"]["cache_n"].as_u64(),
        token_events,
        streamed: stream,
        last,
    }
}

fn assert_close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1e-9),
        "{what}: the proxy exported {got}, llama-server reported {want}"
    );
}

#[tokio::test]
async fn llama_server_reports_prompt_and_predicted_ms_into_the_phase_histograms_needs_tool_llama_server()
 {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_model(&model);
    let server = LlamaServer::start(&model, 1, &[]);
    server.wait_healthy().await;
    let proxy = start(config_for(server.addr)).await;

    let exchanges = [
        chat(proxy.proxy_addr, true).await,
        chat(proxy.proxy_addr, false).await,
        completion(proxy.proxy_addr, true).await,
        completion(proxy.proxy_addr, false).await,
    ];
    for x in &exchanges {
        eprintln!(
            "{}: prompt_ms {} predicted_ms {} predicted_n {}, {} token events; its last event:\n{}",
            x.what, x.prompt_ms, x.predicted_ms, x.predicted_n, x.token_events, x.last
        );
        assert_eq!(
            x.predicted_n, MAX_TOKENS,
            "{}: the model stops at the token limit alone",
            x.what
        );
        if let Some(output) = x.usage_output {
            assert_eq!(output, x.predicted_n, "{}: usage and timings agree", x.what);
        }
        if x.streamed {
            // The tiny model's tokens are single ASCII characters: one
            // chunk of text each.
            assert_eq!(
                x.token_events, x.predicted_n,
                "{}: a chunk per token",
                x.what
            );
        }
    }

    let n = exchanges.len() as f64;
    let s = scrape_until(proxy.admin_addr, |s| sum(s, "llm_requests_total", &[]) == n).await;
    let log = || server.log();
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "ok")]),
        n,
        "every request ok\n{}",
        log()
    );
    assert_eq!(sum(&s, "tokenmeter_stream_parse_errors_total", &[]), 0.0);

    // The server's phases: each request's own report, once.
    let prefill: f64 = exchanges.iter().map(|x| x.prompt_ms / 1000.0).sum();
    let decode: f64 = exchanges.iter().map(|x| x.predicted_ms / 1000.0).sum();
    for (family, want) in [
        ("llm_server_prefill_seconds", prefill),
        ("llm_server_decode_seconds", decode),
    ] {
        assert_eq!(
            sum(&s, &format!("{family}_count"), &[]),
            n,
            "{family}: one observation per request"
        );
        assert_close(family, sum(&s, &format!("{family}_sum"), &[]), want);
    }
    // llama.cpp reports no queue, so no time outside the engine either.
    assert_eq!(sum(&s, "llm_server_queue_seconds_count", &[]), 0.0);
    assert_eq!(sum(&s, "llm_time_outside_engine_seconds_count", &[]), 0.0);
    assert_eq!(sum(&s, "llm_outside_engine_negative_total", &[]), 0.0);
    // The server's prefill is part of the TTFT the proxy measured.
    let streamed = exchanges.iter().filter(|x| x.streamed);
    let streamed_prefill: f64 = streamed.clone().map(|x| x.prompt_ms / 1000.0).sum();
    assert_eq!(
        sum(&s, "llm_time_to_first_token_seconds_count", &[]),
        streamed.count() as f64
    );
    let ttft = sum(&s, "llm_time_to_first_token_seconds_sum", &[]);
    assert!(
        ttft >= streamed_prefill,
        "TTFT {ttft} s, the server's prefill {streamed_prefill} s"
    );

    // Tokens: llama.cpp's usage where it sent one, else the token events.
    let usage_output: u64 = exchanges.iter().filter_map(|x| x.usage_output).sum();
    let usage_input: u64 = exchanges.iter().filter_map(|x| x.usage_input).sum();
    let events: u64 = exchanges
        .iter()
        .filter(|x| x.usage_output.is_none())
        .map(|x| x.token_events)
        .sum();
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "usage")]),
        usage_output as f64,
        "output tokens from usage"
    );
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "events")]),
        events as f64,
        "output tokens counted from events where no usage came"
    );
    assert_eq!(
        sum(&s, "llm_input_tokens_total", &[]),
        usage_input as f64,
        "input tokens"
    );
    let cached: u64 = exchanges.iter().filter_map(|x| x.cached_input).sum();
    assert_eq!(
        sum(&s, "llm_cached_input_tokens_total", &[]),
        cached as f64,
        "cached input tokens"
    );
    // Per request: every request's output, the input where reported.
    let with_input = exchanges.iter().filter(|x| x.usage_input.is_some()).count();
    for (family, count, total) in [
        ("llm_output_tokens", exchanges.len(), usage_output + events),
        ("llm_input_tokens", with_input, usage_input),
    ] {
        assert_eq!(
            sum(&s, &format!("{family}_count"), &[]),
            count as f64,
            "{family}: requests"
        );
        assert_eq!(
            sum(&s, &format!("{family}_sum"), &[]),
            total as f64,
            "{family}: tokens"
        );
    }
    proxy.stop().await;
}

/// llama-server's own `/metrics` (`--metrics`), scraped through the route's
/// `engine_metrics`: its `llamacpp:*` gauges under tokenmeter's names, with
/// the route and no model (llama-server names none), while requests run
/// on its two slots; with `gpus: 1`, the GPU's time divided among the
/// requests adds up.
#[tokio::test]
async fn llama_server_gauges_are_re_exported_with_the_route_needs_tool_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_model(&model);
    let server = LlamaServer::start(&model, 2, &["--metrics"]);
    server.wait_healthy().await;
    let page = get(server.addr, "/metrics").await;
    assert_eq!(page.status, 200, "llama-server's /metrics: {page:?}");
    let page = String::from_utf8(page.body()).unwrap();
    assert!(
        page.contains("llamacpp:requests_processing"),
        "llama-server's own page:\n{page}"
    );
    let mut config = config_for(server.addr);
    let url = format!("http://{}/metrics", server.addr);
    config.routes[0].engine_metrics = Some(tokenmeter::config::MetricsEndpoint {
        url: url.parse().unwrap(),
        shown: url.clone(),
    });
    config.scrape.interval = Duration::from_millis(200);
    config.scrape.timeout = Duration::from_millis(150);
    // One GPU all the time, divided among the requests by their share of
    // the engine's batch.
    config.routes[0].gpus = Some(1);
    let proxy = start(config).await;

    let engine = [("route", "test"), ("model", "")];
    let s = scrape_until(proxy.admin_addr, |s| {
        s.iter().any(|x| x.name == "llm_engine_requests_running")
    })
    .await;
    assert_eq!(
        value(
            &s,
            "llm_engine_info",
            &[("route", "test"), ("server", "llamacpp")]
        ),
        1.0,
        "{}",
        server.log()
    );
    assert_eq!(value(&s, "llm_engine_requests_running", &engine), 0.0);
    assert_eq!(value(&s, "llm_engine_requests_waiting", &engine), 0.0);

    // Four clients in a closed loop on two slots, until a scrape sees
    // requests running: at most two.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop) = (proxy.proxy_addr, stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    completion(addr, true).await;
                }
            })
        })
        .collect();
    let busy = scrape_until(proxy.admin_addr, |s| {
        value(s, "llm_engine_requests_running", &engine) >= 1.0
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    let running = value(&busy, "llm_engine_requests_running", &engine);
    assert!(
        (1.0..=2.0).contains(&running),
        "running {running}: two slots\n{}",
        server.log()
    );
    assert_eq!(
        sum(
            &busy,
            "tokenmeter_scrape_failures_total",
            &[("route", "test")]
        ),
        0.0
    );
    // The requests, in flight, left to others and idle add up to the GPU's
    // time.
    let s = scrape(proxy.admin_addr).await.1;
    let route = [("gpu_set", "test")];
    let charged = sum(&s, "llm_request_gpu_seconds_total", &route);
    let parts = charged
        + sum(&s, "llm_gpu_in_flight_seconds", &route)
        + sum(&s, "llm_gpu_other_replicas_seconds_total", &route)
        + sum(&s, "llm_gpu_idle_seconds_total", &route);
    let total = sum(&s, "llm_gpu_seconds_total", &route);
    assert!(charged > 0.0, "{charged}");
    assert!(
        (parts - total).abs() <= 0.005 * total,
        "{parts} against {total}"
    );
    proxy.stop().await;
}

/// The latency–load curve of a real engine: llama-server with two slots
/// (`--parallel 2 --metrics`) under closed-loop load at 1, 2, 3 and 4
/// concurrent streams, against a class with TTFT p95 ≤ 50 ms. Up to two
/// streams start at once (a first token in a few milliseconds); a third
/// waits for a slot, up to a whole request (about 70 ms, 240 tokens, on
/// one thread), so the knee is 2, measured.
///
/// The load is the requests in flight to the route (no `engine_metrics`
/// here): a request lasts less than any scrape interval, so the engine's
/// counts, read at the latest scrape, would date most requests' load
/// from another moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_with_two_slots_has_its_knee_at_2_needs_tool_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_model(&model);
    // Room for 240 tokens a request (the tiny model's context is 256).
    let server = LlamaServer::start(&model, 2, &["--metrics", "--n-predict", "240"]);
    server.wait_healthy().await;
    let slo = "classes:\n  - name: chat\n    objectives:\n      ttft: {p95: 50ms}\n";
    let main = "slo_files: [slo/*.yaml]\nroutes:\n  - name: llama\n    upstream: http://127.0.0.1:1\n    slo: chat\n";
    let proxy = start(config_from_files(
        dir.path(),
        main,
        &[("chat.yaml", slo)],
        server.addr,
    ))
    .await;
    let body = serde_json::json!({
        "prompt": "Once upon a time",
        "n_predict": 240,
        "ignore_eos": true,
        "stream": true,
    });
    // (clients, requests each): 48 requests at each load, so that the p95
    // at a load lets two slow requests through, not one (a test running
    // beside this one on a 2-core machine can delay a first token).
    let plan = [(1, 48), (2, 24), (3, 16), (4, 12)];
    for (clients, each) in plan {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..clients {
            let (addr, body) = (proxy.proxy_addr, body.clone());
            tasks.spawn(async move {
                for _ in 0..each {
                    let resp = post(addr, "/completion", &body).await;
                    assert_eq!(resp.status, 200);
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }
    let judged: f64 = plan.iter().map(|(c, n)| (c * n) as f64).sum();
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_load_requests_total", &[("route", "llama")]) >= judged
    })
    .await;
    let knee: Vec<&Sample> = s
        .iter()
        .filter(|x| {
            x.name == "llm_slo_capacity_concurrency"
                && x.labels.get("route").map(String::as_str) == Some("llama")
                && x.labels.get("window").map(String::as_str) == Some("5m")
        })
        .collect();
    assert_eq!(knee.len(), 1, "{knee:?}\n{}", server.log());
    assert_eq!(
        knee[0].labels.get("bound").map(String::as_str),
        Some("measured"),
        "{knee:?}"
    );
    assert_eq!(knee[0].value, 2.0, "{knee:?}");
    proxy.stop().await;
}
