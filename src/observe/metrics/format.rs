//! Which exposition a scrape gets, decided in one place from its `Accept`
//! header: the Prometheus protobuf format (`protobuf.rs`, the only one with
//! native histograms), OpenMetrics (`openmetrics.rs`, with exemplars) or
//! the Prometheus text format 0.0.4. Prometheus names all three with
//! weights, protobuf first when native histograms are on
//! (`application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,…,text/plain;version=0.0.4;q=0.2,*/*;q=0.1`),
//! OpenMetrics first otherwise.

use super::{openmetrics, protobuf};

/// An exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text, with the latency histograms' exemplars.
    OpenMetrics,
    /// The Prometheus protobuf format, delimited `MetricFamily` messages,
    /// with native histograms.
    Protobuf,
}

impl Format {
    /// The format `accept` prefers: the one it weighs highest among those
    /// served, protobuf before OpenMetrics on a tie, OpenMetrics only when
    /// no other type weighs more (`*/*` included), and the text format
    /// otherwise (and with no header). Protobuf counts only as Prometheus
    /// asks for it: `proto=io.prometheus.client.MetricFamily` and
    /// `encoding=delimited`.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let (mut protobuf, mut openmetrics, mut other) = (0.0_f64, 0.0_f64, 0.0_f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let (mut q, mut proto, mut delimited) = (1.0, false, false);
            for p in parts {
                let Some((name, value)) = p.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match name.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse::<f64>().unwrap_or(q),
                    "proto" => proto = value == "io.prometheus.client.MetricFamily",
                    "encoding" => delimited = value == "delimited",
                    _ => {}
                }
            }
            match media.as_str() {
                "application/vnd.google.protobuf" if proto && delimited => {
                    protobuf = protobuf.max(q);
                }
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "" => {}
                _ => other = other.max(q),
            }
        }
        if protobuf > 0.0 && protobuf >= openmetrics && protobuf >= other {
            Format::Protobuf
        } else if openmetrics > 0.0 && openmetrics >= other {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The `Content-Type` of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => openmetrics::CONTENT_TYPE,
            Format::Protobuf => protobuf::CONTENT_TYPE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_pick_the_format() {
        let from = |accept| Format::from_accept(Some(accept));
        // Prometheus 2: OpenMetrics first; with native histograms, protobuf
        // first (and Prometheus 3's defaults, with text 1.0.0 and escaping).
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(from(prometheus), Format::OpenMetrics);
        let native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=underscores;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
        assert_eq!(from(native), Format::Protobuf);
        let three = "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=underscores;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
        assert_eq!(from(three), Format::OpenMetrics);
        assert_eq!(from("application/openmetrics-text"), Format::OpenMetrics);
        assert_eq!(Format::from_accept(None), Format::Text);
        assert_eq!(from("*/*"), Format::Text);
        assert_eq!(from("text/plain;version=0.0.4"), Format::Text);
        assert_eq!(
            from("text/plain;q=1,application/openmetrics-text;q=0.5"),
            Format::Text
        );
        assert_eq!(from("application/openmetrics-text;q=0"), Format::Text);
        assert_eq!(from(",;;q=,"), Format::Text);
        // Protobuf only as Prometheus names it, and not below another type.
        assert_eq!(from("application/vnd.google.protobuf"), Format::Text);
        assert_eq!(
            from(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"
            ),
            Format::Text
        );
        assert_eq!(
            from(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.4,application/openmetrics-text;q=0.5"
            ),
            Format::OpenMetrics
        );
        assert_eq!(
            from(
                "application/vnd.google.protobuf;encoding=delimited;proto=io.prometheus.client.MetricFamily"
            ),
            Format::Protobuf
        );
        assert_eq!(
            from(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0"
            ),
            Format::Text
        );
    }
}
