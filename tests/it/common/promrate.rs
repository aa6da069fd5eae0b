//! Prometheus' own samples of a range, read from its query API, and the
//! rate it computes from them (`extrapolatedRate` in its `promql`
//! package), so that a test can say what a rule must have recorded from
//! the samples Prometheus actually took, at the times it took them.

use serde_json::Value;

/// One series' samples in a range: its labels and (milliseconds since the
/// Unix epoch, value) pairs, oldest first.
#[derive(Debug, Clone)]
pub struct Samples {
    pub labels: serde_json::Map<String, Value>,
    pub points: Vec<(i64, f64)>,
}

impl Samples {
    /// The label `name`'s value ("" when absent).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

/// Seconds since the epoch as Prometheus' milliseconds.
pub fn millis(unix_seconds: f64) -> i64 {
    (unix_seconds * 1000.0).round() as i64
}

/// The series of a range-vector answer (`metric[W]` queried at a time).
pub fn matrix(answer: &Value) -> Vec<Samples> {
    assert_eq!(answer["status"], "success", "{answer}");
    assert_eq!(answer["data"]["resultType"], "matrix", "{answer}");
    answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Samples {
            labels: r["metric"].as_object().unwrap().clone(),
            points: r["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        millis(p[0].as_f64().unwrap()),
                        p[1].as_str().unwrap().parse().unwrap(),
                    )
                })
                .collect(),
        })
        .collect()
}

/// `rate()` of a counter over `points` for an evaluation at `at_ms` over
/// a range of `range_ms`, as Prometheus computes it: the growth between
/// the first and last samples (resets added back), extrapolated to the
/// range's ends where the samples come within 1.1 average intervals of
/// them (else by half an interval), never to before the counter's zero;
/// None with fewer than two samples.
pub fn rate(points: &[(i64, f64)], at_ms: i64, range_ms: i64) -> Option<f64> {
    let (&(t0, v0), &(t1, v1)) = (points.first()?, points.last()?);
    if points.len() < 2 {
        return None;
    }
    let mut growth = v1 - v0;
    let mut last = 0.0;
    for &(_, v) in points {
        if v < last {
            growth += last;
        }
        last = v;
    }
    let mut to_start = (t0 - (at_ms - range_ms)) as f64 / 1000.0;
    let to_end = (at_ms - t1) as f64 / 1000.0;
    let sampled = (t1 - t0) as f64 / 1000.0;
    let average = sampled / (points.len() - 1) as f64;
    if growth > 0.0 && v0 >= 0.0 {
        to_start = to_start.min(sampled * (v0 / growth));
    }
    let threshold = average * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        average / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        average / 2.0
    };
    Some(growth * (interval / sampled) / (range_ms as f64 / 1000.0))
}
