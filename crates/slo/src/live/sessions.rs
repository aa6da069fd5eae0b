//! The sessions and turns of each route over the live windows (1m, 5m,
//! 1h), for `/slo`'s `sessions` and the live page (docs/slo.md, "Live
//! status"; the figures are defined in docs/metrics.md, "Sessions and
//! turns").
//!
//! Per route, three rings of time slots as the live series keep them
//! (60 × 1 s, 60 × 5 s, 60 × 60 s). A slot holds, per kind of turn, the
//! requests that finished in it, a sketch of their TTFTs and their prompt
//! and cached prompt tokens; and, of the sessions that ended in it, their
//! count and their turns, duration, model and gap time summed, and the
//! [`TOP`] costliest of them, each with its key already shortened
//! ([`shorten`]: a full key is never kept here). A window merges its
//! ring's slots: its costliest are the costliest of its slots' lists,
//! which hold every session that can be among them. So a route holds at
//! most 180 slots of 4 sketches and [`TOP`] sessions each, whatever the
//! traffic.
//!
//! No I/O, no clock: the caller says `now`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use meter::Turn;
use serde::Serialize;
use tokio::time::Instant;

use super::ring::{Merge, Ring, WINDOWS, covered, slot_index};
use crate::found::Found;
use crate::sketch::Sketch;

/// Sessions kept per slot, and shown per window: the costliest.
pub const TOP: usize = 10;
/// Characters of a key shown before it is cut.
pub const KEY_CHARS: usize = 8;

/// `key` as `/slo` and the page show it: its first [`KEY_CHARS`]
/// characters and "…" when it is longer.
pub fn shorten(key: &str) -> String {
    match key.char_indices().nth(KEY_CHARS) {
        Some((cut, _)) => format!("{}…", &key[..cut]),
        None => key.to_owned(),
    }
}

/// A session that ended, as the windows are told it.
#[derive(Debug, Clone, Copy)]
pub struct SessionEnd<'a> {
    /// Its key, in full: shortened here.
    pub key: &'a str,
    pub tenant: &'a str,
    pub turns: u64,
    pub duration: Duration,
    pub model: Duration,
    /// Its gaps, summed, and how many.
    pub gaps: Duration,
    pub gap_count: u64,
    /// Its input and output tokens.
    pub tokens: u64,
    pub gpu_seconds: f64,
    /// Its cost, where its route is priced, in `currency`.
    pub cost: Option<f64>,
    pub currency: &'a str,
    pub good: bool,
}

/// One of a window's costliest sessions.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CostlySession {
    /// Its key, shortened ([`shorten`]).
    pub key: String,
    pub tenant: String,
    pub turns: u64,
    pub duration_seconds: f64,
    pub model_seconds: f64,
    pub gap_seconds: f64,
    /// Its input and output tokens.
    pub tokens: u64,
    pub gpu_seconds: f64,
    pub cost: Option<f64>,
    pub currency: Option<String>,
    pub good: bool,
}

impl CostlySession {
    /// Costlier first: by cost, then GPU-seconds, then tokens.
    fn rank(&self, other: &Self) -> std::cmp::Ordering {
        let cost = |s: &Self| s.cost.unwrap_or(0.0);
        cost(other)
            .total_cmp(&cost(self))
            .then(other.gpu_seconds.total_cmp(&self.gpu_seconds))
            .then(other.tokens.cmp(&self.tokens))
    }
}

/// The sessions that ended in a slot or window, summed.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct EndedSessions {
    pub sessions: u64,
    pub turns: u64,
    pub duration_seconds: f64,
    pub model_seconds: f64,
    /// Their time outside the model: the sum of their gaps.
    pub gap_seconds: f64,
    pub gaps: u64,
}

/// One kind of turn's requests over a window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TurnWindow {
    pub turn: &'static str,
    pub requests: u64,
    /// TTFT of those with a first token: how many, p50 and p90 (seconds).
    pub ttft: TtftQuantiles,
    pub prompt_tokens: u64,
    /// `None` when none of them reported cached tokens.
    pub cached_prompt_tokens: Option<u64>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct TtftQuantiles {
    pub count: u64,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
}

/// A route's sessions and turns over one window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionsWindow {
    pub window: &'static str,
    /// The span it covers: its width, or less while the process is younger.
    pub seconds: f64,
    /// By kind of turn, in the docs' order.
    pub turns: Vec<TurnWindow>,
    /// Cached prompt tokens over prompt tokens of the continued turns
    /// (`follow_up` and `tool_result`); `None` when none reported cached
    /// tokens.
    pub follow_up_cache_hit_ratio: Option<f64>,
    pub ended: EndedSessions,
    /// Model time over duration of the sessions that ended in it.
    pub model_share: Option<f64>,
    /// The costliest sessions that ended in it, costliest first.
    pub costliest: Vec<CostlySession>,
}

/// A route's sessions open now and over each window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RouteSessionsReport {
    pub route: String,
    /// Sessions open now.
    pub active: u64,
    pub windows: Vec<SessionsWindow>,
}

/// Every route's.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SessionsReport {
    pub routes: Vec<RouteSessionsReport>,
}

/// What a slot holds.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// By kind of turn, in [`Turn::ALL`]'s order.
    requests: [u64; 4],
    ttft: [Sketch; 4],
    prompt: [u64; 4],
    cached: [u64; 4],
    /// Whether any request of the kind reported cached tokens.
    cached_seen: [bool; 4],
    ended: EndedSessions,
    /// At most [`TOP`], costliest first.
    top: Vec<CostlySession>,
}

impl Merge for Slot {
    fn merge_from(&mut self, o: &Self) {
        for i in 0..4 {
            self.requests[i] += o.requests[i];
            self.ttft[i].merge(&o.ttft[i]);
            self.prompt[i] += o.prompt[i];
            self.cached[i] += o.cached[i];
            self.cached_seen[i] |= o.cached_seen[i];
        }
        let (e, f) = (&mut self.ended, &o.ended);
        e.sessions += f.sessions;
        e.turns += f.turns;
        e.duration_seconds += f.duration_seconds;
        e.model_seconds += f.model_seconds;
        e.gap_seconds += f.gap_seconds;
        e.gaps += f.gaps;
        for s in &o.top {
            keep(&mut self.top, s.clone());
        }
    }
}

/// Adds `s` to `top`, keeping the [`TOP`] costliest, costliest first.
fn keep(top: &mut Vec<CostlySession>, s: CostlySession) {
    if top.len() == TOP && top.last().is_some_and(|last| s.rank(last).is_ge()) {
        return;
    }
    let at = top.partition_point(|t| t.rank(&s).is_le());
    top.insert(at, s);
    top.truncate(TOP);
}

fn index_of(turn: Turn) -> usize {
    Turn::ALL.iter().position(|t| *t == turn).unwrap_or(3)
}

/// One route's rings.
#[derive(Debug)]
pub struct RouteSessions {
    origin: Instant,
    rings: Mutex<[Ring<Slot>; 3]>,
}

impl RouteSessions {
    fn rings(&self) -> MutexGuard<'_, [Ring<Slot>; 3]> {
        self.rings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request of kind `turn` finished at `now`, with its TTFT when it
    /// had one and its prompt and cached prompt tokens as reported.
    pub fn turn(
        &self,
        now: Instant,
        turn: Turn,
        ttft: Option<Duration>,
        prompt: Option<u64>,
        cached: Option<u64>,
    ) {
        let i = index_of(turn);
        let mut rings = self.rings();
        for (ring, window) in rings.iter_mut().zip(WINDOWS) {
            let Some(slot) = ring.slot(slot_index(self.origin, now, window.slot)) else {
                continue;
            };
            slot.requests[i] += 1;
            if let Some(d) = ttft {
                slot.ttft[i].add(d);
            }
            slot.prompt[i] += prompt.unwrap_or(0);
            if let Some(n) = cached {
                slot.cached[i] += n;
                slot.cached_seen[i] = true;
            }
        }
    }

    /// A session of the route ended at `now`.
    pub fn ended(&self, now: Instant, e: &SessionEnd<'_>) {
        let costly = CostlySession {
            key: shorten(e.key),
            tenant: e.tenant.to_owned(),
            turns: e.turns,
            duration_seconds: e.duration.as_secs_f64(),
            model_seconds: e.model.as_secs_f64(),
            gap_seconds: e.gaps.as_secs_f64(),
            tokens: e.tokens,
            gpu_seconds: e.gpu_seconds,
            cost: e.cost,
            currency: e.cost.map(|_| e.currency.to_owned()),
            good: e.good,
        };
        let mut rings = self.rings();
        for (ring, window) in rings.iter_mut().zip(WINDOWS) {
            let Some(slot) = ring.slot(slot_index(self.origin, now, window.slot)) else {
                continue;
            };
            let s = &mut slot.ended;
            s.sessions += 1;
            s.turns += e.turns;
            s.duration_seconds += costly.duration_seconds;
            s.model_seconds += costly.model_seconds;
            s.gap_seconds += costly.gap_seconds;
            s.gaps += e.gap_count;
            keep(&mut slot.top, costly.clone());
        }
    }

    /// Each window at `now`.
    fn windows(&self, now: Instant) -> Vec<SessionsWindow> {
        let rings = self.rings();
        WINDOWS
            .iter()
            .zip(rings.iter())
            .map(|(window, ring)| {
                let index = slot_index(self.origin, now, window.slot);
                let mut total = Slot::default();
                ring.collect(index, &mut total);
                let covered = covered(self.origin, now, window.slot, index);
                report(window.name, covered, total)
            })
            .collect()
    }
}

fn report(window: &'static str, covered: Duration, s: Slot) -> SessionsWindow {
    let turns = Turn::ALL
        .iter()
        .enumerate()
        .map(|(i, turn)| TurnWindow {
            turn: turn.as_str(),
            requests: s.requests[i],
            ttft: TtftQuantiles {
                count: s.ttft[i].count(),
                p50: s.ttft[i].quantile(0.5),
                p90: s.ttft[i].quantile(0.9),
            },
            prompt_tokens: s.prompt[i],
            cached_prompt_tokens: s.cached_seen[i].then_some(s.cached[i]),
        })
        .collect();
    let continued = [index_of(Turn::FollowUp), index_of(Turn::ToolResult)];
    let prompt: u64 = continued.iter().map(|&i| s.prompt[i]).sum();
    let cached: u64 = continued.iter().map(|&i| s.cached[i]).sum();
    let seen = continued.iter().any(|&i| s.cached_seen[i]);
    let e = s.ended;
    SessionsWindow {
        window,
        seconds: covered.as_secs_f64(),
        turns,
        follow_up_cache_hit_ratio: (seen && prompt > 0).then(|| cached as f64 / prompt as f64),
        ended: e,
        model_share: (e.duration_seconds > 0.0).then(|| e.model_seconds / e.duration_seconds),
        costliest: s.top,
    }
}

/// Every route's rings, made on first use (routes are the
/// configuration's, so bounded).
#[derive(Debug)]
pub struct SessionWindows {
    origin: Instant,
    routes: Found<RouteSessions, 1>,
}

impl SessionWindows {
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            routes: Found::default(),
        }
    }

    /// The rings of `route`.
    pub fn route(&self, route: &str) -> Arc<RouteSessions> {
        self.routes.get([route], || RouteSessions {
            origin: self.origin,
            rings: Mutex::default(),
        })
    }

    /// Every route's windows at `now`, with the sessions open now on each
    /// (`active`, by route): a route with either, by name.
    pub fn report(&self, now: Instant, active: &[(Arc<str>, u64)]) -> SessionsReport {
        let mut routes: Vec<RouteSessionsReport> = self
            .routes
            .entries()
            .into_iter()
            .map(|([route], r)| RouteSessionsReport {
                active: 0,
                windows: r.windows(now),
                route: route.into(),
            })
            .collect();
        for (route, n) in active {
            match routes.iter_mut().find(|r| *r.route == **route) {
                Some(r) => r.active = *n,
                None => routes.push(RouteSessionsReport {
                    route: route.to_string(),
                    active: *n,
                    windows: self.route(route).windows(now),
                }),
            }
        }
        routes.sort_by(|a, b| a.route.cmp(&b.route));
        SessionsReport { routes }
    }
}

#[cfg(test)]
#[path = "sessions/tests.rs"]
mod tests;
