//! Sessions: the requests of one agent task or conversation, followed on
//! this replica (docs/metrics.md, "Sessions and turns").
//!
//! The table (`table.rs`) is state of the process, not of a
//! configuration: a reload changes how keys are read and the table's
//! bounds, never the sessions open. A request's key is read once, when it
//! starts ([`key_of`]): the first of the configuration's `sessions.keys`
//! that gives one. A key longer than [`MAX_KEY_BYTES`], or not plain
//! text, is replaced by its hash (counted); a key is never a metric label.

use std::sync::Arc;

use http::HeaderMap;

use crate::config::{SessionBody, SessionKeySpec};

pub mod table;

pub use table::{Ended, Named, Place, Reason, Table, Tally};

/// The longest key kept as it is, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// How a request names its session, if it does, and whether its key had
/// to be hashed.
pub fn key_of(
    keys: &[SessionKeySpec],
    headers: &HeaderMap,
    body: Option<&meter::RequestFacts>,
    api: meter::Api,
) -> (Option<Named>, bool) {
    for spec in keys {
        match (&spec.header, spec.body) {
            (Some(name), _) => {
                let Some(value) = headers.get(name) else {
                    continue;
                };
                let value = value.as_bytes().trim_ascii();
                if value.is_empty() {
                    continue;
                }
                let (key, hashed) = kept(value);
                return (Some(Named::Key(key)), hashed);
            }
            (None, Some(SessionBody::Conversation)) => {
                if let Some(id) = body.and_then(|b| b.conversation.as_deref()) {
                    let (key, hashed) = kept(id.as_bytes());
                    return (Some(Named::Key(key)), hashed);
                }
            }
            (None, Some(SessionBody::PreviousResponseId)) => {
                if let Some(id) = body.and_then(|b| b.previous_response_id.as_deref()) {
                    let (key, hashed) = kept(id.as_bytes());
                    return (Some(Named::Previous(key)), hashed);
                }
            }
            (None, None) => {}
        }
    }
    // A Responses request that names nothing may start a chain, where the
    // lineage is followed.
    let lineage = keys
        .iter()
        .any(|k| k.body == Some(SessionBody::PreviousResponseId));
    let responses = api == meter::Api::Responses && body.is_some();
    ((lineage && responses).then_some(Named::Candidate), false)
}

/// `raw` as a key: as it is when it is short plain text, else its hash.
fn kept(raw: &[u8]) -> (Arc<str>, bool) {
    let plain = raw.len() <= MAX_KEY_BYTES && raw.iter().all(|b| (0x20..0x7f).contains(b));
    if plain && let Ok(text) = std::str::from_utf8(raw) {
        return (Arc::from(text), false);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, raw);
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (Arc::from(format!("sha256:{hex}")), true)
}
