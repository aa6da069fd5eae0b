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
//! `meta_info` usage is cumulative; the last value wins. An event with an
//! `error` field or `"object": "error"` is an error.
//!
//! Like every protocol module, it borrows from the event and builds no JSON
//! tree.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::json::{self, Count, IsError, Present, present};
use super::{EventInfo, ParseError, Usage};

/// Classifies one event on its own (delta mode) or a non-streamed body.
pub fn classify(name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    Cumulative::default().classify(name, data)
}

/// Whether a payload looks like SGLang's (`Some(true)`), like TGI's
/// (`Some(false)`), or cannot tell (`None`): both serve `POST /generate`.
pub fn sniff(data: &[u8]) -> Option<bool> {
    #[derive(Deserialize)]
    struct Sniff {
        text: Option<IgnoredAny>,
        meta_info: Option<IgnoredAny>,
        token: Option<IgnoredAny>,
        generated_text: Option<IgnoredAny>,
        details: Option<IgnoredAny>,
    }
    let s: Sniff = json::parse(data).ok()?;
    if s.text.is_some() || s.meta_info.is_some() {
        Some(true)
    } else if s.token.is_some() || s.generated_text.is_some() || s.details.is_some() {
        Some(false)
    } else {
        None
    }
}

/// Most outputs (`index` values) whose text is tracked; later indexes are
/// read as deltas. Bounds memory whatever the upstream sends.
const MAX_SLOTS: usize = 64;

/// The per-request state that tells cumulative from delta text.
#[derive(Debug, Default)]
pub struct Cumulative {
    slots: Vec<Slot>,
    /// Some event did not extend its index's previous text: deltas.
    delta: bool,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
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
        let ev = json::reader::from_slice_seed(trimmed, EventSeed { slots: &self.slots })
            .map_err(|_| ParseError::InvalidJson)?;
        let mut token = false;
        if let Some(text) = ev.text {
            let index = json::count(ev.index).unwrap_or(0);
            match self.slots.iter().position(|s| s.index == index) {
                Some(k) => {
                    let slot = &mut self.slots[k];
                    if text.extends & (1 << k) == 0 {
                        self.delta = true;
                    }
                    token = if self.delta {
                        text.len > 0
                    } else {
                        text.len > slot.len
                    };
                    slot.len = text.len;
                    slot.hash = text.hash;
                }
                None => {
                    token = text.len > 0;
                    if self.slots.len() < MAX_SLOTS {
                        self.slots.push(Slot {
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
            usage: ev
                .meta_info
                .map(|m| Usage {
                    input: json::count(m.prompt_tokens),
                    output: json::count(m.completion_tokens),
                    cached_input: json::count(m.cached_tokens),
                    ..Usage::default()
                })
                .unwrap_or_default(),
            error: present(&ev.error) || ev.object.is_some_and(|o| o.0),
            done: false,
        })
    }
}

struct Event {
    text: Option<Text>,
    meta_info: Option<MetaInfo>,
    index: Option<Count>,
    error: Option<Present>,
    object: Option<IsError>,
}

#[derive(Deserialize)]
struct MetaInfo {
    prompt_tokens: Option<Count>,
    completion_tokens: Option<Count>,
    cached_tokens: Option<Count>,
}

/// What is kept of a text: its length, its hash, and for each tracked slot
/// (bit `k`) whether it starts with that slot's previous text. The index of
/// the event may come after `text` in the object, so every slot is checked.
struct Text {
    len: usize,
    hash: u64,
    extends: u64,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Key {
    Text,
    MetaInfo,
    Index,
    Error,
    Object,
    #[serde(other)]
    Other,
}

struct EventSeed<'a> {
    slots: &'a [Slot],
}

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = Event;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Event, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = Event;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let mut ev = Event {
            text: None,
            meta_info: None,
            index: None,
            error: None,
            object: None,
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Text => ev.text = map.next_value_seed(TextSeed { slots: self.slots })?,
                Key::MetaInfo => ev.meta_info = map.next_value()?,
                Key::Index => ev.index = map.next_value()?,
                Key::Error => ev.error = map.next_value()?,
                Key::Object => ev.object = map.next_value()?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ev)
    }
}

struct TextSeed<'a> {
    slots: &'a [Slot],
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = Option<Text>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Text>, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = Option<Text>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or null")
    }
    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Option<Text>, E> {
        let mut extends = 0u64;
        for (k, s) in self.slots.iter().enumerate().take(MAX_SLOTS) {
            if bytes.get(..s.len).is_some_and(|p| fnv(p) == s.hash) {
                extends |= 1 << k;
            }
        }
        Ok(Some(Text {
            len: bytes.len(),
            hash: fnv(bytes),
            extends,
        }))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Text>, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<Text>, E> {
        Ok(None)
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
