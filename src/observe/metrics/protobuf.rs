//! The Prometheus protobuf exposition: each gathered family as an
//! `io.prometheus.client.MetricFamily` message (the client model's
//! `metrics.proto`), prefixed by its length as a varint. Prometheus asks
//! for it first when native histograms are on, and only this format
//! carries them: each histogram's series has its classic buckets, with
//! their exemplars, and its native buckets (`native.rs`), with the same
//! exemplars again in the native histogram's own `exemplars` field, which
//! the client model reserves for them (a Prometheus that does not read that
//! field takes the classic buckets' exemplars, which carry a timestamp).
//!
//! Written by hand: the `prometheus` crate's protobuf model has neither
//! the native fields nor bucket exemplars, and the messages are a handful
//! of fields. Every field the client model marks optional is written when
//! it has a value (proto2 keeps presence), the native deltas packed, which
//! proto2 parsers read as they read unpacked ones.
//!
//! A histogram with native buckets takes its count and sum from them, so
//! that they always agree with its native buckets as Prometheus checks
//! they do; its classic buckets are read before them (`families.rs`
//! observes the native buckets first), so none is ever above that count.

use prometheus::proto::{Bucket, Histogram, Metric, MetricFamily, MetricType};

use super::exemplars::{Exemplar, Exemplars, Exemplified, SeriesExemplars};
use super::native::{self, Snapshot};

/// The `Content-Type` of the protobuf exposition.
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// Writes `families` as length-delimited `MetricFamily` messages. The
/// histograms named in `exemplified` carry `exemplars`; those whose
/// series `natives` has carry their native buckets.
pub fn encode(
    families: &[MetricFamily],
    exemplified: &[(String, Exemplified)],
    exemplars: &Exemplars,
    natives: &dyn native::Source,
) -> Vec<u8> {
    let mut w = Writer {
        buf: Vec::with_capacity(64 * 1024),
    };
    for mf in families {
        let name = mf.name();
        let exemplified = exemplified.iter().find(|(n, _)| n == name).map(|&(_, h)| h);
        let native = natives.family(name);
        w.delimited(|w| {
            w.string(1, name);
            if !mf.help().is_empty() {
                w.string(2, mf.help());
            }
            let kind = mf.get_field_type();
            w.uint(3, kind as u64);
            for m in mf.get_metric() {
                let histogram = (kind == MetricType::HISTOGRAM).then(|| {
                    let labels = m.get_label().iter().map(|l| (l.name(), l.value()));
                    let series = exemplified.and_then(|h| Some((exemplars.find(labels)?, h)));
                    let native = native.and_then(|f| natives.snapshot(f, m.get_label()));
                    (series, native)
                });
                w.message(4, |w| metric(w, kind, m, histogram));
            }
        });
    }
    w.buf
}

/// The exemplars of a histogram's series, and its native buckets.
type HistogramExtras = (
    Option<(std::sync::Arc<SeriesExemplars>, Exemplified)>,
    Option<Snapshot>,
);

/// A `Metric` message (its fields in number order).
fn metric(w: &mut Writer, kind: MetricType, m: &Metric, histogram_extras: Option<HistogramExtras>) {
    for l in m.get_label() {
        w.message(1, |w| label(w, l.name(), l.value()));
    }
    match kind {
        MetricType::GAUGE => w.message(2, |w| w.double(1, m.get_gauge().get_value())),
        MetricType::COUNTER => w.message(3, |w| w.double(1, m.get_counter().get_value())),
        MetricType::SUMMARY => w.message(4, |w| {
            let s = m.get_summary();
            w.uint(1, s.sample_count());
            w.double(2, s.sample_sum());
            for q in s.get_quantile() {
                w.message(3, |w| {
                    w.double(1, q.quantile());
                    w.double(2, q.value());
                });
            }
        }),
        // The `prometheus` crate makes no untyped metric; a histogram is
        // written below, after the timestamp, in field order.
        MetricType::UNTYPED | MetricType::HISTOGRAM => {}
    }
    if m.timestamp_ms() != 0 {
        w.key(6, VARINT);
        w.varint(m.timestamp_ms() as u64);
    }
    if kind == MetricType::HISTOGRAM {
        let (series, native) = histogram_extras.unwrap_or((None, None));
        let exemplar = |i: usize| series.as_ref().and_then(|(s, h)| s.get(*h, i));
        w.message(7, |w| histogram(w, m.get_histogram(), exemplar, native));
    }
}

/// A `Histogram` message: the classic buckets, with the exemplar of each
/// (`exemplar(i)`, `+Inf` being one past the last bound), and the native
/// fields when it has them.
fn histogram(
    w: &mut Writer,
    h: &Histogram,
    exemplar: impl Fn(usize) -> Option<Exemplar>,
    native: Option<Snapshot>,
) {
    let (count, sum) = native
        .as_ref()
        .map_or((h.get_sample_count(), h.get_sample_sum()), |n| {
            (n.count, n.sum)
        });
    w.uint(1, count);
    w.double(2, sum);
    let buckets: &[Bucket] = h.get_bucket();
    let mut written = Vec::new();
    for (i, b) in buckets.iter().enumerate() {
        let e = exemplar(i);
        bucket(w, b.cumulative_count(), b.upper_bound(), e.as_ref());
        written.extend(e);
    }
    // The `+Inf` bucket is implied by the count: written only to carry an
    // exemplar.
    let has_inf = buckets
        .last()
        .is_some_and(|b| b.upper_bound() == f64::INFINITY);
    if !has_inf && let Some(e) = exemplar(buckets.len()) {
        bucket(w, count, f64::INFINITY, Some(&e));
        written.push(e);
    }
    let Some(n) = native else {
        return;
    };
    w.key(5, VARINT);
    w.varint(zigzag(i64::from(n.schema)));
    w.double(6, native::ZERO_THRESHOLD);
    w.uint(7, n.zero_count);
    for span in &n.spans {
        w.message(12, |w| {
            w.key(1, VARINT);
            w.varint(zigzag(i64::from(span.offset)));
            w.uint(2, u64::from(span.length));
        });
    }
    if !n.deltas.is_empty() {
        w.message(13, |w| {
            for &d in &n.deltas {
                w.varint(zigzag(d));
            }
        });
    }
    for e in &written {
        w.message(16, |w| exemplar_message(w, e));
    }
}

fn bucket(w: &mut Writer, cumulative: u64, upper: f64, exemplar: Option<&Exemplar>) {
    w.message(3, |w| {
        w.uint(1, cumulative);
        w.double(2, upper);
        if let Some(e) = exemplar {
            w.message(3, |w| exemplar_message(w, e));
        }
    });
}

/// An `Exemplar` message: its label, value and timestamp.
fn exemplar_message(w: &mut Writer, e: &Exemplar) {
    let (name, value) = e.id.label();
    w.message(1, |w| label(w, name, &value));
    w.double(2, e.value);
    let seconds = e.unix.floor();
    let nanos = ((e.unix - seconds) * 1e9).round().min(999_999_999.0);
    w.message(3, |w| {
        w.uint(1, seconds as i64 as u64);
        w.uint(2, nanos as u64);
    });
}

fn label(w: &mut Writer, name: &str, value: &str) {
    w.string(1, name);
    w.string(2, value);
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// Protobuf's encoding of a signed integer (`sint32`, `sint64`).
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The bytes of the exposition as they are written.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field << 3 | u32::from(wire)));
    }

    fn uint(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.varint(v);
    }

    fn double(&mut self, field: u32, v: f64) {
        self.key(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn string(&mut self, field: u32, s: &str) {
        self.key(field, LEN);
        self.varint(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// A nested message (or packed field) as field `field`.
    fn message(&mut self, field: u32, write: impl FnOnce(&mut Self)) {
        self.key(field, LEN);
        self.delimited(write);
    }

    /// What `write` writes, preceded by its length: written in place, then
    /// the length put before it.
    fn delimited(&mut self, write: impl FnOnce(&mut Self)) {
        let start = self.buf.len();
        write(self);
        let mut len = (self.buf.len() - start) as u64;
        let mut prefix = [0_u8; 10];
        let mut n = 0;
        while len >= 0x80 {
            prefix[n] = len as u8 | 0x80;
            len >>= 7;
            n += 1;
        }
        prefix[n] = len as u8;
        n += 1;
        self.buf.extend_from_slice(&prefix[..n]);
        self.buf[start..].rotate_right(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::metrics::exemplars::ExemplarId;
    use crate::observe::metrics::native::{Native, Shape};
    use prometheus::proto::LabelPair;
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

    /// No family keeps native buckets.
    struct NoNatives;

    impl native::Source for NoNatives {
        fn family(&self, _: &str) -> Option<usize> {
            None
        }
        fn snapshot(&self, _: usize, _: &[LabelPair]) -> Option<Snapshot> {
            None
        }
    }

    /// Family `0`'s one series has these native buckets.
    struct OneNative(Native);

    impl native::Source for OneNative {
        fn family(&self, name: &str) -> Option<usize> {
            (name == "h").then_some(0)
        }
        fn snapshot(&self, _: usize, _: &[LabelPair]) -> Option<Snapshot> {
            Some(self.0.snapshot())
        }
    }

    fn no_exemplars() -> Exemplars {
        Exemplars::new([&[], &[], &[], &[]], &[])
    }

    #[test]
    fn a_counter_family_is_the_bytes_protobuf_makes() {
        let registry = Registry::new();
        let c = IntCounterVec::new(Opts::new("a_total", "h"), &["k"]).unwrap();
        registry.register(Box::new(c.clone())).unwrap();
        c.with_label_values(&["v"]).inc();
        let bytes = encode(&registry.gather(), &[], &no_exemplars(), &NoNatives);
        let one = 1.0_f64.to_le_bytes();
        let mut want = vec![
            35, // the family's length
            0x0a, 7, b'a', b'_', b't', b'o', b't', b'a', b'l', // name
            0x12, 1, b'h', // help
            0x18, 0, // type: COUNTER
            0x22, 19, // metric
            0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', // label k="v"
            0x1a, 9, 0x09, // counter, its value
        ];
        want.extend_from_slice(&one);
        assert_eq!(bytes, want);
    }

    #[test]
    fn a_histogram_carries_its_native_buckets_and_exemplars() {
        let registry = Registry::new();
        let h = HistogramVec::new(HistogramOpts::new("h", "x").buckets(vec![1.0]), &[]).unwrap();
        registry.register(Box::new(h.clone())).unwrap();
        let native = Native::new(Shape {
            schema: 0,
            max_buckets: 160,
        });
        for v in [1.0, 3.0] {
            native.observe(v);
            h.with_label_values::<&str>(&[]).observe(v);
        }
        let exemplars = Exemplars::new([&[1.0], &[], &[], &[]], &[]);
        let id = ExemplarId::request(b"r").unwrap();
        exemplars.series(&[]).set(Exemplified::Ttft, 3.0, &id);
        let bytes = encode(
            &registry.gather(),
            &[("h".to_owned(), Exemplified::Ttft)],
            &exemplars,
            &OneNative(native),
        );
        let f = |v: f64| v.to_le_bytes();
        let e = exemplars.series(&[]).get(Exemplified::Ttft, 1).unwrap();
        let secs = e.unix.floor() as u64;
        let nanos = ((e.unix - e.unix.floor()) * 1e9).round() as u64;
        // The exemplar: label request_id="r", value 3, its timestamp.
        let mut ts = vec![0x08];
        ts.extend(varint(secs));
        ts.push(0x10);
        ts.extend(varint(nanos));
        let mut exemplar = vec![0x0a, 15, 0x0a, 10];
        exemplar.extend_from_slice(b"request_id");
        exemplar.extend_from_slice(&[0x12, 1, b'r', 0x11]);
        exemplar.extend_from_slice(&f(3.0));
        exemplar.push(0x1a);
        exemplar.push(ts.len() as u8);
        exemplar.extend_from_slice(&ts);
        let mut hist = vec![0x08, 2, 0x11];
        hist.extend_from_slice(&f(4.0));
        // The classic bucket le=1 (1 observation), then +Inf with the
        // exemplar.
        hist.extend_from_slice(&[0x1a, 11, 0x08, 1, 0x11]);
        hist.extend_from_slice(&f(1.0));
        hist.extend_from_slice(&[0x1a, (11 + 2 + exemplar.len()) as u8, 0x08, 2, 0x11]);
        hist.extend_from_slice(&f(f64::INFINITY));
        hist.extend_from_slice(&[0x1a, exemplar.len() as u8]);
        hist.extend_from_slice(&exemplar);
        // Schema 0, the zero threshold, no zero count; buckets 0 (1) and 2
        // (3) as one span of 3 with deltas 1, -1, 1; the exemplar again.
        hist.extend_from_slice(&[0x28, 0, 0x31]);
        hist.extend_from_slice(&f(native::ZERO_THRESHOLD));
        hist.extend_from_slice(&[0x38, 0, 0x62, 4, 0x08, 0, 0x10, 3, 0x6a, 3, 2, 1, 2]);
        hist.extend_from_slice(&[0x82, 0x01, exemplar.len() as u8]);
        hist.extend_from_slice(&exemplar);
        let mut metric = vec![0x3a];
        metric.extend(varint(hist.len() as u64));
        metric.extend_from_slice(&hist);
        let mut family = vec![0x0a, 1, b'h', 0x12, 1, b'x', 0x18, 4, 0x22];
        family.extend(varint(metric.len() as u64));
        family.extend_from_slice(&metric);
        let mut want = varint(family.len() as u64);
        want.extend_from_slice(&family);
        assert_eq!(bytes, want);
    }

    /// A varint, the slow way: seven bits a byte, low first, the top bit
    /// set on all but the last.
    fn varint(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let low = (n % 128) as u8;
            n /= 128;
            if n == 0 {
                out.push(low);
                return out;
            }
            out.push(low + 128);
        }
    }

    #[test]
    fn lengths_past_127_bytes_take_two_bytes() {
        let mut w = Writer { buf: Vec::new() };
        w.delimited(|w| w.string(1, &"x".repeat(200)));
        // 203 bytes: 0xcb 0x01, then the string's key and its length.
        assert_eq!(&w.buf[..5], &[0xcb, 0x01, 0x0a, 0xc8, 0x01]);
        assert_eq!(w.buf.len(), 205);
        assert_eq!((zigzag(0), zigzag(-1), zigzag(1), zigzag(-2)), (0, 1, 2, 3));
        assert_eq!(zigzag(i64::from(i32::MIN)), u64::from(u32::MAX));
    }
}
