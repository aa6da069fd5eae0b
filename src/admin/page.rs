//! The admin root: one page of live charts (`page/index.html`, its scripts
//! and its style sheet, compiled into the binary). It draws what `/slo` and
//! `/slo/history` answer, in SVG, with no library and nothing fetched from
//! elsewhere: the content security policy allows this origin only.

use axum::http::header;
use axum::response::IntoResponse;

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/page.js");
const LOAD_SCRIPT: &str = include_str!("page/load.js");
const BILL_SCRIPT: &str = include_str!("page/bill.js");
const SESSIONS_SCRIPT: &str = include_str!("page/sessions.js");
const STYLE: &str = include_str!("page/page.css");
const ICON: &str = include_str!("page/icon.svg");

/// What every part of the page is sent with: nothing but this origin's own
/// script, style and JSON; never framed; revalidated on each load, so a new
/// binary's page is seen at once.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

pub(super) async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX)
}

pub(super) async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(super) async fn load_script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", LOAD_SCRIPT)
}

pub(super) async fn bill_script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", BILL_SCRIPT)
}

pub(super) async fn sessions_script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SESSIONS_SCRIPT)
}

pub(super) async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}

pub(super) async fn icon() -> impl IntoResponse {
    asset("image/svg+xml", ICON)
}
