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
