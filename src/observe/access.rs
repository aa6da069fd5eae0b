//! The access log: one structured line per metered request, written when
//! the request ends, with what an operator greps for (route, model, status,
//! outcome, TTFT, TPOT, E2EL, tokens), the client's address, its
//! `x-request-id` and its W3C `trace_id`, to find the request in the
//! client's and the upstream's logs and traces. It is one of the observers a finished request is handed to
//! (`recorder.rs`), so it reports the same `Summary` as the metrics.
//!
//! A line is formatted here, into a per-thread buffer, and handed to the
//! process's log writer in one write ([`AccessLog`], made by the command
//! line's logging set-up and passed to the proxy): the same lines, in the
//! same shape, as a `tracing` event at INFO on the `tokenmeter::access`
//! target through the `fmt` subscriber, for about a quarter of the
//! instructions. The log filter still
//! decides: turn the lines off with `TOKENMETER_LOG=info,tokenmeter::access=off`.

use std::cell::RefCell;
use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use tracing_appender::non_blocking::NonBlocking;

use super::request::{Finished, Started};
use super::sessions::Ended;
use super::trace::TraceId;

/// Where access lines go: the process's log writer, and how lines are
/// written there.
#[derive(Clone)]
pub struct AccessLog {
    writer: NonBlocking,
    format: Format,
}

impl AccessLog {
    /// Lines to `writer` (the process's log writer, which drops a line
    /// rather than wait when its buffer is full) in `format`.
    pub fn new(writer: NonBlocking, format: Format) -> Self {
        Self { writer, format }
    }

    /// How many lines (of any kind) the process's log writer has dropped
    /// so far, read when it is called.
    pub fn lines_dropped(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        let counter = self.writer.error_counter();
        move || counter.dropped_lines() as u64
    }

    /// Writes the line of the finished request `entry`, if the log filter
    /// lets INFO lines of the `tokenmeter::access` target through.
    pub fn write(&self, entry: &Entry, finished: &Finished<'_>) {
        if !tracing::enabled!(target: TARGET, tracing::Level::INFO) {
            return;
        }
        LINE.with_borrow_mut(|buf| {
            buf.clear();
            entry.line(buf, finished, self.format, SystemTime::now());
            // One write is one line for the writer: it queues it whole or
            // drops it whole (and counts the drop).
            let _ = self.writer.clone().write(buf);
        });
    }
}

impl AccessLog {
    /// Writes the line of a session that ended, if the log filter lets INFO
    /// lines of the `tokenmeter::session` target through; `currency` is
    /// its cost's.
    pub fn session(&self, ended: &Ended, currency: &str) {
        if !tracing::enabled!(target: SESSION_TARGET, tracing::Level::INFO) {
            return;
        }
        LINE.with_borrow_mut(|buf| {
            buf.clear();
            session_line(buf, ended, currency, self.format, SystemTime::now());
            let _ = self.writer.clone().write(buf);
        });
    }
}

/// The line of the session `e` that ended, at `now`.
fn session_line(buf: &mut Vec<u8>, e: &Ended, currency: &str, format: Format, now: SystemTime) {
    let (f, t) = (&e.figures, &e.figures.tally);
    let mut l = Line::start_of(buf, format, now, SESSION_TARGET, "session");
    l.string("session", Some(&e.key));
    l.plain("route", &f.route);
    l.string(
        "tenant",
        Some(&f.tenant).filter(|t| !t.is_empty()).map(|t| &**t),
    );
    l.plain("reason", e.reason.as_str());
    l.boolean("good", t.good);
    l.number("turns", Some(f.turns));
    l.ms("duration_ms", Some(f.duration()));
    l.ms("model_ms", Some(f.model));
    l.ms("gap_ms", Some(f.gaps));
    l.number("gaps", Some(f.gap_count));
    l.number("input_tokens", Some(t.input_tokens));
    l.number("cached_input_tokens", Some(t.cached_tokens));
    l.number("output_tokens", Some(t.output_tokens));
    if t.gpu_seconds > 0.0 || t.cost.is_some() {
        l.decimal("gpu_seconds", Some(t.gpu_seconds));
        l.decimal("gpu_joules", t.joules);
        l.decimal("gpu_cost", t.cost);
        l.string("currency", t.cost.map(|_| currency));
    }
    l.end();
}

/// What the access line of a request says besides its labels and
/// summary, taken when it starts.
pub struct Entry {
    /// The model the request named (before label bounding), at most 200
    /// characters.
    model: Option<String>,
    /// The tenant its route found, when the route has one (a name of at
    /// most 64 characters, `unknown` or `other`), before label bounding.
    tenant: Option<String>,
    method: http::Method,
    path: String,
    /// The request's `x-request-id` header, at most 128 characters.
    request_id: Option<String>,
    /// The client connection's peer (the proxy's own view, not
    /// `X-Forwarded-For`).
    client: SocketAddr,
    /// The W3C trace the request belongs to.
    trace_id: Option<TraceId>,
}

/// The header whose value the access line carries as `request_id` (the
/// name load balancers, Envoy and nginx's `$request_id` setups use). The
/// proxy never adds one: requests are forwarded as they came.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

impl Entry {
    /// The entry of a request that starts, as its observers are told of
    /// it, attributed to `tenant` when its route has one.
    pub fn new(r: &Started<'_>, tenant: Option<&str>) -> Self {
        let request_id = r
            .parts
            .headers
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|id| truncated(id, 128).to_owned());
        Self {
            model: r.model().map(str::to_owned),
            tenant: tenant.map(str::to_owned),
            method: r.parts.method.clone(),
            path: truncated(r.parts.uri.path(), 256).to_owned(),
            request_id,
            client: r.client,
            trace_id: r.trace.map(|t| t.trace_id),
        }
    }
}

/// The first `max` characters of `s` (a path is rarely longer, and never
/// has more characters than bytes).
fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

impl Entry {
    /// Formats the line of the request `f` that ended, at `now`.
    fn line(&self, buf: &mut Vec<u8>, f: &Finished<'_>, format: Format, now: SystemTime) {
        let (s, gaps, labels) = (f.summary, &f.gaps, f.labels);
        let mut l = Line::start(buf, format, now);
        l.plain("route", labels.route());
        l.string("model", self.model.as_deref());
        l.string("slo", Some(labels.slo()).filter(|slo| !slo.is_empty()));
        l.string("tenant", self.tenant.as_deref());
        l.plain("operation", labels.operation());
        if f.turn != meter::Turn::None {
            l.plain("turn", f.turn.as_str());
        }
        if let Some(place) = f.session {
            l.string("session", Some(&place.key));
            l.number("session_turn", Some(place.turn));
        }
        l.string("response_model", s.response_model.as_deref());
        l.plain("method", self.method.as_str());
        l.plain("path", &self.path);
        l.string("request_id", self.request_id.as_deref());
        if let Some(id) = self.trace_id {
            l.plain(
                "trace_id",
                std::str::from_utf8(&id.hex()).unwrap_or_default(),
            );
        }
        l.address("client", self.client);
        l.number("status", s.status.map(u64::from));
        l.string("outcome", Some(s.outcome.as_str()));
        l.boolean("streamed", s.streamed);
        l.ms("ttft_ms", s.ttft);
        l.ms("tpot_ms", s.tpot);
        l.ms("e2el_ms", s.e2el);
        l.ms("max_itl_ms", gaps.longest);
        let stalled = gaps.stalls > 0;
        l.number("stalls", stalled.then_some(u64::from(gaps.stalls)));
        l.ms("stalled_ms", stalled.then_some(gaps.stalled));
        l.ms("elapsed_ms", Some(s.elapsed));
        l.seconds_as_ms("queue_ms", s.server.queue);
        l.seconds_as_ms("prefill_ms", s.server.prefill);
        l.seconds_as_ms("decode_ms", s.server.decode);
        l.seconds_as_ms("outside_ms", s.outside_engine());
        l.ms("proxy_ms", s.proxy_time);
        l.ms("client_wait_ms", s.status.map(|_| s.client_wait));
        if f.slow_reader {
            l.boolean("slow_reader", true);
        }
        l.number("output_tokens", s.output_tokens.map(|(n, _)| n));
        l.string(
            "output_source",
            s.output_tokens.map(|(_, source)| source.as_str()),
        );
        l.number("input_tokens", s.usage.input);
        l.number("parse_errors", Some(u64::from(s.parse_errors)));
        let occupancy = &f.occupancy;
        l.number("load", Some(occupancy.curve()));
        l.number("in_flight", Some(occupancy.in_flight));
        if let Some(engine) = &occupancy.engine {
            l.number("engine_running", engine.running);
            l.number("engine_waiting", engine.waiting);
            l.decimal("kv_cache_usage", engine.kv_cache_usage);
        }
        if let Some(c) = f.charged {
            l.decimal("gpu_seconds", Some(c.gpu_seconds));
            l.decimal("gpu_joules", c.joules);
            l.decimal("gpu_cost", c.cost);
        }
        l.end();
    }
}

/// The target the lines are filtered and labelled by.
const TARGET: &str = "tokenmeter::access";

/// The target of the line each session writes when it ends.
const SESSION_TARGET: &str = "tokenmeter::session";

/// How lines are written: `--log-format`, and for text whether standard
/// error is a terminal (colours, as the `fmt` subscriber uses them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Text { ansi: bool },
}

thread_local! {
    /// The line being formatted (its capacity kept between lines).
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One line being written, field by field. Fields whose value is `None`
/// are left out, as `tracing` leaves out empty `Option`s.
struct Line<'a> {
    buf: &'a mut Vec<u8>,
    format: Format,
    /// The line's target, written again at its end in JSON.
    target: &'static str,
}

impl<'a> Line<'a> {
    /// The timestamp (RFC 3339, microseconds, UTC), level, target and
    /// message.
    fn start(buf: &'a mut Vec<u8>, format: Format, now: SystemTime) -> Self {
        Self::start_of(buf, format, now, TARGET, "request")
    }

    /// [`start`](Self::start) of a line of `target` saying `message`.
    fn start_of(
        buf: &'a mut Vec<u8>,
        format: Format,
        now: SystemTime,
        target: &'static str,
        message: &str,
    ) -> Self {
        let ts = humantime::format_rfc3339_micros(now);
        let _ = match format {
            Format::Json => write!(
                buf,
                "{{\"timestamp\":\"{ts}\",\"level\":\"INFO\",\"fields\":{{\"message\":\"{message}\""
            ),
            Format::Text { ansi: false } => write!(buf, "{ts}  INFO {target}: {message}"),
            Format::Text { ansi: true } => write!(
                buf,
                "\x1b[2m{ts}\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2m{target}\x1b[0m\x1b[2m:\x1b[0m {message}"
            ),
        };
        Self {
            buf,
            format,
            target,
        }
    }

    fn key(&mut self, key: &str) {
        let b = &mut *self.buf;
        match self.format {
            Format::Json => {
                b.extend_from_slice(b",\"");
                b.extend_from_slice(key.as_bytes());
                b.extend_from_slice(b"\":");
            }
            Format::Text { ansi: false } => {
                b.push(b' ');
                b.extend_from_slice(key.as_bytes());
                b.push(b'=');
            }
            Format::Text { ansi: true } => {
                b.extend_from_slice(b" \x1b[3m");
                b.extend_from_slice(key.as_bytes());
                b.extend_from_slice(b"\x1b[0m\x1b[2m=\x1b[0m");
            }
        }
    }

    /// A string, quoted and escaped in both formats.
    fn string(&mut self, key: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.key(key);
            quoted(self.buf, v);
        }
    }

    /// A string the text format writes bare (a route name, a method, a
    /// path: no spaces or quotes in them, as `tracing` writes `Display`
    /// fields). Control characters are escaped all the same: a line is one
    /// line.
    fn plain(&mut self, key: &str, value: &str) {
        self.key(key);
        match self.format {
            Format::Json => quoted(self.buf, value),
            Format::Text { .. } => escaped(self.buf, value),
        }
    }

    /// A socket address, a string in JSON and bare in text (nothing in it
    /// needs escaping).
    fn address(&mut self, key: &str, value: SocketAddr) {
        self.key(key);
        let _ = match self.format {
            Format::Json => write!(self.buf, "\"{value}\""),
            Format::Text { .. } => write!(self.buf, "{value}"),
        };
    }

    fn number(&mut self, key: &str, value: Option<u64>) {
        if let Some(n) = value {
            self.key(key);
            self.buf
                .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        }
    }

    /// A finite number (0.75), as Rust writes the shortest float that
    /// reads back the same, so that lines add up to what was counted: a
    /// JSON number in both formats.
    fn decimal(&mut self, key: &str, value: Option<f64>) {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            self.key(key);
            let _ = write!(self.buf, "{v}");
        }
    }

    fn boolean(&mut self, key: &str, value: bool) {
        self.key(key);
        self.buf
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    /// A duration in milliseconds, to the microsecond (`12.345`).
    /// A number of seconds, possibly negative (the outside time of clocks
    /// that disagree), in milliseconds as [`ms`](Self::ms) writes them.
    fn seconds_as_ms(&mut self, key: &str, value: Option<f64>) {
        let Some(seconds) = value else {
            return;
        };
        if let Ok(d) = Duration::try_from_secs_f64(seconds.abs()) {
            self.key(key);
            if seconds < 0.0 {
                self.buf.push(b'-');
            }
            self.millis(d);
        }
    }

    fn ms(&mut self, key: &str, value: Option<Duration>) {
        if let Some(d) = value {
            self.key(key);
            self.millis(d);
        }
    }

    /// A duration in milliseconds, to the microsecond.
    fn millis(&mut self, d: Duration) {
        let us = (d.as_nanos() + 500) / 1000;
        let mut b = itoa::Buffer::new();
        self.buf.extend_from_slice(b.format(us / 1000).as_bytes());
        let frac = (us % 1000) as u16;
        self.buf.extend_from_slice(&[
            b'.',
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ]);
    }

    fn end(self) {
        if self.format == Format::Json {
            self.buf.extend_from_slice(b"},\"target\":\"");
            self.buf.extend_from_slice(self.target.as_bytes());
            self.buf.extend_from_slice(b"\"}");
        }
        self.buf.push(b'\n');
    }
}

/// `s` as a JSON string: quoted, with `"`, `\` and control characters
/// escaped.
fn quoted(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    escaped(buf, s);
    buf.push(b'"');
}

/// `s` with `"`, `\` and control characters escaped as JSON escapes them.
fn escaped(buf: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[from..i]);
        if escape.is_empty() {
            let _ = write!(buf, "\\u{:04x}", b);
        } else {
            buf.extend_from_slice(escape);
        }
        from = i + 1;
    }
    buf.extend_from_slice(&bytes[from..]);
}

#[cfg(test)]
#[path = "access/tests.rs"]
mod tests;
