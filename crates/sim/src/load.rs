//! A small, steady, open-loop load for the `demo` command: streamed chat
//! requests at a fixed rate through a base URL (normally the proxy in front
//! of the simulator), with a deterministic mix of lengths, slow starts and
//! failures so the demo's dashboards show a spread of latencies and outcomes.
//! Given tenants, each request names one in [`TENANT_HEADER`], in uneven
//! shares, so the demo's bill has several tenants to tell apart.
//!
//! Open loop means a request is sent every `1 / rate` seconds whether or not
//! earlier ones have finished, as real users do; a slow upstream therefore
//! builds up concurrency instead of hiding its latency.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

/// What a load run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// Requests started.
    pub sent: u64,
    /// Requests answered `2xx` whose stream ended without an error event.
    pub ok: u64,
    /// Requests that failed: transport error, non-`2xx`, body error, or an
    /// in-stream error event. Requests still running at shutdown are in
    /// neither count.
    pub failed: u64,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The request header that names a request's tenant, for a proxy whose
/// route attributes requests by it (`tenant: {header: x-tenant}`).
pub const TENANT_HEADER: &str = "x-tenant";

/// Sends streamed chat requests to `{base_url}/v1/chat/completions` at
/// `rate_per_sec` until `shutdown` resolves, then stops sending, abandons the
/// requests still running and returns the counts. Each request names one of
/// `tenants` (none when it is empty), see [`tenant_of`]. A rate of zero (or
/// any rate that is not a positive finite number) sends nothing and waits
/// for `shutdown`.
pub async fn run_load(
    base_url: String,
    rate_per_sec: f64,
    tenants: Vec<String>,
    shutdown: impl Future<Output = ()> + Send,
) -> LoadSummary {
    let mut summary = LoadSummary::default();
    let period = match Duration::try_from_secs_f64(1.0 / rate_per_sec) {
        Ok(period) if rate_per_sec > 0.0 && !period.is_zero() => period,
        _ => {
            // Zero is the documented "no load"; anything else here is a typo.
            if rate_per_sec != 0.0 {
                tracing::warn!(rate_per_sec, "load: rate must be positive; sending nothing");
            }
            shutdown.await;
            return summary;
        }
    };
    let url: Arc<str> = format!("{}/v1/chat/completions", base_url.trim_end_matches('/')).into();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut ticks = tokio::time::interval(period);
    // Open loop: if the generator falls behind, catch up rather than lower
    // the offered rate.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut running = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = ticks.tick() => {
                let request = build_request(&url, summary.sent, tenant_of(&tenants, summary.sent));
                summary.sent += 1;
                let client = client.clone();
                running.spawn(async move { send(&client, request).await });
            }
            Some(joined) = running.join_next(), if !running.is_empty() => {
                count(&mut summary, joined);
            }
        }
    }
    // Tally what already finished; the rest is abandoned with the demo.
    while let Some(joined) = running.try_join_next() {
        count(&mut summary, joined);
    }
    running.abort_all();
    summary
}

fn count(summary: &mut LoadSummary, joined: Result<Result<(), String>, tokio::task::JoinError>) {
    match joined {
        Ok(Ok(())) => summary.ok += 1,
        Ok(Err(reason)) => {
            tracing::debug!(%reason, "load: request failed");
            summary.failed += 1;
        }
        Err(error) => {
            tracing::debug!(%error, "load: request task failed");
            summary.failed += 1;
        }
    }
}

/// The tenant of request `i`: of `n` tenants, the first takes `n` of every
/// `n (n + 1) / 2` requests, the next `n - 1`, and so on to the last, which
/// takes one, so that their shares of the GPUs differ.
pub fn tenant_of(tenants: &[String], i: u64) -> Option<&str> {
    let n = tenants.len() as u64;
    let mut slot = i.checked_rem(n * (n + 1) / 2)?;
    for (k, tenant) in (0..n).zip(tenants) {
        if slot < n - k {
            return Some(tenant);
        }
        slot -= n - k;
    }
    None
}

/// Request `i` of the run, for `tenant`. The mix is a function of `i` only,
/// so two demo runs offer the same load.
fn build_request(url: &str, i: u64, tenant: Option<&str>) -> Result<Request<Full<Bytes>>, String> {
    let words = ["tell", "me", "about", "metering", "tokens", "latency"];
    let prompt = words[..2 + (i % 5) as usize].join(" ");
    let body = json!({
        "model": "sim-model",
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": 8 + (i * 7) % 48,
        "messages": [{"role": "user", "content": prompt}],
    });
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(
            url.parse::<Uri>()
                .map_err(|e| format!("bad base URL: {e}"))?,
        )
        .header(CONTENT_TYPE, "application/json");
    if let Some(tenant) = tenant {
        builder = builder.header(TENANT_HEADER, tenant);
    }
    // Co-prime periods so the special cases rarely coincide.
    if i % 7 == 3 {
        builder = builder.header("x-sim-ttft-ms", "600");
    }
    if i % 11 == 5 {
        builder = builder.header("x-sim-itl-ms", "60");
    }
    // The server reports its phases, as vLLM does with per-request metrics:
    // of the first token's wait, a queue of 0 to 120 ms (600 ms for the slow
    // first tokens above, queued behind others).
    let queue = if i % 7 == 3 { 450 } else { (i * 37) % 121 };
    builder = builder.header("x-sim-queue-ms", queue.to_string());
    if i % 19 == 9 {
        builder = builder.header("x-sim-status", "503");
    } else if i % 23 == 11 {
        builder = builder.header("x-sim-error-after", "4");
    } else if i % 29 == 13 {
        builder = builder.header("x-sim-abort-after", "6");
    }
    builder
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| format!("could not build request: {e}"))
}

/// Sends one request and reads its body to the end.
async fn send(
    client: &HttpClient,
    request: Result<Request<Full<Bytes>>, String>,
) -> Result<(), String> {
    let response = client
        .request(request?)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("status {status}"));
    }
    if memchr::memmem::find(&body, b"data: {\"error\"").is_some() {
        return Err("error event in stream".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tenant_of;

    /// Three tenants share every six requests three, two and one; none
    /// names no tenant.
    #[test]
    fn tenants_take_uneven_shares_in_turn() {
        let tenants: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let names: Vec<_> = (0..12).map(|i| tenant_of(&tenants, i).unwrap()).collect();
        assert_eq!(
            names,
            ["a", "a", "a", "b", "b", "c", "a", "a", "a", "b", "b", "c"]
        );
        assert_eq!(tenant_of(&["x".to_owned()], 7), Some("x"));
        assert_eq!(tenant_of(&[], 0), None);
    }
}
