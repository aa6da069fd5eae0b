//! The pull reader itself: [`read`], the [`Reader`] a classifier walks an
//! event with, and the [`Prefix`], [`Suffix`] and [`Members`] with which it
//! resumes or closes early what the stream's next events repeat.

use std::cell::Cell;

use super::error::Error;
use super::scan::{literal_end, number_end, peek, string_end, unescape};
use super::skip::skip_value;
use super::template::{Kind, Skipped};

/// Nesting of lists and objects refused (as `serde_json`: 127 levels pass).
pub const MAX_DEPTH: u32 = 128;

thread_local! {
    /// The unescaping buffer, lent to one read at a time.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A scratch buffer that grew past this is dropped rather than kept.
const SCRATCH_KEEP: usize = 64 * 1024;

/// What [`Reader::count`] reads for a value that is not a token count.
pub const NOT_A_COUNT: u64 = u64::MAX;

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
        first: false,
        scratch: None,
        skipped: Skipped::default(),
    };
    let out = value(&mut r);
    let end = peek(input, &mut r.pos);
    if let Some(mut scratch) = r.scratch.take()
        && scratch.capacity() <= SCRATCH_KEEP
    {
        scratch.clear();
        SCRATCH.with(|cell| cell.set(scratch));
    }
    match (out, end) {
        (Ok(v), Err(Error)) => Ok(v),
        _ => Err(Error),
    }
}

/// The start of an event that the next events of the same stream may repeat
/// byte for byte, such as the envelope of a chat chunk before its
/// `choices` (`id`, `object`, `created`, `model`...): the bytes of one
/// event up to and with a comma between two members of its outermost
/// object ([`Reader::boundary`]).
///
/// An event that starts with the same bytes is resumed at that comma
/// ([`Reader::open_object_after`]) instead of read from its start: same
/// bytes, so the same reader state there and the same verdicts on them
/// (the comma itself ends any number before it, so no byte after the
/// prefix took part in reading it). What the caller made of those bytes it
/// keeps itself, beside the prefix.
#[derive(Debug, Default)]
pub struct Prefix {
    bytes: Vec<u8>,
}

impl Prefix {
    /// The longest prefix kept, in bytes: each stream holds its own, and a
    /// longer one is forgotten instead (its events are read whole).
    pub const MAX_LEN: usize = 1024;

    /// Makes the prefix `input` up to and with its comma at `boundary`, as
    /// [`Reader::boundary`] found it while reading `input` (or none, past
    /// [`MAX_LEN`](Self::MAX_LEN), or when `input`'s value is not an
    /// object).
    pub fn set(&mut self, input: &[u8], boundary: usize) {
        self.bytes.clear();
        let object = input.trim_ascii_start().first() == Some(&b'{');
        if object && boundary < Self::MAX_LEN {
            self.bytes.extend_from_slice(&input[..=boundary]);
        }
    }

    /// Its length in bytes (0 when there is none).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The end of an object that the same object in the next events of a
/// stream may repeat byte for byte, such as the `"modelVersion"` and
/// `"responseId"` after a Gemini chunk's candidates and usage: the bytes
/// from a comma between two of its members to its closing brace, where the
/// caller skipped every member. An object read with [`Members`] keeps its
/// suffix in one.
///
/// An object that goes on with the same bytes from a comma is closed there
/// instead of read to its end: same bytes from the same reader state
/// (between two members of an object), so the same verdicts on them, and
/// the caller skipped what they hold.
#[derive(Debug, Default)]
pub struct Suffix {
    bytes: Vec<u8>,
    /// Where its members' commas are in `bytes` (the first at 0): the
    /// object may also go on with the suffix from any of them, as when a
    /// skipped member before them changes from chunk to chunk (Gemini's
    /// `totalTokenCount`).
    commas: [u32; Suffix::COMMAS],
    len_commas: u8,
}

impl Suffix {
    /// The longest suffix kept, in bytes, as [`Prefix::MAX_LEN`]; a longer
    /// one is forgotten instead (its object is read whole).
    pub const MAX_LEN: usize = 1024;

    /// Commas kept, from the first: where the suffix may be resumed from.
    const COMMAS: usize = 4;

    /// Its length in bytes (0 when there is none).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// A loop over the members of an open object that remembers its
/// [`Suffix`] for the next event: `while let Some(key) = m.key(r)? { .. }`
/// in place of [`Reader::key`], with [`counted`](Self::counted) called for
/// every member the caller reads rather than skips. With no suffix it is
/// that loop and nothing more.
#[derive(Debug)]
pub struct Members<'s> {
    suffix: Option<&'s mut Suffix>,
    /// The comma before the members skipped since the last counted one.
    skipped_from: Option<usize>,
    /// Those members' commas, as offsets from it.
    commas: [u32; Suffix::COMMAS],
    len_commas: usize,
}

impl<'s> Members<'s> {
    /// The members of the object just opened, closed early at `suffix`
    /// (then replaced by this object's) when there is one.
    pub fn new(suffix: Option<&'s mut Suffix>) -> Self {
        Self {
            suffix,
            skipped_from: None,
            commas: [0; Suffix::COMMAS],
            len_commas: 0,
        }
    }

    /// The next key, as [`Reader::key`]; `None` once the object is closed,
    /// at its brace or where the rest of it is the suffix.
    #[inline(always)]
    pub fn key<'r>(&mut self, r: &'r mut Reader<'_>) -> Result<Option<&'r [u8]>, Error> {
        let Some(suffix) = self.suffix.as_deref_mut() else {
            return r.key();
        };
        if let Some(at) = r.comma() {
            if r.close_at(suffix) {
                return Ok(None);
            }
            let from = *self.skipped_from.get_or_insert(at);
            if self.len_commas < Suffix::COMMAS {
                // Within `Suffix::MAX_LEN` of `from` whenever it is kept.
                self.commas[self.len_commas] = u32::try_from(at - from).unwrap_or(u32::MAX);
                self.len_commas += 1;
            }
        }
        if r.peek()? == b'}' {
            r.keep_suffix(self.skipped_from, &self.commas[..self.len_commas], suffix);
        }
        r.key()
    }

    /// The member whose key was just read counts: the suffix starts after
    /// it, if at all.
    #[inline]
    pub fn counted(&mut self) {
        self.skipped_from = None;
        self.len_commas = 0;
    }
}

/// The reader's position in the value being read.
///
/// Objects and lists are read in loops: [`open_object`](Self::open_object)
/// then `while let Some(key) = r.key()? { match key { .. } }`, each arm
/// reading the key's value (or [`skip`](Self::skip)ping it);
/// [`open_list_or_null`](Self::open_list_or_null) then
/// `while r.element()? { .. }`, each pass reading one element.
pub struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
    /// Lists and objects open around the position.
    depth: u32,
    /// The next key or element is the first of the object or list opened
    /// last (no comma before it).
    first: bool,
    /// The thread's unescaping buffer, taken at the first escape.
    scratch: Option<Vec<u8>>,
    /// Where the strings and numbers skipped so far are, for a
    /// [`Template`](super::Template).
    skipped: Skipped,
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
    /// by the skip loop.
    #[inline(always)]
    pub fn skip(&mut self) -> Result<(), Error> {
        let (end, kind) = match self.peek()? {
            b'"' => (string_end(self.input, self.pos)?.0, Kind::String),
            b'0'..=b'9' => (number_end(self.input, self.pos)?.0, Kind::Number),
            b'n' => return self.null().map(drop),
            _ => {
                self.pos = skip_value(self.input, self.pos, MAX_DEPTH - 1 - self.depth)?;
                return Ok(());
            }
        };
        // `peek` moved past any whitespace: the value starts at `pos`.
        self.skipped.push(self.pos, end, kind);
        self.pos = end;
        Ok(())
    }

    /// Where the strings and numbers skipped so far are: what any other
    /// string or number in their place would leave the same, whatever the
    /// caller asked of the reader (it asked nothing of their content).
    pub fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    /// Ends the read here: the caller needs nothing more from this input,
    /// and the rest of it is neither read nor checked (`read` then
    /// succeeds). For events whose first keys say all there is to know.
    pub fn leave_the_rest(&mut self) {
        self.pos = self.input.len();
    }

    /// Opens the object at the position, to be read with [`key`](Self::key).
    /// Any other value is an error.
    #[inline(always)]
    pub fn open_object(&mut self) -> Result<(), Error> {
        if self.peek()? != b'{' {
            return Err(Error);
        }
        self.enter()
    }

    /// Opens the outermost object like [`open_object`](Self::open_object),
    /// or, when the input starts with `prefix`, resumes it at the comma
    /// that ends the prefix: whether it resumed. A caller that resumes
    /// takes back what it made of the prefix's bytes when it set it.
    #[inline]
    pub fn open_object_after(&mut self, prefix: &Prefix) -> Result<bool, Error> {
        if self.depth == 0
            && self.pos == 0
            && !prefix.is_empty()
            && self.input.starts_with(&prefix.bytes)
        {
            self.pos = prefix.len() - 1;
            self.depth = 1;
            self.first = false;
            return Ok(true);
        }
        self.open_object().map(|()| false)
    }

    /// Where a [`Prefix`] may end: the position of the next byte, past
    /// whitespace, when it is a comma between two members of the outermost
    /// object. To be asked between members, before [`key`](Self::key).
    #[inline]
    pub fn boundary(&mut self) -> Option<usize> {
        if self.depth != 1 {
            return None;
        }
        self.comma()
    }

    /// The position of the next byte, past whitespace, when it is a comma
    /// between two members of the object being read: where a [`Suffix`]
    /// may start. To be asked between members, before [`key`](Self::key).
    #[inline]
    fn comma(&mut self) -> Option<usize> {
        (self.peek() == Ok(b',')).then_some(self.pos)
    }

    /// At a [`comma`](Self::comma): when the input goes on with `suffix`,
    /// passes it, the object closed, and answers `true` (the caller's loop
    /// over the object ends). Otherwise nothing moves.
    #[inline]
    fn close_at(&mut self, suffix: &Suffix) -> bool {
        if self.depth == 0 {
            return false;
        }
        let rest = self.input.get(self.pos..).unwrap_or_default();
        for &at in &suffix.commas[..usize::from(suffix.len_commas)] {
            let Some(tail) = suffix.bytes.get(at as usize..) else {
                continue;
            };
            if rest.starts_with(tail) {
                self.pos += tail.len();
                self.depth -= 1;
                return true;
            }
        }
        false
    }

    /// Makes `suffix` the object about to close (at the position, on its
    /// brace) from its comma at `from` (as [`comma`](Self::comma) found it
    /// while reading it, every member from there skipped) to that brace,
    /// with the `commas` of its members (offsets from `from`, at most
    /// [`Suffix::COMMAS`]); none for no comma, or past [`Suffix::MAX_LEN`].
    fn keep_suffix(&self, from: Option<usize>, commas: &[u32], suffix: &mut Suffix) {
        suffix.bytes.clear();
        suffix.len_commas = 0;
        if let Some(at) = from
            && self.pos - at < Suffix::MAX_LEN
        {
            suffix.bytes.extend_from_slice(&self.input[at..=self.pos]);
            suffix.commas[..commas.len()].copy_from_slice(commas);
            suffix.len_commas = commas.len() as u8;
        }
    }

    /// [`open_object`](Self::open_object), or `null` for no object: whether
    /// there is one to read.
    #[inline(always)]
    pub fn open_object_or_null(&mut self) -> Result<bool, Error> {
        match self.peek()? {
            b'{' => self.enter().map(|()| true),
            b'n' => self.null(),
            _ => Err(Error),
        }
    }

    /// The next key of the open object (unescaped), past its colon, for the
    /// caller to read its value; `None` once the object is closed.
    #[inline(always)]
    pub fn key(&mut self) -> Result<Option<&[u8]>, Error> {
        let first = std::mem::replace(&mut self.first, false);
        match self.peek()? {
            b'"' if first => {}
            b',' if !first => {
                self.pos += 1;
                if self.peek()? != b'"' {
                    return Err(Error);
                }
            }
            b'}' => return self.leave().map(|()| None),
            _ => return Err(Error),
        }
        let (key, escaped) = self.scan_string()?;
        if self.peek()? != b':' {
            return Err(Error);
        }
        self.pos += 1;
        if escaped {
            return self.unescaped(key).map(Some);
        }
        Ok(Some(key))
    }

    /// Opens the list at the position, to be read with
    /// [`element`](Self::element), or `null` for no list: whether there is
    /// one to read. Any other value is an error.
    #[inline(always)]
    pub fn open_list_or_null(&mut self) -> Result<bool, Error> {
        match self.peek()? {
            b'[' => self.enter().map(|()| true),
            b'n' => self.null(),
            _ => Err(Error),
        }
    }

    /// Whether the open list has another element, for the caller to read
    /// (past the comma before it); `false` once the list is closed.
    #[inline(always)]
    pub fn element(&mut self) -> Result<bool, Error> {
        let first = std::mem::replace(&mut self.first, false);
        match self.peek()? {
            b']' => self.leave().map(|()| false),
            b',' if !first => {
                self.pos += 1;
                if self.peek()? == b']' {
                    return Err(Error);
                }
                Ok(true)
            }
            _ if first => Ok(true),
            _ => Err(Error),
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
        let (raw, escaped) = self.scan_string()?;
        if escaped {
            return self.unescaped(raw).map(|s| Some(content(s)));
        }
        Ok(Some(content(raw)))
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

    /// [`nonempty`](Self::nonempty), with where the value is when it is a
    /// string: the index of its opening quote and the index after its
    /// closing one in the input, for a [`Template`](super::Template).
    #[inline]
    pub fn nonempty_span(&mut self) -> Result<(bool, Option<(usize, usize)>), Error> {
        if self.peek()? != b'"' {
            return self.nonempty().map(|yes| (yes, None));
        }
        let start = self.pos;
        let yes = self.nonempty_string()?;
        Ok((yes, Some((start, self.pos))))
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
    #[inline(always)]
    pub fn is_string(&mut self, s: &[u8]) -> Result<bool, Error> {
        if self.peek()? != b'"' {
            return self.skip().map(|()| false);
        }
        let (raw, escaped) = self.scan_string()?;
        if escaped {
            return self.unescaped(raw).map(|v| v == s);
        }
        Ok(raw == s)
    }

    /// A token count: the next value if it is a non-negative integer;
    /// `null` is not reported (`None`); anything else (a float, a negative
    /// number, a string, a count past `u64`) is [`NOT_A_COUNT`], which no
    /// plausible count reaches, so that the meter rejects the report
    /// without failing the rest of the event.
    #[inline]
    pub fn count(&mut self) -> Result<Option<u64>, Error> {
        match self.peek()? {
            b'n' => return self.null().map(|_| None),
            b'0'..=b'9' => {}
            _ => return self.skip().map(|()| Some(NOT_A_COUNT)),
        }
        let start = self.pos;
        let (end, integer) = number_end(self.input, start)?;
        self.pos = end;
        if !integer {
            return Ok(Some(NOT_A_COUNT));
        }
        Ok(Some(
            self.input[start..end]
                .iter()
                .try_fold(0u64, |n, &d| {
                    n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                })
                .unwrap_or(NOT_A_COUNT),
        ))
    }

    /// A number of any grammar JSON allows (a duration, a rate): the next
    /// value as an `f64`; `null` is not reported (`None`); anything else (a
    /// string, a list...) is NaN, which no plausibility check passes, so
    /// that the meter rejects the report without failing the rest of the
    /// event. A number past `f64` reads as infinite.
    pub fn number(&mut self) -> Result<Option<f64>, Error> {
        match self.peek()? {
            b'n' => return self.null().map(|_| None),
            b'-' | b'0'..=b'9' => {}
            _ => return self.skip().map(|()| Some(f64::NAN)),
        }
        let start = self.pos;
        let (end, _) = number_end(self.input, start)?;
        self.pos = end;
        // The grammar was checked: ASCII digits, sign, point and exponent.
        let text = std::str::from_utf8(&self.input[start..end]).map_err(|_| Error)?;
        Ok(Some(text.parse().unwrap_or(f64::NAN)))
    }

    /// The [`count`](Self::count) of the key `name` in the object at the
    /// position (the rest skipped); `None` without it, or for `null`.
    #[inline]
    pub fn count_in(&mut self, name: &[u8]) -> Result<Option<u64>, Error> {
        let mut n = None;
        if self.open_object_or_null()? {
            while let Some(key) = self.key()? {
                if key == name {
                    n = self.count()?;
                } else {
                    self.skip()?;
                }
            }
        }
        Ok(n)
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

    #[inline]
    fn null(&mut self) -> Result<bool, Error> {
        self.pos = literal_end(self.input, self.pos, b"null")?;
        Ok(false)
    }

    /// Scans the string at the position: its raw content (between the
    /// quotes, borrowed from the input) and whether it has escapes.
    #[inline(always)]
    fn scan_string(&mut self) -> Result<(&'a [u8], bool), Error> {
        let input = self.input;
        let start = self.pos + 1;
        let (end, escaped) = string_end(input, self.pos)?;
        self.pos = end;
        Ok((&input[start..end - 1], escaped))
    }

    /// The unescaped content of a scanned string's `raw` content, in the
    /// thread's buffer.
    #[cold]
    fn unescaped(&mut self, raw: &[u8]) -> Result<&[u8], Error> {
        let buf = self.scratch.get_or_insert_with(|| SCRATCH.with(Cell::take));
        unescape(raw, buf)?;
        Ok(buf)
    }

    #[inline(always)]
    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth >= MAX_DEPTH {
            return Err(Error);
        }
        self.pos += 1;
        self.first = true;
        Ok(())
    }

    #[inline(always)]
    fn leave(&mut self) -> Result<(), Error> {
        self.pos += 1;
        self.depth -= 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
