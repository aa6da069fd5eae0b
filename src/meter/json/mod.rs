//! Small serde helpers shared by the protocol modules.
//!
//! They answer yes/no questions about JSON values while the event is being
//! deserialized (is this string non-empty? does any element of this list carry
//! output?) without building a JSON tree, collecting lists into `Vec`s, or
//! copying strings. Everything that is not asked about is skipped with
//! [`IgnoredAny`].
//!
//! This module must not know any protocol: the questions are generic, the
//! protocol modules decide what they mean.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

pub mod pull;
pub mod reader;

/// What a value (an event, a choice, a part) carries of generated output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Output {
    /// Any generated output: text, refusal, reasoning, tool call.
    pub token: bool,
    /// Output the user sees: text, refusal or tool call, not reasoning.
    pub visible: bool,
}

impl Output {
    /// No output.
    pub const NONE: Output = Output {
        token: false,
        visible: false,
    };

    /// Visible output when `yes`.
    pub fn visible(yes: bool) -> Output {
        Output {
            token: yes,
            visible: yes,
        }
    }

    /// Reasoning (generated but not visible) output when `yes`.
    pub fn reasoning(yes: bool) -> Output {
        Output {
            token: yes,
            visible: false,
        }
    }

    /// Both outputs together.
    pub fn or(self, other: Output) -> Output {
        Output {
            token: self.token || other.token,
            visible: self.visible || other.visible,
        }
    }
}

/// A value that knows what output it carries; used by [`Fold`].
pub trait HasOutput {
    fn output(&self) -> Output;
}

/// The output of every element of a list, or-ed together while the list is
/// visited, so the elements are never collected. `null` (or a missing list,
/// with `#[serde(default)]`) carries no output.
pub struct Fold<T>(pub Output, PhantomData<T>);

impl<T> Default for Fold<T> {
    fn default() -> Self {
        Fold(Output::NONE, PhantomData)
    }
}

impl<'de, T: Deserialize<'de> + HasOutput> Deserialize<'de> for Fold<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + HasOutput> Visitor<'de> for V<T> {
            type Value = Fold<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Fold<T>, E> {
                Ok(Fold::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Fold<T>, E> {
                Ok(Fold::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Fold<T>, A::Error> {
                let mut out = Output::NONE;
                while let Some(e) = seq.next_element::<T>()? {
                    out = out.or(e.output());
                }
                Ok(Fold(out, PhantomData))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Whether a value is a non-empty string (or a non-empty list of content
/// parts). `null`, `""`, numbers and objects are "empty".
pub struct NonEmpty(pub bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_bytes(Probe {
            on_bytes: |s| !s.is_empty(),
            nonempty_list: true,
            on_map: false,
            on_true: false,
            on_number: false,
        })
        .map(NonEmpty)
    }
}

/// Whether an `Option<NonEmpty>` field held a non-empty value.
pub fn nonempty(v: &Option<NonEmpty>) -> bool {
    matches!(v, Some(NonEmpty(true)))
}

/// Whether a value is present and not `null`, `false`, `""` or `[]`: an
/// object (even `{}`), a non-empty string or list, a number, or `true`.
/// Used for "is there an error / a function call here".
pub struct Present(pub bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_bytes(Probe {
            on_bytes: |s| !s.is_empty(),
            nonempty_list: true,
            on_map: true,
            on_true: true,
            on_number: true,
        })
        .map(Present)
    }
}

/// Whether an `Option<Present>` field held a present value.
pub fn present(v: &Option<Present>) -> bool {
    matches!(v, Some(Present(true)))
}

/// Whether a value is the string `"error"`.
pub struct IsError(pub bool);

impl<'de> Deserialize<'de> for IsError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_bytes(Probe {
            on_bytes: |s| s == b"error",
            nonempty_list: false,
            on_map: false,
            on_true: false,
            on_number: false,
        })
        .map(IsError)
    }
}

/// Whether a value is `true` (anything else, including `"true"`, is not).
pub struct IsTrue(pub bool);

impl<'de> Deserialize<'de> for IsTrue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_bytes(Probe {
            on_bytes: |_| false,
            nonempty_list: false,
            on_map: false,
            on_true: true,
            on_number: false,
        })
        .map(IsTrue)
    }
}

/// Asks one yes/no question of a value of any JSON type without allocating:
/// strings go to `on_bytes` (unescaped, not checked for UTF-8), a list answers `nonempty_list` when it has
/// elements, an object answers `on_map`, `true` answers `on_true`, a number
/// answers `on_number`; `false` and `null` answer no.
struct Probe {
    on_bytes: fn(&[u8]) -> bool,
    nonempty_list: bool,
    on_map: bool,
    on_true: bool,
    on_number: bool,
}

impl<'de> Visitor<'de> for Probe {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<bool, E> {
        Ok((self.on_bytes)(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v && self.on_true)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(self.on_number)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(self.on_number)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(self.on_number)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut any = false;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            any = true;
        }
        Ok(any && self.nonempty_list)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(self.on_map)
    }
}

/// A token count: a non-negative integer. Anything else (a float, a string,
/// a negative number) reads as "not reported" instead of failing the event,
/// so one odd field never hides the rest of the event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count(pub Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Option<u64>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u64>, E> {
                Ok(Some(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u64>, E> {
                Ok(u64::try_from(v).ok())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<u64>, E> {
                Ok(None)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<u64>, E> {
                Ok(None)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<u64>, E> {
                Ok(None)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
                Ok(None)
            }
            fn visit_none<E: de::Error>(self) -> Result<Option<u64>, E> {
                Ok(None)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<u64>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(None)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(None)
            }
        }
        d.deserialize_any(V).map(Count)
    }
}

/// The count of an optional count field.
pub fn count(v: Option<Count>) -> Option<u64> {
    v.and_then(|c| c.0)
}

/// Parses `data` (one JSON value, whitespace around it allowed) as `T` with
/// the metering reader ([`reader`]), mapping any failure to
/// [`ParseError::InvalidJson`](super::ParseError::InvalidJson).
pub fn parse<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, super::ParseError> {
    reader::from_slice(data).map_err(|_| super::ParseError::InvalidJson)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct T {
        a: Option<NonEmpty>,
        b: Option<Present>,
        c: Option<IsTrue>,
        d: Option<Count>,
    }

    fn t(s: &str) -> T {
        parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn probes() {
        assert!(nonempty(&t(r#"{"a":"x"}"#).a));
        assert!(!nonempty(&t(r#"{"a":""}"#).a));
        assert!(!nonempty(&t(r#"{"a":null}"#).a));
        assert!(nonempty(&t(r#"{"a":[1]}"#).a));
        assert!(!nonempty(&t(r#"{"a":{"x":"y"}}"#).a));
        assert!(present(&t(r#"{"b":{}}"#).b));
        assert!(!present(&t(r#"{"b":null}"#).b));
        assert!(!present(&t(r#"{"b":""}"#).b));
        assert!(present(&t(r#"{"b":"boom"}"#).b));
        for yes in ["0", "-2", "1.5", "true", "[0]"] {
            assert!(present(&t(&format!(r#"{{"b":{yes}}}"#)).b), "{yes}");
        }
        for no in ["false", "[]"] {
            assert!(!present(&t(&format!(r#"{{"b":{no}}}"#)).b), "{no}");
        }
        assert!(!nonempty(&t(r#"{"a":3}"#).a));
        assert!(t(r#"{"c":true}"#).c.unwrap().0);
        assert!(!t(r#"{"c":"true"}"#).c.unwrap().0);
        assert_eq!(count(t(r#"{"d":7}"#).d), Some(7));
        assert_eq!(count(t(r#"{"d":-1}"#).d), None);
        assert_eq!(count(t(r#"{"d":1.5}"#).d), None);
        assert_eq!(count(t(r#"{"d":null}"#).d), None);
    }
}
