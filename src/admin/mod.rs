//! The admin listener: `/` (a live page of charts, `page.rs`), `/metrics`
//! (the Prometheus text, OpenMetrics or protobuf format), `/healthz`
//! (the process is up), `/readyz` (it accepts traffic; 503 while
//! draining) and `/slo` (live SLO status per route and class over 1m, 5m
//! and 1h, and each route, model and class's latency–load curve, knee and
//! headroom, each GPU set's bill, each route's sessions and turns: JSON,
//! or a text table with `?format=text` or `Accept:
//! text/plain`/`text/html`), `/slo/history` (the last hour of 10 s points
//! per series, for the page's charts) and `/config` (the configuration in
//! force, as JSON). It runs on its own socket, never the proxy's,
//! so scrapes and probes neither mix with client traffic nor appear in its
//! metrics.
//!
//! It only presents what other modules computed; the windows and their
//! numbers are [`slo::live`]'s.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::timeout::TimeoutLayer;

pub mod auth;
mod page;
mod sessions;

use arc_swap::ArcSwap;

use crate::in_force::InForce;
use crate::observe::metrics::{ChargebackReport, Format, Metrics, render_chargeback};
use slo::aggregate::Quantiles;
use slo::capacity::CurveReport;
use slo::live::Report;
use slo::live::sessions::SessionsReport;

/// What the admin endpoints read.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// What is in force: `/config`, and the engines' and GPUs' readings
    /// of the exposition and `/slo`.
    pub in_force: Arc<ArcSwap<InForce>>,
    /// False until the proxy listener is bound, and again once draining.
    pub ready: AtomicBool,
}

/// The admin router.
pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/assets/page.js", get(page::script))
        .route("/assets/load.js", get(page::load_script))
        .route("/assets/bill.js", get(page::bill_script))
        .route("/assets/sessions.js", get(page::sessions_script))
        .route("/assets/page.css", get(page::style))
        .route("/assets/icon.svg", get(page::icon))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/slo", get(slo))
        .route("/slo/history", get(history))
        .route("/config", get(active_config))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(10),
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(auth::Guard {
                in_force: state.in_force.clone(),
                verifier: auth::Verifier::default(),
            }),
            auth::guard,
        ))
        .with_state(state)
}

/// The exposition in the format the scraper's `Accept` prefers
/// ([`Format::from_accept`]): the Prometheus protobuf format (with native
/// histograms), as Prometheus asks with native histograms on; OpenMetrics
/// (with exemplars), as it asks otherwise; else the Prometheus text format.
async fn metrics(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    let in_force = state.in_force.load();
    (
        [(header::CONTENT_TYPE, format.content_type())],
        state.metrics.exposition(format, in_force.engines()),
    )
}

async fn active_config(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    axum::Json(state.in_force.load().config().to_json())
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

#[derive(Debug, serde::Deserialize)]
struct SloQuery {
    format: Option<String>,
    /// One tenant's series instead of every request's.
    tenant: Option<String>,
}

async fn slo(
    State(state): State<Arc<AdminState>>,
    Query(query): Query<SloQuery>,
    headers: HeaderMap,
) -> Response {
    let now = tokio::time::Instant::now();
    let tenant = query.tenant.as_deref().unwrap_or("");
    let report = state.metrics.live().report(now, tenant);
    let in_force = state.in_force.load();
    let readings = in_force.readings();
    // The curves are of every tenant's requests: a tenant's view has none.
    let capacity = if tenant.is_empty() {
        state.metrics.capacity_report(now, readings)
    } else {
        Vec::new()
    };
    // The engines and GPUs are the process's, whoever asks.
    let telemetry = state.metrics.telemetry(in_force.engines());
    // Who used the GPUs: every tenant's, so none in a tenant's view.
    let chargeback = if tenant.is_empty() {
        state.metrics.chargeback(in_force.engines())
    } else {
        ChargebackReport { routes: Vec::new() }
    };
    // Sessions and turns: every tenant's, so none in a tenant's view.
    let sessions = if tenant.is_empty() {
        state.metrics.sessions_report()
    } else {
        SessionsReport::default()
    };
    let report = SloReport {
        report,
        capacity,
        telemetry,
        chargeback,
        sessions,
    };
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let text = match query.format.as_deref() {
        Some("text") => true,
        Some("json") => false,
        Some(other) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("unknown format `{other}`: use json or text\n"),
            )
                .into_response();
        }
        // A browser asks for HTML first; a table in <pre> reads well there.
        None => accept.contains("text/html") || accept.starts_with("text/plain"),
    };
    if !text {
        return axum::Json(report).into_response();
    }
    let table = render_text(&report.report)
        + &render_capacity(&report.capacity)
        + &render_chargeback(&report.chargeback)
        + &sessions::render_text(&report.sessions);
    if accept.contains("text/html") && query.format.is_none() {
        let escaped = table
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        let html = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>tokenmeter SLO status</title></head><body><pre>{escaped}</pre></body></html>\n"
        );
        return ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], table).into_response()
}

/// `/slo`'s JSON: the live windows' report, and beside its fields the
/// latency–load curves (`capacity`), one per route, model and class, and
/// the engine and GPU figures of each route whose pages are scraped
/// (`telemetry`), and each route's GPU time, energy and money over the
/// windows with who was charged them (`chargeback`), and each route's
/// sessions open now with its turns and ended sessions over the windows
/// (`sessions`).
#[derive(serde::Serialize)]
struct SloReport {
    #[serde(flatten)]
    report: Report,
    capacity: Vec<CurveReport>,
    telemetry: crate::observe::metrics::TelemetryReport,
    chargeback: ChargebackReport,
    sessions: SessionsReport,
}

#[derive(Debug, serde::Deserialize)]
struct HistoryQuery {
    route: Option<String>,
    slo: Option<String>,
    /// One tenant's series instead of every request's.
    tenant: Option<String>,
    /// Seconds since the Unix epoch.
    since: Option<f64>,
}

async fn history(
    State(state): State<Arc<AdminState>>,
    Query(query): Query<HistoryQuery>,
) -> Response {
    if query.since.is_some_and(|t| !t.is_finite()) {
        return (
            StatusCode::BAD_REQUEST,
            "since: seconds since the Unix epoch\n",
        )
            .into_response();
    }
    let series = state.metrics.live().history(
        tokio::time::Instant::now(),
        query.route.as_deref(),
        query.slo.as_deref(),
        query.tenant.as_deref().unwrap_or(""),
        query.since,
    );
    axum::Json(serde_json::json!({ "series": series })).into_response()
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |s| format!("{:.1}", s * 1000.0))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |r| format!("{:.2}%", r * 100.0))
}

fn quantiles(q: &Quantiles) -> String {
    format!("{}/{}/{}", ms(q.p50), ms(q.p95), ms(q.p99))
}

/// The report as a table per series: one row per window.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    if report.series.is_empty() {
        out.push_str("no metered requests yet\n");
        return out;
    }
    for series in &report.series {
        let slo = if series.slo.is_empty() {
            "(none)"
        } else {
            series.slo.as_str()
        };
        let _ = write!(out, "route {}  slo {}", series.route, slo);
        for o in &series.objectives {
            let _ = write!(
                out,
                "  {} <= {}ms @ {}",
                o.objective,
                o.threshold_seconds * 1000.0,
                pct(Some(o.target))
            );
        }
        if let Some(t) = series.goodput_target {
            let _ = write!(out, "  goodput @ {}", pct(Some(t)));
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "{:<6} {:>8} {:>9} {:>10} {:>9} {:>8} {:>7}  {:<24} {:<24} {:<24} {:<24}",
            "window",
            "req/s",
            "tok/s",
            "goodput",
            "good/s",
            "burn",
            "errors",
            "ttft p50/p95/p99 ms",
            "tpot p50/p95/p99 ms",
            "itl p50/p95/p99 ms",
            "e2el p50/p95/p99 ms"
        );
        for w in &series.windows {
            let (ratio, rate, burn) =
                w.goodput
                    .as_ref()
                    .map_or(("-".to_owned(), "-".to_owned(), "-".to_owned()), |g| {
                        (
                            pct(g.ratio),
                            format!("{:.3}", g.rate),
                            g.burn_rate.map_or("-".to_owned(), |b| format!("{b:.2}")),
                        )
                    });
            let _ = writeln!(
                out,
                "{:<6} {:>8.3} {:>9.1} {:>10} {:>9} {:>8} {:>7}  {:<24} {:<24} {:<24} {:<24}",
                w.window,
                w.request_rate,
                w.output_token_rate,
                ratio,
                rate,
                burn,
                w.requests - w.ok,
                quantiles(&w.ttft),
                quantiles(&w.tpot),
                quantiles(&w.itl),
                quantiles(&w.e2el),
            );
            for c in &w.compliance {
                let _ = writeln!(
                    out,
                    "         {} within {}ms: {} of {} judged (target {}, burn {})",
                    c.objective,
                    c.threshold_seconds * 1000.0,
                    pct(c.ratio),
                    c.judged,
                    pct(Some(c.target)),
                    c.burn_rate.map_or("-".to_owned(), |b| format!("{b:.2}"))
                );
            }
        }
        out.push('\n');
    }
    out
}

/// The curves as text: per curve, a row per window (its knee, bound,
/// headroom and first breaking load), then each window's buckets as
/// `load_le:judged state`.
pub fn render_capacity(curves: &[CurveReport]) -> String {
    let mut out = String::new();
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for c in curves {
        let _ = writeln!(
            out,
            "capacity  route {}  model {}  slo {}  load now {}  (a bucket needs {} judged)",
            c.route,
            c.model,
            c.slo,
            or_dash(c.load_now.map(|l| l.to_string())),
            c.min_judged
        );
        let _ = writeln!(
            out,
            "{:<6} {:<14} {:>5} {:<9} {:>8} {:>11}",
            "window", "knee state", "knee", "bound", "headroom", "first break"
        );
        for w in &c.windows {
            let k = &w.knee;
            let _ = writeln!(
                out,
                "{:<6} {:<14} {:>5} {:<9} {:>8} {:>11}",
                w.window,
                k.state,
                or_dash(k.concurrency.map(|v| v.to_string())),
                k.bound.unwrap_or("-"),
                or_dash(k.headroom.map(|v| v.to_string())),
                or_dash(k.first_break.map(|v| v.to_string())),
            );
        }
        for w in &c.windows {
            let buckets: Vec<String> = w
                .buckets
                .iter()
                .map(|b| format!("{}:{} {}", b.load_le, b.judged, b.state))
                .collect();
            let _ = writeln!(out, "       {} buckets  {}", w.window, buckets.join("  "));
        }
        out.push('\n');
    }
    out
}
