//! JSON for the protocol modules: the metering reader ([`reader`]) they
//! walk their events with, and what they answer about an event's output.
//!
//! This module must not know any protocol: the reader's questions are
//! generic (is this string non-empty? is this value there? what count is
//! this?), the protocol modules decide what they mean.

pub mod reader;

pub use reader::{Error, Members, NOT_A_COUNT, Prefix, Reader, Skipped, Suffix, Template};

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
) -> Result<T, super::event::ParseError> {
    reader::read(data, value).map_err(|_| super::event::ParseError::InvalidJson)
}

/// Test support for the classifiers that keep state across a stream's
/// events: consecutive events of a capture, each damaged at one byte or
/// not at all.
#[cfg(test)]
pub(crate) mod damage {
    use proptest::prelude::*;

    /// One event's damage: whether, where, how (0 replaces the byte, 1
    /// removes it, 2 and 3 insert one) and with which byte.
    pub type Damage = (bool, usize, u8, u8);

    /// Damage for up to a dozen events, with the bytes that break JSON.
    pub fn damages() -> impl Strategy<Value = Vec<Damage>> {
        prop::collection::vec(
            (
                any::<bool>(),
                0usize..400,
                0u8..4,
                prop::sample::select(&b"0123456789,:\"{}[] ne\\x"[..]),
            ),
            1..12,
        )
    }

    /// The events from `start` on (cycling), each damaged as `damage`
    /// says; with `end`, the even ways fall within the last `end` bytes.
    pub fn damaged(
        events: &[Vec<u8>],
        start: usize,
        damage: &[Damage],
        end: Option<usize>,
    ) -> Vec<Vec<u8>> {
        damage
            .iter()
            .enumerate()
            .map(|(i, &(damaged, at, how, byte))| {
                let mut data = events[(start + i) % events.len()].clone();
                let at = match end {
                    Some(end) if how % 2 == 0 => data.len().saturating_sub(at % end),
                    _ => at % (data.len() + 1),
                };
                if damaged {
                    match how {
                        0 if at < data.len() => data[at] = byte,
                        1 if at < data.len() => drop(data.remove(at)),
                        _ => data.insert(at, byte),
                    }
                }
                data
            })
            .collect()
    }
}
