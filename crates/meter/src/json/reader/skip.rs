//! Skipping a value whole ([`skip_value`]), as `Reader::skip` does for
//! lists and objects: one loop over its tokens, checked like a read value,
//! with the lists and objects open in it kept on a bit stack rather than a
//! call per element.

use super::error::Error;
use super::scan::{key_end, literal_end, number_end, peek, string_end};

/// Skips the value at `pos` (after whitespace), checking its structure;
/// returns the index after it. `room` is how many lists and objects it may
/// open. One loop over the value's tokens, the lists and objects open in it
/// kept as a bit stack (1 for an object), so that a skipped value costs no
/// call per element and its position stays in a register.
pub(super) fn skip_value(input: &[u8], mut pos: usize, room: u32) -> Result<usize, Error> {
    let mut stack: u128 = 0;
    let mut open: u32 = 0;
    'value: loop {
        let b = peek(input, &mut pos)?;
        match b {
            b'"' => pos = string_end(input, pos)?.0,
            b'-' | b'0'..=b'9' => pos = number_end(input, pos)?.0,
            b'n' => pos = literal_end(input, pos, b"null")?,
            b't' => pos = literal_end(input, pos, b"true")?,
            b'f' => pos = literal_end(input, pos, b"false")?,
            b'[' | b'{' => {
                if open >= room {
                    return Err(Error);
                }
                let object = b == b'{';
                pos += 1;
                let next = peek(input, &mut pos)?;
                // `]` and `}` are two above `[` and `{`.
                if next == b + 2 {
                    pos += 1;
                } else {
                    open += 1;
                    stack = stack << 1 | u128::from(object);
                    if object {
                        pos = key_end(input, pos, next)?;
                    }
                    continue 'value;
                }
            }
            _ => return Err(Error),
        }
        // After a value: close the lists and objects that end here, up to
        // the next comma or the end of the skipped value.
        loop {
            if open == 0 {
                return Ok(pos);
            }
            let b = peek(input, &mut pos)?;
            let object = stack & 1 == 1;
            if b == b',' {
                pos += 1;
                if object {
                    let next = peek(input, &mut pos)?;
                    pos = key_end(input, pos, next)?;
                }
                continue 'value;
            }
            if b != if object { b'}' } else { b']' } {
                return Err(Error);
            }
            pos += 1;
            open -= 1;
            stack >>= 1;
        }
    }
}
