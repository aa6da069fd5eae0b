//! `sessions`: which metered requests belong to one session, and how long
//! the table that follows them holds one (docs/metrics.md, "Sessions and
//! turns").

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `sessions`: how the requests of a session are told, and the bounds of
/// the table that follows them. Applies on reload; a reload never drops the
/// sessions open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionSettings {
    /// Whether sessions are followed at all; each request's turn is read
    /// either way.
    #[serde(deserialize_with = "super::kind::boolean")]
    pub enabled: bool,
    /// Where a request's session key is read, in order, the first that
    /// gives one: each `{header: NAME}` (the header's value), or
    /// `{body: conversation}` / `{body: previous_response_id}` (the
    /// Responses API's conversation id, and the lineage of its responses).
    #[serde(deserialize_with = "super::kind::session_keys")]
    pub keys: Vec<SessionKeySpec>,
    /// A session ends when none of its requests is in flight and none has
    /// started for this long. A duration.
    #[serde(with = "super::kind::duration")]
    pub idle_timeout: Duration,
    /// Most sessions held at once (Responses requests that may start one
    /// included); past it the one idle the longest ends, as `evicted`. A
    /// count, at least 1.
    #[serde(deserialize_with = "super::kind::count")]
    pub max_sessions: usize,
}

impl Default for SessionSettings {
    fn default() -> Self {
        let header = |name| SessionKeySpec {
            header: Some(http::HeaderName::from_static(name)),
            body: None,
        };
        let body = |field| SessionKeySpec {
            header: None,
            body: Some(field),
        };
        Self {
            enabled: true,
            keys: vec![
                header("x-session-id"),
                header("x-claude-code-session-id"),
                header("x-session-affinity"),
                header("session-id"),
                header("session_id"),
                body(SessionBody::Conversation),
                body(SessionBody::PreviousResponseId),
            ],
            idle_timeout: Duration::from_secs(5 * 60),
            max_sessions: 100_000,
        }
    }
}

/// One place a session key is read: a header, or a field of a Responses
/// API body (one of the two, which `load/validate.rs` checks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionKeySpec {
    /// A request header whose value, trimmed, is the key.
    #[serde(
        default,
        deserialize_with = "super::kind::header_name",
        serialize_with = "super::show::opt_header",
        skip_serializing_if = "Option::is_none"
    )]
    pub header: Option<http::HeaderName>,
    /// A field of a Responses API request body.
    #[serde(
        default,
        deserialize_with = "super::kind::session_body",
        skip_serializing_if = "Option::is_none"
    )]
    pub body: Option<SessionBody>,
}

/// The Responses API's fields that tie a request to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionBody {
    /// `conversation`: the conversation's id is the key.
    Conversation,
    /// `previous_response_id`: a request joins the session of the response
    /// it names (its key is that session's first response's id).
    PreviousResponseId,
}
