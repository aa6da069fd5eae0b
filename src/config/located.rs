//! Values with where they are written: a position in the file, a value
//! kept with its span, and the typed fields of the schema read without
//! failing.
//!
//! serde stops at the first error, but a config is to report every problem
//! at once. So a typed field (a duration, a size, a count...) is read as the
//! text written with its location, and parsed by the field's own function
//! ([`super::kind`]); a bad value is recorded here with its location and a
//! stand-in takes its place, and reading goes on. [`collecting`] runs one
//! document's reading and hands back what was recorded; the key of each
//! problem is found afterwards from its location. A config with any problem
//! is refused, so no stand-in is ever run on.
//!
//! Outside [`collecting`] nothing can be recorded, and a bad value is a
//! plain serde error instead, so a value is never accepted unchecked.
//!
//! This is the bottom of the config module: the types of the schema
//! (wherever they are defined), `kind.rs` and the reading in `raw` use it,
//! and it uses none of them, so a schema type may hold a located value and
//! name a kind without a module circle. With `raw`, it is the only part
//! that knows the YAML crate.

use std::cell::RefCell;

use serde::de::Error as _;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;

pub(crate) use serde_saphyr::Spanned;

/// A 1-based position in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: u64,
    pub column: u64,
}

/// Where a spanned value is used in the file (for an alias, the alias, not the
/// anchor), or `None` when the YAML crate could not tell.
pub(crate) fn pos<T>(value: &Spanned<T>) -> Option<Pos> {
    location_pos(&value.referenced)
}

pub(crate) fn location_pos(location: &serde_saphyr::Location) -> Option<Pos> {
    (location.line() > 0).then(|| Pos {
        line: location.line(),
        column: location.column(),
    })
}

/// A YAML list of scalars, each kept as text with its location, the list
/// itself with its own.
pub(crate) type List = Spanned<Vec<Spanned<String>>>;

/// A mapping whose keys the user chooses (model names, `p95`), in file
/// order, each value kept as text with its location. Stage two decides which
/// keys are allowed, and points at the value's location for a bad key (the
/// same line): keys are plain strings because a located key cannot pass
/// through `serde_ignored`, which reads every key as text itself.
#[derive(Debug, Default)]
pub(crate) struct Entries(pub Vec<(String, Spanned<String>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;

        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of keys to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Entries(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor)
    }
}

/// A value that could not be read as its field's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Where the value is written.
    pub pos: Option<Pos>,
    /// What is wrong with it.
    pub message: String,
    /// How many keys of the value's path to leave out of the key reported:
    /// 1 for an entry whose key must not be shown (an API key's hash may
    /// be the key itself, pasted by mistake).
    pub up: usize,
    /// A key missing from the value, which the problem is about: the key
    /// reported is the value's with this one under it.
    pub below: Option<&'static str>,
}

thread_local! {
    /// The problems of the document being read on this thread; `None` when
    /// none is.
    static PROBLEMS: RefCell<Option<Vec<Problem>>> = const { RefCell::new(None) };
}

/// Runs `read`, returning what it gives and the problems its typed fields
/// recorded, in the order they were read.
pub(crate) fn collecting<T>(read: impl FnOnce() -> T) -> (T, Vec<Problem>) {
    let outer = PROBLEMS.with(|problems| problems.replace(Some(Vec::new())));
    let value = read();
    let problems = PROBLEMS.with(|problems| problems.replace(outer));
    (value, problems.unwrap_or_default())
}

/// Records a problem; `false` when no document is being collected.
fn record(pos: Option<Pos>, message: String) -> bool {
    record_up(pos, message, 0)
}

/// Records a problem reported `up` keys above its value.
fn record_up(pos: Option<Pos>, message: String, up: usize) -> bool {
    record_problem(Problem {
        pos,
        message,
        up,
        below: None,
    })
}

/// Records a problem about the key `below` of the value at `pos` (a key
/// that is missing), or of the value itself; `false` when no document is
/// being collected.
pub(crate) fn record_below(pos: Option<Pos>, below: Option<&'static str>, message: String) -> bool {
    record_problem(Problem {
        pos,
        message,
        up: 0,
        below,
    })
}

fn record_problem(problem: Problem) -> bool {
    PROBLEMS.with(|problems| match problems.borrow_mut().as_mut() {
        Some(list) => {
            list.push(problem);
            true
        }
        None => false,
    })
}

/// Reads a scalar as text and parses it with `parse`. A bad value is
/// recorded and `stand_in` takes its place; an empty value (`key:` or
/// `key: ~`) is a problem too, as the key's default cannot be known here.
pub fn checked<'de, D, T>(
    deserializer: D,
    stand_in: T,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    checked_or_empty(deserializer, None, stand_in, parse)
}

/// As [`checked`], with `empty` the value of an empty one (for a key whose
/// absence is a value of its own, such as `None`).
pub fn checked_or_empty<'de, D, T>(
    deserializer: D,
    empty: Option<T>,
    stand_in: T,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    checked_standing_in(deserializer, empty, |_| stand_in, parse)
}

/// As [`checked_or_empty`], the stand-in for a bad value made from its text
/// (a route's name, which must still be compared with the others').
pub fn checked_standing_in<'de, D, T>(
    deserializer: D,
    empty: Option<T>,
    stand_in: impl FnOnce(&str) -> T,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let text = Spanned::<Option<String>>::deserialize(deserializer)?;
    let at = pos(&text);
    let result = match (&text.value, empty) {
        (Some(value), _) => parse(value),
        (None, Some(empty)) => return Ok(empty),
        (None, None) => Err(NO_VALUE.to_owned()),
    };
    match result {
        Ok(value) => Ok(value),
        Err(message) if record(at, message.clone()) => {
            Ok(stand_in(text.value.as_deref().unwrap_or_default()))
        }
        Err(message) => Err(D::Error::custom(message)),
    }
}

/// The problem of a typed key written without a value.
const NO_VALUE: &str = "no value: give one, or leave the key out for its default";

/// One item of a list as written: its text and where it is.
pub struct Item<'a> {
    pub pos: Option<Pos>,
    pub text: &'a str,
}

/// Reads a list of scalars and checks it whole with `check`, which sees
/// where the list and each item are written and gives either the value or
/// every problem with its location; with problems, `stand_in` takes the
/// value's place. An empty value (`key: ~`) is `empty`, or a problem
/// without one.
pub fn checked_items<'de, D, T>(
    deserializer: D,
    empty: Option<T>,
    stand_in: T,
    check: impl FnOnce(Option<Pos>, &[Item<'_>]) -> Result<T, Vec<(Option<Pos>, String)>>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let list = Spanned::<Option<Vec<Spanned<String>>>>::deserialize(deserializer)?;
    let result = match (&list.value, empty) {
        (Some(items), _) => {
            let items: Vec<Item<'_>> = items
                .iter()
                .map(|item| Item {
                    pos: pos(item),
                    text: &item.value,
                })
                .collect();
            check(pos(&list), &items)
        }
        (None, Some(empty)) => return Ok(empty),
        (None, None) => Err(vec![(pos(&list), NO_VALUE.to_owned())]),
    };
    match result {
        Ok(value) => Ok(value),
        Err(problems) => {
            for (at, message) in problems {
                if !record(at, message.clone()) {
                    return Err(D::Error::custom(message));
                }
            }
            Ok(stand_in)
        }
    }
}

/// Problems found in a value, each with where it is written.
pub type Problems = Vec<(Option<Pos>, String)>;

/// One entry of a mapping whose keys the user chooses: its key, and its
/// value as text with where it is written.
pub struct Entry<'a> {
    pub key: &'a str,
    pub pos: Option<Pos>,
    pub text: &'a str,
}

/// Reads a mapping of scalars ([`Entries`]) and checks it with `check`,
/// which sees where the mapping is written and its entries, and gives the
/// value (of the entries that checked out) and every problem; a problem is
/// located at its entry's value (the same line as its key), so its key
/// path ends in the entry's key, unless `hide_keys` (then it is the
/// mapping's). No value (`key:`) is `empty`.
pub fn checked_entries<'de, D, T>(
    deserializer: D,
    empty: T,
    hide_keys: bool,
    check: impl FnOnce(Option<Pos>, &[Entry<'_>]) -> (T, Problems),
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let map = Spanned::<Option<Entries>>::deserialize(deserializer)?;
    let at = pos(&map);
    let Some(map) = map.value else {
        return Ok(empty);
    };
    let entries: Vec<Entry<'_>> = map
        .0
        .iter()
        .map(|(key, value)| Entry {
            key,
            pos: pos(value),
            text: &value.value,
        })
        .collect();
    let (value, problems) = check(at, &entries);
    for (problem_at, message) in problems {
        let up = usize::from(hide_keys && problem_at != at);
        if !record_up(problem_at, message.clone(), up) {
            return Err(D::Error::custom(message));
        }
    }
    Ok(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::super::keys::known;
    use super::super::raw::read;
    use crate::config::ProxySettings;

    fn bad_values(text: &str) -> Vec<(u64, String, String)> {
        read(text, known)
            .unwrap()
            .bad_values
            .into_iter()
            .map(|bad| (bad.pos.map_or(0, |pos| pos.line), bad.key, bad.message))
            .collect()
    }

    #[test]
    fn every_bad_value_is_recorded_with_its_key() {
        let found = bad_values(
            "proxy:\n  shutdown_grace: soon\n  trusted_proxies: [10.0.0.0/8, x, '::1/200']\n  x_forwarded:\n",
        );
        let keys: Vec<(u64, &str)> = found.iter().map(|(l, k, _)| (*l, k.as_str())).collect();
        assert_eq!(
            keys,
            [
                (2, "proxy.shutdown_grace"),
                (3, "proxy.trusted_proxies[1]"),
                (3, "proxy.trusted_proxies[2]"),
                (4, "proxy.x_forwarded"),
            ]
        );
        assert!(found[3].2.starts_with("no value"), "{found:?}");
    }

    /// A key whose absence is a value of its own (no connection limit, no
    /// allow-list) takes it when written empty; any other empty key is a
    /// problem, a list's included.
    #[test]
    fn empty_values() {
        let found = bad_values(
            "proxy:\n  max_connections: ~\n  trusted_proxies:\nmetrics:\n  models: {allow: ~}\n  buckets: {proxy_time: ~}\n",
        );
        let keys: Vec<&str> = found.iter().map(|(_, k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["proxy.trusted_proxies", "metrics.buckets.proxy_time"],
            "{found:?}"
        );
        let doc = read(
            "proxy: {max_connections: ~}\nmetrics: {models: {allow: ~}}\n",
            known,
        )
        .unwrap();
        assert_eq!(doc.config.proxy.unwrap().max_connections, None);
        assert_eq!(doc.config.metrics.unwrap().models.allow, None);
    }

    #[test]
    fn outside_a_document_a_bad_value_is_an_error() {
        assert!(serde_saphyr::from_str::<ProxySettings>("shutdown_grace: soon\n").is_err());
        let read: ProxySettings = serde_saphyr::from_str("shutdown_grace: 5s\n").unwrap();
        assert_eq!(read.shutdown_grace, std::time::Duration::from_secs(5));
        assert_eq!(read.max_request_body_bytes, 4 << 20);
    }
}
