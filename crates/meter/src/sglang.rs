//! SGLang native API (`POST /generate`): SSE ending in `data: [DONE]`.
//!
//! Each event has `text`, `meta_info` (`prompt_tokens`, `completion_tokens`
//! cumulative, `cached_tokens`) and, for batches or `n > 1`, `index`. By
//! default `text` is *cumulative*: every event repeats the whole output so
//! far. With `--incremental-streaming-output` it is a *delta*. A *token
//! event* is an event whose output grew: a longer cumulative text, or a
//! non-empty delta. All output is visible (the native API does not separate
//! reasoning).
//!
//! The mode is detected per request by [`Cumulative`], without copying any
//! text: for each `index` it keeps the previous text's length and a hash of
//! it. An event whose text starts with the previous text (same hash over
//! the previous length) is read as cumulative; the first event that does not
//! switches the request to delta mode for good. The one misreading: in delta
//! mode, consecutive identical deltas seen before any switch count once.
//! Non-streamed bodies and [`classify`] read a single event on its own
//! (non-empty text is a token).
//!
//! `meta_info` usage is cumulative; the last value wins. With
//! `--enable-metrics`, `meta_info` also carries the server's timings, in
//! seconds: `queue_time` (the wait queue), and the prefill as the wait
//! from leaving the queue to the prefill batch's start
//! (`prefill_waiting_latency`, `prefill_launch_delay` in older versions)
//! plus that batch's run (`prefill_launch_latency`): both, or no prefill.
//! It reports no decode time. An event with an
//! `error` field or `"object": "error"` is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use super::event::{EventInfo, ParseError, ServerTimings, Usage};
use super::json::{self, Error, Reader};

/// Classifies one event on its own (delta mode) or a non-streamed body.
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    Cumulative::default().classify(name, data)
}

/// Whether a payload looks like SGLang's (`Some(true)`), like TGI's
/// (`Some(false)`), or cannot tell (`None`): both serve `POST /generate`.
pub fn sniff(data: &[u8]) -> Option<bool> {
    let mut sglang = false;
    let mut tgi = false;
    json::read(data, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"text" | b"meta_info" => sglang |= r.not_null()?,
                b"token" | b"generated_text" | b"details" => tgi |= r.not_null()?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })
    .ok()?;
    if sglang {
        Some(true)
    } else if tgi {
        Some(false)
    } else {
        None
    }
}

/// Most outputs (`index` values) whose text is tracked; later indexes are
/// read as deltas. Bounds memory whatever the upstream sends.
const MAX_OUTPUTS: usize = 64;

/// The per-request state that tells cumulative from delta text.
#[derive(Debug, Default)]
pub struct Cumulative {
    outputs: Vec<PreviousText>,
    /// Some event did not extend its index's previous text: deltas.
    delta: bool,
}

/// The text an output (`index`) sent last, by its length and hash: what
/// its next text must start with to be cumulative.
#[derive(Debug, Clone, Copy)]
struct PreviousText {
    index: u64,
    /// Length in bytes of the previous text.
    len: usize,
    /// Hash of the previous text.
    hash: u64,
}

impl Cumulative {
    /// Classifies the next event of the stream.
    pub fn classify(&mut self, _name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        let trimmed = data.trim_ascii();
        if trimmed == b"[DONE]" {
            return Ok(EventInfo {
                done: true,
                ..EventInfo::default()
            });
        }
        let mut text = None;
        let mut index = None;
        let mut usage = Usage::default();
        let mut timings = ServerTimings::default();
        let mut error = false;
        json::read(trimmed, |r| {
            r.open_object()?;
            while let Some(key) = r.key()? {
                match key {
                    // The index of the event may come after `text` in the
                    // object, so the text is checked against every output.
                    b"text" => text = r.string_or_null(|t| Text::new(t, &self.outputs))?,
                    b"meta_info" => meta_info(r, &mut usage, &mut timings)?,
                    b"index" => index = r.count()?,
                    b"error" => error |= r.present()?,
                    b"object" => error |= r.is_string(b"error")?,
                    _ => r.skip()?,
                }
            }
            Ok(())
        })?;
        let mut token = false;
        if let Some(text) = text {
            let index = index.unwrap_or(0);
            match self.outputs.iter().position(|s| s.index == index) {
                Some(k) => {
                    let previous = &mut self.outputs[k];
                    if text.extends & (1 << k) == 0 {
                        self.delta = true;
                    }
                    token = if self.delta {
                        text.len > 0
                    } else {
                        text.len > previous.len
                    };
                    previous.len = text.len;
                    previous.hash = text.hash;
                }
                None => {
                    token = text.len > 0;
                    if self.outputs.len() < MAX_OUTPUTS {
                        self.outputs.push(PreviousText {
                            index,
                            len: text.len,
                            hash: text.hash,
                        });
                    }
                }
            }
        }
        Ok(EventInfo {
            token,
            visible: token,
            usage,
            timings,
            error,
            done: false,
        })
    }
}

/// `meta_info`: usage, and the timings `--enable-metrics` adds.
fn meta_info(
    r: &mut Reader<'_>,
    usage: &mut Usage,
    timings: &mut ServerTimings,
) -> Result<(), Error> {
    let (mut waiting, mut launch) = (None, None);
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"prompt_tokens" => usage.input = r.count()?,
                b"completion_tokens" => usage.output = r.count()?,
                b"cached_tokens" => usage.cached_input = r.count()?,
                b"queue_time" => timings.queue = r.number()?,
                b"prefill_waiting_latency" | b"prefill_launch_delay" => waiting = r.number()?,
                b"prefill_launch_latency" => launch = r.number()?,
                _ => r.skip()?,
            }
        }
    }
    // Each part is checked, so that a negative one cannot hide in the sum.
    timings.prefill = match (waiting, launch) {
        (Some(w), Some(l)) if w >= 0.0 && l >= 0.0 => Some(w + l),
        (Some(_), Some(_)) => Some(f64::NAN),
        _ => None,
    };
    Ok(())
}

/// What is kept of a text: its length, its hash, and for each tracked
/// output (bit `k`) whether it starts with that output's previous text. The
/// index of the event may come after `text` in the object, so every output
/// is checked.
struct Text {
    len: usize,
    hash: u64,
    extends: u64,
}

impl Text {
    fn new(bytes: &[u8], outputs: &[PreviousText]) -> Text {
        let mut extends = 0u64;
        for (k, s) in outputs.iter().enumerate().take(MAX_OUTPUTS) {
            if bytes.get(..s.len).is_some_and(|p| fnv(p) == s.hash) {
                extends |= 1 << k;
            }
        }
        Text {
            len: bytes.len(),
            hash: fnv(bytes),
            extends,
        }
    }
}

/// FNV-1a, 64 bit: enough to tell "starts with the previous text" from "does
/// not" without keeping the text.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[&str]) -> Vec<bool> {
        let mut c = Cumulative::default();
        events
            .iter()
            .map(|e| c.classify(b"", e.as_bytes()).unwrap().token)
            .collect()
    }

    #[test]
    fn cumulative_text_counts_growth() {
        let ev = |t: &str, n: u64| {
            format!(
                r#"{{"text":"{t}","meta_info":{{"id":"x","prompt_tokens":5,"completion_tokens":{n}}}}}"#
            )
        };
        let evs = [
            ev("", 0),
            ev("Hel", 1),
            ev("Hello", 2),
            ev("Hello", 3),
            ev("Hello!", 4),
        ];
        let refs: Vec<&str> = evs.iter().map(String::as_str).collect();
        assert_eq!(run(&refs), [false, true, true, false, true]);
        let i = classify(b"", evs[4].as_bytes()).unwrap();
        assert_eq!(i.usage.output, Some(4));
        assert_eq!(i.usage.input, Some(5));
        assert!(Cumulative::default().classify(b"", b"[DONE]").unwrap().done);
    }

    #[test]
    fn delta_text_is_detected() {
        assert_eq!(
            run(&[
                r#"{"text":"Hel"}"#,
                r#"{"text":"lo"}"#,
                r#"{"text":"lo"}"#,
                r#"{"text":""}"#,
                r#"{"text":"!"}"#
            ]),
            [true, true, true, false, true]
        );
    }

    #[test]
    fn indexes_are_tracked_apart_whatever_the_key_order() {
        assert_eq!(
            run(&[
                r#"{"text":"A","index":0}"#,
                r#"{"index":1,"text":"B"}"#,
                r#"{"text":"AB","index":0}"#,
                r#"{"text":"B","index":1}"#,
                r#"{"text":"Bc","index":1}"#,
            ]),
            [true, true, true, false, true]
        );
    }

    #[test]
    fn errors_and_sniffing() {
        assert!(
            classify(b"", br#"{"error":{"message":"boom"}}"#)
                .unwrap()
                .error
        );
        assert!(
            classify(b"", br#"{"object":"error","message":"boom"}"#)
                .unwrap()
                .error
        );
        assert_eq!(sniff(br#"{"text":"a","meta_info":{}}"#), Some(true));
        assert_eq!(sniff(br#"{"index":1,"token":{"id":1}}"#), Some(false));
        assert_eq!(sniff(b"[DONE]"), None);
    }
}
