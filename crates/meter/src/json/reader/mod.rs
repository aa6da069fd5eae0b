//! The metering JSON reader: a pull reader over one JSON value, on which
//! every protocol classifier walks its events.
//!
//! A classifier reads an event itself: in a loop over an object,
//! [`Reader::key`] hands it each key (raw bytes, unescaped only when the key
//! has escapes) and it reads the value with the method that answers its
//! question ([`Reader::nonempty`], [`Reader::present`], [`Reader::count`], a
//! nested object or list...) or [`Reader::skip`]s it. There is no visitor
//! and no intermediate value: one loop per object in the classifier's own
//! code, strings borrowed from the event, and no allocation (escaped keys
//! and strings are unescaped into a buffer reused by the thread, and a
//! steady stream has none).
//!
//! It accepts exactly RFC 8259 JSON, as `serde_json` does (the tests check
//! this against it on damaged input): one value, optional surrounding
//! whitespace, at most [`MAX_DEPTH`] nested lists and objects. A skipped
//! value is checked like a read one: its structure, its strings' escapes
//! and control characters, its numbers' grammar. Strings are not checked
//! for UTF-8 (they are only compared or measured). Where it is cheap:
//!
//! - strings are scanned sixteen bytes at a time with SSE2 on x86_64 (eight
//!   at a time in a `u64` elsewhere), so a key costs one step;
//! - a skipped list or object is one loop over its tokens with the open
//!   lists and objects on a bit stack, not a call per element;
//! - errors carry no message (metering counts them, it does not report
//!   them), so failing costs no allocation either.
//!
//! A key repeated in an object is handed to the classifier, and read, each
//! time it appears.

mod error;
mod pull;
mod scan;
mod skip;
mod template;

pub use error::Error;
pub use pull::{MAX_DEPTH, Members, NOT_A_COUNT, Prefix, Reader, Suffix, read};
pub use template::{Skipped, Template};
