//! A deterministic OpenAI-compatible upstream, used by the tests and the
//! `demo` command to stand in for an inference server (shaped like vLLM).
//!
//! Tests put the proxy in front of it and check the proxy's measured TTFT,
//! ITL, TPOT and E2EL against the simulator's schedule, so that schedule is
//! exact: every deadline is absolute from the instant the request arrived
//! (`tokio::time::Instant`), the frame for a deadline is never sent before it,
//! and lateness of one frame never shifts the next.
//!
//! # Endpoints
//!
//! - `POST /v1/chat/completions` and `POST /v1/completions` (legacy).
//! - `GET /v1/models`: lists the configured model.
//! - `GET /health`: `200` with an empty body, like vLLM.
//! - `GET /sim/stats`: `{"requests":N,"completed":N,"aborted":N,"failed":N}`
//!   over completion requests (see [`StatsSnapshot`]). `aborted` counts
//!   responses dropped before their end because the client (or a proxy) went
//!   away, so tests can prove that a client's abort reaches the upstream.
//! - `GET /metrics`, in batch-limited mode only: the engine state as vLLM
//!   writes it (see below).
//!
//! # Requests
//!
//! The JSON body is read leniently: unknown fields are ignored, missing ones
//! take defaults, a known field of the wrong type is a `400` with an OpenAI
//! error body. Fields used: `model` (echoed, default [`SimConfig::model`]),
//! `stream`, `stream_options.include_usage`, `n` (choices, default 1, capped
//! at 16), `max_completion_tokens` or `max_tokens` (caps the token count; a
//! capped response finishes with `"length"`), and `messages` / `prompt`, whose
//! whitespace-separated words (at least 1) are the prompt token count.
//!
//! # Responses
//!
//! Token `k` (0-based) of each choice is the text `" tok{k}"`, due at
//! `start + ttft + k * itl`. A streamed response (`text/event-stream`) sends
//! its head at once, then one SSE event per body frame, never two in one:
//! for chat, a role-only chunk per choice right away (not a token; see
//! [`SimConfig::role_chunk`]); one chunk per token per choice, choices
//! interleaved at the same deadline; a finish chunk per choice (empty delta,
//! `finish_reason`); a usage chunk (`choices: []`) if `include_usage`; and
//! `data: [DONE]`. A non-streamed response is sent whole at
//! `start + ttft + (tokens - 1) * itl`, always with `usage`.
//!
//! # Request headers
//!
//! Each takes a non-negative decimal integer; a malformed or out-of-range
//! value is a `400` (a mistyped test header must not pass silently).
//!
//! | header | effect |
//! |---|---|
//! | `x-sim-ttft-ms` | time to the first token, from arrival |
//! | `x-sim-itl-ms` | time between tokens |
//! | `x-sim-tokens` | tokens per choice before `max_tokens` caps it |
//! | `x-sim-status: NNN` | answer `NNN` (400..=599) with an OpenAI error body, without generating |
//! | `x-sim-headers-delay-ms: N` | hold the response head until `start + N` (all answers but `400`s for bad headers). It does not shift the token schedule: tokens already due when the head goes out follow at once |
//! | `x-sim-abort-after: K` | after `K` tokens, fail the body so the connection is reset without a terminating chunk (the client sees a body error); counted as `failed` |
//! | `x-sim-error-after: K` | after `K` tokens, send `data: {"error":{"message":"simulated failure","type":"server_error","code":500}}` and end the stream normally, without `[DONE]` |
//! | `x-sim-stall-after: K` | after `K` tokens, send nothing more and hold the stream open until the client goes away (then counted as `aborted`) or the simulator shuts down (then `failed`) |
//! | `x-sim-queue-ms: Q` | report vLLM's per-request `metrics` (as with `--enable-per-request-metrics`) on the usage chunk, or in a non-streamed body: `queue_time_ms` Q, `time_to_first_token_ms` the TTFT less Q, `generation_time_ms` `(tokens - 1) * itl`. Q is capped at the TTFT |
//! | `x-sim-model: NAME` | the answer names the model NAME, whatever the request asked for (as a gateway that resolves an alias answers) |
//! | `x-sim-cached-tokens: K` | in batch-limited mode, K of the prompt's tokens (at most all) are found in the prefix cache: counted in `/metrics`' prefix cache hits |
//! | `x-sim-stamp: 1` | stamp each JSON event (and a non-streamed body) with the instant it is handed to the server, as `"sim_sent_ns":N` (`CLOCK_MONOTONIC` nanoseconds, see [`stamp`]) before its closing `}`, and add the body's fingerprint to `/sim/stats` (`stamped_*`) |
//!
//! "After `K` tokens" means after token `K - 1` of every choice; the fault
//! happens when token `K` would have been due, or right after the last token
//! when `K` is at least the token count (then before the finish chunks). For
//! non-streamed requests the faults happen at that same instant: abort sends
//! the head and then resets, error answers `500` with an error body, stall
//! never answers. At most one of the three fault headers may be given.
//!
//! # Batch-limited mode
//!
//! With [`SimConfig::slots`] set, at most that many completion requests
//! generate at once; the others wait in arrival order for a slot, and a
//! request's schedule (TTFT, then its tokens) starts when it gets one, so
//! its TTFT from arrival includes the wait. A streamed answer's head still
//! goes out at once, as vLLM's does. The slot is held until the last frame
//! is sent, the body fails, or the client leaves; a queued client that
//! leaves gives up its place. Error answers (`x-sim-status`, `400`s) take
//! no slot. `GET /metrics` serves, with HELP and TYPE lines and the labels
//! `engine="0"` and `model_name` (the configured model), as vLLM does:
//! `vllm:num_requests_running`, `vllm:num_requests_waiting`,
//! `vllm:kv_cache_usage_perc` (running over slots: each slot holds an equal
//! share of the cache), and the counters `vllm:prefix_cache_queries_total`
//! (prompt tokens of the requests admitted) and
//! `vllm:prefix_cache_hits_total` (their `x-sim-cached-tokens`), each with
//! its `_created` sample.
//!
//! The simulator must not measure anything, and knows nothing of the proxy.

pub mod agent;
mod batch;
mod body;
mod config;
pub mod load;
mod plan;
pub mod ramp;
mod script;
pub mod stamp;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, StatusCode, Uri};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use batch::{Admission, Batch};
pub use body::StatsSnapshot;
use body::{SimBody, Stats, Tracker, closing};
pub use config::SimConfig;
use plan::{Api, FaultKind, Overrides, Plan, RequestError};
use script::{Identity, Script};

/// Largest request body read; more is refused, as a real server would.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// State shared by every request of one simulator.
#[derive(Debug)]
struct Shared {
    config: SimConfig,
    stats: Arc<Stats>,
    /// Flipped to `true` by [`serve`] at shutdown, so stalled streams end and
    /// graceful shutdown can finish.
    shutdown: watch::Sender<bool>,
    /// Makes response ids unique within one simulator.
    next_id: AtomicU64,
    /// The slots and the queue, in batch-limited mode.
    batch: Option<Arc<Batch>>,
}

impl Shared {
    fn new(config: SimConfig) -> Self {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |elapsed| elapsed.as_secs_f64());
        Self {
            batch: config
                .slots
                .map(|slots| Arc::new(Batch::new(slots, config.model.clone(), created))),
            config,
            stats: Arc::default(),
            shutdown: watch::Sender::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    fn identity(&self, api: Api) -> Identity {
        let seq = self.next_id.fetch_add(1, Ordering::Relaxed);
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Completions => "cmpl",
        };
        Identity {
            id: format!("{prefix}-sim{seq}"),
            created: unix_now(),
        }
    }

    /// A whole JSON answer whose end is recorded by `tracker`.
    fn json(&self, status: StatusCode, value: &Value, tracker: Tracker) -> Response {
        let body = SimBody::once(
            Bytes::from(value.to_string()),
            tracker,
            self.shutdown.clone(),
        );
        with_type(status, "application/json", Body::new(body))
    }

    fn reject(&self, error: &RequestError, tracker: Tracker) -> Response {
        tracing::debug!(kind = error.kind(), %error, "sim: request refused");
        let status = StatusCode::BAD_REQUEST;
        self.json(status, &error_body(status, &error.to_string()), tracker)
    }
}

/// The simulator's routes, ready to be served. Stalled streams
/// (`x-sim-stall-after`) only end when their client goes away; use [`serve`]
/// to also end them at shutdown.
pub fn router(config: SimConfig) -> Router {
    routes(Arc::new(Shared::new(config)))
}

/// Serves the simulator on `listener` until `shutdown` resolves, then stops
/// accepting, cuts stalled streams and waits for the other responses to
/// finish. Accepted sockets get `TCP_NODELAY`, so each event leaves at once.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared::new(config));
    let app = routes(Arc::clone(&shared));
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "sim: could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            shared.shutdown.send_replace(true);
        })
        .await
}

fn routes(shared: Arc<Shared>) -> Router {
    let router = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/sim/stats", get(stats));
    let router = match shared.batch {
        Some(_) => router.route("/metrics", get(metrics)),
        None => router,
    };
    router.fallback(not_found).with_state(shared)
}

async fn chat(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    complete(&shared, Api::Chat, request).await
}

async fn completions(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    complete(&shared, Api::Completions, request).await
}

/// Answers one completion request according to its [`Plan`].
async fn complete(shared: &Shared, api: Api, request: Request) -> Response {
    // Taken before the body is read, so the schedule counts from the arrival
    // of the request head, as the proxy's `t0` does.
    let start = Instant::now();
    let tracker = shared.stats.track();
    let (parts, body) = request.into_parts();
    let overrides = match Overrides::from_headers(&parts.headers) {
        Ok(overrides) => overrides,
        Err(error) => return shared.reject(&error, tracker),
    };
    let head_at = start + overrides.headers_delay;
    if let Some(status) = overrides.status {
        sleep_until(head_at).await;
        let message = format!("simulated error (x-sim-status: {})", status.as_u16());
        return shared.json(status, &error_body(status, &message), tracker);
    }
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(error) => return shared.reject(&RequestError::Body(error.to_string()), tracker),
    };
    let mut plan = match Plan::new(api, &shared.config, &overrides, start, &bytes) {
        Ok(plan) => plan,
        Err(error) => return shared.reject(&error, tracker),
    };
    let identity = shared.identity(api);
    let admission = shared
        .batch
        .as_ref()
        .map(|batch| batch.admit(plan.prompt_tokens, plan.cached_tokens));

    if plan.stream {
        sleep_until(head_at).await;
        let stamped = plan.stamp;
        // The head goes out now, as vLLM's does; a queued request's events
        // wait in its body for a slot.
        let body = SimBody::script(
            Script::new(plan, &identity),
            tracker,
            shared.shutdown.clone(),
        )
        .stamped(stamped)
        .admitted(admission);
        let mut response = with_type(StatusCode::OK, "text/event-stream", Body::new(body));
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return response;
    }

    // Held until the answer is handed over (or the handler is dropped).
    let _slot = match admission {
        None => None,
        Some(Admission::Running(slot)) => Some(slot),
        Some(Admission::Queued(queued)) => {
            let slot = queued.await;
            plan.schedule.start = Instant::now();
            Some(slot)
        }
    };
    let Some(fault) = plan.fault else {
        sleep_until(head_at.max(plan.schedule.end())).await;
        let bytes = Bytes::from(script::full_response(&plan, &identity).to_string());
        let body = SimBody::once(bytes, tracker, shared.shutdown.clone()).stamped(plan.stamp);
        return with_type(StatusCode::OK, "application/json", Body::new(body));
    };
    sleep_until(head_at.max(plan.schedule.fault_at(fault.after))).await;
    match fault.kind {
        FaultKind::Abort => {
            // The head goes out, then the body fails: the upstream broke
            // mid-body, which a proxy must tell apart from no answer at all.
            let body = SimBody::reset(tracker, shared.shutdown.clone());
            with_type(StatusCode::OK, "application/json", Body::new(body))
        }
        FaultKind::Error => {
            let status = StatusCode::INTERNAL_SERVER_ERROR;
            shared.json(status, &error_body(status, "simulated failure"), tracker)
        }
        FaultKind::Stall => {
            // Dropping this future (the client left) records an abort.
            closing(&shared.shutdown).await;
            tracker.fail();
            let status = StatusCode::SERVICE_UNAVAILABLE;
            let body = error_body(status, "simulator shutting down").to_string();
            (status, [(CONTENT_TYPE, "application/json")], body).into_response()
        }
    }
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let model = &shared.config.model;
    let list = json!({
        "object": "list",
        "data": [{
            "id": model,
            "object": "model",
            "created": unix_now(),
            "owned_by": "tokenmeter-sim",
            "root": model,
            "parent": null,
        }],
    });
    (
        StatusCode::OK,
        [(CONTENT_TYPE, "application/json")],
        list.to_string(),
    )
        .into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    let snapshot = json!(shared.stats.snapshot());
    (
        StatusCode::OK,
        [(CONTENT_TYPE, "application/json")],
        snapshot.to_string(),
    )
        .into_response()
}

/// The engine state in vLLM's names; routed in batch-limited mode only.
async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let page = shared.batch.as_ref().map(|batch| batch.render());
    (
        StatusCode::OK,
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        page.unwrap_or_default(),
    )
        .into_response()
}

async fn not_found(uri: Uri) -> Response {
    let status = StatusCode::NOT_FOUND;
    let body = error_body(status, &format!("no route for {}", uri.path()));
    (
        status,
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn with_type(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An OpenAI error body, typed the way OpenAI types each status.
fn error_body(status: StatusCode, message: &str) -> Value {
    let kind = match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
