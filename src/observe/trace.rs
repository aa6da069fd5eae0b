//! W3C Trace Context (`traceparent`, `tracestate`; Trace Context Level 1):
//! the trace a metered request belongs to, and what the upstream is told of
//! it.
//!
//! A client's valid `traceparent` always names the request's trace (the
//! access line's `trace_id`, the histograms' exemplars). What the upstream
//! receives depends on [`TraceSettings`]:
//!
//! - by default the headers go on as the client sent them: the proxy is not
//!   a span of the trace, so the upstream's spans stay children of the
//!   client's;
//! - with `join`, the proxy is a span of the client's trace: the upstream's
//!   `traceparent` keeps the trace id and flags and names the proxy's own
//!   span as its parent (vLLM, SGLang and TGI then join their spans under
//!   it), and `tracestate` goes on unchanged;
//! - with `start`, a request without a valid `traceparent` starts a trace,
//!   the proxy's span its root (sampled), and the upstream is sent its
//!   `traceparent`; a `tracestate` without a valid `traceparent` is
//!   dropped, as the specification asks.
//!
//! Ids come from a fast, non-cryptographic generator seeded per thread
//! (what OpenTelemetry's SDKs use): they need to be unique, not secret.

use std::fmt;

use http::{HeaderMap, HeaderValue};

use crate::config::TraceSettings;

pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// A trace id: 16 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span (parent) id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

/// The `sampled` bit of the trace flags.
pub const SAMPLED: u8 = 0x01;

/// The trace of one metered request, as the proxy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: TraceId,
    /// The client's span, the parent-id of its `traceparent`, when it sent
    /// one.
    pub parent: Option<SpanId>,
    /// The proxy's own span, when it joined or started the trace: the
    /// parent the upstream is told.
    pub span: Option<SpanId>,
    /// The trace flags (`sampled` is bit 0).
    pub flags: u8,
}

impl Trace {
    /// The trace of a request with `headers`, which are rewritten here for
    /// the upstream as `settings` ask.
    pub fn of_request(settings: TraceSettings, headers: &mut HeaderMap) -> Option<Trace> {
        match client_parent(headers) {
            Some(parent) => {
                let mut trace = Trace {
                    trace_id: parent.trace_id,
                    parent: Some(parent.parent_id),
                    span: None,
                    flags: parent.flags,
                };
                if settings.join {
                    trace.span = Some(SpanId::random());
                    headers.insert(TRACEPARENT, trace.traceparent());
                }
                Some(trace)
            }
            None if settings.start => {
                let trace = Trace {
                    trace_id: TraceId::random(),
                    parent: None,
                    span: Some(SpanId::random()),
                    flags: SAMPLED,
                };
                headers.remove(TRACESTATE);
                headers.insert(TRACEPARENT, trace.traceparent());
                Some(trace)
            }
            None => None,
        }
    }

    /// The `traceparent` naming the proxy's span as the parent (version
    /// `00`, whatever version the client spoke).
    fn traceparent(&self) -> HeaderValue {
        let span = self.span.or(self.parent).unwrap_or(SpanId([0; 8]));
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        hex(&self.trace_id.0, &mut out[3..35]);
        out[35] = b'-';
        hex(&span.0, &mut out[36..52]);
        out[52] = b'-';
        hex(&[self.flags], &mut out[53..55]);
        HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }
}

/// A parsed `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub parent_id: SpanId,
    pub flags: u8,
}

/// The client's `traceparent`, when it sent exactly one and it is valid.
fn client_parent(headers: &HeaderMap) -> Option<Parent> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse(value.as_bytes())
}

/// Parses a `traceparent` value: `version-traceid-parentid-flags`, lowercase
/// hex. Version `00` is exactly 55 characters; a later version may carry
/// more after a `-`, which is ignored (its first four fields read as
/// `00`'s); version `ff` is invalid, as are all-zero ids.
pub fn parse(value: &[u8]) -> Option<Parent> {
    let value = value.trim_ascii();
    if value.len() < 55 {
        return None;
    }
    let version = unhex::<1>(&value[0..2])?[0];
    match version {
        0xff => return None,
        0x00 if value.len() != 55 => return None,
        _ if value.len() > 55 && value[55] != b'-' => return None,
        _ => {}
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = unhex::<16>(&value[3..35])?;
    let parent_id = unhex::<8>(&value[36..52])?;
    let flags = unhex::<1>(&value[53..55])?[0];
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id: TraceId(trace_id),
        parent_id: SpanId(parent_id),
        flags,
    })
}

/// `N` bytes from `2N` lowercase hex digits.
fn unhex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Writes `bytes` as lowercase hex into `out` (twice as long).
fn hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
}

impl TraceId {
    pub(crate) fn random() -> Self {
        loop {
            let id = fastrand::u128(..).to_be_bytes();
            if id != [0; 16] {
                return TraceId(id);
            }
        }
    }

    /// The 32 lowercase hex digits, as `traceparent` and the access log
    /// write it.
    pub fn hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        hex(&self.0, &mut out);
        out
    }
}

impl SpanId {
    pub(crate) fn random() -> Self {
        loop {
            let id = fastrand::u64(..).to_be_bytes();
            if id != [0; 8] {
                return SpanId(id);
            }
        }
    }

    /// The 16 lowercase hex digits.
    pub fn hex(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        hex(&self.0, &mut out);
        out
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.hex()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.hex()).map_err(|_| fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const EXAMPLE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn settings(join: bool, start: bool) -> TraceSettings {
        TraceSettings { join, start }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn the_specifications_example_parses() {
        let p = parse(EXAMPLE.as_bytes()).unwrap();
        assert_eq!(p.trace_id.to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(p.parent_id.to_string(), "b7ad6b7169203331");
        assert_eq!(p.flags, 1);
    }

    #[test]
    fn invalid_values_are_refused() {
        let bad = [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",
            // Uppercase hex, all-zero ids, version ff.
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            // Version 00 with more after it; separators misplaced.
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319cb7ad6b7169203331--01",
            "0g-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            // A later version must put a `-` after the four fields.
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
        ];
        for value in bad {
            assert_eq!(parse(value.as_bytes()), None, "{value}");
        }
        // A later version's extra fields are ignored.
        let later = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-next";
        assert_eq!(parse(later.as_bytes()), parse(EXAMPLE.as_bytes()));
    }

    #[test]
    fn by_default_the_headers_go_on_unchanged() {
        let mut h = headers(&[(TRACEPARENT, EXAMPLE), (TRACESTATE, "v=1")]);
        let before = h.clone();
        let t = Trace::of_request(settings(false, true), &mut h).unwrap();
        assert_eq!(h, before);
        assert_eq!(t.span, None);
        assert_eq!(t.parent.unwrap().to_string(), "b7ad6b7169203331");
        let mut none = HeaderMap::new();
        assert_eq!(Trace::of_request(settings(false, false), &mut none), None);
        assert!(none.is_empty());
    }

    #[test]
    fn joining_keeps_the_trace_and_names_the_proxys_span_as_parent() {
        let mut h = headers(&[(TRACEPARENT, EXAMPLE), (TRACESTATE, "v=1")]);
        let t = Trace::of_request(settings(true, false), &mut h).unwrap();
        let sent = parse(h[TRACEPARENT].as_bytes()).unwrap();
        assert_eq!(sent.trace_id, t.trace_id);
        assert_eq!(
            sent.trace_id.to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(Some(sent.parent_id), t.span);
        assert_ne!(sent.parent_id.to_string(), "b7ad6b7169203331");
        assert_eq!(sent.flags, 1);
        assert_eq!(h[TRACESTATE], "v=1");
        assert_eq!(h.get_all(TRACEPARENT).iter().count(), 1);
    }

    #[test]
    fn a_request_without_a_valid_parent_starts_a_trace_only_when_asked() {
        for sent in [
            vec![],
            vec![(TRACEPARENT, "nonsense")],
            vec![(TRACEPARENT, EXAMPLE), (TRACEPARENT, EXAMPLE)],
        ] {
            let mut with_state = sent.clone();
            with_state.push((TRACESTATE, "v=1"));
            let mut h = headers(&with_state);
            let before = h.clone();
            assert_eq!(Trace::of_request(settings(true, false), &mut h), None);
            assert_eq!(h, before);
            let t = Trace::of_request(settings(false, true), &mut h).unwrap();
            let p = parse(h[TRACEPARENT].as_bytes()).unwrap();
            assert_eq!(
                (p.trace_id, Some(p.parent_id), p.flags),
                (t.trace_id, t.span, SAMPLED)
            );
            assert_eq!(t.parent, None);
            assert!(h.get(TRACESTATE).is_none());
        }
        let a = Trace::of_request(settings(false, true), &mut HeaderMap::new()).unwrap();
        let b = Trace::of_request(settings(false, true), &mut HeaderMap::new()).unwrap();
        assert_ne!(a.trace_id, b.trace_id);
    }
}
