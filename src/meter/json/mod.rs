//! JSON for the protocol modules: the metering reader ([`reader`]) they
//! walk their events with, and what they answer about an event's output.
//!
//! This module must not know any protocol: the reader's questions are
//! generic (is this string non-empty? is this value there? what count is
//! this?), the protocol modules decide what they mean.

pub mod reader;

pub use reader::{Error, Members, Prefix, Reader, Suffix};

/// What a value (an event, a choice, a part) carries of generated output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Output {
    /// Any generated output: text, refusal, reasoning, tool call.
    pub token: bool,
    /// Output the user sees: text, refusal or tool call, not reasoning.
    pub visible: bool,
}

impl Output {
    /// No output.
    pub const NONE: Output = Output {
        token: false,
        visible: false,
    };

    /// Visible output when `yes`.
    pub fn visible(yes: bool) -> Output {
        Output {
            token: yes,
            visible: yes,
        }
    }

    /// Reasoning (generated but not visible) output when `yes`.
    pub fn reasoning(yes: bool) -> Output {
        Output {
            token: yes,
            visible: false,
        }
    }

    /// Both outputs together.
    pub fn or(self, other: Output) -> Output {
        Output {
            token: self.token || other.token,
            visible: self.visible || other.visible,
        }
    }
}

/// Reads `data` (one JSON value, whitespace around it allowed) with
/// `value` on the metering reader, mapping any failure to
/// [`ParseError::InvalidJson`](super::ParseError::InvalidJson).
pub fn read<'a, T>(
    data: &'a [u8],
    value: impl FnOnce(&mut Reader<'a>) -> Result<T, Error>,
) -> Result<T, super::ParseError> {
    reader::read(data, value).map_err(|_| super::ParseError::InvalidJson)
}
