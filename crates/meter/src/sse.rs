//! Incremental Server-Sent Events framing.
//!
//! Follows the WHATWG event-stream grammar: lines end in CRLF, LF or a lone
//! CR (a CR at the end of one chunk and an LF at the start of the next are
//! one terminator); `:` starts a comment; `data` lines of one event are joined
//! with `\n`; a blank line dispatches the event. Bytes arrive in whatever
//! pieces the network delivers, so a line may be cut anywhere, including
//! inside a UTF-8 sequence or between CR and LF: "need more bytes" is a state,
//! not an error.
//!
//! Two deliberate departures from a browser's parser, both so that a metering
//! proxy counts what the upstream actually sent:
//! - at end of stream, a last event without its terminating blank line is
//!   still dispatched (several real servers and captures end that way);
//! - a line or event larger than the configured limit is dropped and reported
//!   as [`FrameError::Oversized`] instead of growing memory without bound.
//!
//! The framer only reads: it never sees, let alone changes, the bytes that
//! are forwarded to the client.

/// One dispatched event. Borrowed from the framer's buffers; valid only
/// during the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event:` field, empty when the event had none (the default type).
    pub name: &'a [u8],
    /// The `data:` lines joined with `\n`.
    pub data: &'a [u8],
}

/// A framing problem. Framing goes on after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// An event (or a single line) exceeded the size limit and was dropped.
    #[error("event larger than the framing limit was dropped")]
    Oversized,
}

impl FrameError {
    /// A short, bounded name usable as a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::Oversized => "oversized_event",
        }
    }
}

/// Incremental SSE parser. One per response; buffers are reused across
/// events so a long stream allocates only while its largest event grows.
#[derive(Debug)]
pub struct SseFramer {
    /// The unfinished line carried over from the previous chunk.
    line: Vec<u8>,
    /// The `data` of the event being built (each line followed by `\n`).
    data: Vec<u8>,
    /// The `event` field of the event being built.
    name: Vec<u8>,
    /// Whether the event being built has had a `data` line (an empty `data:`
    /// line still makes an event).
    has_data: bool,
    /// The previous chunk ended in CR: an LF starting this one belongs to it.
    skip_lf: bool,
    /// The current line or event outgrew `limit`; drop until it ends.
    discarding_line: bool,
    discarding_event: bool,
    /// Whether the first line has been seen (a UTF-8 BOM there is skipped).
    started: bool,
    /// Largest line and largest event kept, in bytes.
    limit: usize,
}

/// Default size limit for one line or one event: far above any real token
/// event, small enough to bound memory per stream.
pub const DEFAULT_LIMIT: usize = 1 << 20;

impl Default for SseFramer {
    fn default() -> Self {
        Self::new(DEFAULT_LIMIT)
    }
}

impl SseFramer {
    /// A framer that drops lines and events larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            name: Vec::new(),
            has_data: false,
            skip_lf: false,
            discarding_line: false,
            discarding_event: false,
            started: false,
            limit,
        }
    }

    /// Feeds the next piece of the body, calling `on` for each event it
    /// completes (and each framing error) in order.
    pub fn feed(&mut self, mut chunk: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if let [b'\n', rest @ ..] = chunk {
                chunk = rest;
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', chunk) {
            let line = &chunk[..i];
            chunk = &chunk[self.after_terminator(chunk, i)..];
            // The usual event, one data line and the blank line after it in
            // this chunk, is dispatched from the chunk without being copied.
            if let Some(data) = self.lone_data(line)
                && let [b'\n' | b'\r', ..] = chunk
            {
                chunk = &chunk[self.after_terminator(chunk, 0)..];
                on(Ok(Event {
                    name: &self.name,
                    data,
                }));
                self.name.clear();
                continue;
            }
            self.end_line(line, on);
        }
        self.push_partial(chunk, on);
    }

    /// Where the line terminator at `i` (CR, LF or CRLF) ends; a CR that
    /// ends the chunk may be the first half of a CRLF.
    fn after_terminator(&mut self, chunk: &[u8], i: usize) -> usize {
        match (chunk[i], chunk.get(i + 1)) {
            (b'\r', Some(b'\n')) => i + 2,
            (b'\r', None) => {
                self.skip_lf = true;
                i + 1
            }
            _ => i + 1,
        }
    }

    /// The value of `line` when it is a `data` line that starts an event
    /// and nothing is carried over or being dropped: what the event's data
    /// is if a blank line follows.
    #[inline]
    fn lone_data<'a>(&self, line: &'a [u8]) -> Option<&'a [u8]> {
        let clean = self.started
            && self.line.is_empty()
            && !self.has_data
            && !self.discarding_line
            && !self.discarding_event;
        let value = line.strip_prefix(b"data:").filter(|_| clean)?;
        let value = value.strip_prefix(b" ").unwrap_or(value);
        (line.len() <= self.limit).then_some(value)
    }

    /// Ends the stream: a last line without terminator, and a last event
    /// without its blank line, are dispatched.
    pub fn finish(&mut self, on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if !self.line.is_empty() || self.discarding_line {
            self.end_line(&[], on);
        }
        self.end_line(&[], on);
        self.skip_lf = false;
    }

    /// Keeps an unterminated tail for the next chunk, within the limit.
    fn push_partial(&mut self, tail: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if tail.is_empty() || self.discarding_line {
            return;
        }
        if self.line.len() + tail.len() > self.limit {
            self.line.clear();
            self.discarding_line = true;
            on(Err(FrameError::Oversized));
            return;
        }
        self.line.extend_from_slice(tail);
    }

    /// A line terminator was found; `tail` is the part of the line in the
    /// current chunk.
    fn end_line(&mut self, tail: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if self.discarding_line {
            self.discarding_line = false;
            // The dropped line belonged to an event: drop the event too, so a
            // half event is never classified.
            self.discarding_event = true;
            return;
        }
        if self.line.is_empty() {
            // A line that arrived whole is held to the limit as one
            // carried over is, so that the cuts never change the events.
            if tail.len() > self.limit {
                self.discarding_event = true;
                on(Err(FrameError::Oversized));
            } else {
                self.process_line(tail, on);
            }
        } else {
            let mut line = std::mem::take(&mut self.line);
            if line.len() + tail.len() > self.limit {
                self.discarding_event = true;
                on(Err(FrameError::Oversized));
            } else {
                line.extend_from_slice(tail);
                self.process_line(&line, on);
            }
            line.clear();
            self.line = line;
        }
    }

    fn process_line(
        &mut self,
        mut line: &[u8],
        on: &mut impl FnMut(Result<Event<'_>, FrameError>),
    ) {
        if !self.started {
            self.started = true;
            if let [0xEF, 0xBB, 0xBF, rest @ ..] = line {
                line = rest;
            }
        }
        if line.is_empty() {
            self.dispatch(on);
            return;
        }
        if line[0] == b':' {
            return; // comment, e.g. a keep-alive `: ping`
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.discarding_event {
                    return;
                }
                if self.data.len() + value.len() + 1 > self.limit {
                    self.discarding_event = true;
                    self.data.clear();
                    on(Err(FrameError::Oversized));
                    return;
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
                self.has_data = true;
            }
            b"event" => {
                self.name.clear();
                self.name.extend_from_slice(&value[..value.len().min(256)]);
            }
            _ => {} // id, retry and unknown fields carry nothing we meter
        }
    }

    fn dispatch(&mut self, on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if self.has_data && !self.discarding_event {
            let data = self.data.strip_suffix(b"\n").unwrap_or(&self.data);
            on(Ok(Event {
                name: &self.name,
                data,
            }));
        }
        self.data.clear();
        self.name.clear();
        self.has_data = false;
        self.discarding_event = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::framer::Framer;
    use crate::framer::framing_tests::{Text, frame_all};

    fn frame(chunks: &[&[u8]], limit: usize) -> Vec<Text> {
        frame_all(Framer::Sse(SseFramer::new(limit)), chunks)
    }

    fn ok(name: &str, data: &str) -> Text {
        Ok((name.to_owned(), data.to_owned()))
    }

    #[test]
    fn every_line_ending_form() {
        for text in [
            "data: a\n\ndata: b\n\n",
            "data: a\r\n\r\ndata: b\r\n\r\n",
            "data: a\r\rdata: b\r\r",
            "data: a\r\n\ndata: b\n\r\n",
        ] {
            assert_eq!(
                frame(&[text.as_bytes()], 100),
                vec![ok("", "a"), ok("", "b")],
                "{text:?}"
            );
        }
    }

    #[test]
    fn cr_and_lf_in_separate_chunks_are_one_terminator() {
        let got = frame(&[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\n\r\n"], 100);
        assert_eq!(got, vec![ok("", "a"), ok("", "b")]);
    }

    #[test]
    fn fields_comments_and_multiline_data() {
        let text = ": ping\nevent: delta\nid: 7\nretry: 10\ndata:x\ndata: y\n\n:c\n\ndata\n\n";
        assert_eq!(
            frame(&[text.as_bytes()], 100),
            vec![ok("delta", "x\ny"), ok("", "")]
        );
    }

    #[test]
    fn bom_is_skipped_and_unterminated_last_event_is_flushed() {
        let got = frame(&[b"\xEF\xBB\xBFdata: a\n\ndata: b"], 100);
        assert_eq!(got, vec![ok("", "a"), ok("", "b")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert_eq!(frame(&[b"event: x\n\ndata: y\n\n"], 100), vec![ok("", "y")]);
    }

    #[test]
    fn oversized_events_are_dropped_and_framing_recovers() {
        let big = format!("data: {}\n\ndata: ok\n\n", "x".repeat(50));
        for cut in 0..big.len() {
            let (a, b) = big.as_bytes().split_at(cut);
            let got = frame(&[a, b], 20);
            assert_eq!(
                got,
                vec![Err(FrameError::Oversized), ok("", "ok")],
                "cut {cut}"
            );
        }
        let many = "data: 0123456789\ndata: 0123456789\n\ndata: ok\n\n";
        assert_eq!(
            frame(&[many.as_bytes()], 20),
            vec![Err(FrameError::Oversized), ok("", "ok")]
        );
    }

    /// A line over the limit drops its event whether it arrived whole or
    /// in pieces: a comment, or a data line whose value alone would fit.
    /// The last input is the one the `sse_framer` fuzz target found.
    #[test]
    fn an_oversized_line_is_dropped_however_it_is_cut() {
        let text = b": a comment longer than 16\ndata: x\n\ndata: 0123456789a\n\ndata: ok\n\n";
        let whole = frame(&[text], 16);
        assert_eq!(
            whole,
            vec![
                Err(FrameError::Oversized),
                Err(FrameError::Oversized),
                ok("", "ok")
            ]
        );
        for i in 0..text.len() {
            for j in i..text.len() {
                let got = frame(&[&text[..i], &text[i..j], &text[j..]], 16);
                assert_eq!(got, whole, "cuts {i} {j}");
            }
        }
        let wire = b"\xEF\xBB\xBF: keep-alive comm\0\0\x01\0\0\0\0\0\0\0lta\rt";
        let whole = frame(&[wire], 32);
        assert_eq!(whole, vec![Err(FrameError::Oversized)]);
        assert_eq!(frame(&[&wire[..8], &wire[8..26], &wire[26..]], 32), whole);
    }

    #[test]
    fn any_cut_gives_the_same_events() {
        let text = b": keep\r\nevent: e\r\ndata: {\"a\":1}\r\n\r\ndata: two\rdata: lines\r\rdata: [DONE]\n\n";
        let whole = frame(&[text], 1000);
        for i in 0..text.len() {
            for j in i..text.len() {
                let got = frame(&[&text[..i], &text[i..j], &text[j..]], 1000);
                assert_eq!(got, whole, "cuts {i} {j}");
            }
        }
    }
}
