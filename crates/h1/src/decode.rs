//! Decoding a response body out of the connection's read buffer, by its
//! framing: a `Content-Length`, chunked (with its trailers as a last
//! frame), or until the upstream closes.
//!
//! A data frame is split off the read buffer as it is ([`take`]): no copy,
//! no allocation. The frame shares the buffer until the client's
//! connection has written and dropped it. hyper's server polls the body
//! for the next frame before it writes the one it queued, so that poll's
//! read finds the frame still there: it goes into the room after it, and
//! the read after the write takes the buffer back whole, in place
//! ([`crate::body`]). Per chunk of a stream read one chunk a read
//! (`benches/relay.rs`, a counting allocator): none, whether the frame is
//! dropped at once or waits for that next poll. A copy of each frame into
//! a buffer of its own, which keeps the read buffer unshared, costs one;
//! splitting with a full-size reservation before every read costs two
//! when the frame waits (a new buffer, then its shared header at the next
//! split).
//!
//! A chunk as upstreams send it, its size line, data and CRLF all in the
//! buffer, is taken at once (`whole_chunk`): the size's hex digits by a
//! table, the data split off with its framing. Anything else (a chunk cut
//! across reads, whitespace, an extension, the last chunk, bad framing)
//! goes through the byte-by-byte state machine, which keeps its place
//! between reads, so that no line is scanned twice; an extension is
//! skipped by a search for its line's end.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http_body::Frame;

use super::error::Error;
use super::limits::{MAX_HEAD, MAX_HEADERS, MAX_SIZE_LINE};

/// Where the chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Chunk {
    /// In a chunk's size line: the size so far and its number of digits.
    Size {
        size: u64,
        digits: u8,
    },
    /// In the whitespace after the size.
    SizeSpace {
        size: u64,
    },
    /// In a chunk extension (ignored): how many bytes of it were read.
    Extension {
        size: u64,
        len: usize,
    },
    /// After the CR of the size line.
    SizeLf {
        size: u64,
    },
    /// In a chunk's data: how many bytes remain.
    Data(u64),
    DataCr,
    DataLf,
    /// After the last chunk: the trailer section.
    Trailers,
}

impl Chunk {
    const START: Chunk = Chunk::Size { size: 0, digits: 0 };

    /// The state after the framing byte `b` (never called in `Data` or
    /// `Trailers`, which take their bytes whole).
    fn step(self, b: u8) -> Result<Chunk, Error> {
        let hex = |b: u8| (b as char).to_digit(16).map(u64::from);
        Ok(match self {
            Chunk::Size { size, digits } => match (b, hex(b)) {
                (_, Some(d)) if digits < 16 => Chunk::Size {
                    size: size << 4 | d,
                    digits: digits + 1,
                },
                (_, Some(_)) => return Err(Error::Chunked("chunk size over 16 hex digits")),
                (b'\r', None) if digits > 0 => Chunk::SizeLf { size },
                (b' ' | b'\t', None) if digits > 0 => Chunk::SizeSpace { size },
                (b';', None) if digits > 0 => Chunk::Extension { size, len: 0 },
                _ => return Err(Error::Chunked("invalid chunk size")),
            },
            Chunk::SizeSpace { size } => match b {
                b' ' | b'\t' => self,
                b';' => Chunk::Extension { size, len: 0 },
                b'\r' => Chunk::SizeLf { size },
                _ => return Err(Error::Chunked("invalid chunk size")),
            },
            Chunk::Extension { size, len } => match b {
                b'\r' => Chunk::SizeLf { size },
                b'\n' => return Err(Error::Chunked("bare LF in a chunk extension")),
                _ if len >= MAX_SIZE_LINE => {
                    return Err(Error::Chunked("chunk extension over 4 KiB"));
                }
                _ => Chunk::Extension { size, len: len + 1 },
            },
            Chunk::SizeLf { size } => match (b, size) {
                (b'\n', 0) => Chunk::Trailers,
                (b'\n', _) => Chunk::Data(size),
                _ => return Err(Error::Chunked("no LF after a chunk size")),
            },
            Chunk::DataCr => match b {
                b'\r' => Chunk::DataLf,
                _ => return Err(Error::Chunked("chunk data longer than its size")),
            },
            Chunk::DataLf => match b {
                b'\n' => Chunk::START,
                _ => return Err(Error::Chunked("no LF after chunk data")),
            },
            Chunk::Data(_) | Chunk::Trailers => self,
        })
    }
}

/// How a response body is delimited, and how far it has been decoded out
/// of the read buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Decoder {
    /// This many bytes remain.
    Length(u64),
    Chunked(Chunk),
    /// Until the upstream closes the connection.
    Close,
    /// Ended (or empty from the start).
    Done,
}

impl Decoder {
    pub(super) const CHUNKED: Decoder = Decoder::Chunked(Chunk::START);

    pub(super) fn is_done(&self) -> bool {
        *self == Decoder::Done
    }

    /// The upstream closed the connection: whether that ends the body.
    pub(super) fn closed(&mut self) -> bool {
        let ends = *self == Decoder::Close;
        if ends {
            *self = Decoder::Done;
        }
        ends
    }

    /// The next frame that `buf` holds (taken off its front), or `None`
    /// when it needs more bytes or the body has ended (`is_done`). After a
    /// data frame, the framing that follows it in `buf` is taken too, up to
    /// the next chunk's data, so that the last frame of a body whose end
    /// was read with it already says the body has ended.
    pub(super) fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame<Bytes>>, Error> {
        // Every framing needs a byte to go further (the body reads the
        // transport when the buffer is empty, twice a chunk or more).
        if buf.is_empty() {
            return Ok(None);
        }
        let frame = match *self {
            Decoder::Done => None,
            Decoder::Close => Some(Frame::data(take(buf, 0, buf.len()))),
            Decoder::Length(rest) => {
                let n = usize::try_from(rest).unwrap_or(usize::MAX).min(buf.len());
                let rest = rest - n as u64;
                *self = if rest == 0 {
                    Decoder::Done
                } else {
                    Decoder::Length(rest)
                };
                Some(Frame::data(take(buf, 0, n)))
            }
            Decoder::Chunked(at) => {
                let whole = match at {
                    Chunk::START => self.whole_chunk(buf),
                    _ => None,
                };
                let frame = match whole {
                    Some(data) => Some(Frame::data(data)),
                    None => self.chunked(buf, true)?,
                };
                if !buf.is_empty() && frame.as_ref().is_some_and(Frame::is_data) {
                    // An error there leaves the state and `buf` as they
                    // were: the next call meets it, after this frame.
                    let _ = self.chunked(buf, false);
                }
                frame
            }
        };
        Ok(frame)
    }

    /// At the start of a chunk, a size line of hex digits and CRLF at the
    /// start of `buf`: with the data and the CRLF after it there too (the
    /// usual chunk), the data, split off with its framing; else the size
    /// line taken off, for the state machine to go on after it. Anything
    /// else (whitespace, an extension, a line cut across reads, bad
    /// framing) is left to the state machine.
    fn whole_chunk(&mut self, buf: &mut BytesMut) -> Option<Bytes> {
        let (size, line) = size_line(buf)?;
        let end = usize::try_from(size)
            .ok()
            .filter(|&size| size > 0)
            .and_then(|size| line.checked_add(size));
        if let Some(end) = end
            && buf.get(end..).and_then(|crlf| crlf.get(..2)) == Some(&b"\r\n"[..])
        {
            let mut chunk = buf.split_to(end + 2);
            chunk.advance(line);
            chunk.truncate(end - line);
            return Some(chunk.freeze());
        }
        buf.advance(line);
        *self = Decoder::Chunked(match size {
            0 => Chunk::Trailers,
            size => Chunk::Data(size),
        });
        None
    }

    /// Runs the chunked decoder over `buf`: the next data frame (only when
    /// `data`) or trailers frame, or `None` when `buf` has no more for it
    /// (or, without `data`, at the next data or non-empty trailers). An
    /// error leaves the state and `buf` unchanged.
    fn chunked(&mut self, buf: &mut BytesMut, data: bool) -> Result<Option<Frame<Bytes>>, Error> {
        let Decoder::Chunked(mut at) = *self else {
            return Ok(None);
        };
        // Framing bytes read, taken off `buf` at the end.
        let mut i = 0;
        let frame = loop {
            match at {
                Chunk::Data(rest) => {
                    if !data || i == buf.len() {
                        break None;
                    }
                    let n = usize::try_from(rest)
                        .unwrap_or(usize::MAX)
                        .min(buf.len() - i);
                    let data = take(buf, i, n);
                    i = 0;
                    // The CRLF after the data, when it came with it.
                    at = match rest - n as u64 {
                        0 if buf.starts_with(b"\r\n") => {
                            i = 2;
                            Chunk::START
                        }
                        0 => Chunk::DataCr,
                        rest => Chunk::Data(rest),
                    };
                    break Some(Frame::data(data));
                }
                // The usual framing, whole in `buf`, read at once: the CRLF
                // after a chunk's data, and a size line without extensions.
                Chunk::DataCr if buf[i..].starts_with(b"\r\n") => {
                    i += 2;
                    at = Chunk::START;
                    continue;
                }
                Chunk::START => {
                    if let Some((size, len)) = size_line(&buf[i..]) {
                        i += len;
                        at = match size {
                            0 => Chunk::Trailers,
                            size => Chunk::Data(size),
                        };
                        continue;
                    }
                }
                Chunk::Trailers => {
                    let section = &buf[i..];
                    if section.starts_with(b"\r\n") {
                        buf.advance(i + 2);
                        *self = Decoder::Done;
                        return Ok(None);
                    }
                    if !data {
                        break None;
                    }
                    let Some(end) = memchr::memmem::find(section, b"\r\n\r\n") else {
                        if section.len() > MAX_HEAD {
                            return Err(Error::Chunked("trailers longer than 64 KiB"));
                        }
                        break None;
                    };
                    let trailers = trailers(&section[..end + 4])?;
                    buf.advance(i + end + 4);
                    *self = Decoder::Done;
                    return Ok(Some(Frame::trailers(trailers)));
                }
                // An extension's bytes up to its line's end (or to what
                // `buf` holds), at once.
                Chunk::Extension { size, len } => {
                    let rest = &buf[i..];
                    let skip = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
                    if len + skip > MAX_SIZE_LINE {
                        return Err(Error::Chunked("chunk extension over 4 KiB"));
                    }
                    i += skip;
                    at = Chunk::Extension {
                        size,
                        len: len + skip,
                    };
                }
                _ => {}
            }
            let Some(&b) = buf.get(i) else { break None };
            at = at.step(b)?;
            i += 1;
        };
        buf.advance(i);
        *self = Decoder::Chunked(at);
        Ok(frame)
    }
}

/// A whole chunk size line of hex digits and CRLF at the start of `bytes`:
/// the size and the line's length. `None` for anything else (more to read,
/// an extension, whitespace, an error), which the byte-by-byte path takes.
fn size_line(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut size = 0u64;
    let mut digits = 0;
    for &b in bytes.iter().take(16) {
        let d = HEX[usize::from(b)];
        if d > 0xf {
            break;
        }
        size = size << 4 | u64::from(d);
        digits += 1;
    }
    (digits > 0 && bytes[digits..].starts_with(b"\r\n")).then_some((size, digits + 2))
}

/// Each byte's value as a hex digit, or `NOT_HEX`.
static HEX: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            d @ b'0'..=b'9' => d - b'0',
            d @ b'a'..=b'f' => d - b'a' + 10,
            d @ b'A'..=b'F' => d - b'A' + 10,
            _ => NOT_HEX,
        };
        b += 1;
    }
    table
};
const NOT_HEX: u8 = 0xff;

/// A trailer section (its fields and the empty line after them).
fn trailers(section: &[u8]) -> Result<HeaderMap, Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let Ok(httparse::Status::Complete((_, fields))) = httparse::parse_headers(section, &mut slots)
    else {
        return Err(Error::Chunked("invalid trailers"));
    };
    let mut map = HeaderMap::with_capacity(fields.len());
    for f in fields {
        let (name, value) = field(f).ok_or(Error::Chunked("invalid trailers"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The `n` bytes of `buf` after its first `skip`, split off it with
/// those (see the module's doc).
pub(super) fn take(buf: &mut BytesMut, skip: usize, n: usize) -> Bytes {
    buf.advance(skip);
    buf.split_to(n).freeze()
}

/// A header field as parsed, as `http` holds it (`None` if it cannot be).
pub(super) fn field(h: &httparse::Header<'_>) -> Option<(HeaderName, HeaderValue)> {
    let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
    Some((name, HeaderValue::from_bytes(h.value).ok()?))
}
