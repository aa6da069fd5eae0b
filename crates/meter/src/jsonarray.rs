//! Incremental framing of one streamed JSON array (Gemini's
//! `:streamGenerateContent` without `alt=sse`): each element of the
//! top-level array is dispatched as an [`Event`] as soon as its closing
//! brace arrives, without waiting for the `,` that separates it from the
//! next one (Gemini sends that comma with the next element).
//!
//! The framer tracks only nesting depth and whether it is inside a string
//! (and after a backslash), so it never parses a value: the protocol module
//! does that. Bytes before the opening `[` and after the closing `]` are
//! ignored; scalar elements (not objects or arrays) are skipped. An element
//! larger than the limit is dropped and reported once as
//! [`FrameError::Oversized`]. An element cut off by the end of the stream is
//! dispatched as it is, so the protocol module reports it as invalid JSON
//! instead of it vanishing silently.
//!
//! The framer only reads: it never sees, let alone changes, the bytes that
//! are forwarded to the client.

use super::sse::{Event, FrameError};

/// Where the framer is in the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `[`.
    Before,
    /// Inside the array, between elements.
    Between,
    /// Inside a scalar string element at the top level (skipped).
    TopString { escaped: bool },
    /// Inside an object or array element.
    Element {
        depth: u32,
        in_string: bool,
        escaped: bool,
    },
    /// After the closing `]`.
    After,
}

/// Incremental array-element framer. One per response.
#[derive(Debug)]
pub struct JsonArrayFramer {
    state: State,
    /// The element being built (its bytes so far).
    element: Vec<u8>,
    /// The current element outgrew `limit`; keep tracking its structure but
    /// not its bytes.
    discarding: bool,
    /// Largest element kept, in bytes.
    limit: usize,
}

impl Default for JsonArrayFramer {
    fn default() -> Self {
        Self::new(super::sse::DEFAULT_LIMIT)
    }
}

impl JsonArrayFramer {
    /// A framer that drops elements larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            state: State::Before,
            element: Vec::new(),
            discarding: false,
            limit,
        }
    }

    /// Feeds the next piece of the body, calling `on` for each element it
    /// completes (and each framing error) in order.
    pub fn feed(&mut self, chunk: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        // Start of the element's bytes within this chunk, when inside one.
        let mut start = match self.state {
            State::Element { .. } => Some(0),
            _ => None,
        };
        for (i, &b) in chunk.iter().enumerate() {
            self.state = match self.state {
                State::Before => {
                    if b == b'[' {
                        State::Between
                    } else {
                        State::Before
                    }
                }
                State::After => State::After,
                State::Between => match b {
                    b']' => State::After,
                    b'"' => State::TopString { escaped: false },
                    b'{' | b'[' => {
                        start = Some(i);
                        State::Element {
                            depth: 1,
                            in_string: false,
                            escaped: false,
                        }
                    }
                    _ => State::Between,
                },
                State::TopString { escaped } => match (escaped, b) {
                    (true, _) => State::TopString { escaped: false },
                    (false, b'\\') => State::TopString { escaped: true },
                    (false, b'"') => State::Between,
                    _ => State::TopString { escaped: false },
                },
                State::Element {
                    depth,
                    in_string,
                    escaped,
                } => {
                    let next = match (in_string, escaped, b) {
                        (true, true, _) => (depth, true, false),
                        (true, false, b'\\') => (depth, true, true),
                        (true, false, b'"') => (depth, false, false),
                        (true, false, _) => (depth, true, false),
                        (false, _, b'"') => (depth, true, false),
                        (false, _, b'{' | b'[') => (depth.saturating_add(1), false, false),
                        (false, _, b'}' | b']') => (depth - 1, false, false),
                        (false, _, _) => (depth, false, false),
                    };
                    if next.0 == 0 {
                        let from = start.take().unwrap_or(0);
                        self.complete(&chunk[from..=i], on);
                        State::Between
                    } else {
                        State::Element {
                            depth: next.0,
                            in_string: next.1,
                            escaped: next.2,
                        }
                    }
                }
            };
        }
        if let Some(from) = start {
            self.keep(&chunk[from..], on);
        }
    }

    /// Ends the stream: an element cut off by the end is dispatched as it is.
    pub fn finish(&mut self, on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if matches!(self.state, State::Element { .. }) && !self.discarding {
            let element = std::mem::take(&mut self.element);
            on(Ok(Event {
                name: b"",
                data: &element,
            }));
        }
        self.element.clear();
        self.discarding = false;
        self.state = State::After;
    }

    /// Keeps the unfinished part of an element for the next chunk.
    fn keep(&mut self, part: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if self.discarding {
            return;
        }
        if self.element.len() + part.len() > self.limit {
            self.element.clear();
            self.discarding = true;
            on(Err(FrameError::Oversized));
            return;
        }
        self.element.extend_from_slice(part);
    }

    /// An element ended; `tail` is its part in the current chunk.
    fn complete(&mut self, tail: &[u8], on: &mut impl FnMut(Result<Event<'_>, FrameError>)) {
        if self.discarding {
            self.discarding = false;
        } else if self.element.len() + tail.len() > self.limit {
            self.element.clear();
            on(Err(FrameError::Oversized));
        } else if self.element.is_empty() {
            on(Ok(Event {
                name: b"",
                data: tail,
            }));
        } else {
            let mut element = std::mem::take(&mut self.element);
            element.extend_from_slice(tail);
            on(Ok(Event {
                name: b"",
                data: &element,
            }));
            element.clear();
            self.element = element;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::framer::Framer;
    use crate::framer::framing_tests::{Text, frame_all, ok};

    fn frame(chunks: &[&[u8]], limit: usize) -> Vec<Text> {
        frame_all(Framer::JsonArray(JsonArrayFramer::new(limit)), chunks)
    }

    #[test]
    fn elements_are_dispatched_at_their_closing_brace() {
        let text = b"[{\"a\": \"}]\\\"{\"}\r\n,\r\n{\"b\": [1, {\"c\": 2}]}\r\n, \"s]{\", 3, [4]]  trailing";
        assert_eq!(
            frame(&[text], 100),
            vec![
                ok("{\"a\": \"}]\\\"{\"}"),
                ok("{\"b\": [1, {\"c\": 2}]}"),
                ok("[4]")
            ]
        );
        // The first element is out before the comma arrives.
        let mut framer = JsonArrayFramer::new(100);
        let mut n = 0;
        framer.feed(b"[{\"a\":1}", &mut |_| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    fn truncated_element_is_flushed_and_oversized_dropped() {
        assert_eq!(
            frame(&[b"[{\"a\":1},{\"b\""], 100),
            vec![ok("{\"a\":1}"), ok("{\"b\"")]
        );
        let text = format!("[{{\"x\":\"{}\"}},{{\"ok\":1}}]", "x".repeat(50));
        for cut in 0..=text.len() {
            let (a, b) = text.as_bytes().split_at(cut);
            assert_eq!(
                frame(&[a, b], 20),
                vec![Err(FrameError::Oversized), ok("{\"ok\":1}")],
                "cut {cut}"
            );
        }
    }

    #[test]
    fn any_cut_gives_the_same_elements() {
        let text = "[{\"t\":\"é\\\\\"},\n{\"u\":{\"v\":\"日\\\"}\"}}\n]".as_bytes();
        let whole = frame(&[text], 1000);
        assert_eq!(whole.len(), 2);
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let got = frame(&[&text[..i], &text[i..j], &text[j..]], 1000);
                assert_eq!(got, whole, "cuts {i} {j}");
            }
        }
    }
}
