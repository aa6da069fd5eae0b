//! The admin listener: `/metrics` (Prometheus text format), `/healthz`
//! (the process is up) and `/readyz` (it accepts traffic; 503 while
//! draining). It runs on its own socket, never the proxy's, so scrapes and
//! probes neither mix with client traffic nor appear in its metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tower_http::timeout::TimeoutLayer;

use crate::metrics::Metrics;

/// What the admin endpoints read.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// False until the proxy listener is bound, and again once draining.
    pub ready: AtomicBool,
}

/// The admin router.
pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(10),
        ))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
