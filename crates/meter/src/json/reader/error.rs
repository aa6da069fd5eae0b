//! The reader's one error: the input is not JSON, or not of the shape the
//! classifier reads. It carries no message, so failing costs no allocation.

use std::fmt;

/// The input is not JSON, or not of the shape the classifier reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid JSON for this event")
    }
}

impl std::error::Error for Error {}
