//! The table of open sessions, on a told clock (docs/metrics.md, "Sessions
//! and turns"): each session's requests, its time in the model (the union
//! of its requests' spans), its gaps (from a response's end to its next
//! request while none is in flight), its tokens and its charge, until it
//! has been idle for the idle timeout or is evicted from a full table.
//!
//! Responses API lineage: each response's id is remembered against its
//! session (the last [`RESPONSE_IDS`] of each), so a request naming one as
//! its `previous_response_id` joins that session; one naming an id never
//! seen (another replica's) starts a session keyed by it. A Responses
//! request that names no previous response is held as a *candidate* under
//! the id its response will have: when a later request names that id, the
//! candidate becomes the session's first turn, from its own arrival; a
//! candidate never followed is never counted as a session.
//!
//! Every operation is O(log n) in the sessions held, which are at most
//! `max` (candidates included). A full table evicts a candidate first (the
//! one idle the longest), so that one-off Responses requests never push
//! out a session; then the session idle the longest.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Response ids remembered per session: the newest ones, which the next
/// requests name.
pub const RESPONSE_IDS: usize = 16;

/// How a request names its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// A key (a header's value, a conversation id).
    Key(Arc<str>),
    /// The response it continues (`previous_response_id`).
    Previous(Arc<str>),
    /// A Responses request that names no previous response: it may start
    /// one.
    Candidate,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// None of its requests in flight, none started for the idle timeout.
    Idle,
    /// The table was full and it was the one idle the longest.
    Evicted,
}

impl Reason {
    pub const ALL: [Reason; 2] = [Reason::Idle, Reason::Evicted];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Idle => "idle",
            Reason::Evicted => "evicted",
        }
    }
}

/// What requests used and how they went: one request's, or a session's
/// sum of its requests'.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tally {
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub gpu_seconds: f64,
    pub joules: Option<f64>,
    pub cost: Option<f64>,
    /// Good as the chargeback counts it (judged good, or without a class
    /// ended `ok`): for a session, every one of its requests was.
    pub good: bool,
}

impl Default for Tally {
    /// Nothing used, and nothing that went wrong.
    fn default() -> Self {
        Self {
            input_tokens: 0,
            cached_tokens: 0,
            output_tokens: 0,
            gpu_seconds: 0.0,
            joules: None,
            cost: None,
            good: true,
        }
    }
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Self) {
        self.input_tokens += o.input_tokens;
        self.cached_tokens += o.cached_tokens;
        self.output_tokens += o.output_tokens;
        self.gpu_seconds += o.gpu_seconds;
        self.joules = sum(self.joules, o.joules);
        self.cost = sum(self.cost, o.cost);
        self.good &= o.good;
    }
}

/// A session's figures so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub route: Arc<str>,
    pub tenant: Arc<str>,
    /// When its first request arrived.
    pub first: Instant,
    /// When its last response ended, once one has.
    pub last_end: Option<Instant>,
    /// Its requests.
    pub turns: u64,
    /// The time at least one of its requests was in flight.
    pub model: Duration,
    /// Its gaps, summed, and how many.
    pub gaps: Duration,
    pub gap_count: u64,
    /// Its requests' that ended, summed.
    pub tally: Tally,
}

impl Figures {
    /// From its first request's arrival to its last response's end (0
    /// while none has ended).
    pub fn duration(&self) -> Duration {
        self.last_end.map_or(Duration::ZERO, |end| {
            end.saturating_duration_since(self.first)
        })
    }
}

/// A session that ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub key: Arc<str>,
    pub reason: Reason,
    pub figures: Figures,
}

/// A request's place in its session, as [`Table::start`] gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The session's key (a candidate's is provisional: its response's id
    /// once it has one).
    pub key: Arc<str>,
    /// The request's number in the session on this replica, from 1.
    pub turn: u64,
    /// The gap it closed, when it started with none of its session's
    /// requests in flight, after one had ended.
    pub gap: Option<Duration>,
    /// Which session of that key: one evicted while the request was in
    /// flight, then started again, is another.
    pub session: u64,
}

#[derive(Debug)]
struct Session {
    figures: Figures,
    /// Its requests in flight, and since when one has been.
    in_flight: u32,
    busy_since: Instant,
    /// Its place in the table's order of activity.
    active: (Instant, u64),
    /// Held until a request names its response.
    candidate: bool,
    /// Tells it from an earlier session of the same key.
    id: u64,
    /// Its tenant is the one its first request to end had.
    tenant_final: bool,
    /// The newest ids of its responses.
    responses: VecDeque<Arc<str>>,
}

/// The sessions open.
#[derive(Debug)]
pub struct Table {
    sessions: HashMap<Arc<str>, Session>,
    /// The sessions by their last activity (a request's start or end).
    order: BTreeMap<(Instant, u64), Arc<str>>,
    /// The candidates among them, in the same order.
    candidates: BTreeMap<(Instant, u64), Arc<str>>,
    /// Response id → its session's key.
    responses: HashMap<Arc<str>, Arc<str>>,
    seq: u64,
    pub idle_timeout: Duration,
    pub max: usize,
}

impl Table {
    pub fn new(idle_timeout: Duration, max: usize) -> Self {
        Self {
            sessions: HashMap::new(),
            order: BTreeMap::new(),
            candidates: BTreeMap::new(),
            responses: HashMap::new(),
            seq: 0,
            idle_timeout,
            max: max.max(1),
        }
    }

    /// Sessions held, candidates included.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The open sessions by route (candidates are not sessions yet).
    pub fn active(&self) -> HashMap<Arc<str>, u64> {
        let mut active = HashMap::new();
        for s in self.sessions.values().filter(|s| !s.candidate) {
            *active.entry(s.figures.route.clone()).or_default() += 1;
        }
        active
    }

    /// A request of `route` and `tenant` that names its session as `named`
    /// starts at `at`: its place, and the sessions a full table evicted to
    /// hold its session.
    pub fn start(
        &mut self,
        named: Named,
        route: &Arc<str>,
        tenant: &Arc<str>,
        at: Instant,
    ) -> (Place, Vec<Ended>) {
        let key = match named {
            Named::Key(key) => key,
            Named::Previous(id) => self.responses.get(&id).cloned().unwrap_or(id),
            Named::Candidate => {
                self.seq += 1;
                Arc::from(format!("\u{0}candidate {}", self.seq))
            }
        };
        let mut evicted = Vec::new();
        if !self.sessions.contains_key(&key) {
            while self.sessions.len() >= self.max {
                let first = self.candidates.first_key_value();
                match first
                    .or(self.order.first_key_value())
                    .map(|(_, k)| k.clone())
                {
                    Some(oldest) => evicted.extend(self.end(&oldest, Reason::Evicted)),
                    None => break,
                }
            }
            let candidate = key.starts_with('\u{0}');
            self.insert(key.clone(), route, tenant, at, candidate);
        }
        let seq = self.next();
        let Some(session) = self.sessions.get_mut(&key) else {
            // Held or just inserted: never here.
            let place = Place {
                key,
                turn: 0,
                gap: None,
                session: 0,
            };
            return (place, evicted);
        };
        // A candidate named by a later request is a session from its own
        // first request.
        if session.candidate && !key.starts_with('\u{0}') {
            session.candidate = false;
            self.candidates.remove(&session.active);
        }
        let s = &mut session.figures;
        let gap = match (session.in_flight, s.last_end) {
            (0, Some(end)) => {
                let gap = at.saturating_duration_since(end);
                s.gaps += gap;
                s.gap_count += 1;
                Some(gap)
            }
            _ => None,
        };
        if session.in_flight == 0 {
            session.busy_since = at;
        }
        session.in_flight += 1;
        s.turns += 1;
        let turn = s.turns;
        let session_id = session.id;
        self.set_active(&key, (at, seq));
        let place = Place {
            key,
            turn,
            gap,
            session: session_id,
        };
        (place, evicted)
    }

    /// Ends the session held as `key` for `reason`: its figures, unless
    /// it was a candidate (never a session).
    pub fn end(&mut self, key: &Arc<str>, reason: Reason) -> Option<Ended> {
        let session = self.sessions.remove(key)?;
        self.order.remove(&session.active);
        self.candidates.remove(&session.active);
        for id in &session.responses {
            if self.responses.get(id) == Some(key) {
                self.responses.remove(id);
            }
        }
        (!session.candidate).then(|| Ended {
            key: key.clone(),
            reason,
            figures: session.figures,
        })
    }

    /// The response of the request at `place` names the Responses API id
    /// `id` (read as its stream starts): a later request naming it joins
    /// the session. A candidate is held under it from now on (`place`
    /// follows).
    pub fn respond(&mut self, place: &mut Place, id: &str) {
        let id: Arc<str> = Arc::from(id);
        let Some(session) = self.sessions.get(&place.key) else {
            return;
        };
        if session.id != place.session {
            return;
        }
        if session.candidate {
            place.key = self.rekey(&place.key, id.clone());
        }
        let key = place.key.clone();
        if let Some(session) = self.sessions.get_mut(&key) {
            if session.responses.len() == RESPONSE_IDS
                && let Some(old) = session.responses.pop_front()
                && self.responses.get(&old) == Some(&key)
            {
                self.responses.remove(&old);
            }
            session.responses.push_back(id.clone());
            self.responses.insert(id, key);
        }
    }

    /// The request at `place` ended at `at`, adding `tally`; `tenant` is
    /// its tenant label, final now that it ended, the session's when it is
    /// the first of its requests to end. A candidate whose response named
    /// no id is dropped.
    pub fn finish(&mut self, place: &Place, at: Instant, tally: Tally, tenant: Option<Arc<str>>) {
        let seq = self.next();
        let Some(session) = self
            .sessions
            .get_mut(&place.key)
            .filter(|s| s.id == place.session)
        else {
            // Its session ended while it was in flight (evicted).
            return;
        };
        session.in_flight = session.in_flight.saturating_sub(1);
        let s = &mut session.figures;
        if session.in_flight == 0 {
            s.model += at.saturating_duration_since(session.busy_since);
        }
        s.last_end = Some(s.last_end.map_or(at, |end| end.max(at)));
        s.tally += tally;
        if let Some(tenant) = tenant.filter(|_| !session.tenant_final) {
            s.tenant = tenant;
            session.tenant_final = true;
        }
        let unnamed = session.candidate && session.responses.is_empty();
        let idle = session.in_flight == 0;
        let active = (at.max(session.active.0), seq);
        self.set_active(&place.key, active);
        if unnamed && idle {
            self.end(&place.key, Reason::Idle);
        }
    }

    /// Ends every session idle for the idle timeout at `now`.
    pub fn sweep(&mut self, now: Instant) -> Vec<Ended> {
        let mut ended = Vec::new();
        while let Some((&(at, _), key)) = self.order.first_key_value() {
            if now.saturating_duration_since(at) < self.idle_timeout {
                break;
            }
            let key = key.clone();
            let in_flight = self.sessions.get(&key).is_some_and(|s| s.in_flight > 0);
            if in_flight {
                // Busy, not idle: active as of now.
                let seq2 = self.next();
                self.set_active(&key, (now, seq2));
                continue;
            }
            ended.extend(self.end(&key, Reason::Idle));
        }
        ended
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn insert(
        &mut self,
        key: Arc<str>,
        route: &Arc<str>,
        tenant: &Arc<str>,
        at: Instant,
        candidate: bool,
    ) {
        let seq = self.next();
        let figures = Figures {
            route: route.clone(),
            tenant: tenant.clone(),
            first: at,
            last_end: None,
            turns: 0,
            model: Duration::ZERO,
            gaps: Duration::ZERO,
            gap_count: 0,
            tally: Tally::default(),
        };
        self.order.insert((at, seq), key.clone());
        if candidate {
            self.candidates.insert((at, seq), key.clone());
        }
        let session = Session {
            figures,
            in_flight: 0,
            busy_since: at,
            active: (at, seq),
            candidate,
            id: seq,
            tenant_final: false,
            responses: VecDeque::new(),
        };
        self.sessions.insert(key, session);
    }

    /// Moves the candidate held as `from` to `to`, its response's id: the
    /// key it is held under from now on. A session already held as `to`
    /// (another replica's response seen first) keeps its place, and the
    /// candidate is dropped.
    fn rekey(&mut self, from: &Arc<str>, to: Arc<str>) -> Arc<str> {
        let Some(s) = self.sessions.remove(from) else {
            return to;
        };
        self.order.remove(&s.active);
        self.candidates.remove(&s.active);
        if !self.sessions.contains_key(&to) {
            self.order.insert(s.active, to.clone());
            if s.candidate {
                self.candidates.insert(s.active, to.clone());
            }
            self.sessions.insert(to.clone(), s);
        }
        to
    }

    /// The session held as `key` was active at `active`: its place in the
    /// order (and the candidates') moves there.
    fn set_active(&mut self, key: &Arc<str>, active: (Instant, u64)) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        let previous = std::mem::replace(&mut session.active, active);
        self.order.remove(&previous);
        self.order.insert(active, key.clone());
        if session.candidate {
            self.candidates.remove(&previous);
            self.candidates.insert(active, key.clone());
        }
    }
}

/// The sum of two figures that may be unknown: known once either is.
fn sum(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

#[cfg(test)]
#[path = "table/tests.rs"]
mod tests;
