//! The exemplars of the latency histograms: for each series of TTFT, TPOT,
//! ITL and E2EL and each of its buckets, the last request observed there
//! that can be found again (by its W3C trace id, or its `x-request-id`),
//! with the value it was observed at and when. The OpenMetrics exposition
//! (`openmetrics.rs`) writes them after their bucket's sample, so a
//! Grafana user goes from a slow bucket to the trace or log line of a
//! request in it.
//!
//! A request touches its series' exemplars once for each histogram, at
//! most four times in all (its ITL exemplar is its largest gap, set when
//! it finishes), never per token: one lookup of its series when its
//! histogram handles are resolved, then one uncontended lock per
//! exemplar written.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

/// What finds a request again: its trace, or the id its client gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExemplarId {
    /// A W3C trace id.
    Trace([u8; 16]),
    /// An `x-request-id` (1 to [`MAX_REQUEST_ID`] visible ASCII bytes).
    Request(Arc<str>),
}

/// The longest request id an exemplar carries: OpenMetrics bounds an
/// exemplar's label set to 128 characters.
pub const MAX_REQUEST_ID: usize = 96;

impl ExemplarId {
    /// The id of a request that gave `value` as its `x-request-id`, when
    /// it fits an exemplar (1 to 96 visible ASCII bytes).
    pub fn request(value: &[u8]) -> Option<Self> {
        let fits = (1..=MAX_REQUEST_ID).contains(&value.len())
            && value.iter().all(|b| b.is_ascii_graphic());
        fits.then(|| Self::Request(String::from_utf8_lossy(value).into()))
    }

    /// The exemplar's one label: `trace_id` and the trace id in hex, or
    /// `request_id` and the request id.
    pub(super) fn label(&self) -> (&'static str, String) {
        match self {
            Self::Trace(id) => {
                let mut hex = String::with_capacity(32);
                for b in id {
                    let _ = write!(hex, "{b:02x}");
                }
                ("trace_id", hex)
            }
            Self::Request(id) => ("request_id", id.to_string()),
        }
    }

    /// Writes the exemplar's label set, `{trace_id="…"}` or
    /// `{request_id="…"}`.
    fn write_labels(&self, out: &mut String) {
        let (name, value) = self.label();
        out.push('{');
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push_str("\"}");
    }
}

/// One exemplar: the request, the value it was observed at, and when
/// (Unix seconds).
#[derive(Clone, Debug)]
pub(super) struct Exemplar {
    pub(super) id: ExemplarId,
    pub(super) value: f64,
    pub(super) unix: f64,
}

/// The histograms that carry exemplars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exemplified {
    Ttft = 0,
    Tpot = 1,
    Itl = 2,
    E2el = 3,
}

const FAMILIES: usize = 4;

/// The bucket bounds of each exemplified histogram, and the exemplars of
/// each of their series.
pub struct Exemplars {
    bounds: [Arc<[f64]>; FAMILIES],
    /// The positions of the histograms' label names, sorted by name: a
    /// series' key is its values in that order.
    order: Vec<usize>,
    series: RwLock<HashMap<String, Arc<SeriesExemplars>>>,
}

/// The exemplar slots of one label set: one per bucket (and `+Inf`) of
/// each exemplified histogram.
pub struct SeriesExemplars {
    bounds: [Arc<[f64]>; FAMILIES],
    slots: [Box<[Mutex<Option<Exemplar>>]>; FAMILIES],
}

impl Exemplars {
    /// `bounds` are the buckets of TTFT, TPOT, ITL and E2EL, in that order
    /// (sorted, as the histograms have them); `labels` the names of their
    /// labels.
    pub fn new(bounds: [&[f64]; FAMILIES], labels: &[&str]) -> Self {
        let mut order: Vec<usize> = (0..labels.len()).collect();
        order.sort_by_key(|&i| labels[i]);
        Self {
            bounds: bounds.map(Arc::from),
            order,
            series: RwLock::new(HashMap::new()),
        }
    }

    /// The slots of the series whose label values are `values` (in the
    /// order of the names given to [`Exemplars::new`]), made the first
    /// time it is asked for.
    pub fn series(&self, values: &[&str]) -> Arc<SeriesExemplars> {
        let key = key(self.order.iter().filter_map(|&i| values.get(i).copied()));
        if let Some(s) = read(&self.series).get(&key) {
            return s.clone();
        }
        let mut series = self.series.write().unwrap_or_else(|e| e.into_inner());
        series
            .entry(key)
            .or_insert_with(|| {
                Arc::new(SeriesExemplars {
                    bounds: self.bounds.clone(),
                    slots: self
                        .bounds
                        .clone()
                        .map(|b| (0..=b.len()).map(|_| Mutex::new(None)).collect()),
                })
            })
            .clone()
    }

    /// The slots of a series as the exposition names it (its label
    /// pairs as gathered, in any order), if any request wrote one.
    pub(super) fn find<'a>(
        &self,
        labels: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Option<Arc<SeriesExemplars>> {
        let mut pairs: Vec<(&str, &str)> = labels.collect();
        pairs.sort_unstable_by_key(|&(name, _)| name);
        let key = key(pairs.into_iter().map(|(_, value)| value));
        read(&self.series).get(&key).cloned()
    }
}

impl SeriesExemplars {
    /// Makes the request `id`, observed at `value` (seconds) in histogram
    /// `h`, its bucket's exemplar.
    pub fn set(&self, h: Exemplified, value: f64, id: &ExemplarId) {
        if !value.is_finite() {
            return;
        }
        let bounds = &self.bounds[h as usize];
        let bucket = bounds.partition_point(|&b| b < value);
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let exemplar = Exemplar {
            id: id.clone(),
            value,
            unix,
        };
        if let Some(slot) = self.slots[h as usize].get(bucket) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(exemplar);
        }
    }

    /// The exemplar of histogram `h`'s bucket `bucket` (the index in its
    /// bounds; their count is `+Inf`), if a request set one.
    pub(super) fn get(&self, h: Exemplified, bucket: usize) -> Option<Exemplar> {
        let slot = self.slots[h as usize].get(bucket)?;
        slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Writes the exemplar of histogram `h`'s bucket `bucket` as
    /// OpenMetrics puts it after the bucket's sample:
    /// ` # {trace_id="…"} 0.43 1733270000.123`.
    pub(super) fn write(&self, h: Exemplified, bucket: usize, out: &mut String) {
        if let Some(e) = self.get(h, bucket) {
            out.push_str(" # ");
            e.id.write_labels(out);
            let _ = write!(out, " {} {:.3}", e.value, e.unix);
        }
    }
}

impl fmt::Debug for Exemplars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exemplars").finish_non_exhaustive()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

/// A series' label values, in the order of their names, as one string:
/// each ended by a byte no label value of ours holds.
fn key<'a>(values: impl Iterator<Item = &'a str> + Clone) -> String {
    let mut key = String::with_capacity(values.clone().map(|v| v.len() + 1).sum());
    for value in values {
        key.push_str(value);
        key.push('\u{0}');
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(s: &SeriesExemplars, h: Exemplified, bucket: usize) -> String {
        let mut out = String::new();
        s.write(h, bucket, &mut out);
        out
    }

    #[test]
    fn an_exemplar_lands_in_the_bucket_of_its_value() {
        let e = Exemplars::new(
            [&[0.1, 0.5, 1.0], &[0.05], &[0.01, 0.02], &[1.0]],
            &["route", "model"],
        );
        let s = e.series(&["chat", "m"]);
        let id = ExemplarId::Trace([0xab; 16]);
        s.set(Exemplified::Ttft, 0.5, &id);
        s.set(
            Exemplified::Ttft,
            7.0,
            &ExemplarId::request(b"req-1").unwrap(),
        );
        assert_eq!(written(&s, Exemplified::Ttft, 0), "");
        let at_bound = written(&s, Exemplified::Ttft, 1);
        assert!(
            at_bound.starts_with(&format!(" # {{trace_id=\"{}\"}} 0.5 ", "ab".repeat(16))),
            "{at_bound}"
        );
        assert!(written(&s, Exemplified::Ttft, 3).starts_with(" # {request_id=\"req-1\"} 7 "));
        // Out of range, or another histogram: nothing.
        assert_eq!(written(&s, Exemplified::Ttft, 4), "");
        assert_eq!(written(&s, Exemplified::Tpot, 1), "");
        // The same label set in another order is the same series.
        let again = e
            .find([("model", "m"), ("route", "chat")].into_iter())
            .unwrap();
        assert!(Arc::ptr_eq(&again, &s));
        assert!(
            e.find([("route", "m"), ("model", "chat")].into_iter())
                .is_none()
        );
    }

    #[test]
    fn the_last_request_of_a_bucket_is_its_exemplar() {
        let e = Exemplars::new([&[1.0], &[1.0], &[1.0], &[1.0]], &[]);
        let s = e.series(&[]);
        s.set(Exemplified::E2el, 0.2, &ExemplarId::Trace([1; 16]));
        s.set(Exemplified::E2el, 0.3, &ExemplarId::Trace([2; 16]));
        s.set(Exemplified::E2el, f64::NAN, &ExemplarId::Trace([3; 16]));
        assert!(written(&s, Exemplified::E2el, 0).contains(&"02".repeat(16)));
    }

    #[test]
    fn request_ids_that_do_not_fit_are_not_exemplars() {
        assert!(ExemplarId::request(b"").is_none());
        assert!(ExemplarId::request(b"has space").is_none());
        assert!(ExemplarId::request("é".as_bytes()).is_none());
        assert!(ExemplarId::request(&[b'a'; MAX_REQUEST_ID + 1]).is_none());
        let id = ExemplarId::request(br#"a"b\c"#).unwrap();
        let mut out = String::new();
        id.write_labels(&mut out);
        assert_eq!(out, r#"{request_id="a\"b\\c"}"#);
    }
}
