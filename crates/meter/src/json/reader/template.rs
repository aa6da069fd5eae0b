//! [`Template`]: an event that the next events of a stream repeat byte for
//! byte but for one string value of output and the strings and numbers the
//! reader skipped, such as a chat chunk whose only changes from the one
//! before are its `content` and a member nobody reads (a timestamp).

use super::scan::{number_end, string_end};

/// What a hole of a [`Template`] holds: any valid value of the kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Kind {
    /// A string (its escapes checked, no control character).
    #[default]
    String,
    /// A number starting with a digit (its grammar checked).
    Number,
}

/// One value of a template's event that another event may hold another of:
/// from its first byte to the byte after it, in the event.
#[derive(Debug, Clone, Copy, Default)]
struct Hole {
    start: u32,
    end: u32,
    kind: Kind,
}

/// The strings and numbers that a read skipped, by where they are, in the
/// order read: the first [`Skipped::MAX`] within the first 64 KiB of the
/// event (past them the read has overflowed: a template holds no more).
/// Small, as every read makes one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Skipped {
    starts: [u16; Skipped::MAX],
    ends: [u16; Skipped::MAX],
    /// Bit `i`: the `i`th is a number (a string otherwise).
    numbers: u8,
    len: u8,
    overflowed: bool,
}

impl Skipped {
    /// The most holes kept.
    const MAX: usize = 7;

    #[inline(always)]
    pub(super) fn push(&mut self, start: usize, end: usize, kind: Kind) {
        let i = usize::from(self.len);
        match (u16::try_from(start), u16::try_from(end)) {
            (Ok(start), Ok(end)) if i < Self::MAX => {
                self.starts[i] = start;
                self.ends[i] = end;
                self.numbers |= u8::from(kind == Kind::Number) << i;
                self.len += 1;
            }
            _ => self.overflowed = true,
        }
    }

    fn holes(&self) -> impl Iterator<Item = Hole> + '_ {
        (0..usize::from(self.len)).map(|i| Hole {
            start: u32::from(self.starts[i]),
            end: u32::from(self.ends[i]),
            kind: if self.numbers & (1 << i) != 0 {
                Kind::Number
            } else {
                Kind::String
            },
        })
    }
}

/// The bytes of one event with holes: its one string of output, and the
/// strings and numbers its reader skipped.
///
/// An event that is the same bytes with other values in those holes
/// ([`matches`](Self::matches)) is not read again: the reader would walk
/// the same bytes between the holes from the same state, each hole is one
/// token of the same kind (checked: a string's escapes and no control
/// character, a number's grammar), and a skipped value is checked and
/// nothing else, so every verdict is the same but the output string's.
/// That holds when the caller's reading of the event depends on that string
/// only through whether it is empty (it reads it with
/// [`Reader::nonempty_span`](super::Reader::nonempty_span) and only adds
/// that answer to its output): the caller keeps what it made of the rest of
/// the event beside the template, and recomputes the string's part from the
/// answer `matches` gives.
#[derive(Debug, Default)]
pub struct Template {
    bytes: Vec<u8>,
    /// In the order of `bytes`, the output string's among them.
    holes: [Hole; Template::HOLES],
    len: u8,
    /// Which of `holes` is the output string.
    output: u8,
}

impl Template {
    /// The longest event kept, in bytes: each stream holds its own, and a
    /// longer one is not kept (its events are read whole).
    pub const MAX_LEN: usize = 1024;

    const HOLES: usize = Skipped::MAX + 1;

    /// Makes the template `input` around its string of output from
    /// `span.0` (its opening quote) to `span.1` (after its closing quote),
    /// as [`Reader::nonempty_span`](super::Reader::nonempty_span) found it
    /// while reading `input`, and the values `skipped` there; none past
    /// [`MAX_LEN`](Self::MAX_LEN), for a span that is not a string of
    /// `input`, or when the read skipped too many values to keep.
    pub fn set(&mut self, input: &[u8], span: (usize, usize), skipped: &Skipped) {
        self.bytes.clear();
        let (open, close) = span;
        let string = input.get(open).is_some_and(|&b| b == b'"')
            && string_end(input, open).is_ok_and(|(end, _)| end == close);
        if !string || input.len() > Self::MAX_LEN || skipped.overflowed {
            return;
        }
        // Both within `MAX_LEN`.
        let (Ok(start), Ok(end)) = (u32::try_from(open), u32::try_from(close)) else {
            return;
        };
        let output = Hole {
            start,
            end,
            kind: Kind::String,
        };
        let mut len = 0u8;
        let mut last_end = 0;
        let mut placed = false;
        for hole in skipped.holes() {
            if !placed && output.start < hole.start {
                self.holes[usize::from(len)] = output;
                self.output = len;
                (len, placed, last_end) = (len + 1, true, output.end);
            }
            if hole.start < last_end || hole.end as usize > input.len() {
                return;
            }
            self.holes[usize::from(len)] = hole;
            (len, last_end) = (len + 1, hole.end);
        }
        if !placed {
            if output.start < last_end {
                return;
            }
            self.holes[usize::from(len)] = output;
            self.output = len;
            len += 1;
        }
        self.len = len;
        self.bytes.extend_from_slice(input);
    }

    /// Forgets the template.
    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// When `input` is the template's bytes with other valid values of the
    /// same kinds in its holes: whether its string of output is non-empty.
    /// `None` otherwise (the event is to be read).
    #[inline]
    pub fn matches(&self, input: &[u8]) -> Option<bool> {
        if self.bytes.is_empty() {
            return None;
        }
        // Most streams repeat their skipped values too: the same bytes but
        // for the output string, checked with one comparison on each side
        // of it. A special case of the walk below, with its answer.
        let output = self.holes[usize::from(self.output)];
        let (head, tail) = (
            &self.bytes[..output.start as usize],
            &self.bytes[output.end as usize..],
        );
        if input.len() > head.len() + tail.len()
            && input.ends_with(tail)
            && input.starts_with(head)
            && input[head.len()] == b'"'
            && let Ok((end, _)) = string_end(input, head.len())
            && end == input.len() - tail.len()
        {
            // An escape never unescapes to nothing: empty is `""` exactly.
            return Some(end > head.len() + 2);
        }
        // Where the next fixed bytes start, in the template and in `input`.
        let (mut at, mut pos) = (0, 0);
        let mut nonempty = false;
        for (i, hole) in self.holes[..usize::from(self.len)].iter().enumerate() {
            let fixed = &self.bytes[at..hole.start as usize];
            if !input.get(pos..)?.starts_with(fixed) {
                return None;
            }
            pos += fixed.len();
            let first = *input.get(pos)?;
            let end = match hole.kind {
                Kind::String if first == b'"' => string_end(input, pos).ok()?.0,
                Kind::Number if first.is_ascii_digit() => number_end(input, pos).ok()?.0,
                _ => return None,
            };
            if i == usize::from(self.output) {
                // An escape never unescapes to nothing: empty is `""`
                // exactly.
                nonempty = end > pos + 2;
            }
            (at, pos) = (hole.end as usize, end);
        }
        (input.get(pos..)? == &self.bytes[at..]).then_some(nonempty)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Error, Reader, read};
    use super::*;

    /// Reads the object `r` is at as a classifier would: the string of
    /// output is the member `s`, objects are entered, anything else is
    /// skipped. Where the string was.
    fn walk(r: &mut Reader<'_>, span: &mut Option<(usize, usize)>) -> Result<(), Error> {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"s" => *span = r.nonempty_span()?.1.or(*span),
                b"o" => walk(r, span)?,
                _ => r.skip()?,
            }
        }
        Ok(())
    }

    /// The template of `event` as its read leaves it.
    fn template(event: &[u8]) -> Template {
        let mut span = None;
        let skipped = read(event, |r| {
            walk(r, &mut span)?;
            Ok(*r.skipped())
        })
        .unwrap();
        let mut t = Template::default();
        t.set(event, span.unwrap(), &skipped);
        assert!(!t.is_empty());
        t
    }

    #[test]
    fn another_string_in_its_place_matches() {
        let event = br#"{"a":[1],"s":"abc","b":[2]}"#;
        let t = template(event);
        assert_eq!(t.matches(event), Some(true));
        assert_eq!(t.matches(br#"{"a":[1],"s":"","b":[2]}"#), Some(false));
        assert_eq!(t.matches(br#"{"a":[1],"s":"x","b":[2]}"#), Some(true));
        // Escaped quotes and backslashes, and the tail's own bytes, inside
        // the string: it still ends where the tail starts.
        for s in [
            r#"\"\\"#,
            r#"\\"#,
            r#"a\"b"#,
            r#"\u00e9\n"#,
            r#"\",\"b\":[2]}"#,
            "é 世界",
        ] {
            let other = format!(r#"{{"a":[1],"s":"{s}","b":[2]}}"#);
            assert_eq!(t.matches(other.as_bytes()), Some(true), "{s}");
        }
    }

    #[test]
    fn anything_else_does_not() {
        let event = br#"{"a":[1],"s":"abc","b":[2]}"#;
        let t = template(event);
        for other in [
            // The string ends before the tail: the tail is not after it.
            r#"{"a":[1],"s":"x","y","b":[2]}"#,
            r#"{"a":[1],"s":"x",1,"b":[2]}"#,
            // Broken strings: a bad escape, an escaped closing quote, a
            // control character.
            r#"{"a":[1],"s":"\x","b":[2]}"#,
            r#"{"a":[1],"s":"\","b":[2]}"#,
            "{\"a\":[1],\"s\":\"a\nb\",\"b\":[2]}",
            // Not a string in its place, or other bytes around it (a
            // skipped list is fixed bytes).
            r#"{"a":[1],"s":null,"b":[2]}"#,
            r#"{"a":[1],"s":x","b":[2]}"#,
            r#"{"a":[1],"s":"x,"b":[2]}"#,
            r#"{"a":[2],"s":"abc","b":[2]}"#,
            r#"{"a":[1],"s":"abc","b":[3]}"#,
            r#"{"a":[1],"s":"abc","b":[2]} "#,
            r#"{"a":[1],"s":"#,
            r#"{"a":[1],"s":""#,
            r#""b":[2]}"#,
            "",
        ] {
            assert_eq!(t.matches(other.as_bytes()), None, "{other}");
        }
    }

    /// A skipped string or number may be another of its kind; anything
    /// else in its place, or a skipped `null`, list or object changed, is
    /// read.
    #[test]
    fn skipped_strings_and_numbers_may_differ() {
        let event = br#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#;
        let t = template(event);
        assert_eq!(t.matches(event), Some(true));
        for (other, nonempty) in [
            (
                r#"{"n":0,"t":"","o":{"i":0,"s":"","z":null},"b":[2],"ns":9}"#,
                false,
            ),
            (
                r#"{"n":12.5e-3,"t":"\"}\\","o":{"i":7,"s":"é","z":null},"b":[2],"ns":1E9}"#,
                true,
            ),
        ] {
            assert_eq!(t.matches(other.as_bytes()), Some(nonempty), "{other}");
        }
        for other in [
            // Another kind, or no valid value of the kind.
            r#"{"n":"17","t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#,
            r#"{"n":17,"t":1,"o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#,
            r#"{"n":-1,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#,
            r#"{"n":01,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#,
            r#"{"n":1.,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#,
            r#"{"n":17,"t":"\q","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123}"#,
            r#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":123e}"#,
            r#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":true}"#,
            r#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":}"#,
            r#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[2],"ns":1"#,
            // A skipped `null` or list is fixed bytes.
            r#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":0},"b":[2],"ns":123}"#,
            r#"{"n":17,"t":"x","o":{"i":0,"s":"abc","z":null},"b":[3],"ns":123}"#,
        ] {
            assert_eq!(t.matches(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn none_is_kept_past_its_limits_or_for_a_span_that_is_no_string() {
        let none = Skipped::default();
        let mut t = Template::default();
        assert_eq!(t.matches(b"\"\""), None);
        let long = format!(r#"["{}"]"#, "x".repeat(Template::MAX_LEN));
        t.set(long.as_bytes(), (1, long.len() - 1), &none);
        assert!(t.is_empty());
        t.set(br#"["x"]"#, (0, 5), &none);
        assert!(t.is_empty());
        t.set(br#"["x"]"#, (1, 9), &none);
        assert!(t.is_empty());
        // Two strings are not one.
        t.set(br#"["x","y"]"#, (1, 8), &none);
        assert!(t.is_empty());
        t.set(br#"["x"]"#, (1, 4), &none);
        assert_eq!(t.matches(br#"["yy"]"#), Some(true));
        t.clear();
        assert_eq!(t.matches(br#"["yy"]"#), None);
        // More skipped values than a template holds.
        let many = |n: usize| {
            let members: String = (0..n).map(|i| format!(r#""k{i}":{i},"#)).collect();
            format!(r#"{{{members}"s":"x"}}"#)
        };
        assert!(!template(many(Skipped::MAX).as_bytes()).is_empty());
        let event = many(Skipped::MAX + 1);
        let mut span = None;
        let skipped = read(event.as_bytes(), |r| {
            walk(r, &mut span)?;
            Ok(*r.skipped())
        })
        .unwrap();
        t.set(event.as_bytes(), span.unwrap(), &skipped);
        assert!(t.is_empty());
    }
}
