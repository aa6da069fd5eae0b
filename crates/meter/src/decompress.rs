//! Decoding a *copy* of a compressed response body for metering.
//!
//! The client always gets the compressed bytes exactly as the upstream sent
//! them; only the meter reads the decoded text. Each frame is decoded as it
//! arrives (the upstream's compressor flushes per event when it streams),
//! into a buffer that is drained after every frame and capped per frame, so
//! a decompression bomb degrades metering instead of exhausting memory.

use std::io::Write;

use super::event::ParseError;

/// Supported `content-encoding` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Gzip,
    /// HTTP's `deflate` is the zlib format (RFC 9110 §8.4.1.2).
    Deflate,
    Brotli,
    Zstd,
}

impl Encoding {
    /// Parses a `content-encoding` header value. `Ok(None)` for identity or
    /// no encoding; `Err` for one the meter cannot decode (several stacked
    /// codings included).
    pub fn parse(value: Option<&[u8]>) -> Result<Option<Encoding>, ParseError> {
        let Some(value) = value.map(<[u8]>::trim_ascii).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let is = |name: &[u8]| value.eq_ignore_ascii_case(name);
        Ok(Some(if is(b"identity") {
            return Ok(None);
        } else if is(b"gzip") || is(b"x-gzip") {
            Encoding::Gzip
        } else if is(b"deflate") {
            Encoding::Deflate
        } else if is(b"br") {
            Encoding::Brotli
        } else if is(b"zstd") {
            Encoding::Zstd
        } else {
            return Err(ParseError::Compressed);
        }))
    }
}

/// The decoded output of one frame, capped.
struct Sink {
    out: Vec<u8>,
    limit: usize,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > self.limit {
            return Err(std::io::Error::other(
                "decoded frame over the metering limit",
            ));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Codec {
    Gzip(flate2::write::GzDecoder<Sink>),
    Deflate(flate2::write::ZlibDecoder<Sink>),
    Brotli(Box<brotli::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
}

/// A streaming decoder of one response body.
pub struct Decompressor {
    codec: Codec,
}

impl Decompressor {
    /// A decoder whose output per frame is capped at `limit` bytes.
    pub fn new(encoding: Encoding, limit: usize) -> Result<Self, ParseError> {
        let sink = Sink {
            out: Vec::new(),
            limit,
        };
        let codec = match encoding {
            Encoding::Gzip => Codec::Gzip(flate2::write::GzDecoder::new(sink)),
            Encoding::Deflate => Codec::Deflate(flate2::write::ZlibDecoder::new(sink)),
            Encoding::Brotli => {
                Codec::Brotli(Box::new(brotli::DecompressorWriter::new(sink, 4096)))
            }
            Encoding::Zstd => Codec::Zstd(
                zstd::stream::write::Decoder::new(sink).map_err(|_| ParseError::Compressed)?,
            ),
        };
        Ok(Self { codec })
    }

    /// Decodes the next frame; the returned text is valid until the next
    /// call.
    pub fn decode(&mut self, frame: &[u8]) -> Result<&[u8], ParseError> {
        let result = match &mut self.codec {
            Codec::Gzip(d) => {
                d.get_mut().out.clear();
                d.write_all(frame).and_then(|()| d.flush())
            }
            Codec::Deflate(d) => {
                d.get_mut().out.clear();
                d.write_all(frame).and_then(|()| d.flush())
            }
            Codec::Brotli(d) => {
                d.get_mut().out.clear();
                d.write_all(frame).and_then(|()| d.flush())
            }
            Codec::Zstd(d) => {
                d.get_mut().out.clear();
                d.write_all(frame).and_then(|()| d.flush())
            }
        };
        result.map_err(|_| ParseError::Compressed)?;
        Ok(match &self.codec {
            Codec::Gzip(d) => &d.get_ref().out,
            Codec::Deflate(d) => &d.get_ref().out,
            Codec::Brotli(d) => &d.get_ref().out,
            Codec::Zstd(d) => &d.get_ref().out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn compress(encoding: Encoding, data: &[u8]) -> Vec<u8> {
        match encoding {
            Encoding::Gzip => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Encoding::Deflate => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Encoding::Brotli => {
                let mut out = Vec::new();
                {
                    let mut e = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                    e.write_all(data).unwrap();
                }
                out
            }
            Encoding::Zstd => zstd::encode_all(data, 3).unwrap(),
        }
    }

    #[test]
    fn every_encoding_decodes_whatever_the_cuts() {
        let text: Vec<u8> = (0..2000)
            .flat_map(|i| format!("data: {{\"n\":{i}}}\n\n").into_bytes())
            .collect();
        for enc in [
            Encoding::Gzip,
            Encoding::Deflate,
            Encoding::Brotli,
            Encoding::Zstd,
        ] {
            let packed = compress(enc, &text);
            for size in [1, 7, 100, packed.len()] {
                let mut d = Decompressor::new(enc, 1 << 20).unwrap();
                let mut out = Vec::new();
                for piece in packed.chunks(size) {
                    out.extend_from_slice(d.decode(piece).unwrap());
                }
                assert_eq!(out, text, "{enc:?} in pieces of {size}");
            }
        }
    }

    #[test]
    fn a_bomb_is_refused_not_inflated() {
        let zeros = vec![0u8; 8 << 20];
        for enc in [
            Encoding::Gzip,
            Encoding::Deflate,
            Encoding::Brotli,
            Encoding::Zstd,
        ] {
            let packed = compress(enc, &zeros);
            let mut d = Decompressor::new(enc, 1 << 20).unwrap();
            assert_eq!(
                d.decode(&packed).unwrap_err(),
                ParseError::Compressed,
                "{enc:?}"
            );
        }
    }

    #[test]
    fn encodings_parse() {
        assert_eq!(Encoding::parse(None), Ok(None));
        assert_eq!(Encoding::parse(Some(b" identity ")), Ok(None));
        assert_eq!(Encoding::parse(Some(b"GZIP")), Ok(Some(Encoding::Gzip)));
        assert_eq!(Encoding::parse(Some(b"br")), Ok(Some(Encoding::Brotli)));
        assert_eq!(Encoding::parse(Some(b"zstd")), Ok(Some(Encoding::Zstd)));
        assert_eq!(
            Encoding::parse(Some(b"deflate")),
            Ok(Some(Encoding::Deflate))
        );
        assert_eq!(
            Encoding::parse(Some(b"gzip, br")),
            Err(ParseError::Compressed)
        );
        assert_eq!(
            Encoding::parse(Some(b"compress")),
            Err(ParseError::Compressed)
        );
    }
}
