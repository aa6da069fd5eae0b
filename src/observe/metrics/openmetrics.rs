//! The OpenMetrics 1.0 text exposition of gathered metric families, with
//! the latency histograms' exemplars. Scrapers that ask for it (Prometheus
//! does by default; `format.rs` decides) get this; the others get the
//! Prometheus text format 0.0.4 of the `prometheus` crate, which has no
//! exemplars, or the protobuf format (`protobuf.rs`). Both write the
//! same series with the same label values (`le` included), so switching
//! formats changes no series.
//!
//! What differs from 0.0.4: a counter's family is named without its
//! `_total` suffix (its sample keeps it), `+Inf`/`-Inf`/`NaN` are spelled
//! that way, a bucket's sample may be followed by its exemplar, and the
//! exposition ends with `# EOF`.

use std::fmt::Write as _;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use super::exemplars::{Exemplars, Exemplified};

/// The `Content-Type` of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Writes `families` in the OpenMetrics text format. `exemplars` are
/// written after the buckets of the histograms named in `exemplified`.
pub fn encode(
    families: &[MetricFamily],
    exemplified: &[(String, Exemplified)],
    exemplars: &Exemplars,
) -> String {
    let mut out = String::with_capacity(64 * 1024);
    for mf in families {
        let name = mf.name();
        let kind = mf.get_field_type();
        let family = match kind {
            MetricType::COUNTER => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let type_name = match kind {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::HISTOGRAM => "histogram",
            MetricType::SUMMARY => "summary",
            MetricType::UNTYPED => "unknown",
        };
        let _ = writeln!(out, "# TYPE {family} {type_name}");
        if !mf.help().is_empty() {
            out.push_str("# HELP ");
            out.push_str(family);
            out.push(' ');
            escape(mf.help(), &mut out);
            out.push('\n');
        }
        let exemplified = exemplified.iter().find(|(n, _)| n == name).map(|&(_, h)| h);
        for m in mf.get_metric() {
            match kind {
                MetricType::COUNTER => {
                    sample(
                        &mut out,
                        family,
                        "_total",
                        m,
                        None,
                        m.get_counter().get_value(),
                    );
                    out.push('\n');
                }
                MetricType::GAUGE => {
                    sample(&mut out, name, "", m, None, m.get_gauge().get_value());
                    out.push('\n');
                }
                // The `prometheus` crate makes no untyped metric.
                MetricType::UNTYPED => {}
                MetricType::HISTOGRAM => histogram(&mut out, name, m, exemplified, exemplars),
                MetricType::SUMMARY => {
                    let s = m.get_summary();
                    for q in s.get_quantile() {
                        let quantile = q.quantile().to_string();
                        sample(
                            &mut out,
                            name,
                            "",
                            m,
                            Some(("quantile", &quantile)),
                            q.value(),
                        );
                        out.push('\n');
                    }
                    sample(&mut out, name, "_sum", m, None, s.sample_sum());
                    out.push('\n');
                    sample(&mut out, name, "_count", m, None, s.sample_count() as f64);
                    out.push('\n');
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

fn histogram(
    out: &mut String,
    name: &str,
    m: &Metric,
    exemplified: Option<Exemplified>,
    exemplars: &Exemplars,
) {
    let h = m.get_histogram();
    let series = exemplified
        .and_then(|_| exemplars.find(m.get_label().iter().map(|l| (l.name(), l.value()))));
    let buckets = h.get_bucket();
    let mut inf_seen = false;
    for (i, b) in buckets.iter().enumerate() {
        let bound = b.upper_bound();
        inf_seen |= bound == f64::INFINITY;
        // The label value the 0.0.4 encoder writes, so the series match.
        let le = if bound == f64::INFINITY {
            "+Inf".to_owned()
        } else {
            bound.to_string()
        };
        sample(
            out,
            name,
            "_bucket",
            m,
            Some(("le", &le)),
            b.cumulative_count() as f64,
        );
        if let (Some(series), Some(h)) = (&series, exemplified) {
            series.write(h, i, out);
        }
        out.push('\n');
    }
    if !inf_seen {
        let count = h.get_sample_count() as f64;
        sample(out, name, "_bucket", m, Some(("le", "+Inf")), count);
        if let (Some(series), Some(h)) = (&series, exemplified) {
            series.write(h, buckets.len(), out);
        }
        out.push('\n');
    }
    sample(out, name, "_sum", m, None, h.get_sample_sum());
    out.push('\n');
    sample(out, name, "_count", m, None, h.get_sample_count() as f64);
    out.push('\n');
}

/// Writes one sample line, without its line end (an exemplar may follow).
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    m: &Metric,
    extra: Option<(&str, &str)>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    labels(out, m.get_label(), extra);
    out.push(' ');
    number(out, value);
    if m.timestamp_ms() != 0 {
        // OpenMetrics timestamps are seconds.
        let _ = write!(out, " {}", m.timestamp_ms() as f64 / 1000.0);
    }
}

fn labels(out: &mut String, pairs: &[LabelPair], extra: Option<(&str, &str)>) {
    if pairs.is_empty() && extra.is_none() {
        return;
    }
    let mut separator = '{';
    for (name, value) in pairs.iter().map(|l| (l.name(), l.value())).chain(extra) {
        out.push(separator);
        out.push_str(name);
        out.push_str("=\"");
        escape(value, out);
        out.push('"');
        separator = ',';
    }
    out.push('}');
}

/// A number as OpenMetrics spells it.
fn number(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Escapes a label value or help text: `\`, `"` and line feeds.
fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::metrics::exemplars::ExemplarId;
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

    #[test]
    fn families_are_written_as_openmetrics() {
        let registry = Registry::new();
        let c = IntCounterVec::new(
            Opts::new("x_requests_total", "Requests \"seen\"\\ok"),
            &["route"],
        )
        .unwrap();
        let h = HistogramVec::new(
            HistogramOpts::new("x_ttft_seconds", "TTFT").buckets(vec![0.5, 1.0]),
            &["route"],
        )
        .unwrap();
        registry.register(Box::new(c.clone())).unwrap();
        registry.register(Box::new(h.clone())).unwrap();
        c.with_label_values(&["a\"b"]).inc_by(3);
        h.with_label_values(&["chat"]).observe(0.7);
        let exemplars = Exemplars::new([&[0.5, 1.0], &[], &[], &[]], &["route"]);
        exemplars
            .series(&["chat"])
            .set(Exemplified::Ttft, 0.7, &ExemplarId::Trace([0x0f; 16]));
        let text = encode(
            &registry.gather(),
            &[("x_ttft_seconds".to_owned(), Exemplified::Ttft)],
            &exemplars,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# TYPE x_requests counter");
        assert_eq!(lines[1], r#"# HELP x_requests Requests \"seen\"\\ok"#);
        assert_eq!(lines[2], r#"x_requests_total{route="a\"b"} 3"#);
        assert_eq!(lines[3], "# TYPE x_ttft_seconds histogram");
        assert_eq!(
            lines[5],
            r#"x_ttft_seconds_bucket{route="chat",le="0.5"} 0"#
        );
        let with_exemplar = format!(
            r#"x_ttft_seconds_bucket{{route="chat",le="1"}} 1 # {{trace_id="{}"}} 0.7 "#,
            "0f".repeat(16)
        );
        assert!(lines[6].starts_with(&with_exemplar), "{}", lines[6]);
        assert_eq!(
            lines[7],
            r#"x_ttft_seconds_bucket{route="chat",le="+Inf"} 1"#
        );
        assert_eq!(lines[8], r#"x_ttft_seconds_sum{route="chat"} 0.7"#);
        assert_eq!(lines[9], r#"x_ttft_seconds_count{route="chat"} 1"#);
        assert_eq!(lines.last(), Some(&"# EOF"));
    }
}
