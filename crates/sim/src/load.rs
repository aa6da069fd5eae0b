//! A small, steady, open-loop load for the `demo` command: streamed chat
//! requests at a fixed rate through a base URL (normally the proxy in front
//! of the simulator), with a deterministic mix of lengths, slow starts and
//! failures so the demo's dashboards show a spread of latencies and outcomes.
//! Given tenants, each request names one in [`TENANT_HEADER`], in uneven
//! shares, so the demo's bill has several tenants to tell apart. Headers
//! of the caller's own (a tenant, a session key), read with
//! [`parse_header`], go on every request.
//!
//! Open loop means a request is sent every `1 / rate` seconds whether or not
//! earlier ones have finished, as real users do; a slow upstream therefore
//! builds up concurrency instead of hiding its latency.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderName, HeaderValue, Method, Request, Uri};
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

pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The request header that names a request's tenant, for a proxy whose
/// route attributes requests by it (`tenant: {header: x-tenant}`).
pub const TENANT_HEADER: &str = "x-tenant";

/// A header sent on every request of a load, as [`parse_header`] reads it.
pub type Header = (HeaderName, HeaderValue);

/// Reads a header written as curl's `-H` takes it, `Name: value`: the name
/// a valid header name (any case), the value trimmed, of visible ASCII,
/// spaces and tabs (it may be empty). The framing headers, which the load
/// writes itself, are refused.
pub fn parse_header(text: &str) -> Result<Header, String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err("expected `Name: value`, with a colon after the name".to_owned());
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("`{}` is not a header name", name.trim()))?;
    if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
        return Err(format!(
            "`{name}` frames the body, which the load writes itself"
        ));
    }
    let value = value.trim();
    let printable = |b: u8| b == b'\t' || (b' '..=b'~').contains(&b);
    match value.bytes().all(printable) {
        true => Ok((
            name,
            HeaderValue::from_str(value).map_err(|e| e.to_string())?,
        )),
        false => Err(format!(
            "the value of `{name}` may hold only visible ASCII characters, spaces and tabs"
        )),
    }
}

/// Sends streamed chat requests to `{base_url}/v1/chat/completions` at
/// `rate_per_sec` until `shutdown` resolves, then stops sending, abandons the
/// requests still running and returns the counts. Each request names one of
/// `tenants` (none when it is empty), see [`tenant_of`], and carries
/// `headers`, which replace any of the same name the load would send (its
/// `x-sim-*` mix, a tenant). A rate of zero (or any rate that is not a
/// positive finite number) sends nothing and waits for `shutdown`.
pub async fn run_load(
    base_url: String,
    rate_per_sec: f64,
    tenants: Vec<String>,
    headers: Vec<Header>,
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
                let tenant = tenant_of(&tenants, summary.sent);
                let request = build_request(&url, summary.sent, tenant)
                    .map(|request| with_headers(request, &headers));
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

/// `request` with `headers`, each name's values replacing the request's.
fn with_headers(mut request: Request<Full<Bytes>>, headers: &[Header]) -> Request<Full<Bytes>> {
    let map = request.headers_mut();
    for (name, _) in headers {
        map.remove(name);
    }
    for (name, value) in headers {
        map.append(name.clone(), value.clone());
    }
    request
}

/// Sends one request and reads its body to the end.
pub(crate) async fn send(
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
#[allow(clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::{parse_header, tenant_of, with_headers};

    /// A header as curl writes it: the name in any case, the value
    /// trimmed; what is not a header is told, without a panic.
    #[test]
    fn headers_are_read_as_curl_writes_them() {
        let (name, value) = parse_header("X-Tenant:  team-a ").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("x-tenant", "team-a")
        );
        let (name, value) = parse_header("x-session-id:a:b").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("x-session-id", "a:b")
        );
        assert_eq!(parse_header("x-empty:").unwrap().1, "");
        for (bad, told) in [
            ("x-tenant team-a", "colon"),
            (": team-a", "is not a header name"),
            ("x tenant: a", "`x tenant` is not a header name"),
            ("x-tenant: a\u{1}b", "visible ASCII"),
            ("x-tenant: caf\u{e9}", "visible ASCII"),
            ("Content-Length: 5", "frames the body"),
            ("transfer-encoding: chunked", "frames the body"),
        ] {
            let error = parse_header(bad).unwrap_err();
            assert!(error.contains(told), "{bad:?}: {error}");
        }
    }

    /// A caller's header replaces the load's own of that name, and a name
    /// given twice is sent twice.
    #[test]
    fn a_callers_headers_replace_the_loads_own() {
        let request = http::Request::builder()
            .header("x-sim-queue-ms", "40")
            .header("content-type", "application/json")
            .body(Default::default())
            .unwrap();
        let headers = ["x-sim-queue-ms: 7", "x-a: 1", "x-a: 2"].map(|h| parse_header(h).unwrap());
        let request = with_headers(request, &headers);
        let values = |name| {
            request
                .headers()
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(values("x-sim-queue-ms"), ["7"]);
        assert_eq!(values("x-a"), ["1", "2"]);
        assert_eq!(values("content-type"), ["application/json"]);
    }

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
