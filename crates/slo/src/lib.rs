//! SLO judging: one finished request against its SLO class, by the rules of
//! docs/metrics.md ("SLOs and goodput").
//!
//! [`judge`] is a pure function of the class and the meter's [`Summary`]: it
//! decides whether the request was good, bad, or is not counted in the
//! goodput ratio, and which objectives it violated. Counting the verdicts is
//! the metrics module's job.
//!
//! The live windows behind `/slo` (`live/`, with the quantile sketch in
//! `sketch.rs`) aggregate judged requests per route and class over 1m, 5m
//! and 1h; the latency–load curves and their knees (`capacity`) use the
//! same windows.
//!
//! This module must not do I/O, read a clock or know Prometheus; everything
//! it needs is in the summary (including `elapsed`, how long a failed request
//! had lasted), and the live windows are told the time by their caller.

pub mod aggregate;
pub mod capacity;
mod class;
pub mod declared;
pub mod found;
pub mod history;
pub mod in_flight;
pub mod ledger;
pub mod live;
pub mod rules;
pub mod sketch;

pub use class::{DEFAULT_WINDOW, Goodput, Objective, ObjectiveKind, SloClass};

use meter::{Outcome, Summary};

/// The objectives a request violated (a set of [`ObjectiveKind`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Violations(u8);

impl Violations {
    fn bit(kind: ObjectiveKind) -> u8 {
        match kind {
            ObjectiveKind::Ttft => 1,
            ObjectiveKind::Tpot => 2,
            ObjectiveKind::E2el => 4,
        }
    }

    fn insert(&mut self, kind: ObjectiveKind) {
        self.0 |= Self::bit(kind);
    }

    /// Whether `kind` was violated.
    pub fn contains(self, kind: ObjectiveKind) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    /// Whether no objective was violated.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The violated objectives, in label order.
    pub fn iter(self) -> impl Iterator<Item = ObjectiveKind> {
        ObjectiveKind::ALL
            .into_iter()
            .filter(move |kind| self.contains(*kind))
    }
}

/// How one request counts against its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Outcome `ok` and every required objective held. `violations` lists
    /// objectives outside `goodput.require` that were exceeded (each still
    /// counts against its own objective).
    Good { violations: Violations },
    /// A required objective was exceeded, whatever the outcome (a threshold
    /// passed before the client aborted or the upstream failed counts).
    Bad { violations: Violations },
    /// The request failed or was aborted before any required threshold was
    /// crossed, or it was a slow reader's and its class leaves those out:
    /// it is counted under its outcome, not in the goodput ratio.
    NotCounted,
}

impl Verdict {
    /// The `verdict` label value, `None` when not counted.
    pub fn label(self) -> Option<&'static str> {
        match self {
            Verdict::Good { .. } => Some("good"),
            Verdict::Bad { .. } => Some("bad"),
            Verdict::NotCounted => None,
        }
    }

    /// The objectives to count as violated (none when not counted).
    pub fn violations(self) -> Violations {
        match self {
            Verdict::Good { violations } | Verdict::Bad { violations } => violations,
            Verdict::NotCounted => Violations::default(),
        }
    }
}

/// What is known about one objective when the request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Met,
    Violated,
    /// Does not apply (TTFT/TPOT of a non-streamed response, TPOT with
    /// N < 2), or the request ended before it could be decided and before
    /// the threshold passed. Holds for a completed request.
    Open,
}

/// Judges one finished request against its class.
///
/// A class without objectives judges by outcome alone: `ok` is good, a
/// failure of the upstream or the proxy (`upstream_error`, `timeout`,
/// `proxy_error`) is bad, and a client abort is not counted (the client
/// chose to stop; nothing was promised about it).
///
/// A slow reader's request (`slow_reader`: its client held it up for more
/// than `metrics.slow_reader_share` of its time) is not counted when its
/// class says `exclude_slow_readers`.
pub fn judge(class: &SloClass, s: &Summary, slow_reader: bool) -> Verdict {
    let none = Violations::default();
    if slow_reader && class.exclude_slow_readers {
        return Verdict::NotCounted;
    }
    if class.objectives.is_empty() {
        return match s.outcome {
            Outcome::Ok => Verdict::Good { violations: none },
            Outcome::ClientAbort | Outcome::ClientTimeout => Verdict::NotCounted,
            Outcome::UpstreamError | Outcome::Timeout | Outcome::ProxyError => {
                Verdict::Bad { violations: none }
            }
        };
    }
    let mut violations = none;
    for objective in &class.objectives {
        if status(objective.kind, objective.threshold, s) == Status::Violated {
            violations.insert(objective.kind);
        }
    }
    let required_violated = class
        .goodput
        .require
        .iter()
        .any(|kind| violations.contains(*kind));
    if required_violated {
        Verdict::Bad { violations }
    } else if s.outcome == Outcome::Ok {
        Verdict::Good { violations }
    } else {
        Verdict::NotCounted
    }
}

/// One objective: a value equal to the threshold holds (`le` buckets count
/// it as compliant too).
fn status(kind: ObjectiveKind, threshold: std::time::Duration, s: &Summary) -> Status {
    let compare = |value: std::time::Duration| {
        if value > threshold {
            Status::Violated
        } else {
            Status::Met
        }
    };
    // Whether the threshold had passed by the time the request ended,
    // without the number itself being known.
    let passed = || {
        if s.elapsed > threshold {
            Status::Violated
        } else {
            Status::Open
        }
    };
    match kind {
        // TTFT and TPOT do not apply to non-streamed responses.
        ObjectiveKind::Ttft if !s.streamed => Status::Open,
        // No first token by the end: if the request lasted past the
        // threshold, the first token was late whatever happened next.
        ObjectiveKind::Ttft => s.ttft.map_or_else(passed, compare),
        // TPOT is a per-request average known only at a complete end
        // (`tpot` is `Some` for ok streams with N >= 2). A stream that
        // failed midway is judged on TTFT and E2EL, not on a partial
        // average over token events that may carry several tokens each.
        ObjectiveKind::Tpot if !s.streamed => Status::Open,
        ObjectiveKind::Tpot => s.tpot.map_or(Status::Open, compare),
        // E2EL of a failed request is not observed, but if it had already
        // lasted past the threshold the request was too slow anyway.
        ObjectiveKind::E2el => s.e2el.map_or_else(passed, compare),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::class::{Goodput, Objective};
    use meter::{TokenSource, Usage};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// TTFT 500 ms, TPOT 50 ms, E2EL 10 s, all required.
    fn class() -> SloClass {
        let objective = |kind, threshold| Objective {
            kind,
            threshold,
            target: 0.95,
        };
        SloClass {
            name: "chat".into(),
            description: String::new(),
            window: crate::class::DEFAULT_WINDOW,
            objectives: vec![
                objective(ObjectiveKind::Ttft, ms(500)),
                objective(ObjectiveKind::Tpot, ms(50)),
                objective(ObjectiveKind::E2el, ms(10_000)),
            ],
            goodput: Goodput {
                require: ObjectiveKind::ALL.to_vec(),
                target: Some(0.9),
            },
            per_tenant_alerts: false,
            exclude_slow_readers: false,
        }
    }

    /// A completed stream: TTFT 100 ms, TPOT 20 ms, 11 tokens, E2EL 300 ms.
    fn ok_stream() -> Summary {
        Summary {
            outcome: Outcome::Ok,
            status: Some(200),
            streamed: true,
            ttft: Some(ms(100)),
            ttft_visible: Some(ms(100)),
            e2el: Some(ms(300)),
            elapsed: ms(300),
            tpot: Some(ms(20)),
            output_tokens: Some((11, TokenSource::Usage)),
            usage: Usage::default(),
            server: meter::ServerTimings::default(),
            client_wait: std::time::Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 12,
            token_events: 11,
            first_token_event: Some(0),
            first_visible_event: Some(0),
            terminal_event: None,
            parse_errors: 0,
        }
    }

    /// A stream that ended with `outcome` after `elapsed`, with its first
    /// token at `ttft` (if any).
    fn failed(outcome: Outcome, ttft: Option<Duration>, elapsed: Duration) -> Summary {
        Summary {
            outcome,
            ttft,
            e2el: None,
            tpot: None,
            elapsed,
            output_tokens: None,
            ..ok_stream()
        }
    }

    fn violated(v: Verdict) -> Vec<&'static str> {
        v.violations().iter().map(ObjectiveKind::as_str).collect()
    }

    #[test]
    fn complete_request_within_every_threshold_is_good() {
        let v = judge(&class(), &ok_stream(), false);
        assert_eq!(v.label(), Some("good"));
        assert!(v.violations().is_empty());
    }

    #[test]
    fn value_equal_to_the_threshold_holds() {
        let s = Summary {
            ttft: Some(ms(500)),
            tpot: Some(ms(50)),
            ..ok_stream()
        };
        assert_eq!(judge(&class(), &s, false).label(), Some("good"));
    }

    #[test]
    fn each_exceeded_threshold_makes_it_bad_and_is_named() {
        let cases = [
            (
                Summary {
                    ttft: Some(ms(501)),
                    ..ok_stream()
                },
                vec!["ttft"],
            ),
            (
                Summary {
                    tpot: Some(ms(51)),
                    ..ok_stream()
                },
                vec!["tpot"],
            ),
            (
                Summary {
                    e2el: Some(ms(10_001)),
                    elapsed: ms(10_001),
                    ..ok_stream()
                },
                vec!["e2el"],
            ),
            (
                Summary {
                    ttft: Some(ms(900)),
                    tpot: Some(ms(80)),
                    ..ok_stream()
                },
                vec!["ttft", "tpot"],
            ),
        ];
        for (s, expected) in cases {
            let v = judge(&class(), &s, false);
            assert_eq!(v.label(), Some("bad"), "{s:?}");
            assert_eq!(violated(v), expected);
        }
    }

    #[test]
    fn tpot_holds_trivially_with_fewer_than_two_tokens() {
        let s = Summary {
            tpot: None,
            output_tokens: Some((1, TokenSource::Usage)),
            ..ok_stream()
        };
        assert_eq!(judge(&class(), &s, false).label(), Some("good"));
    }

    #[test]
    fn ttft_and_tpot_do_not_apply_to_non_streamed_responses() {
        // A non-streamed body that took 2 s: above the TTFT threshold, but
        // TTFT is not a thing for it; E2EL (10 s) holds.
        let s = Summary {
            streamed: false,
            ttft: None,
            tpot: None,
            e2el: Some(ms(2000)),
            elapsed: ms(2000),
            ..ok_stream()
        };
        assert_eq!(judge(&class(), &s, false).label(), Some("good"));
        let slow = Summary {
            e2el: Some(ms(12_000)),
            elapsed: ms(12_000),
            ..s
        };
        assert_eq!(violated(judge(&class(), &slow, false)), vec!["e2el"]);
    }

    #[test]
    fn threshold_passed_before_an_abort_or_failure_is_bad() {
        // No first token, and the client gave up after 2 s: TTFT was late.
        let v = judge(
            &class(),
            &failed(Outcome::ClientAbort, None, ms(2000)),
            false,
        );
        assert_eq!(v.label(), Some("bad"));
        assert_eq!(violated(v), vec!["ttft"]);
        // A late first token, then the upstream failed.
        let v = judge(
            &class(),
            &failed(Outcome::UpstreamError, Some(ms(800)), ms(900)),
            false,
        );
        assert_eq!(violated(v), vec!["ttft"]);
        // Timely first token, then stalled past the E2EL threshold.
        let v = judge(
            &class(),
            &failed(Outcome::Timeout, Some(ms(100)), ms(11_000)),
            false,
        );
        assert_eq!(v.label(), Some("bad"));
        assert_eq!(violated(v), vec!["e2el"]);
    }

    #[test]
    fn failure_before_any_threshold_is_not_counted() {
        for outcome in [
            Outcome::ClientAbort,
            Outcome::UpstreamError,
            Outcome::Timeout,
            Outcome::ProxyError,
        ] {
            // No token yet, ended before the TTFT threshold.
            assert_eq!(
                judge(&class(), &failed(outcome, None, ms(200)), false),
                Verdict::NotCounted,
                "{outcome:?}"
            );
            // First token in time, ended before the E2EL threshold: TPOT is
            // not decided for a broken stream.
            assert_eq!(
                judge(&class(), &failed(outcome, Some(ms(100)), ms(3000)), false),
                Verdict::NotCounted,
                "{outcome:?}"
            );
        }
        // Failed before the response head (no stream known): only E2EL.
        let s = Summary {
            streamed: false,
            status: Some(502),
            ..failed(Outcome::ProxyError, None, ms(2000))
        };
        assert_eq!(judge(&class(), &s, false), Verdict::NotCounted);
    }

    #[test]
    fn completed_stream_without_tokens_is_late_only_past_the_ttft_threshold() {
        let empty = Summary {
            ttft: None,
            tpot: None,
            output_tokens: Some((0, TokenSource::Events)),
            ..ok_stream()
        };
        assert_eq!(judge(&class(), &empty, false).label(), Some("good"));
        let slow = Summary {
            e2el: Some(ms(600)),
            elapsed: ms(600),
            ..empty
        };
        assert_eq!(violated(judge(&class(), &slow, false)), vec!["ttft"]);
    }

    #[test]
    fn only_required_objectives_decide_goodput() {
        let mut c = class();
        c.goodput.require = vec![ObjectiveKind::Ttft];
        let s = Summary {
            tpot: Some(ms(80)),
            ..ok_stream()
        };
        let v = judge(&c, &s, false);
        assert_eq!(v.label(), Some("good"));
        // The TPOT violation still counts against the TPOT objective.
        assert_eq!(violated(v), vec!["tpot"]);
        let s = Summary {
            ttft: Some(ms(800)),
            ..ok_stream()
        };
        assert_eq!(judge(&c, &s, false).label(), Some("bad"));
    }

    #[test]
    fn class_without_objectives_judges_by_outcome() {
        let mut c = class();
        c.objectives.clear();
        c.goodput.require.clear();
        let slow = Summary {
            ttft: Some(ms(60_000)),
            ..ok_stream()
        };
        assert_eq!(judge(&c, &slow, false).label(), Some("good"));
        for outcome in [
            Outcome::UpstreamError,
            Outcome::Timeout,
            Outcome::ProxyError,
        ] {
            assert_eq!(
                judge(&c, &failed(outcome, None, ms(10)), false).label(),
                Some("bad"),
                "{outcome:?}"
            );
        }
        assert_eq!(
            judge(&c, &failed(Outcome::ClientAbort, None, ms(10)), false),
            Verdict::NotCounted
        );
    }

    /// A slow reader's request is judged like any other unless its class
    /// leaves slow readers out; then it is neither good nor bad, whatever
    /// it met.
    #[test]
    fn a_slow_readers_request_is_left_out_only_where_its_class_says() {
        let slow = Summary {
            ttft: Some(ms(2000)),
            ..ok_stream()
        };
        for s in [ok_stream(), slow] {
            let judged = judge(&class(), &s, true);
            assert_ne!(judged, Verdict::NotCounted);
            assert_eq!(judged, judge(&class(), &s, false));
            let c = SloClass {
                exclude_slow_readers: true,
                ..class()
            };
            assert_eq!(judge(&c, &s, true), Verdict::NotCounted);
            assert_eq!(judge(&c, &s, false), judged);
        }
    }
}
