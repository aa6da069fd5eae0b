//! Native histograms: the state of one series, observed beside its classic
//! buckets, as Prometheus defines it (the `schema`, `zero_threshold` and
//! spans of `io.prometheus.client.Histogram`), and the snapshot the
//! protobuf exposition (`protobuf.rs`) writes of it.
//!
//! At schema `n` the buckets grow by a factor of `2^(2^-n)`: bucket `i`
//! holds the values in `(2^((i-1)·2^-n), 2^(i·2^-n)]`, so every power of
//! two is a bucket's upper bound, inclusive, and `2^n` buckets share each
//! octave. A value at or below the zero threshold counts in the zero
//! bucket instead. The values observed here are durations and counts,
//! never negative: a series has positive buckets only, and a negative,
//! NaN or infinite value, which no caller makes, is not observed.
//!
//! A series keeps its buckets as one window of counters, from its lowest
//! populated bucket to its highest, so that an observation is an index
//! into an array under an uncontended lock, and allocates only when a
//! value falls outside the window. The bucket limit bounds that window:
//! when a value would widen it past the limit, the schema is lowered by
//! one, each pair of buckets merged into one of twice the width (client_golang's
//! reduction), until it fits or the schema is the lowest, `-4`, where 73
//! buckets cover every value above the zero threshold. The window counts
//! the empty buckets between its ends too, a stricter bound than
//! client_golang's count of populated buckets, which bounds a series'
//! memory: at most `max(limit, 73)` counters of 8 bytes. A series whose
//! schema was lowered keeps the lower one for the life of the process.

use std::sync::{LazyLock, Mutex};

use prometheus::proto::LabelPair;

/// The zero bucket's threshold: client_golang's default, `2^-128`. Every
/// value above it is a normal float, whose bucket is read from its bits.
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

/// The lowest schema Prometheus defines (16 octaves a bucket).
pub const MIN_SCHEMA: i8 = -4;
/// The highest schema Prometheus defines (256 buckets an octave).
pub const MAX_SCHEMA: i8 = 8;

/// How a series' native buckets start: its schema and the bucket limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub schema: i8,
    pub max_buckets: usize,
}

/// The native buckets of one series.
#[derive(Debug)]
pub struct Native {
    max_buckets: usize,
    state: Mutex<State>,
}

/// The buckets a [`Held`] window has room for from its first value.
const HELD_BUCKETS: usize = 32;

/// Native buckets that one request fills alone, without a lock, and hands
/// to its series at once ([`Native::publish`]): the same window, schema
/// and bound as a series', its own.
#[derive(Debug)]
pub struct Held {
    max_buckets: usize,
    state: State,
}

impl Held {
    /// Nothing held, in buckets of the series' starting `shape`.
    pub fn new(shape: Shape) -> Self {
        Held {
            max_buckets: shape.max_buckets.max(1),
            state: State::new(shape),
        }
    }

    /// Counts `v` in its bucket (or the zero bucket).
    pub fn observe(&mut self, v: f64) {
        // Room for the buckets a stream's gaps fall in, at once: a window
        // grown one bucket at a time would reallocate as it widens.
        if self.state.counts.capacity() == 0 {
            self.state
                .counts
                .reserve(HELD_BUCKETS.min(self.max_buckets));
        }
        self.state.observe(v, self.max_buckets);
    }
}

#[derive(Debug)]
struct State {
    schema: i8,
    count: u64,
    sum: f64,
    zero_count: u64,
    /// The bucket index of `counts[0]`.
    offset: i32,
    /// The window of buckets: its first and last are populated.
    counts: Vec<u64>,
}

/// What the exposition writes of a series: its count and sum (those of
/// its native buckets, which always agree with them), and the populated
/// buckets as spans and deltas.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub schema: i8,
    pub count: u64,
    pub sum: f64,
    pub zero_count: u64,
    pub spans: Vec<Span>,
    /// Each populated bucket's count minus the previous one's (the first
    /// minus 0), in the order of the spans.
    pub deltas: Vec<i64>,
}

/// Where the protobuf exposition finds the native buckets of a gathered
/// histogram's series.
pub trait Source {
    /// The handle of the family named `name` for [`Source::snapshot`],
    /// when its series keep native buckets.
    fn family(&self, name: &str) -> Option<usize>;
    /// The native buckets of `family`'s series labelled `labels` (as
    /// gathered, in any order), if it has them.
    fn snapshot(&self, family: usize, labels: &[LabelPair]) -> Option<Snapshot>;
}

/// A run of consecutive buckets: its gap after the previous run (the first
/// run's is its first bucket's index) and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub offset: i32,
    pub length: u32,
}

impl Native {
    pub fn new(shape: Shape) -> Self {
        Native {
            max_buckets: shape.max_buckets.max(1),
            state: Mutex::new(State::new(shape)),
        }
    }

    /// Counts `v` in its bucket (or the zero bucket).
    pub fn observe(&self, v: f64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.observe(v, self.max_buckets);
    }

    /// Adds what `held` holds, which is left empty: the count, sum and zero
    /// bucket, and each bucket at the lower of the two schemas.
    pub fn publish(&self, held: &mut Held) {
        let p = &mut held.state;
        if p.count == 0 {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while p.schema > s.schema {
            p.halve();
        }
        while s.schema > p.schema {
            s.halve();
        }
        s.count += p.count;
        s.sum += p.sum;
        s.zero_count += p.zero_count;
        for (k, &n) in p.counts.iter().enumerate() {
            if n > 0 {
                // The series' schema may drop as its window widens: the
                // bucket is found again at the schema it stands at.
                let i = (s.schema..p.schema).fold(p.offset + k as i32, |i, _| halved(i));
                s.add(i, n, self.max_buckets);
            }
        }
        p.count = 0;
        p.sum = 0.0;
        p.zero_count = 0;
        p.counts.clear();
    }

    /// The series as it stands.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (spans, deltas) = spans(s.offset, &s.counts);
        Snapshot {
            schema: s.schema,
            count: s.count,
            sum: s.sum,
            zero_count: s.zero_count,
            spans,
            deltas,
        }
    }
}

impl State {
    fn new(shape: Shape) -> Self {
        State {
            schema: shape.schema.clamp(MIN_SCHEMA, MAX_SCHEMA),
            count: 0,
            sum: 0.0,
            zero_count: 0,
            offset: 0,
            counts: Vec::new(),
        }
    }

    /// Counts `v` in its bucket (or the zero bucket), with a window of at
    /// most `max` buckets.
    fn observe(&mut self, v: f64, max: usize) {
        if !(v >= 0.0 && v.is_finite()) {
            return;
        }
        self.count += 1;
        self.sum += v;
        if v <= ZERO_THRESHOLD {
            self.zero_count += 1;
            return;
        }
        let i = bucket_index(v, self.schema);
        self.add(i, 1, max);
    }

    /// Counts `n` values in bucket `i` (at this schema).
    fn add(&mut self, i: i32, n: u64, max: usize) {
        let slot = usize::try_from(i64::from(i) - i64::from(self.offset)).ok();
        match slot.and_then(|k| self.counts.get_mut(k)) {
            Some(c) => *c += n,
            None => self.widen(i, n, max),
        }
    }

    /// Counts `n` values in bucket `i`, outside the window: the window
    /// grows to hold it, at a lower schema if it would pass `max` buckets.
    fn widen(&mut self, mut i: i32, n: u64, max: usize) {
        if self.counts.is_empty() {
            self.offset = i;
            self.counts.push(n);
            return;
        }
        loop {
            let last = self.offset + self.counts.len() as i32 - 1;
            let (lo, hi) = (self.offset.min(i), last.max(i));
            let width = (hi - lo) as usize + 1;
            if width <= max || self.schema == MIN_SCHEMA {
                // Widened in place when there is room (a request's held
                // window has some from the start).
                let len = self.counts.len();
                self.counts.reserve_exact(width - len);
                self.counts.resize(width, 0);
                if lo < self.offset {
                    let shift = (self.offset - lo) as usize;
                    self.counts.copy_within(0..len, shift);
                    self.counts[..shift].fill(0);
                    self.offset = lo;
                }
                self.counts[(i - lo) as usize] += n;
                return;
            }
            self.halve();
            i = halved(i);
        }
    }

    /// Lowers the schema by one: bucket `i` becomes bucket `ceil(i/2)`, so
    /// each pair of buckets is merged into one.
    fn halve(&mut self) {
        let offset = halved(self.offset);
        let mut last = 0;
        for k in 0..self.counts.len() {
            let c = std::mem::take(&mut self.counts[k]);
            // Never past `k`: the merged window is no wider than the old.
            let j = (halved(self.offset + k as i32) - offset) as usize;
            self.counts[j] += c;
            last = j;
        }
        self.counts.truncate(last + 1);
        self.offset = offset;
        self.schema -= 1;
    }
}

/// The index at the next lower schema of bucket `i`: `ceil(i/2)`.
fn halved(i: i32) -> i32 {
    (i + 1) >> 1
}

/// The bucket of `v` (a positive normal number) at `schema`: the `i` with
/// `2^((i-1)·2^-schema) < v <= 2^(i·2^-schema)`, exact at every bound
/// (client_golang's and Prometheus's way: the bucket is read from the
/// float's exponent and, above schema 0, its fraction's place among the
/// bounds of one octave).
pub fn bucket_index(v: f64, schema: i8) -> i32 {
    let bits = v.to_bits();
    // v = frac · 2^exp with frac in [0.5, 1).
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let frac = f64::from_bits((bits & ((1 << 52) - 1)) | (1022 << 52));
    if schema >= 0 {
        let bounds = &OCTAVE_BOUNDS[schema as usize];
        let within = bounds.partition_point(|&b| b < frac) as i32;
        within + (exp - 1) * bounds.len() as i32
    } else {
        // An exact power of two is the top of its bucket.
        let exp = if frac == 0.5 { exp - 1 } else { exp };
        let shift = -i32::from(schema);
        (exp + (1 << shift) - 1) >> shift
    }
}

/// For each schema `n` from 0 to 8, the `2^n` bucket bounds of the octave
/// `[0.5, 1)`: `2^(j·2^-n - 1)`.
static OCTAVE_BOUNDS: LazyLock<Vec<Vec<f64>>> = LazyLock::new(|| {
    (0..=MAX_SCHEMA)
        .map(|n| {
            let per_octave = 1_usize << n;
            (0..per_octave)
                .map(|j| (j as f64 / per_octave as f64 - 1.0).exp2())
                .collect()
        })
        .collect()
});

/// The populated buckets of the window starting at bucket `offset` as
/// spans and deltas. Up to two empty buckets between populated ones stay
/// in their span as zero deltas, which is shorter than a new span (as
/// client_golang writes them).
fn spans(offset: i32, counts: &[u64]) -> (Vec<Span>, Vec<i64>) {
    let (mut spans, mut deltas) = (Vec::<Span>::new(), Vec::new());
    let (mut previous, mut end, mut gap) = (0_u64, offset, 0_i32);
    for (k, &c) in counts.iter().enumerate() {
        let i = offset + k as i32;
        if c == 0 {
            gap += 1;
            continue;
        }
        match spans.last_mut() {
            Some(span) if gap <= 2 => {
                for _ in 0..gap {
                    deltas.push(-(previous as i64));
                    previous = 0;
                }
                span.length += gap as u32 + 1;
            }
            Some(_) => spans.push(Span {
                offset: i - end,
                length: 1,
            }),
            None => spans.push(Span {
                offset: i,
                length: 1,
            }),
        }
        deltas.push(c as i64 - previous as i64);
        previous = c;
        end = i + 1;
        gap = 0;
    }
    (spans, deltas)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket's bounds at `schema`, computed the slow way.
    fn upper(i: i32, schema: i8) -> f64 {
        (f64::from(i) * (-f64::from(schema)).exp2()).exp2()
    }

    fn next_up(v: f64) -> f64 {
        f64::from_bits(v.to_bits() + 1)
    }

    fn next_down(v: f64) -> f64 {
        f64::from_bits(v.to_bits() - 1)
    }

    #[test]
    fn a_power_of_two_tops_its_bucket_at_every_schema() {
        for schema in MIN_SCHEMA..=MAX_SCHEMA {
            for e in [-20, -3, -1, 0, 1, 5, 17] {
                let v = f64::from(e).exp2();
                let i = bucket_index(v, schema);
                // At schema n >= 0, 2^e is bucket e·2^n; below, it is a
                // bucket's bound only when 2^-n divides e.
                if schema >= 0 {
                    assert_eq!(i, e << schema, "2^{e} at schema {schema}");
                }
                assert!(v <= upper(i, schema) && v > upper(i - 1, schema));
                assert_eq!(bucket_index(next_up(v), schema), {
                    let top = v == upper(i, schema);
                    if top { i + 1 } else { i }
                });
                assert_eq!(bucket_index(next_down(v), schema), {
                    let bottom = next_down(v) <= upper(i - 1, schema);
                    if bottom { i - 1 } else { i }
                });
            }
        }
    }

    #[test]
    fn values_between_bounds_find_their_bucket() {
        // Schema 3: eight buckets an octave, bounds 2^(i/8).
        assert_eq!(bucket_index(1.0, 3), 0);
        assert_eq!(bucket_index(1.05, 3), 1); // (1, 1.0905]
        assert_eq!(bucket_index(1.09, 3), 1);
        assert_eq!(bucket_index(1.1, 3), 2);
        assert_eq!(bucket_index(0.25, 3), -16);
        assert_eq!(bucket_index(0.3, 3), -13); // (0.2973, 0.3242]
        // Schema 0: octaves. Schema -1: two octaves a bucket.
        assert_eq!(bucket_index(3.0, 0), 2);
        assert_eq!(bucket_index(4.0, -1), 1);
        assert_eq!(bucket_index(4.5, -1), 2);
        assert_eq!(bucket_index(0.5, -1), 0); // (1/4, 1]
        assert_eq!(bucket_index(0.2, -1), -1); // (1/16, 1/4]
        // Schema -4: 2^16 a bucket.
        assert_eq!(bucket_index(65536.0, -4), 1);
        assert_eq!(bucket_index(65537.0, -4), 2);
        // Every value of an octave at every schema: in the bucket the slow
        // way says, away from the bounds (where rounding decides).
        for schema in MIN_SCHEMA..=MAX_SCHEMA {
            for k in 1..1000 {
                let v = 0.001 * f64::from(k) * 7.3;
                let i = bucket_index(v, schema);
                assert!(v > upper(i - 1, schema) * (1.0 - 1e-12), "{v} at {schema}");
                assert!(v <= upper(i, schema) * (1.0 + 1e-12), "{v} at {schema}");
            }
        }
    }

    fn native(schema: i8, max_buckets: usize) -> Native {
        Native::new(Shape {
            schema,
            max_buckets,
        })
    }

    #[test]
    fn zero_and_tiny_values_count_in_the_zero_bucket() {
        let n = native(3, 160);
        n.observe(0.0);
        n.observe(ZERO_THRESHOLD);
        n.observe(next_up(ZERO_THRESHOLD));
        n.observe(f64::NAN);
        n.observe(-1.0);
        n.observe(f64::INFINITY);
        let s = n.snapshot();
        assert_eq!((s.count, s.zero_count), (3, 2));
        // 2^-128 is the top of bucket -128·8; just above it, the next.
        assert_eq!(
            s.spans,
            [Span {
                offset: -128 * 8 + 1,
                length: 1
            }]
        );
        assert_eq!(s.deltas, [1]);
    }

    #[test]
    fn spans_and_deltas_write_the_populated_buckets() {
        let n = native(0, 160);
        // Buckets 0 (1), 1 (2), 3 (5, 6, 7), 4 (9) and 10 (1000).
        for v in [1.0, 2.0, 2.0, 5.0, 6.0, 7.0, 9.0, 1000.0] {
            n.observe(v);
        }
        let s = n.snapshot();
        assert_eq!(s.schema, 0);
        assert_eq!((s.count, s.sum), (8, 1032.0));
        // One empty bucket (2) stays in the span; five (5..=9) start a new one.
        assert_eq!(
            s.spans,
            [
                Span {
                    offset: 0,
                    length: 5
                },
                Span {
                    offset: 5,
                    length: 1
                }
            ]
        );
        assert_eq!(s.deltas, [1, 1, -2, 3, -2, 0]);
        // Three empty buckets start a new span.
        let n = native(0, 160);
        for v in [1.0, 16.0] {
            n.observe(v);
        }
        let s = n.snapshot();
        let runs: Vec<(i32, u32)> = s.spans.iter().map(|s| (s.offset, s.length)).collect();
        assert_eq!(runs, [(0, 1), (3, 1)]);
        assert_eq!(s.deltas, [1, 0]);
        assert_eq!(native(3, 160).snapshot().spans, []);
    }

    #[test]
    fn a_window_past_the_limit_halves_the_schema() {
        // At schema 2, buckets 0..=8 span 1 to 4: nine buckets, past four.
        let n = native(2, 4);
        n.observe(1.0); // bucket 0
        n.observe(1.1); // bucket 1: (1, 1.189]
        n.observe(1.5); // bucket 3: (1.414, 1.682]
        assert_eq!(n.snapshot().schema, 2);
        n.observe(4.0); // bucket 8: the window would be 0..=8
        let s = n.snapshot();
        // At schema 1 the buckets are 0, 1, 2 and 4: five, still past
        // four; at schema 0, 0, 1 (1.1 and 1.5 in (1, 2]) and 2.
        assert_eq!(s.schema, 0);
        assert_eq!(s.count, 4);
        let runs: Vec<(i32, u32)> = s.spans.iter().map(|s| (s.offset, s.length)).collect();
        assert_eq!(runs, [(0, 3)]);
        // Bucket 0 holds 1; bucket 1, (1, 2], holds 1.1 and 1.5; bucket 2, 4.
        assert_eq!(s.deltas, [1, 1, -1]);
        // Each count is where the slow way puts it at the final schema.
        for v in [1.0, 1.1, 1.5, 4.0] {
            let i = bucket_index(v, s.schema);
            assert!(v > upper(i - 1, 0) && v <= upper(i, 0));
        }
        // Values within the window are counted in place; one below widens it
        // to the left.
        n.observe(0.3); // schema 0: (0.25, 0.5] is bucket -1
        let s = n.snapshot();
        assert_eq!(s.schema, 0);
        let runs: Vec<(i32, u32)> = s.spans.iter().map(|s| (s.offset, s.length)).collect();
        assert_eq!(runs, [(-1, 4)]);
        assert_eq!(s.deltas, [1, 0, 1, -1]);
    }

    #[test]
    fn halving_merges_pairs_of_buckets_into_their_parent() {
        // Merging is ceil(i/2): buckets -3 and -2 into -1, -1 and 0 into 0,
        // 1 and 2 into 1.
        for (i, parent) in [(-3, -1), (-2, -1), (-1, 0), (0, 0), (1, 1), (2, 1), (3, 2)] {
            assert_eq!(halved(i), parent, "{i}");
            // The parent at schema 2 holds the child at schema 3.
            let (lo, hi) = (upper(i - 1, 3), upper(i, 3));
            assert!(lo >= upper(parent - 1, 2) - 1e-12 && hi <= upper(parent, 2) + 1e-12);
        }
        let mut s = State {
            schema: 3,
            count: 0,
            sum: 0.0,
            zero_count: 0,
            offset: -3,
            counts: vec![1, 2, 3, 4, 5, 6],
        };
        s.halve();
        assert_eq!((s.schema, s.offset), (2, -1));
        assert_eq!(s.counts, [3, 7, 11]);
    }

    #[test]
    fn the_lowest_schema_holds_every_value_past_the_limit() {
        let n = native(MIN_SCHEMA, 1);
        for v in [1e-30, 1.0, 1e30, f64::MAX] {
            n.observe(v);
        }
        let s = n.snapshot();
        assert_eq!(s.schema, MIN_SCHEMA);
        assert_eq!(s.count, 4);
        let width: u32 = s.spans.iter().map(|s| s.length).sum();
        assert!(s.spans[0].offset >= -8 && width <= 73, "{s:?}");
    }

    /// What a series holds before its window: its limit, its lock and the
    /// state behind it (docs/metrics.md states it).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_series_holds_72_bytes_beside_its_window() {
        assert_eq!(std::mem::size_of::<Native>(), 72);
    }

    #[test]
    fn a_held_window_widens_in_place_either_way() {
        let mut held = Held::new(Shape {
            schema: 3,
            max_buckets: 160,
        });
        held.observe(0.01);
        let before = held.state.counts.as_ptr();
        for v in [0.005, 0.02, 0.004, 0.03] {
            held.observe(v);
        }
        assert_eq!(held.state.counts.as_ptr(), before);
        let one_by_one = native(3, 160);
        for v in [0.01, 0.005, 0.02, 0.004, 0.03] {
            one_by_one.observe(v);
        }
        let s = one_by_one.state.lock().unwrap();
        assert_eq!(
            (held.state.offset, &held.state.counts),
            (s.offset, &s.counts)
        );
    }

    #[test]
    fn an_observation_in_the_window_does_not_allocate() {
        let n = native(3, 160);
        n.observe(0.01);
        n.observe(10.0);
        let before = n.state.lock().unwrap().counts.as_ptr();
        for k in 0..1000 {
            n.observe(0.01 + f64::from(k) * 0.00999);
        }
        let s = n.state.lock().unwrap();
        assert_eq!(s.counts.as_ptr(), before);
        assert!(s.counts.capacity() <= 160);
    }

    /// Values published from a request's held buckets, in several batches
    /// and with the series' schema lowered in between, leave the series as
    /// observing each value on it would.
    #[test]
    fn held_buckets_publish_as_the_values_observed_one_by_one() {
        let shape = Shape {
            schema: 3,
            max_buckets: 40,
        };
        let values: Vec<f64> = (0..400)
            .map(|k| match k % 7 {
                0 => 0.0,
                1 => 1e-40,
                _ => 0.0007 * f64::from(k).powf(1.7),
            })
            .collect();
        let (one_by_one, published) = (Native::new(shape), Native::new(shape));
        let mut held = Held::new(shape);
        for (k, &v) in values.iter().enumerate() {
            one_by_one.observe(v);
            held.observe(v);
            if k % 53 == 0 {
                published.publish(&mut held);
                assert_eq!(held.state.count, 0);
            }
        }
        published.publish(&mut held);
        let (a, b) = (one_by_one.snapshot(), published.snapshot());
        assert!(a.schema < 3, "the window was narrowed: {a:?}");
        assert_eq!(
            (a.schema, a.count, a.zero_count),
            (b.schema, b.count, b.zero_count)
        );
        assert_eq!((a.spans, a.deltas), (b.spans, b.deltas));
        assert!((a.sum - b.sum).abs() < 1e-9 * a.sum);
        // Held buckets narrowed further than the series' are brought to one
        // schema too.
        let wide = Native::new(Shape {
            schema: 3,
            max_buckets: 1000,
        });
        let mut narrow = Held::new(shape);
        for &v in &values {
            narrow.observe(v);
        }
        wide.publish(&mut narrow);
        assert_eq!(wide.snapshot().count, 400);
        assert!(wide.snapshot().schema < 3);
    }
}
