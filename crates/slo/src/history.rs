//! The recent history of one live series, for the admin page's charts:
//! one point per [`POINT`] (10 s) for the last [`POINTS`] of them (an hour),
//! and the latest [`SCATTER`] requests' input tokens against their TTFT.
//!
//! The requests of the point being filled are read from the 1m window's
//! one-second slots (the caller's `source`), which still hold them: a slot
//! is only reused by a request a minute later, and any event (a request
//! starting or finishing) closes the point before its own request is
//! placed. So a request is folded into the windows and nothing more; when
//! the clock moves past a point, its requests are reduced to a [`Point`]
//! (counts, sums and the quantiles of each latency), so a closed point's
//! size is fixed whatever the traffic:
//! [`Point`] is a few hundred bytes and a series keeps at most
//! [`POINTS`] of them and [`SCATTER`] samples (see `tests::memory_is_bounded`).
//!
//! Requests in flight are counted here too (started, finished), so each
//! point knows the most that were in flight during it and how many were
//! left at its end; a point where nothing started or finished carries the
//! level of the one before it.
//!
//! Like the windows, this module does no I/O and reads no clock.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::aggregate::{Aggregate, Quantiles, kind_index, outcome_index};
use crate::class::ObjectiveKind;
use meter::Outcome;

/// Width of one history point.
pub const POINT: Duration = Duration::from_secs(10);
/// Points kept per series: an hour.
pub const POINTS: u64 = 360;
/// Requests kept per series for the input tokens vs TTFT scatter.
pub const SCATTER: usize = 500;

/// A closed point: what the page draws of ten seconds of one series.
#[derive(Debug, Clone, Default, PartialEq)]
struct Point {
    counts: Counts,
    /// TTFT, TPOT, ITL, E2EL, time to response headers, and the server's
    /// queue, prefill, decode and the time outside the engine.
    latencies: [Quantiles; 9],
    in_flight: Occupancy,
}

/// Counts and sums of a point (a reduced [`Aggregate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counts {
    requests: u64,
    outcomes: [u64; Outcome::ALL.len()],
    output_tokens: u64,
    input_tokens: u64,
    good: u64,
    bad: u64,
    good_output_tokens: u64,
    violations: [u64; 3],
    phases: [f64; 3],
    phased: u64,
    engine: [f64; 4],
    engine_phased: u64,
}

impl Counts {
    fn of(a: &Aggregate) -> Self {
        Self {
            requests: a.requests,
            outcomes: a.outcomes,
            output_tokens: a.output_tokens,
            input_tokens: a.input_tokens,
            good: a.good,
            bad: a.bad,
            good_output_tokens: a.good_output_tokens,
            violations: a.violations,
            phases: a.phases,
            phased: a.phased,
            engine: a.engine,
            engine_phased: a.engine_phased,
        }
    }
}

/// Requests in flight during a point.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Occupancy {
    /// The most at any moment of the point.
    peak: u64,
    /// How many at its end (or now, for the point being filled).
    end: u64,
}

impl Point {
    fn of(a: &Aggregate, in_flight: Occupancy) -> Self {
        Self {
            counts: Counts::of(a),
            latencies: [
                &a.ttft, &a.tpot, &a.itl, &a.e2el, &a.headers, &a.queue, &a.prefill, &a.decode,
                &a.outside,
            ]
            .map(Quantiles::of),
            in_flight,
        }
    }

    /// A point where nothing finished, `level` requests in flight throughout.
    fn idle(level: u64) -> Self {
        Self {
            in_flight: Occupancy {
                peak: level,
                end: level,
            },
            ..Self::default()
        }
    }
}

/// The history of one series. Indexes count [`POINT`]s from the live
/// windows' origin.
#[derive(Debug, Default)]
pub struct History {
    /// The index of the point being filled.
    open: Option<u64>,
    /// The open point's requests in flight.
    open_in_flight: Occupancy,
    /// Closed points, oldest first, each with its index; at most
    /// [`POINTS`], and none older than [`POINTS`] before the open one.
    closed: VecDeque<(u64, Point)>,
    /// Requests in flight now.
    in_flight: u64,
    /// Requests in flight at the end of the last point dropped.
    dropped_end: u64,
    /// Index of the first point the series had.
    first: Option<u64>,
    /// Input tokens and TTFT of the latest requests that had both, with
    /// the time they finished (seconds from the origin).
    scatter: VecDeque<(f64, u64, f64)>,
}

/// The requests that finished in a point, by its index: asked only of the
/// point being filled (and, as it closes, the one before).
pub type PointAggregates<'a> = &'a dyn Fn(u64) -> Aggregate;

impl History {
    /// Moves the open point to `index`, closing the one before with its
    /// requests from `source`.
    fn advance(&mut self, index: u64, source: PointAggregates<'_>) {
        self.first.get_or_insert(index);
        if self.open.is_some_and(|open| open >= index) {
            return;
        }
        if let Some(open) = self.open.take() {
            let point = Point::of(&source(open), self.open_in_flight);
            self.closed.push_back((open, point));
        }
        while let Some((oldest, _)) = self.closed.front() {
            if *oldest + POINTS > index && self.closed.len() < POINTS as usize {
                break;
            }
            if let Some((_, dropped)) = self.closed.pop_front() {
                self.dropped_end = dropped.in_flight.end;
            }
        }
        self.open = Some(index);
        self.open_in_flight = Occupancy {
            peak: self.in_flight,
            end: self.in_flight,
        };
    }

    /// A request started at point `index`.
    pub fn start(&mut self, index: u64, source: PointAggregates<'_>) {
        self.advance(index, source);
        self.in_flight += 1;
        self.open_in_flight.peak = self.open_in_flight.peak.max(self.in_flight);
        self.open_in_flight.end = self.in_flight;
    }

    /// A request is finishing at point `index`, `at` seconds from the
    /// origin: called before it is placed in the windows `source` reads.
    pub fn finish(
        &mut self,
        index: u64,
        at: f64,
        input_ttft: Option<(u64, f64)>,
        source: PointAggregates<'_>,
    ) {
        self.advance(index, source);
        self.in_flight = self.in_flight.saturating_sub(1);
        self.open_in_flight.end = self.in_flight;
        if let Some((input, ttft)) = input_ttft {
            if self.scatter.len() == SCATTER {
                self.scatter.pop_front();
            }
            self.scatter.push_back((at, input, ttft));
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Every point from `since` (an index; clamped to the hour kept and to
    /// the series' first point) to the one holding `now` (time since the
    /// origin), gaps filled, and the scatter samples that finished in that
    /// span. `unix` is the origin's wall-clock time, in seconds since the
    /// Unix epoch.
    pub fn report(
        &self,
        since: u64,
        now: Duration,
        unix: f64,
        source: PointAggregates<'_>,
    ) -> (Vec<PointReport>, Vec<[f64; 3]>) {
        let width = POINT.as_secs();
        let now_secs = now.as_secs_f64();
        let now = now.as_secs() / width;
        let Some(first) = self.first else {
            return (Vec::new(), Vec::new());
        };
        let from = since.max(first).max((now + 1).saturating_sub(POINTS));
        let mut points = Vec::new();
        let mut closed = self.closed.iter().peekable();
        // The level carried into gaps: the end of the last point before.
        let mut level = self.dropped_end;
        for index in from..=now {
            while let Some((i, p)) = closed.peek() {
                if *i >= index {
                    break;
                }
                level = p.in_flight.end;
                closed.next();
            }
            let point = match (closed.peek(), self.open) {
                (Some((i, p)), _) if *i == index => {
                    level = p.in_flight.end;
                    closed.next();
                    p.clone()
                }
                (_, Some(i)) if i == index => {
                    level = self.open_in_flight.end;
                    Point::of(&source(i), self.open_in_flight)
                }
                // After the open point (nothing happened since): the
                // requests in flight now were in flight throughout.
                (_, Some(i)) if i < index => Point::idle(self.in_flight),
                _ => Point::idle(level),
            };
            let start = (index * width) as f64;
            // The point being filled covers what has passed of it (at
            // least a second, as the windows).
            let seconds = (now_secs - start).clamp(1.0, width as f64);
            points.push(PointReport::of(unix + start, seconds, &point));
        }
        let start = (from * width) as f64;
        let scatter = self
            .scatter
            .iter()
            .filter(|(at, _, _)| *at >= start)
            .map(|&(at, input, ttft)| [unix + at, input as f64, ttft])
            .collect();
        (points, scatter)
    }
}

/// One point of `/slo/history`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PointReport {
    /// Start of the point, seconds since the Unix epoch.
    pub t: f64,
    /// The time it covers: its width, or what has passed of the point
    /// being filled (divide its counts by this for rates).
    pub seconds: f64,
    /// Requests that finished in it, any outcome, and by outcome.
    pub requests: u64,
    pub outcomes: Outcomes,
    pub output_tokens: u64,
    pub input_tokens: u64,
    /// Verdicts of the judged ones, their output tokens when good, and the
    /// requests over each objective's threshold.
    pub good: u64,
    pub bad: u64,
    pub good_output_tokens: u64,
    pub violations: Violations,
    /// Latency quantiles in seconds.
    pub ttft: Quantiles,
    pub tpot: Quantiles,
    pub itl: Quantiles,
    pub e2el: Quantiles,
    /// Time to response headers.
    pub headers: Quantiles,
    /// Where the time of completed streams went, summed over them.
    pub phases: Phases,
    /// The server's own phases and the time outside the engine, of the
    /// requests that reported them.
    pub queue: Quantiles,
    pub prefill: Quantiles,
    pub decode: Quantiles,
    pub outside: Quantiles,
    /// Where the time of completed streams whose server reported its
    /// phases went, by those phases, summed over them.
    pub engine_phases: EnginePhases,
    /// Requests in flight: the most during the point, and at its end.
    pub in_flight_peak: u64,
    pub in_flight_end: u64,
}

/// Requests by outcome.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Outcomes {
    pub ok: u64,
    pub upstream_error: u64,
    pub timeout: u64,
    pub client_abort: u64,
    pub client_timeout: u64,
    pub proxy_error: u64,
}

/// Judged requests over each objective's threshold.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Violations {
    pub ttft: u64,
    pub tpot: u64,
    pub e2el: u64,
}

/// The request time of completed streams, split at the response head and
/// the first token: seconds summed over `requests`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Phases {
    pub requests: u64,
    /// From `t0` to the response head (queueing, where the server sends
    /// its head as it starts the request's work).
    pub headers_seconds: f64,
    /// From the response head to the first token (prefill).
    pub first_token_seconds: f64,
    /// From the first token to the end (decode).
    pub decode_seconds: f64,
}

/// The request time of completed streams whose server reported its queue,
/// prefill and decode: seconds summed over `requests`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EnginePhases {
    pub requests: u64,
    /// In the server's queue.
    pub queue_seconds: f64,
    /// Prefill, by the server's clock.
    pub prefill_seconds: f64,
    /// Decode, by the server's clock.
    pub decode_seconds: f64,
    /// Outside the engine before the first token: TTFT − queue − prefill.
    pub outside_seconds: f64,
}

impl PointReport {
    fn of(t: f64, seconds: f64, p: &Point) -> Self {
        let c = &p.counts;
        let outcome = |o: Outcome| c.outcomes[outcome_index(o)];
        let violation = |k: ObjectiveKind| c.violations[kind_index(k)];
        let [
            ttft,
            tpot,
            itl,
            e2el,
            headers,
            queue,
            prefill,
            decode,
            outside,
        ] = p.latencies.clone();
        Self {
            t,
            seconds,
            requests: c.requests,
            outcomes: Outcomes {
                ok: outcome(Outcome::Ok),
                upstream_error: outcome(Outcome::UpstreamError),
                timeout: outcome(Outcome::Timeout),
                client_abort: outcome(Outcome::ClientAbort),
                client_timeout: outcome(Outcome::ClientTimeout),
                proxy_error: outcome(Outcome::ProxyError),
            },
            output_tokens: c.output_tokens,
            input_tokens: c.input_tokens,
            good: c.good,
            bad: c.bad,
            good_output_tokens: c.good_output_tokens,
            violations: Violations {
                ttft: violation(ObjectiveKind::Ttft),
                tpot: violation(ObjectiveKind::Tpot),
                e2el: violation(ObjectiveKind::E2el),
            },
            ttft,
            tpot,
            itl,
            e2el,
            headers,
            phases: Phases {
                requests: c.phased,
                headers_seconds: c.phases[0],
                first_token_seconds: c.phases[1],
                decode_seconds: c.phases[2],
            },
            queue,
            prefill,
            decode,
            outside,
            engine_phases: EnginePhases {
                requests: c.engine_phased,
                queue_seconds: c.engine[0],
                prefill_seconds: c.engine[1],
                decode_seconds: c.engine[2],
                outside_seconds: c.engine[3],
            },
            in_flight_peak: p.in_flight.peak,
            in_flight_end: p.in_flight.end,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn one(requests: u64) -> Aggregate {
        Aggregate {
            requests,
            ..Aggregate::default()
        }
    }

    #[test]
    fn gaps_carry_the_requests_in_flight() {
        // What the windows hold: one request finished in point 2, two in 4.
        let source = |p: u64| {
            one(match p {
                2 => 1,
                4 => 2,
                _ => 0,
            })
        };
        let mut h = History::default();
        h.start(2, &source);
        h.start(2, &source);
        h.finish(2, 25.0, Some((100, 0.2)), &source);
        // Point 3: nothing; point 4: one more starts and both finish.
        h.start(4, &source);
        h.finish(4, 41.0, None, &source);
        h.finish(4, 42.0, Some((300, 0.4)), &source);
        let (points, scatter) = h.report(0, secs(65), 1000.0, &source);
        let summary: Vec<_> = points
            .iter()
            .map(|p| {
                (
                    p.t,
                    p.seconds,
                    p.requests,
                    p.in_flight_peak,
                    p.in_flight_end,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (1020.0, 10.0, 1, 2, 1),
                (1030.0, 10.0, 0, 1, 1),
                (1040.0, 10.0, 2, 2, 0),
                (1050.0, 10.0, 0, 0, 0),
                // The point being filled, 5 s into it.
                (1060.0, 5.0, 0, 0, 0),
            ]
        );
        assert_eq!(scatter, [[1025.0, 100.0, 0.2], [1042.0, 300.0, 0.4]]);
        // From point 4 on only.
        let (points, scatter) = h.report(4, secs(65), 1000.0, &source);
        assert_eq!(points.len(), 3);
        assert_eq!(scatter.len(), 1);
    }

    #[test]
    fn an_hour_is_kept_and_no_more() {
        let source = |p: u64| one(u64::from(p < 1000));
        let mut h = History::default();
        for i in 0..1000 {
            h.start(i, &source);
            h.finish(i, (i * 10) as f64, Some((i, 0.1)), &source);
        }
        assert_eq!(h.closed.len(), POINTS as usize - 1);
        let (points, scatter) = h.report(0, secs(9995), 0.0, &source);
        assert_eq!(points.len(), POINTS as usize);
        assert_eq!(points[0].t, 6400.0);
        assert!(points.iter().all(|p| p.requests == 1));
        assert_eq!(h.scatter.len(), SCATTER);
        // Only the samples of the hour reported.
        assert_eq!(scatter.len(), POINTS as usize);
        // Idle for two hours: the old points leave as the clock moves.
        h.start(1720, &source);
        assert!(h.closed.len() <= 1);
        let (points, _) = h.report(0, secs(17200), 0.0, &source);
        assert_eq!(points.len(), POINTS as usize);
        assert_eq!(points.iter().map(|p| p.requests).sum::<u64>(), 0);
        assert_eq!(points.last().unwrap().in_flight_end, 1);
    }

    #[test]
    fn memory_is_bounded() {
        // A closed point is under 750 bytes (docs/slo.md says so).
        let point = std::mem::size_of::<(u64, Point)>();
        assert!(point < 750, "{point} bytes");
        // The closed points and the scatter, at most, per series.
        let bytes = POINTS as usize * std::mem::size_of::<(u64, Point)>()
            + SCATTER * std::mem::size_of::<(f64, u64, f64)>();
        assert!(bytes < 288 * 1024, "{bytes} bytes");
    }
}
