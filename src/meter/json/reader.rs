//! The JSON reader behind [`parse`](super::parse): a serde `Deserializer`
//! over a byte slice, built for the metering path.
//!
//! It accepts exactly RFC 8259 JSON (one value, optional surrounding
//! whitespace, at most [`MAX_DEPTH`] nested lists and objects) and drives
//! the same derived and hand-written visitors as `serde_json` would, but
//! it is cheaper where metering spends its time:
//!
//! - object keys and probed strings reach visitors as raw bytes
//!   (`deserialize_identifier`, `deserialize_bytes`), so nothing validates
//!   UTF-8 that is only compared or measured;
//! - skipped values (`IgnoredAny`) are scanned for their structure only;
//! - strings with escapes are unescaped only when a visitor asks for their
//!   content, into one scratch buffer reused by the thread, so a steady
//!   stream allocates nothing;
//! - errors carry no message (metering counts them, it does not report
//!   them), so failing costs no allocation either.
//!
//! Differences from `serde_json` that callers rely on: `deserialize_bytes`
//! on a value that is not a string behaves like `deserialize_any` (so a
//! probe sees `null`, lists and objects too), and enums are read from
//! their string form only.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};

/// Nesting of lists and objects refused (as `serde_json`: 127 levels pass).
pub const MAX_DEPTH: u32 = 128;

/// The input is not JSON, or not of the shape the visitor wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid JSON for this event")
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Error
    }
}

thread_local! {
    /// The unescaping buffer, lent to one parse at a time.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A scratch buffer that grew past this is dropped rather than kept.
const SCRATCH_KEEP: usize = 64 * 1024;

/// Reads `input` (one JSON value) with `seed`.
pub fn from_slice_seed<'de, S: DeserializeSeed<'de>>(
    input: &'de [u8],
    seed: S,
) -> Result<S::Value, Error> {
    SCRATCH.with(|cell| {
        let mut scratch = cell.take();
        let mut de = Deserializer {
            input,
            pos: 0,
            depth: 0,
            scratch: &mut scratch,
        };
        let value = seed.deserialize(&mut de);
        let end = de.ws();
        scratch.clear();
        if scratch.capacity() <= SCRATCH_KEEP {
            cell.set(scratch);
        }
        match (value, end) {
            (Ok(v), None) => Ok(v),
            _ => Err(Error),
        }
    })
}

/// Reads `input` (one JSON value) as `T`.
pub fn from_slice<'de, T: de::Deserialize<'de>>(input: &'de [u8]) -> Result<T, Error> {
    from_slice_seed(input, std::marker::PhantomData::<T>)
}

pub struct Deserializer<'de, 's> {
    input: &'de [u8],
    pos: usize,
    depth: u32,
    scratch: &'s mut Vec<u8>,
}

/// A number as read: the narrowest type that holds it.
enum Number {
    U(u64),
    I(i64),
    F(f64),
}

impl<'de> Deserializer<'de, '_> {
    /// Skips whitespace and returns the next byte, if any. Every JSON
    /// whitespace byte is at most `b' '`, so the usual case (no whitespace
    /// between tokens, as servers write events) is one comparison.
    #[inline(always)]
    fn ws(&mut self) -> Option<u8> {
        match self.input.get(self.pos) {
            Some(&b) if b > b' ' => Some(b),
            _ => self.ws_slow(),
        }
    }

    #[inline(always)]
    fn ws_slow(&mut self) -> Option<u8> {
        while let Some(&b) = self.input.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(b);
            }
            self.pos += 1;
        }
        None
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), Error> {
        if self.input[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(Error)
        }
    }

    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth >= MAX_DEPTH {
            return Err(Error);
        }
        self.pos += 1;
        Ok(())
    }

    /// Consumes the closing `close` of a list or object whose elements the
    /// visitor has read.
    fn leave(&mut self, close: u8) -> Result<(), Error> {
        if self.ws() != Some(close) {
            return Err(Error);
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(())
    }

    /// Scans the string whose opening quote is at `pos` (see
    /// [`string_end`]); returns its raw content (between the quotes) and
    /// whether it has escapes; `pos` ends after the closing quote.
    #[inline(always)]
    fn string(&mut self) -> Result<(&'de [u8], bool), Error> {
        let start = self.pos + 1;
        let (end, escaped) = string_end(self.input, self.pos)?;
        self.pos = end;
        Ok((&self.input[start..end - 1], escaped))
    }

    /// The content of the string at `pos`, unescaped into the scratch
    /// buffer when it has escapes.
    fn string_bytes<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Error> {
        let (raw, escaped) = self.string()?;
        if !escaped {
            return visitor.visit_borrowed_bytes(raw);
        }
        unescape(raw, self.scratch)?;
        visitor.visit_bytes(self.scratch)
    }

    fn string_str<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Error> {
        let (raw, escaped) = self.string()?;
        if !escaped {
            return visitor.visit_borrowed_str(std::str::from_utf8(raw).map_err(|_| Error)?);
        }
        unescape(raw, self.scratch)?;
        visitor.visit_str(std::str::from_utf8(self.scratch).map_err(|_| Error)?)
    }

    /// Scans the number at `pos` (see [`number_end`]), leaving `pos` after
    /// it; returns where it started and whether it is an integer.
    fn scan_number(&mut self) -> Result<(usize, bool), Error> {
        let start = self.pos;
        let (end, integer) = number_end(self.input, start)?;
        self.pos = end;
        Ok((start, integer))
    }

    /// Reads the number at `pos` as serde_json does: `u64`, else `i64`,
    /// else a finite `f64` (`-0` is the float -0.0).
    fn number(&mut self) -> Result<Number, Error> {
        let (start, integer) = self.scan_number()?;
        let text = &self.input[start..self.pos];
        if integer {
            let (negative, digits) = match text.split_first() {
                Some((b'-', rest)) => (true, rest),
                _ => (false, text),
            };
            let magnitude = digits.iter().try_fold(0u64, |n, &d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            });
            match (magnitude, negative) {
                (Some(n), false) => return Ok(Number::U(n)),
                (Some(n), true) if n > 0 => {
                    if let Some(v) = 0i64.checked_sub_unsigned(n) {
                        return Ok(Number::I(v));
                    }
                }
                _ => {}
            }
        }
        let text = std::str::from_utf8(text).map_err(|_| Error)?;
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Number::F(f)),
            _ => Err(Error),
        }
    }

    /// Skips one value, checking its structure.
    fn skip(&mut self) -> Result<(), Error> {
        self.pos = skip_value(self.input, self.pos, MAX_DEPTH - 1 - self.depth)?;
        Ok(())
    }

    /// Before the next element of a list or entry of an object: `None` at
    /// its closing `close`, else the element's first byte, past the comma
    /// that separates it from the one before (none before the first; a
    /// trailing comma is an error).
    #[inline(always)]
    fn next_item(&mut self, close: u8, first: &mut bool) -> Result<Option<u8>, Error> {
        let next = self.ws().ok_or(Error)?;
        if next == close {
            return Ok(None);
        }
        if std::mem::replace(first, false) {
            return Ok(Some(next));
        }
        if next != b',' {
            return Err(Error);
        }
        self.pos += 1;
        match self.ws() {
            Some(b) if b != close => Ok(Some(b)),
            _ => Err(Error),
        }
    }

    fn colon(&mut self) -> Result<(), Error> {
        if self.ws() != Some(b':') {
            return Err(Error);
        }
        self.pos += 1;
        Ok(())
    }
}

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

/// Skips whitespace from `pos` and returns the next byte (not consumed);
/// an error at the end of the input. The usual case, no whitespace, is one
/// comparison: every JSON whitespace byte is at most `b' '`.
#[inline(always)]
pub(super) fn peek(input: &[u8], pos: &mut usize) -> Result<u8, Error> {
    match input.get(*pos) {
        Some(&b) if b > b' ' => Ok(b),
        _ => peek_slow(input, pos),
    }
}

#[inline(never)]
fn peek_slow(input: &[u8], pos: &mut usize) -> Result<u8, Error> {
    while let Some(&b) = input.get(*pos) {
        if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            return Ok(b);
        }
        *pos += 1;
    }
    Err(Error)
}

/// After the literal `lit` at `pos`.
#[inline(always)]
fn literal_end(input: &[u8], pos: usize, lit: &[u8]) -> Result<usize, Error> {
    match input.get(pos..pos + lit.len()) {
        Some(s) if s == lit => Ok(pos + lit.len()),
        _ => Err(Error),
    }
}

/// After the colon that follows the object key starting at `pos`, whose
/// first byte is `first`.
#[inline(always)]
fn key_end(input: &[u8], pos: usize, first: u8) -> Result<usize, Error> {
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
fn next_special(input: &[u8], mut i: usize) -> usize {
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
fn special16(input: &[u8], i: usize) -> Option<u32> {
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
fn next_special_swar(input: &[u8], mut i: usize) -> usize {
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
fn unicode_escape(s: &[u8]) -> Result<(char, usize), Error> {
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

impl<'de> de::Deserializer<'de> for &mut Deserializer<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.ws().ok_or(Error)? {
            b'"' => self.string_str(visitor),
            b'n' => {
                self.literal(b"null")?;
                visitor.visit_unit()
            }
            b't' => {
                self.literal(b"true")?;
                visitor.visit_bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                visitor.visit_bool(false)
            }
            b'-' | b'0'..=b'9' => match self.number()? {
                Number::U(n) => visitor.visit_u64(n),
                Number::I(n) => visitor.visit_i64(n),
                Number::F(n) => visitor.visit_f64(n),
            },
            b'[' => {
                self.enter()?;
                let value = visitor.visit_seq(Elements {
                    de: &mut *self,
                    first: true,
                })?;
                self.leave(b']')?;
                Ok(value)
            }
            b'{' => {
                self.enter()?;
                let value = visitor.visit_map(Entries {
                    de: &mut *self,
                    first: true,
                })?;
                self.leave(b'}')?;
                Ok(value)
            }
            _ => Err(Error),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.ws().ok_or(Error)? {
            b'"' => self.string_bytes(visitor),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.ws().ok_or(Error)? {
            b'"' => self.string_bytes(visitor),
            _ => Err(Error),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.ws() == Some(b'n') {
            self.literal(b"null")?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.skip()?;
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.ws().ok_or(Error)? {
            b'"' => visitor.visit_enum(UnitVariant { de: self }),
            _ => Err(Error),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        unit unit_struct seq tuple tuple_struct map struct
    }
}

/// The elements of a list, for `visit_seq`.
struct Elements<'a, 'de, 's> {
    de: &'a mut Deserializer<'de, 's>,
    first: bool,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.de.next_item(b']', &mut self.first)?.is_none() {
            return Ok(None);
        }
        seed.deserialize(&mut *self.de).map(Some)
    }
}

/// The entries of an object, for `visit_map`.
struct Entries<'a, 'de, 's> {
    de: &'a mut Deserializer<'de, 's>,
    first: bool,
}

impl<'de> de::MapAccess<'de> for Entries<'_, 'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.de.next_item(b'}', &mut self.first)? {
            None => Ok(None),
            Some(b'"') => seed.deserialize(Key { de: &mut *self.de }).map(Some),
            Some(_) => Err(Error),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        self.de.colon()?;
        seed.deserialize(&mut *self.de)
    }
}

/// An object key (the string at `pos`): raw bytes for identifiers, text for
/// visitors that want text.
struct Key<'a, 'de, 's> {
    de: &'a mut Deserializer<'de, 's>,
}

impl<'de> de::Deserializer<'de> for Key<'_, 'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.de.string_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.de.string_bytes(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.de.string_bytes(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.de.string()?;
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct
        map struct enum
    }
}

/// An enum read from its string form: a unit variant.
struct UnitVariant<'a, 'de, 's> {
    de: &'a mut Deserializer<'de, 's>,
}

impl<'de> de::EnumAccess<'de> for UnitVariant<'_, 'de, '_> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let variant = seed.deserialize(Key { de: &mut *self.de })?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for UnitVariant<'_, 'de, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, Error> {
        Err(Error)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Error> {
        Err(Error)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::de::IgnoredAny;
    use serde_json::Value;

    /// Our reading of `input` as a JSON tree, and serde_json's, with floats
    /// to 12 significant digits: serde_json's default float parser is not
    /// correctly rounded (std's, used here, is), so the last bits may differ.
    fn both(input: &[u8]) -> (Option<Value>, Option<Value>) {
        (
            from_slice::<Value>(input).ok().map(rounded),
            serde_json::from_slice::<Value>(input).ok().map(rounded),
        )
    }

    fn rounded(v: Value) -> Value {
        match v {
            Value::Number(n) if n.is_f64() => {
                Value::String(format!("{:.11e}", n.as_f64().unwrap_or_default()))
            }
            Value::Array(a) => Value::Array(a.into_iter().map(rounded).collect()),
            Value::Object(o) => {
                Value::Object(o.into_iter().map(|(k, v)| (k, rounded(v))).collect())
            }
            v => v,
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1000i32..1000, 0u32..1000)
                .prop_map(|(a, b)| Value::from(f64::from(a) + f64::from(b) / 1000.0)),
            "(\\PC|[\"\\\\/\u{0}-\u{1f}\u{7f}-\u{10ffff}]){0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("\\PC{0,6}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Bytes that matter to a JSON reader, to mutate valid documents with.
    const NOISE: &[u8] =
        b"{}[]\":,\\/u0123456789abcdefABCDEFnulltrs-+.eE \t\r\n\x00\x1f\x7f\xc3\xa9\xff";

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Every document serde_json writes reads back as the same tree.
        #[test]
        fn reads_what_serde_json_writes(v in value(), pretty in any::<bool>()) {
            let text = if pretty {
                serde_json::to_vec_pretty(&v).unwrap()
            } else {
                serde_json::to_vec(&v).unwrap()
            };
            prop_assert_eq!(from_slice::<Value>(&text).ok(), Some(v));
            prop_assert!(from_slice::<IgnoredAny>(&text).is_ok());
        }

        /// On damaged documents it accepts and rejects exactly what
        /// serde_json does, and reads the same tree when it accepts.
        #[test]
        fn agrees_with_serde_json_on_damaged_input(
            v in value(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..3, prop::sample::select(NOISE)), 1..4),
        ) {
            let mut text = serde_json::to_vec(&v).unwrap();
            for (at, op, byte) in edits {
                let i = at.index(text.len() + 1);
                match op {
                    0 => text.insert(i, byte),
                    1 if i < text.len() => { text.remove(i); }
                    _ if i < text.len() => text[i] = byte,
                    _ => text.push(byte),
                }
            }
            let (ours, theirs) = both(&text);
            prop_assert_eq!(ours, theirs, "input {:?}", String::from_utf8_lossy(&text));
            prop_assert_eq!(
                from_slice::<IgnoredAny>(&text).is_ok(),
                serde_json::from_slice::<IgnoredAny>(&text).is_ok(),
                "input {:?}", String::from_utf8_lossy(&text)
            );
        }
    }

    /// Nesting is bounded like serde_json's trees (127 levels), skipped
    /// values included (serde_json skips without a bound; this reader
    /// recurses, so it keeps the bound there too).
    #[test]
    fn nesting_is_bounded() {
        for depth in [1, 127, 128, 129, 100_000] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let (ours, theirs) = both(text.as_bytes());
            assert_eq!(ours.is_some(), theirs.is_some(), "depth {depth}");
            assert_eq!(
                from_slice::<IgnoredAny>(text.as_bytes()).is_ok(),
                depth <= 127
            );
        }
    }

    #[test]
    fn edge_cases_agree_with_serde_json() {
        let cases: &[&[u8]] = &[
            b"",
            b" ",
            b"null",
            b" null ",
            b"nul",
            b"nulll",
            b"-",
            b"-0",
            b"01",
            b"1.",
            b"1.5e",
            b"1e+5",
            b"18446744073709551615",
            b"18446744073709551616",
            b"-9223372036854775808",
            b"-9223372036854775809",
            b"1e999",
            br#""\ud83d\ude00""#,
            br#""\ud83d""#,
            br#""\ude00""#,
            br#""\u00e9\n\t\"""#,
            br#""\x""#,
            b"\"a\x01b\"",
            b"\"\xff\"",
            b"[1,]",
            b"[,1]",
            b"[1 2]",
            br#"{"a":1,}"#,
            br#"{"a" 1}"#,
            br#"{1:2}"#,
            br#"{"a":1}x"#,
            b"[]",
            b"{}",
            b"[[]]",
            b"\xef\xbb\xbf{}",
            b"\"abcdefgh\\\"ijklmnopq\"",
            b"\"0123456789abcdef\x1f\"",
        ];
        for case in cases {
            let (ours, theirs) = both(case);
            assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(case));
        }
    }

    #[test]
    fn keys_and_strings_reach_visitors_unescaped() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct T {
            kind: Option<u64>,
        }
        // An escaped key still names its field.
        assert_eq!(
            from_slice::<T>(br#"{"k\u0069nd":3}"#),
            Ok(T { kind: Some(3) })
        );
        assert_eq!(
            from_slice::<T>(br#"{"other":"x\"y","kind":4}"#),
            Ok(T { kind: Some(4) })
        );
        assert_eq!(from_slice::<T>(br#"{"kind":3,"kind":4}"#), Err(Error));
    }
}
