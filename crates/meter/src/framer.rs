//! The framer of a response body ([`Framer`]): SSE, NDJSON or a JSON
//! array's elements, or none, chosen with the response head; and what the
//! framers' unit tests share.

use super::{jsonarray, ndjson, sse};

/// The framer of the response body, chosen with the response head.
pub(crate) enum Framer {
    None,
    Sse(sse::SseFramer),
    Ndjson(ndjson::NdjsonFramer),
    JsonArray(jsonarray::JsonArrayFramer),
}

impl Framer {
    pub(crate) fn feed(&mut self, chunk: &[u8], on: &mut impl FnMut(FrameResult<'_>)) {
        match self {
            Framer::None => {}
            Framer::Sse(f) => f.feed(chunk, on),
            Framer::Ndjson(f) => f.feed(chunk, on),
            Framer::JsonArray(f) => f.feed(chunk, on),
        }
    }

    pub(crate) fn finish(&mut self, on: &mut impl FnMut(FrameResult<'_>)) {
        match self {
            Framer::None => {}
            Framer::Sse(f) => f.finish(on),
            Framer::Ndjson(f) => f.finish(on),
            Framer::JsonArray(f) => f.finish(on),
        }
    }
}

pub(crate) type FrameResult<'a> = Result<sse::Event<'a>, sse::FrameError>;

/// What the framers' unit tests share.
#[cfg(test)]
pub(crate) mod framing_tests {
    use super::{FrameResult, Framer, sse::FrameError};

    /// One event as text: `(name, data)`.
    pub(crate) type Text = Result<(String, String), FrameError>;

    /// The events `framer` yields for `chunks`, fed one at a time, then at
    /// `finish`.
    pub(crate) fn frame_all(mut framer: Framer, chunks: &[&[u8]]) -> Vec<Text> {
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut out = Vec::new();
        let mut on = |r: FrameResult<'_>| out.push(r.map(|e| (lossy(e.name), lossy(e.data))));
        for c in chunks {
            framer.feed(c, &mut on);
        }
        framer.finish(&mut on);
        out
    }

    /// An unnamed event (NDJSON lines and JSON array elements have no name).
    pub(crate) fn ok(data: &str) -> Text {
        Ok((String::new(), data.to_owned()))
    }
}
