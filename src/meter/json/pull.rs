//! A pull reader over one JSON value, for the protocol classifiers.
//!
//! A classifier walks the event itself: [`Reader::object`] hands it each
//! key (raw bytes, unescaped only when the key has escapes), and it reads
//! the value with the method that answers its question ([`Reader::nonempty`],
//! [`Reader::count`], a nested [`Reader::object`] or [`Reader::list`]...)
//! or [`Reader::skip`]s it. Everything stays in one loop per object with
//! the position in a register: no visitor, no intermediate value, no
//! allocation (escaped keys and strings are unescaped into a buffer reused
//! by the thread).
//!
//! The input must be exactly one RFC 8259 value, as [`super::reader`]
//! checks it: every skipped value is checked for its structure, strings
//! for their escapes and control characters, numbers for their grammar,
//! nesting is bounded by [`MAX_DEPTH`], and only whitespace may follow.

use std::cell::Cell;

use super::reader::{Error, MAX_DEPTH, number_end, peek, skip_value, string_end, unescape};

thread_local! {
    /// The unescaping buffer, lent to one read at a time.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A scratch buffer that grew past this is dropped rather than kept.
const SCRATCH_KEEP: usize = 64 * 1024;

/// Reads `input`, one JSON value surrounded by optional whitespace, with
/// `value`, which must read that value whole.
pub fn read<'a, T>(
    input: &'a [u8],
    value: impl FnOnce(&mut Reader<'a>) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut r = Reader {
        input,
        pos: 0,
        depth: 0,
        scratch: SCRATCH.with(Cell::take),
    };
    let out = value(&mut r);
    let end = peek(input, &mut r.pos);
    let mut scratch = std::mem::take(&mut r.scratch);
    if scratch.capacity() <= SCRATCH_KEEP {
        scratch.clear();
        SCRATCH.with(|cell| cell.set(scratch));
    }
    match (out, end) {
        (Ok(v), Err(Error)) => Ok(v),
        _ => Err(Error),
    }
}

/// The reader's position in the value being read.
pub struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
    /// Lists and objects open around the position.
    depth: u32,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Reader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("pos", &self.pos).finish()
    }
}

impl<'a> Reader<'a> {
    /// The first byte of the next value, past whitespace.
    #[inline(always)]
    pub fn peek(&mut self) -> Result<u8, Error> {
        peek(self.input, &mut self.pos)
    }

    /// Skips the next value, checking it. Strings, numbers and `null`, the
    /// values skipped most, are scanned here; lists, objects and the rest
    /// by the reader's skip loop.
    #[inline(always)]
    pub fn skip(&mut self) -> Result<(), Error> {
        self.pos = match self.peek()? {
            b'"' => string_end(self.input, self.pos)?.0,
            b'0'..=b'9' => number_end(self.input, self.pos)?.0,
            b'n' => return self.null().map(drop),
            _ => skip_value(self.input, self.pos, MAX_DEPTH - 1 - self.depth)?,
        };
        Ok(())
    }

    /// Reads an object, calling `entry` with each key; `entry` must read
    /// the key's value. Any other value is an error.
    #[inline(always)]
    pub fn object(
        &mut self,
        entry: impl FnMut(&mut Self, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if self.peek()? != b'{' {
            return Err(Error);
        }
        self.object_or_null(entry).map(drop)
    }

    /// [`object`](Self::object), or `null` for no object (`false`).
    #[inline(always)]
    pub fn object_or_null(
        &mut self,
        mut entry: impl FnMut(&mut Self, &[u8]) -> Result<(), Error>,
    ) -> Result<bool, Error> {
        match self.peek()? {
            b'{' => {}
            b'n' => return self.null(),
            _ => return Err(Error),
        }
        self.enter()?;
        if self.peek()? == b'}' {
            return self.leave();
        }
        loop {
            if self.peek()? != b'"' {
                return Err(Error);
            }
            let start = self.pos + 1;
            let (end, escaped) = string_end(self.input, self.pos)?;
            self.pos = end;
            if self.peek()? != b':' {
                return Err(Error);
            }
            self.pos += 1;
            let key = &self.input[start..end - 1];
            if escaped {
                let mut buf = std::mem::take(&mut self.scratch);
                unescape(key, &mut buf)?;
                let read = entry(self, &buf);
                self.scratch = buf;
                read?;
            } else {
                entry(self, key)?;
            }
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => return self.leave(),
                _ => return Err(Error),
            }
        }
    }

    /// Reads a list, calling `element` for each element, which it must
    /// read. `null` is no list (`false`); any other value is an error.
    #[inline(always)]
    pub fn list_or_null(
        &mut self,
        mut element: impl FnMut(&mut Self) -> Result<(), Error>,
    ) -> Result<bool, Error> {
        match self.peek()? {
            b'[' => {}
            b'n' => return self.null(),
            _ => return Err(Error),
        }
        self.enter()?;
        if self.peek()? == b']' {
            return self.leave();
        }
        loop {
            element(self)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => return self.leave(),
                _ => return Err(Error),
            }
        }
    }

    /// Reads a string with `content` (given the unescaped bytes, not
    /// checked for UTF-8); `null` is `None`, any other value an error.
    #[inline]
    pub fn string_or_null<T>(
        &mut self,
        content: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, Error> {
        match self.peek()? {
            b'"' => {}
            b'n' => return self.null().map(|_| None),
            _ => return Err(Error),
        }
        let start = self.pos + 1;
        let (end, escaped) = string_end(self.input, self.pos)?;
        self.pos = end;
        let raw = &self.input[start..end - 1];
        if !escaped {
            return Ok(Some(content(raw)));
        }
        unescape(raw, &mut self.scratch)?;
        Ok(Some(content(&self.scratch)))
    }

    /// Whether the next value is a non-empty string or a non-empty list;
    /// anything else (`null`, `""`, `[]`, a number, an object) is empty.
    #[inline]
    pub fn nonempty(&mut self) -> Result<bool, Error> {
        match self.peek()? {
            b'"' => self.nonempty_string(),
            b'[' => self.nonempty_list(),
            _ => self.skip().map(|()| false),
        }
    }

    /// Whether the next value is there: an object (even `{}`), a non-empty
    /// string or list, a number or `true`; not `null`, `false`, `""`, `[]`.
    #[inline]
    pub fn present(&mut self) -> Result<bool, Error> {
        match self.peek()? {
            b'"' => self.nonempty_string(),
            b'[' => self.nonempty_list(),
            b'n' | b'f' => self.skip().map(|()| false),
            _ => self.skip().map(|()| true),
        }
    }

    /// Whether the next value is anything but `null`.
    #[inline]
    pub fn not_null(&mut self) -> Result<bool, Error> {
        let null = self.peek()? == b'n';
        self.skip().map(|()| !null)
    }

    /// Whether the next value is `true` (not `"true"`, not `1`).
    #[inline]
    pub fn is_true(&mut self) -> Result<bool, Error> {
        let yes = self.peek()? == b't';
        self.skip().map(|()| yes)
    }

    /// Whether the next value is the string `s`.
    #[inline]
    pub fn is_string(&mut self, s: &[u8]) -> Result<bool, Error> {
        if self.peek()? != b'"' {
            return self.skip().map(|()| false);
        }
        self.string_or_null(|v| v == s).map(|v| v == Some(true))
    }

    /// A token count: the next value if it is a non-negative integer that
    /// fits in a `u64`; anything else (a float, a string, a negative
    /// number, `-0`) reads as not reported, so that one odd field never
    /// fails the rest of the event.
    #[inline]
    pub fn count(&mut self) -> Result<Option<u64>, Error> {
        if !self.peek()?.is_ascii_digit() {
            return self.skip().map(|()| None);
        }
        let start = self.pos;
        let (end, integer) = number_end(self.input, start)?;
        self.pos = end;
        if !integer {
            return Ok(None);
        }
        Ok(self.input[start..end].iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        }))
    }

    fn nonempty_string(&mut self) -> Result<bool, Error> {
        let start = self.pos;
        self.pos = string_end(self.input, start)?.0;
        // An escape never unescapes to nothing: empty is `""` exactly.
        Ok(self.pos > start + 2)
    }

    fn nonempty_list(&mut self) -> Result<bool, Error> {
        let mut after = self.pos + 1;
        let empty = peek(self.input, &mut after)? == b']';
        self.skip().map(|()| !empty)
    }

    fn null(&mut self) -> Result<bool, Error> {
        if self.input.get(self.pos..self.pos + 4) != Some(b"null") {
            return Err(Error);
        }
        self.pos += 4;
        Ok(false)
    }

    #[inline(always)]
    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth >= MAX_DEPTH {
            return Err(Error);
        }
        self.pos += 1;
        Ok(())
    }

    #[inline(always)]
    fn leave(&mut self) -> Result<bool, Error> {
        self.pos += 1;
        self.depth -= 1;
        Ok(true)
    }
}
