//! The keys of `sessions`: how the requests of one session are told.

use super::super::raw::fields_of;
use super::super::{SessionKeySpec, SessionSettings};
use super::key::{Table, key};

/// `sessions`.
pub(super) static SESSIONS: Table = Table {
    fields: fields_of::<SessionSettings>,
    keys: &[
        key(
            "enabled",
            "boolean",
            "`true`",
            "Whether sessions are followed (each request's turn is read either way).",
        ),
        key(
            "keys",
            "list",
            "the headers `x-session-id`, `x-claude-code-session-id`, `x-session-affinity`, \
            `session-id`, `session_id`, then `{body: conversation}`, `{body: \
            previous_response_id}`",
            "Where a request's session key is read, in order; the first that gives one wins. \
            Each entry is `{header: NAME}` or `{body: conversation}` / `{body: \
            previous_response_id}`.",
        )
        .keys(&SESSIONS_KEYS),
        key(
            "idle_timeout",
            "duration",
            "`5m`",
            "A session ends once none of its requests is in flight and none has started for \
            this long.",
        ),
        key(
            "max_sessions",
            "count",
            "`100000`",
            "Most sessions held at once, candidates included; past it a candidate is dropped \
            first, else the session idle the longest ends, as `evicted`.",
        ),
    ],
};

/// `sessions.keys`.
pub(super) static SESSIONS_KEYS: Table = Table {
    fields: fields_of::<SessionKeySpec>,
    keys: &[
        key(
            "header",
            "header name",
            "none",
            "A request header whose value is the key.",
        ),
        key(
            "body",
            "`conversation` or `previous_response_id`",
            "none",
            "A Responses API body field: the conversation's id, or the response a request \
            continues (it joins that response's session).",
        ),
    ],
};
