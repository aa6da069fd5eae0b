//! A closed-loop load whose concurrency climbs in steps, for the `demo`
//! command's latency–load curve: `steps[0]` clients, each sending its next
//! request when the last one ends, for `hold`; then `steps[1]` clients, and
//! so on; after the last step it starts again from the first.
//!
//! Closed loop, unlike [`run_load`](crate::load::run_load): a step's
//! concurrency is exactly its number of clients, so the requests of a step
//! all meet the same load at arrival, and a batch-limited simulator shows
//! its knee at its number of slots. The requests are plain (no slow starts
//! or faults), of one length, so that only the load moves their latency.
//! Given tenants, client `i` names the `i`-th of them, round, in
//! [`TENANT_HEADER`]: the first clients, which run at every step, are the
//! tenants that use the engine most.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::load::{LoadSummary, TENANT_HEADER};

/// The shape of a ramp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ramp {
    /// Concurrency of each step, in order; a step of 0 sends nothing.
    pub steps: Vec<u32>,
    /// How long each step lasts.
    pub hold: Duration,
    /// Output tokens each request asks for.
    pub max_tokens: u32,
    /// The tenants the clients name, client `i` the `i % len`-th (none when
    /// empty).
    pub tenants: Vec<String>,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Counts kept by the clients, read once at the end.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
}

/// Runs `ramp` against `{base_url}/v1/chat/completions` until `shutdown`
/// resolves, then abandons the requests running and returns the counts
/// (requests still running are in neither `ok` nor `failed`). A ramp with
/// no step, or a zero hold, sends nothing.
pub async fn run_ramp(
    base_url: String,
    ramp: Ramp,
    shutdown: impl Future<Output = ()> + Send,
) -> LoadSummary {
    let counts = Arc::new(Counts::default());
    if ramp.steps.is_empty() || ramp.hold.is_zero() {
        shutdown.await;
        return LoadSummary::default();
    }
    let url: Arc<str> = format!("{}/v1/chat/completions", base_url.trim_end_matches('/')).into();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    // Client `i` runs while the step's concurrency is above `i`.
    let (concurrency, _) = watch::channel(0u32);
    let mut clients = JoinSet::new();
    let mut started = 0u32;
    tokio::pin!(shutdown);
    'ramp: loop {
        for &step in &ramp.steps {
            concurrency.send_replace(step);
            while started < step {
                let tenant = (!ramp.tenants.is_empty())
                    .then(|| ramp.tenants[started as usize % ramp.tenants.len()].clone());
                clients.spawn(client_loop(
                    started,
                    concurrency.subscribe(),
                    Sender {
                        client: client.clone(),
                        url: url.clone(),
                        max_tokens: ramp.max_tokens,
                        tenant,
                    },
                    counts.clone(),
                ));
                started += 1;
            }
            tokio::select! {
                () = &mut shutdown => break 'ramp,
                () = tokio::time::sleep(ramp.hold) => {}
            }
        }
    }
    clients.abort_all();
    LoadSummary {
        sent: counts.sent.load(Ordering::Relaxed),
        ok: counts.ok.load(Ordering::Relaxed),
        failed: counts.failed.load(Ordering::Relaxed),
    }
}

/// What a client sends its requests with.
struct Sender {
    client: HttpClient,
    url: Arc<str>,
    max_tokens: u32,
    /// The tenant its requests name, if any.
    tenant: Option<String>,
}

/// Client `index`: sends a request after another while the concurrency is
/// above its index, and waits for it to rise again when it is not.
async fn client_loop(
    index: u32,
    mut concurrency: watch::Receiver<u32>,
    sender: Sender,
    counts: Arc<Counts>,
) {
    loop {
        if concurrency.wait_for(|&c| c > index).await.is_err() {
            return;
        }
        counts.sent.fetch_add(1, Ordering::Relaxed);
        match send(&sender).await {
            Ok(()) => counts.ok.fetch_add(1, Ordering::Relaxed),
            Err(reason) => {
                tracing::debug!(%reason, "ramp: request failed");
                counts.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// Sends one streamed chat request and reads its answer to the end.
async fn send(sender: &Sender) -> Result<(), String> {
    let body = json!({
        "model": "sim-model",
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": sender.max_tokens,
        "messages": [{"role": "user", "content": "how much load can you take"}],
    });
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(
            sender
                .url
                .parse::<Uri>()
                .map_err(|e| format!("bad base URL: {e}"))?,
        )
        .header(CONTENT_TYPE, "application/json");
    if let Some(tenant) = &sender.tenant {
        builder = builder.header(TENANT_HEADER, tenant);
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| format!("could not build request: {e}"))?;
    let response = sender
        .client
        .request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("status {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimConfig;
    use std::num::NonZeroU32;
    use tokio::net::TcpListener;

    /// The simulator's own gauges follow the ramp's steps: with 2 slots,
    /// a step of 3 clients holds 2 running and 1 waiting.
    #[tokio::test]
    async fn a_step_holds_its_concurrency() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
        let (stop_load, load_stopped) = tokio::sync::oneshot::channel::<()>();
        let config = SimConfig {
            ttft: Duration::from_millis(50),
            itl: Duration::from_millis(20),
            tokens: 20,
            slots: NonZeroU32::new(2),
            ..SimConfig::default()
        };
        let server = tokio::spawn(crate::serve(listener, config, async {
            let _ = server_stopped.await;
        }));
        let ramp = Ramp {
            steps: vec![3],
            hold: Duration::from_secs(60),
            max_tokens: 20,
            tenants: Vec::new(),
        };
        let load = tokio::spawn(run_ramp(format!("http://{addr}"), ramp, async {
            let _ = load_stopped.await;
        }));
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        // Each request holds a slot about 450 ms: within a few seconds the
        // gauges are read mid-request, whatever the machine's speed.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let seen = loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never saw 2 running and 1 waiting"
            );
            let page = client
                .get(format!("http://{addr}/metrics").parse().unwrap())
                .await
                .unwrap()
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes();
            let page = String::from_utf8_lossy(&page).into_owned();
            let value = |name: &str| {
                page.lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.rsplit(' ').next())
                    .and_then(|v| v.parse::<f64>().ok())
            };
            let running = value("vllm:num_requests_running{");
            let waiting = value("vllm:num_requests_waiting{");
            if running == Some(2.0) && waiting == Some(1.0) {
                break (running, waiting);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(seen, (Some(2.0), Some(1.0)));
        let _ = stop_load.send(());
        let summary = load.await.unwrap();
        assert!(summary.sent >= 3, "{summary:?}");
        assert_eq!(summary.failed, 0, "{summary:?}");
        let _ = stop_server.send(());
        server.await.unwrap().unwrap();
    }
}
