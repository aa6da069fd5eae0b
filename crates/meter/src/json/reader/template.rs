//! [`Template`]: an event that the next events of a stream repeat byte for
//! byte but for one string value, such as a chat chunk whose only change
//! from the one before is its `content`.

use super::scan::string_end;

/// The bytes of one event around one of its string values: the event
/// before that string (up to and with its opening quote) and after it
/// (from its closing quote's next byte to the end).
///
/// An event that is the same bytes with another string in that place
/// ([`matches`](Self::matches)) is not read again: the reader would walk
/// the same bytes before the string from the same state, the string is one
/// token (checked: its escapes, no control character), and after it the
/// same bytes from the same state again, so every verdict is the same but
/// the string's own. That holds when the caller's reading of the event
/// depends on the string only through whether it is empty (it reads it
/// with [`Reader::nonempty_span`](super::Reader::nonempty_span) and only
/// adds that answer to its output): the caller keeps what it made of the
/// rest of the event beside the template, and recomputes the string's
/// part from the answer `matches` gives.
#[derive(Debug, Default)]
pub struct Template {
    bytes: Vec<u8>,
    /// The string's opening quote, in `bytes`.
    open: usize,
    /// Where what follows its closing quote starts, in `bytes`.
    close: usize,
}

impl Template {
    /// The longest event kept, in bytes: each stream holds its own, and a
    /// longer one is not kept (its events are read whole).
    pub const MAX_LEN: usize = 1024;

    /// Makes the template `input` around its string from `span.0` (its
    /// opening quote) to `span.1` (after its closing quote), as
    /// [`Reader::nonempty_span`](super::Reader::nonempty_span) found it
    /// while reading `input`; none past [`MAX_LEN`](Self::MAX_LEN), or for
    /// a span that is not a string of `input`.
    pub fn set(&mut self, input: &[u8], span: (usize, usize)) {
        self.bytes.clear();
        let (open, close) = span;
        let string = input.get(open).is_some_and(|&b| b == b'"')
            && string_end(input, open).is_ok_and(|(end, _)| end == close);
        if string && input.len() <= Self::MAX_LEN {
            self.bytes.extend_from_slice(input);
            self.open = open;
            self.close = close;
        }
    }

    /// Forgets the template.
    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// When `input` is the template's bytes with another valid JSON string
    /// in place of its string: whether that string is non-empty. `None`
    /// otherwise (the event is to be read).
    #[inline]
    pub fn matches(&self, input: &[u8]) -> Option<bool> {
        let head = self.bytes.get(..=self.open)?;
        let tail = self.bytes.get(self.close..)?;
        // The closing quote, at least, is between them.
        // The tail first: it is the shorter, and where chunks differ most.
        if input.len() <= head.len() + tail.len()
            || !input.ends_with(tail)
            || !input.starts_with(head)
        {
            return None;
        }
        let end = string_end(input, self.open).ok()?.0;
        // An escape never unescapes to nothing: empty is `""` exactly.
        (end == input.len() - tail.len()).then_some(end > self.open + 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template of `event` around its string starting at `open`.
    fn template(event: &[u8], open: usize) -> Template {
        let close = string_end(event, open).unwrap().0;
        let mut t = Template::default();
        t.set(event, (open, close));
        assert!(!t.is_empty());
        t
    }

    #[test]
    fn another_string_in_its_place_matches() {
        let event = br#"{"a":1,"s":"abc","b":[2]}"#;
        let t = template(event, 11);
        assert_eq!(t.matches(event), Some(true));
        assert_eq!(t.matches(br#"{"a":1,"s":"","b":[2]}"#), Some(false));
        assert_eq!(t.matches(br#"{"a":1,"s":"x","b":[2]}"#), Some(true));
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
            let other = format!(r#"{{"a":1,"s":"{s}","b":[2]}}"#);
            assert_eq!(t.matches(other.as_bytes()), Some(true), "{s}");
        }
    }

    #[test]
    fn anything_else_does_not() {
        let event = br#"{"a":1,"s":"abc","b":[2]}"#;
        let t = template(event, 11);
        for other in [
            // The string ends before the tail: the tail is not after it.
            r#"{"a":1,"s":"x","y","b":[2]}"#,
            r#"{"a":1,"s":"x",1,"b":[2]}"#,
            // Broken strings: a bad escape, an escaped closing quote, a
            // control character.
            r#"{"a":1,"s":"\x","b":[2]}"#,
            r#"{"a":1,"s":"\","b":[2]}"#,
            "{\"a\":1,\"s\":\"a\nb\",\"b\":[2]}",
            // Not a string in its place, or other bytes around it.
            r#"{"a":1,"s":null,"b":[2]}"#,
            r#"{"a":2,"s":"abc","b":[2]}"#,
            r#"{"a":1,"s":"abc","b":[3]}"#,
            r#"{"a":1,"s":"abc","b":[2]} "#,
            r#"{"a":1,"s":"#,
            r#"{"a":1,"s":""#,
            r#""b":[2]}"#,
            "",
        ] {
            assert_eq!(t.matches(other.as_bytes()), None, "{other}");
        }
        // The head and the tail overlap in a shorter input.
        let t = template(br#"["x","x"]"#, 1);
        assert_eq!(t.matches(br#"["x"]"#), None);
        assert_eq!(t.matches(br#"["","x"]"#), Some(false));
    }

    #[test]
    fn none_is_kept_past_its_limit_or_for_a_span_that_is_no_string() {
        let mut t = Template::default();
        assert_eq!(t.matches(b"\"\""), None);
        let long = format!(r#"["{}"]"#, "x".repeat(Template::MAX_LEN));
        t.set(long.as_bytes(), (1, long.len() - 1));
        assert!(t.is_empty());
        t.set(br#"["x"]"#, (0, 5));
        assert!(t.is_empty());
        t.set(br#"["x"]"#, (1, 9));
        assert!(t.is_empty());
        // Two strings are not one.
        t.set(br#"["x","y"]"#, (1, 8));
        assert!(t.is_empty());
        t.set(br#"["x"]"#, (1, 4));
        assert_eq!(t.matches(br#"["yy"]"#), Some(true));
        t.clear();
        assert_eq!(t.matches(br#"["yy"]"#), None);
    }
}
