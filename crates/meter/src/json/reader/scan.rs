//! Scanning one token of the input: whitespace, literals, keys, numbers,
//! and strings, sixteen bytes at a time with SSE2 on x86_64 (eight at a
//! time in a `u64` elsewhere), with the unescaping of those that have
//! escapes.

use super::error::Error;

/// Skips whitespace from `pos` and returns the next byte (not consumed);
/// an error at the end of the input. The usual case, no whitespace, is one
/// comparison: every JSON whitespace byte is at most `b' '`.
#[inline(always)]
pub(super) fn peek(input: &[u8], pos: &mut usize) -> Result<u8, Error> {
    match input.get(*pos) {
        Some(&b) if b > b' ' => Ok(b),
        _ => {
            *pos = skip_whitespace(input, *pos);
            input.get(*pos).copied().ok_or(Error)
        }
    }
}

/// The index of the first byte at or after `pos` that is not JSON
/// whitespace, or `input.len()`. Out of line, and given the position by
/// value, so that callers keep theirs in a register.
#[inline(never)]
pub(super) fn skip_whitespace(input: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = input.get(pos) {
        pos += 1;
    }
    pos
}

/// After the literal `lit` at `pos`.
#[inline(always)]
pub(super) fn literal_end(input: &[u8], pos: usize, lit: &[u8]) -> Result<usize, Error> {
    match input.get(pos..pos + lit.len()) {
        Some(s) if s == lit => Ok(pos + lit.len()),
        _ => Err(Error),
    }
}

/// After the colon that follows the object key starting at `pos`, whose
/// first byte is `first`.
#[inline(always)]
pub(super) fn key_end(input: &[u8], pos: usize, first: u8) -> Result<usize, Error> {
    if first != b'"' {
        return Err(Error);
    }
    let mut pos = string_end(input, pos)?.0;
    if peek(input, &mut pos)? != b':' {
        return Err(Error);
    }
    Ok(pos + 1)
}

/// Scans the string whose opening quote is at `pos`, checking its escapes
/// and that it holds no control character. Returns the index after its
/// closing quote and whether it has escapes.
#[inline(always)]
pub(super) fn string_end(input: &[u8], pos: usize) -> Result<(usize, bool), Error> {
    let mut i = pos + 1;
    let mut escaped = false;
    loop {
        i = next_special(input, i);
        match *input.get(i).ok_or(Error)? {
            b'"' => return Ok((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += match input.get(i + 1).ok_or(Error)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' => {
                        let hex = input.get(i + 2..i + 6).ok_or(Error)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return Err(Error);
                        }
                        6
                    }
                    _ => return Err(Error),
                };
            }
            _ => return Err(Error),
        }
    }
}

/// Scans the number at `pos`,
/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`; returns the index after
/// it and whether it is an integer.
#[inline(always)]
pub(super) fn number_end(input: &[u8], pos: usize) -> Result<(usize, bool), Error> {
    let digits = |i: &mut usize| {
        let from = *i;
        while input.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - from
    };
    let mut i = pos;
    if input.get(i) == Some(&b'-') {
        i += 1;
    }
    match input.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return Err(Error),
    }
    let mut integer = true;
    if input.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return Err(Error);
        }
        integer = false;
    }
    if matches!(input.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(input.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return Err(Error);
        }
        integer = false;
    }
    Ok((i, integer))
}

/// The index of the first byte at or after `i` that is `"`, `\` or a
/// control character (below 0x20), or `input.len()`: sixteen bytes at a time
/// where the CPU has SSE2 (every x86_64 does), then eight at a time, then
/// byte by byte for the last few.
#[inline(always)]
pub(super) fn next_special(input: &[u8], mut i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    while let Some(found) = special16(input, i) {
        if found != 0 {
            return i + found.trailing_zeros() as usize;
        }
        i += 16;
    }
    next_special_swar(input, i)
}

/// The special bytes (as [`next_special`]) of the sixteen at `i`, one bit
/// each; `None` when fewer than sixteen are left.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn special16(input: &[u8], i: usize) -> Option<u32> {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, m128i, min_u8_m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };
    let bytes: [u8; 16] = input.get(i..i + 16)?.try_into().ok()?;
    let v = m128i::from(bytes);
    let splat = |b: u8| set_splat_i8_m128i(i8::from_ne_bytes([b]));
    let quote = cmp_eq_mask_i8_m128i(v, splat(b'"'));
    let backslash = cmp_eq_mask_i8_m128i(v, splat(b'\\'));
    // `min(b, 0x1f) == b` exactly for the bytes below 0x20.
    let control = cmp_eq_mask_i8_m128i(min_u8_m128i(v, splat(0x1f)), v);
    let found = move_mask_i8_m128i(bitor_m128i(bitor_m128i(quote, backslash), control));
    Some(found.cast_unsigned())
}

/// [`next_special`] without SSE2: eight bytes at a time in a `u64`.
#[inline(always)]
pub(super) fn next_special_swar(input: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = input.get(i..i + 8) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(bytes);
        // A byte's high bit is set in `zero(x)` for the first zero byte of
        // `x` (and possibly bytes after it), never before it: the lowest set
        // bit marks the first special byte exactly.
        let zero = |x: u64| x.wrapping_sub(ONES) & !x;
        let quote = zero(word ^ (ONES * u64::from(b'"')));
        let backslash = zero(word ^ (ONES * u64::from(b'\\')));
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let found = (quote | backslash | control) & HIGH;
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = input.get(i) {
        if b == b'"' || b == b'\\' || b < 0x20 {
            break;
        }
        i += 1;
    }
    i
}

/// Writes the unescaped form of a scanned string's content into `out`.
pub(super) fn unescape(raw: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    out.clear();
    let mut i = 0;
    while let Some(at) = raw[i..].iter().position(|&b| b == b'\\') {
        out.extend_from_slice(&raw[i..i + at]);
        i += at;
        let byte = match raw.get(i + 1).ok_or(Error)? {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (c, used) = unicode_escape(&raw[i..])?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                i += used;
                continue;
            }
            _ => return Err(Error),
        };
        out.push(byte);
        i += 2;
    }
    out.extend_from_slice(&raw[i..]);
    Ok(())
}

/// Decodes `\uXXXX` (or a surrogate pair `\uD8XX\uDCXX`) at the start of
/// `s`; returns the character and the bytes used. Lone surrogates fail.
pub(super) fn unicode_escape(s: &[u8]) -> Result<(char, usize), Error> {
    let hex = |at: usize| -> Result<u32, Error> {
        let digits = s.get(at..at + 4).ok_or(Error)?;
        let text = std::str::from_utf8(digits).map_err(|_| Error)?;
        u32::from_str_radix(text, 16).map_err(|_| Error)
    };
    let first = hex(2)?;
    match first {
        0xD800..=0xDBFF => {
            if s.get(6..8) != Some(b"\\u") {
                return Err(Error);
            }
            let second = hex(8)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return Err(Error);
            }
            let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
            Ok((char::from_u32(c).ok_or(Error)?, 12))
        }
        0xDC00..=0xDFFF => Err(Error),
        c => Ok((char::from_u32(c).ok_or(Error)?, 6)),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes that matter to a JSON reader, to mutate valid documents with.
    pub(in super::super) const NOISE: &[u8] =
        b"{}[]\":,\\/u0123456789abcdefABCDEFnulltrs-+.eE \t\r\n\x00\x1f\x7f\xc3\xa9\xff";

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The SSE2 scan and the portable one find the same first special
        /// byte from every offset.
        #[test]
        fn string_scans_agree(bytes in prop::collection::vec(prop::sample::select(NOISE), 0..80), plain in prop::collection::vec(0x20u8..0x7f, 0..40)) {
            let mut input = plain;
            input.extend(bytes);
            for i in 0..=input.len() {
                prop_assert_eq!(next_special(&input, i), next_special_swar(&input, i));
                let first = input[i..]
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .map_or(input.len(), |p| i + p);
                prop_assert_eq!(next_special(&input, i), first);
            }
        }
    }
}
