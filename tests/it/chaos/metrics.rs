//! What the admin listener says: scrapes and their series.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{RawResponse, Sample, parse_metrics, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// `GET path` on the admin listener, within 5 s; `None` on any failure.
pub(super) async fn admin_get(admin: SocketAddr, path: &str) -> Option<RawResponse> {
    let get = async {
        let mut s = TcpStream::connect(admin).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        buf.windows(4)
            .any(|w| w == b"\r\n\r\n")
            .then(|| parse_response(&buf))
    };
    timeout(Duration::from_secs(5), get).await.ok().flatten()
}

pub(super) async fn scrape(admin: SocketAddr) -> Option<Vec<Sample>> {
    let resp = admin_get(admin, "/metrics").await?;
    if resp.status != 200 || resp.truncated {
        return None;
    }
    Some(parse_metrics(&String::from_utf8(resp.body()).ok()?))
}

pub(super) fn total(samples: &[Sample], name: &str) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .sum()
}

pub(super) fn by_label(samples: &[Sample], name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == name) {
        let key = s.labels.get(label).cloned().unwrap_or_default();
        *out.entry(key).or_insert(0.0) += s.value;
    }
    out
}

/// The cumulative series of a scrape (counters, histogram buckets, sums and
/// counts), keyed by name and labels.
pub(super) fn cumulative(samples: &[Sample]) -> HashMap<String, f64> {
    samples
        .iter()
        .filter(|s| {
            ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .any(|suffix| s.name.ends_with(suffix))
        })
        .map(|s| (format!("{}{:?}", s.name, s.labels), s.value))
        .collect()
}

/// Every series of `before` that went down or disappeared in `after`.
pub(super) fn decreases(
    before: &HashMap<String, f64>,
    after: &HashMap<String, f64>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (series, &was) in before {
        match after.get(series) {
            None => out.push(format!("{series} disappeared (was {was})")),
            Some(&now) if now < was => out.push(format!("{series} went from {was} to {now}")),
            Some(_) => {}
        }
    }
    out
}

// The checks' own helpers, so that the scenario's assertions can fail.

#[test]
fn a_cumulative_series_that_goes_down_or_vanishes_is_reported() {
    let scrape = |text: &str| cumulative(&parse_metrics(text));
    let before = scrape("a_total{x=\"1\"} 5\nb_bucket{le=\"1\"} 3\nc_sum 2\ng 7\n");
    assert!(
        decreases(
            &before,
            &scrape("a_total{x=\"1\"} 6\nb_bucket{le=\"1\"} 3\nc_sum 2\ng 1\n")
        )
        .is_empty()
    );
    assert_eq!(
        decreases(
            &before,
            &scrape("a_total{x=\"1\"} 4\nb_bucket{le=\"1\"} 3\nc_sum 2\n")
        )
        .len(),
        1
    );
    assert_eq!(
        decreases(&before, &scrape("a_total{x=\"1\"} 5\nc_sum 2\n")).len(),
        1
    );
}
