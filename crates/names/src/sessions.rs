//! The families of turns and sessions (docs/metrics.md, "Sessions and
//! turns").

use crate::family::Kind::{Counter, Gauge, Histogram};
use crate::family::{Family, domain, own};

pub const TURN_TTFT: Family = domain(
    "turn_time_to_first_token_seconds",
    Histogram,
    &["route", "model", "slo", "turn"],
    "Time to first token of metered requests by the kind of turn their body says they are (first, tool_result, follow_up, none).",
);
pub const TURNS: Family = domain(
    "turns_total",
    Counter,
    &["route", "model", "turn"],
    "Metered requests by the kind of turn their body says they are.",
);
pub const TURN_PROMPT_TOKENS: Family = domain(
    "turn_prompt_tokens_total",
    Counter,
    &["route", "model", "turn"],
    "Input tokens the upstream reports, by the kind of turn of their request.",
);
pub const TURN_CACHED_PROMPT_TOKENS: Family = domain(
    "turn_cached_prompt_tokens_total",
    Counter,
    &["route", "model", "turn"],
    "Input tokens the upstream reports as served from its prefix cache, by the kind of turn of their request.",
);
pub const TURN_UNREAD: Family = own(
    "tokenmeter_turn_bodies_unread_total",
    Counter,
    &["route"],
    "Metered requests of an API with conversations whose body could not be read for its turn (not JSON, nested too deep, or larger than proxy.max_request_body): counted under turn none.",
);

pub const SESSION_DURATION: Family = domain(
    "session_duration_seconds",
    Histogram,
    &["route"],
    "Sessions that ended: from their first request's arrival to their last response's end.",
);
pub const SESSION_TURNS: Family = domain(
    "session_turns",
    Histogram,
    &["route"],
    "Sessions that ended: their requests on this replica.",
);
pub const SESSION_MODEL: Family = domain(
    "session_model_seconds",
    Histogram,
    &["route"],
    "Sessions that ended: the time at least one of their requests was in flight.",
);
pub const SESSION_GAPS: Family = domain(
    "session_gap_seconds",
    Histogram,
    &["route"],
    "Gaps in sessions, one observation each: from a response's end to the session's next request, with none of its requests in flight (a tool, the client or a person).",
);
pub const SESSION_GPU_SECONDS: Family = domain(
    "session_gpu_seconds",
    Histogram,
    &["route"],
    "Sessions that ended, on routes with GPUs: the GPU-seconds charged to their requests.",
);
pub const SESSION_COST: Family = domain(
    "session_cost",
    Histogram,
    &["route", "currency"],
    "Sessions that ended, on priced routes: the cost charged to their requests.",
);
pub const SESSIONS_TOTAL: Family = domain(
    "sessions_total",
    Counter,
    &["route", "tenant", "good"],
    "Sessions that ended, by their first request's route and tenant, good when every request in them was.",
);
pub const SESSIONS_ACTIVE: Family = domain(
    "sessions_active",
    Gauge,
    &["route"],
    "Sessions open on this replica.",
);
pub const SESSIONS_ENDED: Family = own(
    "tokenmeter_sessions_ended_total",
    Counter,
    &["reason"],
    "Sessions that ended, by why: idle (past sessions.idle_timeout) or evicted (the table was full).",
);
pub const SESSION_KEYS_HASHED: Family = own(
    "tokenmeter_session_keys_hashed_total",
    Counter,
    &[],
    "Session keys longer than 256 bytes or not plain text, replaced by their SHA-256.",
);

/// The families of turns and sessions (docs/metrics.md, "Sessions and
/// turns").
pub const SESSIONS: [Family; 15] = [
    TURN_TTFT,
    TURNS,
    TURN_PROMPT_TOKENS,
    TURN_CACHED_PROMPT_TOKENS,
    TURN_UNREAD,
    SESSION_DURATION,
    SESSION_TURNS,
    SESSION_MODEL,
    SESSION_GAPS,
    SESSION_GPU_SECONDS,
    SESSION_COST,
    SESSIONS_TOTAL,
    SESSIONS_ACTIVE,
    SESSIONS_ENDED,
    SESSION_KEYS_HASHED,
];
