//! Capacity: the latency–load curve of each (route, model, class) and its
//! knee, the largest load at arrival at which every target of the class
//! still holds (docs/metrics.md, "The latency–load curve and its knee").
//!
//! `knee.rs` holds the rule, as pure functions of counts per load bucket:
//! the buckets, what makes a bucket hold, the knee, the headroom.
//! `curve.rs` keeps those counts (and a latency sketch per bucket, for
//! display) over the live windows of `/slo`. The recording rules that give
//! the knee of several replicas from their counters are in `rules/fleet.rs`.
//!
//! This module does no I/O, reads no clock and knows no Prometheus: the
//! caller passes `now`, the load each request met, and the load now.

pub mod curve;
pub mod knee;

pub use curve::{Capacity, Curve, CurveReport, LoadSample};
pub use knee::{Bound, BucketCounts, Headroom, Knee};
