//! What the fuzz targets share: cutting an input into the reads a network
//! could deliver it in, and driving the framers.

use meter::jsonarray::JsonArrayFramer;
use meter::ndjson::NdjsonFramer;
use meter::sse::{DEFAULT_LIMIT, Event, FrameError, SseFramer};

/// `wire` cut as the selector bytes `cuts` say: `[0, _]` is one byte per
/// piece; otherwise three pieces, cut at `cuts[0] / 256` and
/// `cuts[1] / 256` of its length (pieces may be empty).
pub fn pieces(cuts: [u8; 2], wire: &[u8]) -> Vec<&[u8]> {
    if cuts[0] == 0 {
        return wire.chunks(1).collect();
    }
    let mut at = cuts.map(|c| wire.len() * usize::from(c) / 256);
    at.sort_unstable();
    let [a, b] = at;
    vec![&wire[..a], &wire[a..b], &wire[b..]]
}

/// The framing limit a selector byte says: the default (1 MiB) below 0x80,
/// else 1 to 128 bytes, so that oversized lines, events and elements are
/// reached with small inputs.
pub fn limit(selector: u8) -> usize {
    if selector < 0x80 {
        DEFAULT_LIMIT
    } else {
        usize::from(selector & 0x7f) + 1
    }
}

/// An event as the framers dispatch it, owned: `(name, data)`.
pub type Owned = Result<(Vec<u8>, Vec<u8>), FrameError>;

/// The three framers, as one.
pub trait Framer {
    fn new(limit: usize) -> Self;
    fn feed(&mut self, chunk: &[u8], on: &mut dyn FnMut(Result<Event<'_>, FrameError>));
    fn finish(&mut self, on: &mut dyn FnMut(Result<Event<'_>, FrameError>));
}

macro_rules! framer {
    ($t:ty) => {
        impl Framer for $t {
            fn new(limit: usize) -> Self {
                <$t>::new(limit)
            }
            fn feed(&mut self, chunk: &[u8], on: &mut dyn FnMut(Result<Event<'_>, FrameError>)) {
                <$t>::feed(self, chunk, &mut |e| on(e))
            }
            fn finish(&mut self, on: &mut dyn FnMut(Result<Event<'_>, FrameError>)) {
                <$t>::finish(self, &mut |e| on(e))
            }
        }
    };
}

framer!(SseFramer);
framer!(NdjsonFramer);
framer!(JsonArrayFramer);

/// What a framer of `limit` makes of `pieces` fed in turn, then finished.
pub fn frame<F: Framer>(limit: usize, pieces: &[&[u8]]) -> Vec<Owned> {
    let mut framer = F::new(limit);
    let mut out = Vec::new();
    let mut on = |e: Result<Event<'_>, FrameError>| {
        out.push(e.map(|e| (e.name.to_vec(), e.data.to_vec())));
    };
    for p in pieces {
        framer.feed(p, &mut on);
    }
    framer.finish(&mut on);
    out
}

/// The framer target: input `[cut, cut, limit, wire...]`. The wire framed
/// whole and framed in pieces gives the same events and errors, and no
/// event is over the limit.
pub fn framer_target<F: Framer>(data: &[u8]) {
    let [c0, c1, l, wire @ ..] = data else {
        return;
    };
    let limit = limit(*l);
    let whole = frame::<F>(limit, &[wire]);
    let cut = frame::<F>(limit, &pieces([*c0, *c1], wire));
    for (name, data) in whole.iter().flatten() {
        assert!(data.len() <= limit, "an event over the limit");
        assert!(name.len() <= 256, "an event name over 256 bytes");
    }
    assert_eq!(whole, cut, "the pieces changed the events");
}
