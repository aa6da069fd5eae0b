//! What the live windows and the history add up: the counts and latency
//! sketches of some requests ([`Aggregate`]), and the quantiles reported
//! of a sketch ([`Quantiles`]).

use std::time::Duration;

use serde::Serialize;

use super::Verdict;
use super::sketch::Sketch;
use crate::class::ObjectiveKind;
use meter::{Outcome, Summary};

/// Quantiles reported for each latency.
const QUANTILES: [f64; 3] = [0.5, 0.95, 0.99];

/// Counts and latency sketches of some requests (one request, one slot, or
/// a whole window).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregate {
    /// Finished metered requests, any outcome.
    pub requests: u64,
    /// Those of each outcome, in [`Outcome::ALL`] order.
    pub outcomes: [u64; Outcome::ALL.len()],
    /// Output tokens of all of them (where known).
    pub output_tokens: u64,
    /// Input tokens the upstream reported for them.
    pub input_tokens: u64,
    /// Judged good against their class.
    pub good: u64,
    /// Judged bad against their class.
    pub bad: u64,
    /// Output tokens of the good ones.
    pub good_output_tokens: u64,
    /// Judged requests that exceeded each objective, by [`ObjectiveKind`]
    /// in [`ObjectiveKind::ALL`] order.
    pub violations: [u64; 3],
    /// Seconds of completed streams from `t0` to the response head, from
    /// there to the first token, and from there to the end, summed over the
    /// `phased` streams that had all three.
    pub phases: [f64; 3],
    pub phased: u64,
    /// Seconds of completed streams whose server reported its queue,
    /// prefill and decode, in the server's queue, prefill and decode and
    /// outside the engine (TTFT − queue − prefill), summed over the
    /// `engine_phased` streams that had all four (outside not negative).
    pub engine: [f64; 4],
    pub engine_phased: u64,
    pub ttft: Sketch,
    pub tpot: Sketch,
    pub itl: Sketch,
    pub e2el: Sketch,
    /// Time to response headers.
    pub headers: Sketch,
    /// The server's phases and the time outside the engine, of every
    /// request that reported them (docs/metrics.md, "Where the time goes").
    pub queue: Sketch,
    pub prefill: Sketch,
    pub decode: Sketch,
    pub outside: Sketch,
}

pub(super) fn kind_index(kind: ObjectiveKind) -> usize {
    match kind {
        ObjectiveKind::Ttft => 0,
        ObjectiveKind::Tpot => 1,
        ObjectiveKind::E2el => 2,
    }
}

impl Aggregate {
    /// One finished request: its summary, its verdict (when it has a
    /// class), the sketch of its ITL gaps and its time to response headers
    /// (when a head came). Latencies are taken exactly when docs/metrics.md
    /// observes them (the summary's `Some` fields).
    pub fn request(
        summary: &Summary,
        verdict: Option<Verdict>,
        itl: Sketch,
        headers: Option<Duration>,
    ) -> Self {
        let mut a = Aggregate {
            requests: 1,
            output_tokens: summary.output_tokens.map_or(0, |(n, _)| n),
            input_tokens: summary.usage.input.unwrap_or(0),
            itl,
            ..Aggregate::default()
        };
        a.outcomes[outcome_index(summary.outcome)] = 1;
        for (value, sketch) in [
            (summary.ttft, &mut a.ttft),
            (summary.tpot, &mut a.tpot),
            (summary.e2el, &mut a.e2el),
            (headers, &mut a.headers),
        ] {
            if let Some(v) = value {
                sketch.add(v);
            }
        }
        if let (true, Some(h), Some(first), Some(end)) =
            (summary.streamed, headers, summary.ttft, summary.e2el)
        {
            a.phases = [
                h.as_secs_f64(),
                first.saturating_sub(h).as_secs_f64(),
                end.saturating_sub(first).as_secs_f64(),
            ];
            a.phased = 1;
        }
        let server = &summary.server;
        // A negative outside time is clocks that disagree: not taken.
        let outside = summary.outside_engine().filter(|o| *o >= 0.0);
        for (value, sketch) in [
            (server.queue, &mut a.queue),
            (server.prefill, &mut a.prefill),
            (server.decode, &mut a.decode),
            (outside, &mut a.outside),
        ] {
            if let Some(v) = value {
                sketch.add_secs(v);
            }
        }
        if let (true, Some(_), Some(queue), Some(prefill), Some(decode), Some(outside)) = (
            summary.streamed,
            summary.e2el,
            server.queue,
            server.prefill,
            server.decode,
            outside,
        ) {
            a.engine = [queue, prefill, decode, outside];
            a.engine_phased = 1;
        }
        if let Some(verdict) = verdict {
            match verdict {
                Verdict::Good { .. } => {
                    a.good = 1;
                    a.good_output_tokens = a.output_tokens;
                }
                Verdict::Bad { .. } => a.bad = 1,
                Verdict::NotCounted => {}
            }
            for kind in verdict.violations().iter() {
                a.violations[kind_index(kind)] = 1;
            }
        }
        a
    }

    /// Requests that ended `ok`.
    pub fn ok(&self) -> u64 {
        self.outcomes[outcome_index(Outcome::Ok)]
    }

    /// Adds `other` into this aggregate.
    pub fn merge(&mut self, other: &Aggregate) {
        self.requests += other.requests;
        for (mine, theirs) in self.outcomes.iter_mut().zip(other.outcomes) {
            *mine += theirs;
        }
        self.output_tokens += other.output_tokens;
        self.input_tokens += other.input_tokens;
        self.good += other.good;
        self.bad += other.bad;
        self.good_output_tokens += other.good_output_tokens;
        for (mine, theirs) in self.violations.iter_mut().zip(other.violations) {
            *mine += theirs;
        }
        for (mine, theirs) in self.phases.iter_mut().zip(other.phases) {
            *mine += theirs;
        }
        self.phased += other.phased;
        for (mine, theirs) in self.engine.iter_mut().zip(other.engine) {
            *mine += theirs;
        }
        self.engine_phased += other.engine_phased;
        self.ttft.merge(&other.ttft);
        self.tpot.merge(&other.tpot);
        self.itl.merge(&other.itl);
        self.e2el.merge(&other.e2el);
        self.headers.merge(&other.headers);
        self.queue.merge(&other.queue);
        self.prefill.merge(&other.prefill);
        self.decode.merge(&other.decode);
        self.outside.merge(&other.outside);
    }
}

/// Latency quantiles of one metric in one window; `None` without samples.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Quantiles {
    pub count: u64,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Quantiles {
    pub(super) fn of(sketch: &Sketch) -> Self {
        let [p50, p95, p99] = QUANTILES.map(|q| sketch.quantile(q));
        Self {
            count: sketch.count(),
            p50,
            p95,
            p99,
        }
    }
}

/// Position of `outcome` in [`Outcome::ALL`].
pub(super) fn outcome_index(outcome: Outcome) -> usize {
    Outcome::ALL
        .iter()
        .position(|o| *o == outcome)
        .unwrap_or_default()
}
