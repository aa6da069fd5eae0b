//! The response body, which reads the connection as it is polled and has
//! `decode.rs` take its frames out of the read buffer (and sends the rest
//! of the request, if the response came first).

use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use super::conn::{Conn, Keep, Transport};
use super::decode::Decoder;
use super::error::Error;
use super::limits::{READ_LEFT, READ_MAX, READ_MIN};
use super::write::{SendBody, Sending};

/// A response body, read from its connection as it is polled (which also
/// sends the rest of the request, if the response came first).
pub struct Body<T, B> {
    /// `None` once the body has ended (or failed).
    conn: Option<Conn<T>>,
    decoder: Decoder,
    /// Whether the connection can be kept once the body has ended (and the
    /// request has been sent whole).
    keep: bool,
    /// The rest of the request, while it is being sent.
    sending: Option<Box<Sending<B>>>,
    /// Where the connection goes if it can be kept.
    home: Weak<dyn Keep<T>>,
    /// Room reserved for the next read (adaptive, `READ_MIN..=READ_MAX`).
    read_size: usize,
    /// When the request's last byte was written, if that was before the
    /// response head came.
    written: Option<tokio::time::Instant>,
}

impl<T, B> Body<T, B> {
    /// The body of a response whose head `conn` has read: framed by
    /// `decoder`, with the rest of the request to send if the head came
    /// first.
    pub(super) fn new(
        conn: Conn<T>,
        decoder: Decoder,
        keep: bool,
        sending: Option<Box<Sending<B>>>,
        home: Weak<dyn Keep<T>>,
        written: Option<tokio::time::Instant>,
    ) -> Self {
        Body {
            conn: Some(conn),
            decoder,
            keep,
            sending,
            home,
            read_size: READ_MIN,
            written,
        }
    }

    /// When the request's last byte was written to the connection, if the
    /// whole request was written before the response head came (nearly
    /// always; else its body is still being sent).
    pub fn request_written(&self) -> Option<tokio::time::Instant> {
        self.written
    }
}

impl<T: Transport, B: SendBody> Body<T, B> {
    /// Once the body has ended: its connection back to the pool, if it can
    /// be kept, else closed (and a request not all sent is not sent
    /// further).
    pub(super) fn ended(&mut self) {
        if !self.decoder.is_done() {
            return;
        }
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let request_sent = self.sending.take().is_none();
        if self.keep && request_sent && conn.buf.is_empty() {
            // An idle connection holds no buffer (up to `max_idle` of
            // them wait in the pool); the next exchange takes a new one.
            conn.buf = BytesMut::new();
            T::give_back(conn, &self.home);
        }
    }

    /// Sends more of the request, as far as its body and the upstream
    /// allow now. Once the response has begun, a failure to send is not
    /// the response's: the rest is not sent, and the connection is not
    /// kept.
    fn send_rest(&mut self, cx: &mut Context<'_>) {
        let (Some(sending), Some(conn)) = (self.sending.as_mut(), self.conn.as_mut()) else {
            return;
        };
        let Poll::Ready(result) = sending.poll(&mut conn.io, cx) else {
            return;
        };
        if let Err(e) = result {
            tracing::debug!(error = ?e, "the rest of the request was not sent to the upstream");
            self.keep = false;
        }
        self.sending = None;
    }
}

impl<T: Transport, B: SendBody> http_body::Body for Body<T, B> {
    type Data = Bytes;
    type Error = Error<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error<B::Error>>>> {
        let this = self.get_mut();
        this.send_rest(cx);
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut conn.buf) {
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.widen())));
                }
                Ok(Some(frame)) => {
                    this.ended();
                    return Poll::Ready(Some(Ok(frame)));
                }
                Ok(None) if this.decoder.is_done() => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Ok(None) => {}
            }
            make_room(&mut conn.buf, this.read_size);
            let room = conn.buf.capacity() - conn.buf.len();
            let read = tokio_util::io::poll_read_buf(Pin::new(&mut conn.io), cx, &mut conn.buf);
            match ready!(read) {
                // A TLS stream the upstream closed without its close_notify:
                // a body framed by length or chunks was cut short. (One
                // delimited by the close may have been truncated: the error
                // says so.)
                Err(e)
                    if e.kind() == std::io::ErrorKind::UnexpectedEof
                        && this.decoder != Decoder::Close =>
                {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::ClosedInBody)));
                }
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
                // (A body delimited by the close never keeps its connection.)
                Ok(0) if this.decoder.closed() => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::ClosedInBody)));
                }
                Ok(n) if n == room => this.read_size = (this.read_size * 2).min(READ_MAX),
                Ok(n) if n < room / 2 => this.read_size = (this.read_size / 2).max(READ_MIN),
                Ok(_) => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder {
            Decoder::Done => SizeHint::with_exact(0),
            Decoder::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

/// Room in `buf` for a read of `size`: the buffer taken back whole, in
/// place, once every frame split off it is gone; else, while a frame still
/// waits to be written, the room left after it, if that is at least
/// `READ_LEFT`; else a new buffer.
#[inline]
fn make_room(buf: &mut BytesMut, size: usize) {
    if buf.capacity() - buf.len() < size
        && !buf.try_reclaim(size)
        && buf.capacity() - buf.len() < READ_LEFT
    {
        buf.reserve(size);
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::take;
    use super::super::head::parse_head;
    use super::super::limits::MAX_SIZE_LINE;
    use super::*;

    /// Frames, each with whether the body had ended right after it.
    type Frames = Vec<(Frame<Bytes>, bool)>;

    /// The frames `decoder` makes of `wire` handed over in the pieces cut
    /// at `cuts` (as reads would), each with whether the body had ended
    /// right after it; the decoder's last word is the result's second part.
    fn frames(
        framing: Decoder,
        wire: &[u8],
        cuts: &[usize],
    ) -> (Frames, Result<(BytesMut, bool), Error>) {
        let mut decoder = framing;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&wire.len()]) {
            buf.extend_from_slice(&wire[from..to]);
            from = to;
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => out.push((frame, decoder.is_done())),
                    Ok(None) => break,
                    Err(e) => return (out, Err(e)),
                }
            }
        }
        let done = decoder.is_done();
        (out, Ok((buf, done)))
    }

    fn data(frames: &Frames) -> Vec<Vec<u8>> {
        frames
            .iter()
            .filter_map(|(f, _)| f.data_ref().map(|d| d.to_vec()))
            .collect()
    }

    const CHUNKED: &[u8] = b"7\r\ndata: a\r\n\
        19;name=value\r\ndata: {\"x\":1}\n\ndata: bc\n\n\r\n\
        3 \r\nxyz\r\n0\r\n\r\n";

    /// Read whole, every chunk is one frame with its bytes, and the last one
    /// ends the body (the terminator came with it).
    #[test]
    fn a_chunk_is_one_frame() {
        let (out, rest) = frames(Decoder::CHUNKED, CHUNKED, &[]);
        assert_eq!(
            data(&out),
            [&b"data: a"[..], b"data: {\"x\":1}\n\ndata: bc\n\n", b"xyz"]
        );
        assert_eq!(
            out.iter().map(|(_, end)| *end).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert!(rest.unwrap().0.is_empty());
    }

    /// Cut anywhere, in one or two places: the same bytes, no frame
    /// crosses a chunk's boundary (a chunk cut in its data is two frames),
    /// and the body ends exactly at its terminator.
    #[test]
    fn chunked_bodies_cut_anywhere_decode_the_same() {
        let chunks: [&[u8]; 3] = [b"data: a", b"data: {\"x\":1}\n\ndata: bc\n\n", b"xyz"];
        let n = CHUNKED.len();
        for a in 0..=n {
            for b in a..=n {
                let (out, rest) = frames(Decoder::CHUNKED, CHUNKED, &[a, b]);
                let (rest, done) = rest.unwrap_or_else(|e| panic!("cut at {a}, {b}: {e}"));
                assert!(rest.is_empty() && done, "cut at {a}, {b}");
                // Each frame lies inside one chunk: regrouped, the chunks.
                let mut regrouped: Vec<Vec<u8>> = vec![Vec::new()];
                let mut i = 0;
                for d in data(&out) {
                    assert!(!d.is_empty(), "cut at {a}, {b}: empty frame");
                    regrouped[i].extend_from_slice(&d);
                    assert!(regrouped[i].len() <= chunks[i].len());
                    if regrouped[i].len() == chunks[i].len() {
                        regrouped.push(Vec::new());
                        i += 1;
                    }
                }
                assert_eq!(&regrouped[..3], chunks, "cut at {a}, {b}");
                // Only the last frame can say the body ended (it does when
                // the terminator came in the same piece).
                assert!(out[..out.len() - 1].iter().all(|(_, end)| !end));
                // The last data byte is 8 before the end.
                let last_piece = [a, b].into_iter().filter(|&c| c < n).max().unwrap_or(0);
                if last_piece <= n - 8 {
                    assert!(out.last().unwrap().1, "cut at {a}, {b}: ended");
                }
            }
        }
    }

    #[test]
    fn trailers_come_as_a_last_frame() {
        let wire = b"3\r\nabc\r\n0\r\nx-usage: 12\r\nx-b: 2\r\n\r\n";
        for cut in 0..=wire.len() {
            let (out, rest) = frames(Decoder::CHUNKED, wire, &[cut]);
            assert_eq!(rest.unwrap(), (BytesMut::new(), true), "cut at {cut}");
            assert_eq!(data(&out).concat(), b"abc", "cut at {cut}");
            let (last, end) = out.last().unwrap();
            let trailers = last.trailers_ref().expect("trailers");
            assert_eq!(trailers["x-usage"], "12");
            assert_eq!(trailers["x-b"], "2");
            assert!(end);
        }
    }

    #[test]
    fn bad_chunked_framing_is_an_error_after_the_good_frames() {
        for (wire, good) in [
            (&b"3\r\nabcd\r\n"[..], 1),
            (b"3\r\nabc\nx", 1),
            (b"g\r\n", 0),
            (b"\r\n", 0),
            (b"3 4\r\nabc\r\n", 0),
            (b"3\n", 0),
            (b"11111111111111111\r\n", 0),
            (b"3;\n", 0),
            (b"3\r\nabc\r\n0\r\nno colon\r\n\r\n", 1),
        ] {
            let (out, rest) = frames(Decoder::CHUNKED, wire, &[]);
            assert!(
                matches!(rest, Err(Error::Chunked(_))),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
            assert_eq!(out.len(), good, "{:?}", String::from_utf8_lossy(wire));
        }
    }

    #[test]
    fn a_chunk_extension_is_bounded() {
        let mut wire = b"3;".to_vec();
        wire.extend(std::iter::repeat_n(b'x', MAX_SIZE_LINE + 1));
        wire.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
        assert!(frames(Decoder::CHUNKED, &wire, &[]).1.is_err());
        let mut wire = b"3;".to_vec();
        wire.extend(std::iter::repeat_n(b'x', MAX_SIZE_LINE));
        wire.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
        assert_eq!(data(&frames(Decoder::CHUNKED, &wire, &[]).0), [b"abc"]);
    }

    #[test]
    fn a_length_body_ends_at_its_length() {
        let wire = b"hello, world";
        for cut in 0..=wire.len() {
            let (out, rest) = frames(Decoder::Length(5), wire, &[cut]);
            assert_eq!(data(&out).concat(), b"hello", "cut at {cut}");
            assert!(out.last().unwrap().1);
            // What follows the body is left for the connection to refuse.
            let (rest, done) = rest.unwrap();
            assert!(done);
            assert_eq!(&rest[..], &wire[5..]);
        }
    }

    /// A frame is the read buffer's own bytes, not a copy; while it lives
    /// the next read goes into the room after it, and once it is gone the
    /// buffer is taken back whole, in place.
    #[test]
    fn frames_are_split_off_and_the_buffer_taken_back_once_they_are_gone() {
        let mut buf = BytesMut::with_capacity(READ_MIN);
        buf.extend_from_slice(b"5\r\nhello\r\n");
        let start = buf.as_ptr();
        let mut decoder = Decoder::CHUNKED;
        let frame = decoder
            .decode(&mut buf)
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap();
        assert_eq!(&frame[..], b"hello");
        assert_eq!(
            frame.as_ptr(),
            start.wrapping_add(3),
            "split off, not copied"
        );
        assert!(buf.is_empty());
        // The frame still waits to be written: the read goes after it.
        make_room(&mut buf, READ_MIN);
        assert_eq!(buf.as_ptr(), start.wrapping_add(10));
        assert!(buf.capacity() >= READ_LEFT);
        drop(frame);
        make_room(&mut buf, READ_MIN);
        assert_eq!(buf.as_ptr(), start, "taken back in place");
        assert!(buf.capacity() >= READ_MIN);
    }

    /// With too little room left after a frame that still waits, a read
    /// takes a new buffer, and the frame keeps its bytes.
    #[test]
    fn a_read_takes_a_new_buffer_when_a_frame_holds_the_room() {
        let mut buf = BytesMut::with_capacity(READ_MIN);
        let data = vec![b'x'; READ_MIN - READ_LEFT + 1];
        buf.extend_from_slice(&data);
        let start = buf.as_ptr();
        let frame = take(&mut buf, 0, data.len());
        make_room(&mut buf, READ_MIN);
        let at = buf.as_ptr() as usize;
        assert!(!(start as usize..start as usize + READ_MIN).contains(&at));
        assert!(buf.capacity() >= READ_MIN);
        assert_eq!(frame, data);
    }

    /// A size line's every form, cut at every byte (and every two): the
    /// same data, the same end, or the same error.
    #[test]
    fn size_lines_in_every_form_decode_the_same_cut_anywhere() {
        let ok: &[(&[u8], &[u8])] = &[
            (b"a\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (
                b"1F\r\n0123456789abcdef0123456789abcde\r\n0\r\n\r\n",
                b"0123456789abcdef0123456789abcde",
            ),
            (b"000a\r\n0123456789\r\n0000\r\n\r\n", b"0123456789"),
            (
                b"000000000000000a\r\n0123456789\r\n0\r\n\r\n",
                b"0123456789",
            ),
            (b"a;ext=1\r\n0123456789\r\n0;last\r\n\r\n", b"0123456789"),
            (b"a;\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (b"a \t\r\n0123456789\r\n0 \r\n\r\n", b"0123456789"),
            (b"a\t;x=\"y\"\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n", b"abcdefg"),
        ];
        let bad: &[&[u8]] = &[
            b"0000000000000000a\r\n0123456789\r\n0\r\n\r\n",
            b"a\n0123456789\r\n0\r\n\r\n",
            b"a;x\n0123456789\r\n0\r\n\r\n",
            b"a \n0123456789\r\n0\r\n\r\n",
            b"a\r0123456789\r\n0\r\n\r\n",
            b"a\r\n0123456789\n0\r\n\r\n",
            b"a\r\n0123456789\r0\r\n\r\n",
            b"a\r\n0123456789\r\n\n\r\n",
            b"-a\r\n0123456789\r\n0\r\n\r\n",
            b"0x\r\n\r\n",
        ];
        for a in 0..60 {
            for b in a..60 {
                for &(wire, want) in ok {
                    let cuts: Vec<usize> =
                        [a, b].into_iter().filter(|&c| c <= wire.len()).collect();
                    let (out, rest) = frames(Decoder::CHUNKED, wire, &cuts);
                    let name = String::from_utf8_lossy(wire);
                    assert_eq!(
                        rest.unwrap(),
                        (BytesMut::new(), true),
                        "{name:?} cut at {cuts:?}"
                    );
                    assert_eq!(data(&out).concat(), want, "{name:?} cut at {cuts:?}");
                    assert!(
                        out.iter()
                            .all(|(f, _)| f.data_ref().is_some_and(|d| !d.is_empty()))
                    );
                }
                for &wire in bad {
                    let cuts: Vec<usize> =
                        [a, b].into_iter().filter(|&c| c <= wire.len()).collect();
                    let (_, rest) = frames(Decoder::CHUNKED, wire, &cuts);
                    let name = String::from_utf8_lossy(wire);
                    assert!(
                        matches!(rest, Err(Error::Chunked(_))),
                        "{name:?} cut at {cuts:?}"
                    );
                }
            }
        }
    }

    /// The largest size there is reads on as data, chunk by read.
    #[test]
    fn a_size_of_sixteen_fs_is_read_as_data() {
        let wire = b"ffffffffffffffff\r\nabc";
        let (out, rest) = frames(Decoder::CHUNKED, wire, &[19]);
        assert_eq!(data(&out), [&b"a"[..], b"bc"]);
        let (rest, done) = rest.unwrap();
        assert!(rest.is_empty() && !done);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 500, ..Default::default() })]

        /// Any chunking of any data, with or without extensions, cut into
        /// reads anywhere: the data comes out whole, every frame within one
        /// chunk, and the body ends at the terminator.
        #[test]
        fn any_chunked_body_decodes_to_its_chunks(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..300), 0..8),
            style in 0usize..6,
            cuts in proptest::collection::vec(0usize..4000, 0..6),
        ) {
            let mut wire = Vec::new();
            for c in &chunks {
                // Upper or lower case, leading zeros, whitespace,
                // extensions: the fast path's and the state machine's.
                let size = match style % 3 {
                    0 => format!("{:X}", c.len()),
                    1 => format!("{:x}", c.len()),
                    _ => format!("{:04x}", c.len()),
                };
                wire.extend_from_slice(size.as_bytes());
                wire.extend_from_slice(match style / 3 {
                    0 => &b""[..],
                    _ => b" ;a=b",
                });
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(c);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            let (out, rest) = frames(Decoder::CHUNKED, &wire, &cuts);
            let (rest, done) = rest.unwrap();
            proptest::prop_assert!(rest.is_empty() && done);
            // Regrouped by chunk, the frames are the chunks.
            let mut got: Vec<Vec<u8>> = Vec::new();
            let mut open = 0;
            for d in data(&out) {
                if open == 0 {
                    got.push(Vec::new());
                    open = chunks[got.len() - 1].len();
                }
                proptest::prop_assert!(d.len() <= open, "a frame across chunks");
                got.last_mut().unwrap().extend_from_slice(&d);
                open -= d.len();
            }
            proptest::prop_assert_eq!(got, chunks);
        }

        /// Whatever the upstream sends, the decoders and the head parser
        /// answer (a frame, more to read, or an error) without panicking.
        #[test]
        fn any_bytes_are_answered(
            wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            cut in 0usize..200,
        ) {
            let cut = cut.min(wire.len());
            for framing in [Decoder::CHUNKED, Decoder::Length(50), Decoder::Close] {
                let _ = frames(framing, &wire, &[cut]);
            }
            let mut buf = BytesMut::from(&wire[..]);
            let _ = parse_head(&mut buf);
        }
    }
}
