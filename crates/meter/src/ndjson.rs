//! Incremental newline-delimited JSON framing (Ollama's streams).
//!
//! Lines end in `\n`; a `\r` before it is stripped; blank (whitespace-only)
//! lines are skipped; a last line without its `\n` is dispatched at end of
//! stream. Bytes arrive in whatever pieces the network delivers, so a line
//! may be cut anywhere, including inside a UTF-8 sequence or between `\r`
//! and `\n`: "need more bytes" is a state, not an error. Each line is
//! dispatched as an [`Event`] without a name, so the protocol modules see
//! NDJSON and SSE the same way.
//!
//! Like the SSE framer, a line larger than the limit is dropped and reported
//! once as [`FrameError::Oversized`], and framing resumes at the next line.
//! The framer only reads: it never sees, let alone changes, the bytes that
//! are forwarded to the client.

use super::sse::{Event, FrameError};

/// Incremental NDJSON parser. One per response; the line buffer is reused, so
/// a long stream allocates only while its longest line grows (and not at all
/// for lines that arrive whole within one chunk).
#[derive(Debug)]
pub struct NdjsonFramer {
    /// The unfinished line carried over from the previous chunk.
    line: Vec<u8>,
    /// The current line outgrew `limit`; drop bytes until its `\n`.
    discarding: bool,
    /// Largest line kept, in bytes.
    limit: usize,
}

impl Default for NdjsonFramer {
    fn default() -> Self {
        Self::new(super::sse::DEFAULT_LIMIT)
    }
}

impl NdjsonFramer {
    /// A framer that drops lines larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            discarding: false,
            limit,
        }
    }

    /// Feeds the next piece of the body, calling `on` for each line it
    /// completes (and each framing error) in order.
    pub fn feed(&mut self, mut chunk: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        while let Some(i) = memchr::memchr(b'\n', chunk) {
            let (head, rest) = (&chunk[..i], &chunk[i + 1..]);
            if self.discarding {
                self.discarding = false;
            } else if self.line.len() + head.len() > self.limit {
                // Checked for lines that arrive whole too, so that how the
                // bytes were cut never changes what is dispatched.
                self.line.clear();
                on(Err(FrameError::Oversized));
            } else if self.line.is_empty() {
                dispatch(head, on);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                dispatch(&line, on);
                line.clear();
                self.line = line;
            }
            chunk = rest;
        }
        if chunk.is_empty() || self.discarding {
            return;
        }
        if self.line.len() + chunk.len() > self.limit {
            self.line.clear();
            self.discarding = true;
            on(Err(FrameError::Oversized));
            return;
        }
        self.line.extend_from_slice(chunk);
    }

    /// Ends the stream: a last line without `\n` is dispatched.
    pub fn finish(&mut self, on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if !self.discarding && !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            dispatch(&line, on);
        }
        self.line.clear();
        self.discarding = false;
    }
}

fn dispatch(line: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.trim_ascii().is_empty() {
        return;
    }
    on(Ok(Event {
        name: b"",
        data: line,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::framer::Framer;
    use crate::framer::framing_tests::{Text, frame_all, ok};

    fn frame(chunks: &[&[u8]], limit: usize) -> Vec<Text> {
        frame_all(Framer::Ndjson(NdjsonFramer::new(limit)), chunks)
    }

    #[test]
    fn lines_crlf_blank_lines_and_unterminated_tail() {
        let text = b"{\"a\":1}\n\r\n  \n{\"b\":2}\r\n\n{\"c\":3}";
        assert_eq!(
            frame(&[text], 100),
            vec![ok("{\"a\":1}"), ok("{\"b\":2}"), ok("{\"c\":3}")]
        );
        assert_eq!(frame(&[b""], 100), vec![]);
        assert_eq!(frame(&[b"\n\n"], 100), vec![]);
    }

    #[test]
    fn oversized_lines_are_dropped_and_framing_recovers() {
        let text = format!("{}\nok\n{}", "x".repeat(50), "y".repeat(30));
        for cut in 0..=text.len() {
            let (a, b) = text.as_bytes().split_at(cut);
            assert_eq!(
                frame(&[a, b], 20),
                vec![
                    Err(FrameError::Oversized),
                    ok("ok"),
                    Err(FrameError::Oversized)
                ],
                "cut {cut}"
            );
        }
        // Exactly at the limit is kept.
        assert_eq!(frame(&[b"0123456789\n"], 10), vec![ok("0123456789")]);
    }

    #[test]
    fn any_cut_gives_the_same_lines() {
        let text = "{\"response\":\"é\"}\r\n\n{\"done\":true}\n{\"x\":\"日本\"}".as_bytes();
        let whole = frame(&[text], 1000);
        assert_eq!(whole.len(), 3);
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let got = frame(&[&text[..i], &text[i..j], &text[j..]], 1000);
                assert_eq!(got, whole, "cuts {i} {j}");
            }
        }
        let singles: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(frame(&singles, 1000), whole);
    }
}
