//! Spans the tests measured themselves, on tokio's clock: a client's
//! requests, or a read of a page bracketed by the instants around it.

use std::time::Duration;

use tokio::time::Instant;

/// The time at least one of `spans` (start, end) was open: their union's
/// length.
pub fn union(spans: &[(Instant, Instant)]) -> Duration {
    let mut sorted: Vec<_> = spans.to_vec();
    sorted.sort();
    let mut total = Duration::ZERO;
    let mut open: Option<(Instant, Instant)> = None;
    for (start, end) in sorted {
        open = match open {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + open.map_or(Duration::ZERO, |(s, e)| e - s)
}

/// A page read between two instants: whatever it counted was counted at
/// some moment in `[sent, received]`.
pub struct Bracketed<T> {
    pub sent: Instant,
    pub received: Instant,
    pub read: T,
}

impl<T> Bracketed<T> {
    /// Reads `f`'s answer between the instants around it.
    pub async fn read<F: Future<Output = T>>(f: F) -> Self {
        let sent = Instant::now();
        let read = f.await;
        Self {
            sent,
            received: Instant::now(),
            read,
        }
    }

    /// The shortest and the longest time between this read's moment and
    /// `later`'s.
    pub fn span_to<U>(&self, later: &Bracketed<U>) -> (f64, f64) {
        (
            later
                .sent
                .saturating_duration_since(self.received)
                .as_secs_f64(),
            (later.received - self.sent).as_secs_f64(),
        )
    }
}

/// The access lines a `tokenmeter serve` child wrote to `lines`, each
/// line's fields as JSON, until `n` of them have come.
pub fn access_lines(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    n: usize,
) -> Vec<serde_json::Value> {
    let mut access = Vec::new();
    while access.len() < n {
        let line = lines.next().expect("serve exited").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["target"] == "tokenmeter::access" {
            access.push(v["fields"].clone());
        }
    }
    access
}

/// How much longer a client's span of `client` was than the proxy's own
/// of the same request (its access line's `elapsed_ms`, found by its
/// `request_id` `id` in `lines`), in seconds: the time on the wire and in
/// the client's and the proxy's scheduling. A request's share of a batch
/// reckoned from the clients' spans differs from the proxy's by at most
/// the GPUs times the sum of these over the requests.
pub fn widening(lines: &[serde_json::Value], id: &str, client: Duration) -> f64 {
    let line = lines
        .iter()
        .find(|l| l["request_id"] == id)
        .unwrap_or_else(|| panic!("no access line of {id}"));
    let own = line["elapsed_ms"].as_f64().unwrap() / 1e3;
    let client = client.as_secs_f64();
    assert!(
        client >= own - 1e-4,
        "{id}: client {client} s, proxy {own} s"
    );
    (client - own).max(0.0)
}
