//! The fuzzing entry point of the response reader.

use bytes::BytesMut;
use http::header::HeaderMap;
use http::{StatusCode, Version};

use super::decode::Decoder;
use super::head::{KeepAliveHint, Parsed, connection_close, parse_head};
use super::limits::MAX_HEAD;

/// Fuzzing entry point (`fuzz/fuzz_targets/h1_response.rs`, built only
/// with `--cfg fuzzing`): `data` read as an upstream's answer, head then
/// body, as `head::poll_head` and [`Body`](super::Body) read it, handed
/// over in the reads its first two bytes choose (0: one byte per read;
/// else cuts at those fractions of the rest). Whatever the bytes, nothing panics, and the
/// reads change nothing: head, data, trailers and end are those of the
/// whole answer read at once.
pub fn fuzz_response(data: &[u8]) {
    /// How the body ended.
    #[derive(Debug, PartialEq)]
    enum End {
        /// At its framing's end.
        Done,
        /// Delimited by the close, which came.
        Closed,
        /// The bytes ran out before the head or the body's end.
        Short,
        Error(String),
    }
    /// What was made of a final response head.
    #[derive(Debug, PartialEq)]
    struct Seen {
        status: StatusCode,
        reason: Option<Vec<u8>>,
        version: Version,
        headers: HeaderMap,
        framing: Decoder,
        ambiguous: bool,
        hint: KeepAliveHint,
        idle_limit: Option<std::time::Duration>,
        allows_another: bool,
        close: bool,
    }
    /// What an answer came to.
    #[derive(Debug, PartialEq)]
    struct Read {
        head: Option<Seen>,
        data: Vec<u8>,
        trailers: Vec<HeaderMap>,
        end: End,
    }
    fn read<'a>(mut pieces: impl Iterator<Item = &'a [u8]>) -> Read {
        let mut out = Read {
            head: None,
            data: Vec::new(),
            trailers: Vec::new(),
            end: End::Short,
        };
        let mut buf = BytesMut::new();
        let head = loop {
            if !buf.is_empty() {
                match parse_head(&mut buf) {
                    Err(e) => {
                        out.end = End::Error(e.to_string());
                        return out;
                    }
                    Ok(Parsed::Final(head)) => break head,
                    Ok(Parsed::Interim) => continue,
                    Ok(Parsed::Partial) if buf.len() >= MAX_HEAD => {
                        out.end = End::Error("head longer than 64 KiB".into());
                        return out;
                    }
                    Ok(Parsed::Partial) => {}
                }
            }
            match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => return out,
            }
        };
        let mut decoder =
            if head.status == StatusCode::NO_CONTENT || head.status == StatusCode::NOT_MODIFIED {
                Decoder::Done
            } else {
                head.framing
            };
        let hint = KeepAliveHint::of(&head.headers);
        out.head = Some(Seen {
            status: head.status,
            reason: head.reason.map(|r| r.as_bytes().to_vec()),
            version: head.version,
            close: connection_close(&head.headers),
            headers: head.headers,
            framing: head.framing,
            ambiguous: head.ambiguous,
            hint,
            idle_limit: hint.idle_limit(),
            allows_another: hint.allows_another(),
        });
        loop {
            match decoder.decode(&mut buf) {
                Err(e) => {
                    out.end = End::Error(e.to_string());
                    return out;
                }
                Ok(Some(frame)) => match frame.into_data() {
                    Ok(data) => {
                        assert!(!data.is_empty(), "an empty data frame");
                        out.data.extend_from_slice(&data);
                    }
                    Err(frame) => {
                        let trailers = frame.into_trailers().ok();
                        assert!(decoder.is_done(), "trailers before the end");
                        out.trailers.extend(trailers);
                    }
                },
                Ok(None) if decoder.is_done() => {
                    out.end = End::Done;
                    return out;
                }
                Ok(None) => match pieces.next() {
                    Some(piece) => buf.extend_from_slice(piece),
                    None => {
                        if decoder.closed() {
                            out.end = End::Closed;
                        }
                        return out;
                    }
                },
            }
        }
    }
    let [first, second, wire @ ..] = data else {
        return;
    };
    let whole = read(std::iter::once(wire));
    let pieces = if *first == 0 {
        read(wire.chunks(1))
    } else {
        let mut cuts = [
            wire.len() * usize::from(*first) / 256,
            wire.len() * usize::from(*second) / 256,
        ];
        cuts.sort_unstable();
        let [a, b] = cuts;
        read([&wire[..a], &wire[a..b], &wire[b..]].into_iter())
    };
    assert_eq!(whole, pieces, "the reads changed what was read");
}
