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
            model: r.model.map(str::to_owned),
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
}

impl<'a> Line<'a> {
    /// The timestamp (RFC 3339, microseconds, UTC), level, target and
    /// message.
    fn start(buf: &'a mut Vec<u8>, format: Format, now: SystemTime) -> Self {
        let ts = humantime::format_rfc3339_micros(now);
        let _ = match format {
            Format::Json => write!(
                buf,
                "{{\"timestamp\":\"{ts}\",\"level\":\"INFO\",\"fields\":{{\"message\":\"request\""
            ),
            Format::Text { ansi: false } => write!(buf, "{ts}  INFO {TARGET}: request"),
            Format::Text { ansi: true } => write!(
                buf,
                "\x1b[2m{ts}\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2m{TARGET}\x1b[0m\x1b[2m:\x1b[0m request"
            ),
        };
        Self { buf, format }
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
            self.buf.extend_from_slice(TARGET.as_bytes());
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::config::Route;
    use crate::observe::labels::{Bounds, Labels};
    use crate::observe::occupancy::{EngineOccupancy, Occupancy};
    use crate::observe::request::{Charged, Gaps};
    use crate::observe::trace::Trace;
    use meter::{Outcome, ServerTimings, Summary, TokenSource, Usage};

    fn logged(model: Option<&str>, request_id: Option<&str>) -> Entry {
        let mut request = http::Request::post("/v1/chat/completions");
        if let Some(id) = request_id {
            request = request.header(REQUEST_ID_HEADER, id);
        }
        let (parts, ()) = request.body(()).unwrap().into_parts();
        Entry::new(&started(&route(), &parts, model, None), None)
    }

    fn route() -> Route {
        crate::observe::request::route("  - name: chat\n    upstream: http://127.0.0.1:8000\n")
    }

    fn started<'a>(
        route: &'a Route,
        parts: &'a http::request::Parts,
        model: Option<&'a str>,
        trace: Option<Trace>,
    ) -> Started<'a> {
        Started {
            route,
            api: meter::Api::OpenAi,
            model,
            body: None,
            parts,
            client: "[::1]:41234".parse().unwrap(),
            trace,
        }
    }

    /// The labels of the requests logged here: route `chat`, class
    /// `interactive`, `chat` (the line names the model and tenant the
    /// request gave, not their labels).
    fn labels() -> Labels {
        let counter = || prometheus::IntCounter::new("overflow", "overflow").unwrap();
        let bounds = Bounds::new(
            &crate::config::MetricsSettings::default(),
            counter(),
            counter(),
        );
        Labels::resolve(
            &std::sync::Arc::new(bounds),
            "chat",
            None,
            Some("interactive"),
            None,
            meter::Operation::Chat,
        )
    }

    /// The line of `entry`, ended with `s`, a slow reader's or not.
    fn written(entry: &Entry, s: &Summary, slow_reader: bool, format: Format) -> Vec<u8> {
        let labels = labels();
        let finished = Finished {
            turn: meter::Turn::None,
            summary: s,
            labels: &labels,
            judged: None,
            headers: None,
            at: tokio::time::Instant::now(),
            gaps: Gaps::default(),
            slow_reader,
            occupancy: Occupancy {
                in_flight: 3,
                engine: None,
            },
            charged: None,
        };
        let mut buf = Vec::new();
        entry.line(&mut buf, &finished, format, at());
        buf
    }

    fn summary() -> Summary {
        Summary {
            outcome: Outcome::Ok,
            status: Some(200),
            streamed: true,
            ttft: Some(Duration::from_nanos(2_041_500)),
            ttft_visible: Some(Duration::from_nanos(2_041_500)),
            e2el: Some(Duration::from_millis(1182)),
            elapsed: Duration::from_millis(1182),
            tpot: Some(Duration::from_nanos(19_984_499)),
            output_tokens: Some((50, TokenSource::Usage)),
            usage: Usage {
                input: Some(12),
                output: Some(50),
                ..Usage::default()
            },
            server: ServerTimings::default(),
            client_wait: std::time::Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 52,
            token_events: 50,
            first_token_event: Some(1),
            first_visible_event: Some(1),
            terminal_event: None,
            parse_errors: 0,
        }
    }

    /// 2026-12-01T20:48:00.123456Z.
    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(1_796_158_080_123_456)
    }

    fn line(l: &Entry, s: &Summary, format: Format) -> String {
        String::from_utf8(written(l, s, false, format)).unwrap()
    }

    #[test]
    fn json_lines_have_the_shape_of_the_fmt_subscribers() {
        let text = line(&logged(Some("m1"), Some("req-7")), &summary(), Format::Json);
        assert!(
            text.ends_with('\n') && text.matches('\n').count() == 1,
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "timestamp": "2026-12-01T20:48:00.123456Z",
                "level": "INFO",
                "fields": {
                    "message": "request",
                    "route": "chat",
                    "model": "m1",
                    "slo": "interactive",
                    "operation": "chat",
                    "method": "POST",
                    "path": "/v1/chat/completions",
                    "request_id": "req-7",
                    "client": "[::1]:41234",
                    "status": 200,
                    "outcome": "ok",
                    "streamed": true,
                    "ttft_ms": 2.042,
                    "tpot_ms": 19.984,
                    "e2el_ms": 1182.0,
                    "elapsed_ms": 1182.0,
                    "client_wait_ms": 0.0,
                    "output_tokens": 50,
                    "output_source": "usage",
                    "input_tokens": 12,
                    "parse_errors": 0,
                    "load": 3,
                    "in_flight": 3
                },
                "target": "tokenmeter::access"
            })
        );
    }

    #[test]
    fn a_request_names_its_tenant_and_trace_id() {
        let (parts, ()) = http::Request::post("/v1/chat/completions")
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )
            .body(())
            .unwrap()
            .into_parts();
        let mut headers = parts.headers.clone();
        let trace = Trace::of_request(crate::config::TraceSettings::default(), &mut headers);
        let route = route();
        let entry = Entry::new(&started(&route, &parts, None, trace), Some("team-a"));
        let text = line(&entry, &summary(), Format::Json);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["fields"]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(v["fields"]["tenant"], "team-a");
        let text = line(&entry, &summary(), Format::Text { ansi: false });
        assert!(
            text.contains(" trace_id=0af7651916cd43dd8448eb211c80319c "),
            "{text}"
        );
    }

    #[test]
    fn fields_without_a_value_are_left_out() {
        let mut s = summary();
        s.ttft = None;
        s.tpot = None;
        s.e2el = None;
        s.status = None;
        s.output_tokens = None;
        s.usage = Usage::default();
        s.outcome = Outcome::ClientAbort;
        let text = line(&logged(None, None), &s, Format::Json);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let f = v["fields"].as_object().unwrap();
        for key in [
            "model",
            "tenant",
            "response_model",
            "request_id",
            "trace_id",
            "status",
            "ttft_ms",
            "tpot_ms",
            "e2el_ms",
            "output_tokens",
            "output_source",
            "input_tokens",
            "queue_ms",
            "prefill_ms",
            "decode_ms",
            "outside_ms",
            "client_wait_ms",
            "slow_reader",
            "proxy_ms",
        ] {
            assert!(!f.contains_key(key), "{key} in {text}");
        }
        assert_eq!(f["outcome"], "client_abort");
        assert_eq!(f["elapsed_ms"], 1182.0);
    }

    #[test]
    fn the_servers_phases_and_the_outside_time_are_written_when_known() {
        let mut s = summary();
        s.server = ServerTimings {
            queue: Some(0.0005),
            prefill: Some(0.0012),
            decode: Some(0.9),
        };
        let text = line(&logged(None, None), &s, Format::Text { ansi: false });
        assert!(
            text.contains(" queue_ms=0.500 prefill_ms=1.200 decode_ms=900.000 outside_ms=0.342 "),
            "{text}"
        );
        // A server that counts more than the proxy saw: negative, written.
        s.server.prefill = Some(0.0025);
        let text = line(&logged(None, None), &s, Format::Json);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["fields"]["outside_ms"], -0.959);
        // No queue: no outside time.
        s.server.queue = None;
        let text = line(&logged(None, None), &s, Format::Json);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["fields"].get("outside_ms").is_none(), "{text}");
        assert_eq!(v["fields"]["prefill_ms"], 2.5);
    }

    /// The client's wait is written for every response; a slow reader is
    /// marked as one.
    #[test]
    fn the_clients_wait_is_written_and_a_slow_reader_marked() {
        let mut s = summary();
        s.client_wait = Duration::from_millis(2003);
        let entry = logged(None, None);
        let buf = written(&entry, &s, true, Format::Json);
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["fields"]["client_wait_ms"], 2003.0);
        assert_eq!(v["fields"]["slow_reader"], true);
        let text = line(&entry, &s, Format::Text { ansi: false });
        assert!(text.contains(" client_wait_ms=2003.000 "), "{text}");
        assert!(!text.contains("slow_reader"), "{text}");
    }

    #[test]
    fn any_string_a_client_sends_stays_one_line_and_round_trips() {
        let odd = "a\"b\\c\nd\re\tf\u{1}g\u{7f}h é 字 🦀";
        // A header value is visible ASCII and spaces at most.
        let l = logged(Some(odd), Some("id \"quoted\" \\"));
        let text = line(&l, &summary(), Format::Json);
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["fields"]["model"], odd);
        assert_eq!(v["fields"]["request_id"], "id \"quoted\" \\");
        let text = line(&l, &summary(), Format::Text { ansi: false });
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert!(!text.contains('\u{1}') && !text.contains('\r'), "{text}");
    }

    #[test]
    fn text_lines_read_like_the_fmt_subscribers() {
        let l = logged(Some("m1"), Some("req-7"));
        assert_eq!(
            line(&l, &summary(), Format::Text { ansi: false }),
            "2026-12-01T20:48:00.123456Z  INFO tokenmeter::access: request route=chat \
             model=\"m1\" slo=\"interactive\" operation=chat method=POST path=/v1/chat/completions \
             request_id=\"req-7\" client=[::1]:41234 status=200 outcome=\"ok\" streamed=true ttft_ms=2.042 \
             tpot_ms=19.984 e2el_ms=1182.000 elapsed_ms=1182.000 client_wait_ms=0.000 output_tokens=50 \
             output_source=\"usage\" input_tokens=12 parse_errors=0 load=3 in_flight=3\n"
        );
        let coloured = line(&l, &summary(), Format::Text { ansi: true });
        assert!(coloured.contains("\x1b[32m INFO\x1b[0m"), "{coloured}");
        assert!(
            coloured.contains("\x1b[3mroute\x1b[0m\x1b[2m=\x1b[0mchat"),
            "{coloured}"
        );
    }

    /// Where the route's engine is scraped, the line has its figures, and
    /// the load is its running plus waiting requests; where the route has
    /// GPUs, its share of them, as the shortest decimal that reads back the
    /// same (so lines add up to the counters).
    #[test]
    fn the_load_at_arrival_and_the_gpu_share_are_on_the_line() {
        let labels = labels();
        let s = summary();
        let finished = Finished {
            turn: meter::Turn::None,
            summary: &s,
            labels: &labels,
            judged: None,
            headers: None,
            at: tokio::time::Instant::now(),
            gaps: Gaps::default(),
            slow_reader: false,
            occupancy: Occupancy {
                in_flight: 2,
                engine: Some(EngineOccupancy {
                    running: Some(4),
                    waiting: Some(1),
                    kv_cache_usage: Some(0.875),
                }),
            },
            charged: Some(Charged {
                gpu_seconds: 0.1 + 0.2,
                joules: None,
                cost: Some(1e-7),
            }),
        };
        let entry = logged(None, None);
        let mut buf = Vec::new();
        entry.line(&mut buf, &finished, Format::Text { ansi: false }, at());
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.ends_with(
                " load=5 in_flight=2 engine_running=4 engine_waiting=1 kv_cache_usage=0.875 gpu_seconds=0.30000000000000004 gpu_cost=0.0000001\n"
            ),
            "{text}"
        );
        let mut buf = Vec::new();
        entry.line(&mut buf, &finished, Format::Json, at());
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["fields"]["kv_cache_usage"], 0.875);
        assert_eq!(v["fields"]["engine_waiting"], 1);
    }

    #[test]
    fn truncated_keeps_the_first_characters() {
        assert_eq!(truncated("/v1/chat", 256), "/v1/chat");
        assert_eq!(truncated("abcdef", 3), "abc");
        assert_eq!(truncated("abc", 3), "abc");
        // Characters, not bytes: "é" is two bytes.
        assert_eq!(truncated("éééé", 3), "ééé");
        assert_eq!(truncated("ééé", 3), "ééé");
        let long = "/".repeat(300);
        assert_eq!(truncated(&long, 256).len(), 256);
    }
}
