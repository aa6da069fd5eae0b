//! The report: per leg, the figures of the issue, each also as a delta and a
//! ratio to the `direct` leg; the checks of the targets; JSON for tools and
//! a plain-text table for people.
//!
//! Deltas are differences of percentiles (leg p99 minus direct p99), not
//! percentiles of per-chunk differences: the same chunk is not sent through
//! two legs. A target is "rig-limited" when the direct leg alone already
//! misses it, or when the core shared by the simulator and the load
//! generator was nearly saturated: then the rig, not the proxy, set the
//! figure. A direct leg with errors or lost bytes makes the whole scenario's
//! verdicts "rig-limited": its deltas compare with a broken floor.
//!
//! Files: `types.rs` holds the report's types and how each figure is
//! computed, `compute.rs` builds a scenario's report from the runs of its
//! legs, `checks.rs` checks the targets and a sweep's limit, `text.rs`
//! renders the plain-text table.

mod checks;
mod compute;
mod text;
mod types;

pub use checks::{check_targets, max_streams_under_1ms};
pub use compute::scenario;
pub use text::text;
pub use types::{
    AccuracyReport, CpuReport, FidelityReport, LegReport, Machine, MemoryReport, Offered,
    Quantiles, Range, Report, RoundDetail, ScenarioReport, Spread, TargetCheck, TlsReport, Versus,
};
