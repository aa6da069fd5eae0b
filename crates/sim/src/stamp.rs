//! Send-time stamps and byte fingerprints shared by the simulator and the
//! benchmark's load generator.
//!
//! A stamped response carries, in each JSON event or body, the instant it was
//! handed to the HTTP server as `"sim_sent_ns":N`: nanoseconds of
//! `CLOCK_MONOTONIC`, which every process on the host reads the same, so a
//! client on the same host gets one-way latency per chunk by reading the
//! clock when the frame arrives ([`mono_ns`]). `tokio::time::Instant` reads
//! the same clock on Linux, but does not expose its value.
//!
//! [`Fnv64`] fingerprints a byte stream independently of how it was cut into
//! frames, so the simulator (what it sent) and the load generator (what it
//! received) can prove that a proxy forwarded every byte unchanged.

use bytes::{BufMut, Bytes, BytesMut};

/// The JSON key of the send-time stamp.
pub const STAMP_KEY: &[u8] = b"\"sim_sent_ns\":";

/// Now on `CLOCK_MONOTONIC`, in nanoseconds.
pub fn mono_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail; it counts from boot, so both parts are
    // non-negative.
    let Ok(t) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) else {
        return 0;
    };
    (t.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec() as u64)
}

/// Adds `,"sim_sent_ns":now` before the last `}` of `frame`, when that `}` is
/// followed only by whitespace (an SSE `data: {...}\n\n` event or a whole
/// JSON body). Other frames (`data: [DONE]`) are returned as they are.
pub fn stamp(frame: &Bytes, now_ns: u64) -> Bytes {
    let Some(close) = frame.iter().rposition(|&b| b == b'}') else {
        return frame.clone();
    };
    if !frame[close + 1..].iter().all(u8::is_ascii_whitespace) {
        return frame.clone();
    }
    let mut out = BytesMut::with_capacity(frame.len() + STAMP_KEY.len() + 21);
    out.put_slice(&frame[..close]);
    out.put_u8(b',');
    out.put_slice(STAMP_KEY);
    out.put_slice(now_ns.to_string().as_bytes());
    out.put_slice(&frame[close..]);
    out.freeze()
}

/// Reads the stamp of one event or body, if it has one.
pub fn read_stamp(event: &[u8]) -> Option<u64> {
    let at = memchr::memmem::rfind(event, STAMP_KEY)? + STAMP_KEY.len();
    let digits = event[at..].iter().take_while(|b| b.is_ascii_digit());
    digits.fold(None, |acc: Option<u64>, &b| {
        Some(
            acc.unwrap_or(0)
                .wrapping_mul(10)
                .wrapping_add(u64::from(b - b'0')),
        )
    })
}

/// FNV-1a, 64 bits, fed incrementally: the same bytes give the same value
/// however they are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    /// Feeds more bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The fingerprint of everything fed so far.
    pub fn value(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stamps_json_events_and_bodies_only() {
        let ev = Bytes::from_static(b"data: {\"a\":1}\n\n");
        let out = stamp(&ev, 42);
        assert_eq!(&out[..], b"data: {\"a\":1,\"sim_sent_ns\":42}\n\n");
        assert_eq!(read_stamp(&out), Some(42));
        let done = Bytes::from_static(b"data: [DONE]\n\n");
        assert_eq!(stamp(&done, 42), done);
        assert_eq!(read_stamp(&done), None);
        let body = Bytes::from_static(b"{\"x\":{}}");
        assert_eq!(&stamp(&body, 7)[..], b"{\"x\":{},\"sim_sent_ns\":7}");
        let json: serde_json::Value = serde_json::from_slice(&stamp(&body, 7)).unwrap();
        assert_eq!(json["sim_sent_ns"], 7);
    }

    #[test]
    fn fingerprint_ignores_frame_boundaries() {
        let mut whole = Fnv64::default();
        whole.update(b"hello world");
        let mut parts = Fnv64::default();
        parts.update(b"hel");
        parts.update(b"lo wor");
        parts.update(b"ld");
        assert_eq!(whole, parts);
        assert_ne!(whole, Fnv64::default());
    }

    #[test]
    fn clock_is_monotonic() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(b >= a && a > 0);
    }
}
