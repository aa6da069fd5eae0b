//! The pull reader against serde_json, on what serde_json writes, on that
//! damaged, and on edge cases: the same trees and the same verdicts, at
//! any depth; keys and strings unescaped, numbers of every grammar; the
//! probes' answers and the shapes they check; and a prefix resumed at its
//! comma.

use super::super::scan::tests::NOISE;
use super::*;
use proptest::prelude::*;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

/// The whole value at the reader's position as a JSON tree, read with
/// the reader's own methods (numbers as serde_json reads them: `u64`,
/// else `i64`, else a finite `f64`).
fn tree(r: &mut Reader<'_>) -> Result<Value, Error> {
    Ok(match r.peek()? {
        b'{' => {
            let mut map = Map::new();
            r.open_object()?;
            while let Some(key) = r.key()? {
                let key = String::from_utf8(key.to_vec()).map_err(|_| Error)?;
                map.insert(key, tree(r)?);
            }
            Value::Object(map)
        }
        b'[' => {
            let mut list = Vec::new();
            r.open_list_or_null()?;
            while r.element()? {
                list.push(tree(r)?);
            }
            Value::Array(list)
        }
        b'"' => {
            let s = r.string_or_null(|s| String::from_utf8(s.to_vec()))?;
            Value::String(s.ok_or(Error)?.map_err(|_| Error)?)
        }
        b't' | b'f' => Value::Bool(r.is_true()?),
        b'n' => {
            r.skip()?;
            Value::Null
        }
        _ => {
            let start = r.pos;
            let (end, integer) = number_end(r.input, start)?;
            r.pos = end;
            let text = std::str::from_utf8(&r.input[start..end]).map_err(|_| Error)?;
            let n = if integer {
                text.parse::<u64>().ok().map(Value::from).or_else(|| {
                    text.parse::<i64>()
                        .ok()
                        .filter(|&n| n != 0)
                        .map(Value::from)
                })
            } else {
                None
            };
            match n {
                Some(v) => v,
                None => match text.parse::<f64>() {
                    Ok(f) if f.is_finite() => Value::from(f),
                    _ => return Err(Error),
                },
            }
        }
    })
}

/// Our reading of `input` as a JSON tree, and serde_json's, with floats
/// to 12 significant digits: serde_json's default float parser is not
/// correctly rounded (std's, used here, is), so the last bits may differ.
fn both(input: &[u8]) -> (Option<Value>, Option<Value>) {
    (
        read(input, tree).ok().map(rounded),
        serde_json::from_slice::<Value>(input).ok().map(rounded),
    )
}

fn skips(input: &[u8]) -> bool {
    read(input, Reader::skip).is_ok()
}

fn rounded(v: Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => {
            Value::String(format!("{:.11e}", n.as_f64().unwrap_or_default()))
        }
        Value::Array(a) => Value::Array(a.into_iter().map(rounded).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, rounded(v))).collect()),
        v => v,
    }
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1000i32..1000, 0u32..1000)
            .prop_map(|(a, b)| Value::from(f64::from(a) + f64::from(b) / 1000.0)),
        "(\\PC|[\"\\\\/\u{0}-\u{1f}\u{7f}-\u{10ffff}]){0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("\\PC{0,20}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Every document serde_json writes reads back as the same tree,
    /// and skips.
    #[test]
    fn reads_what_serde_json_writes(v in value(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_vec_pretty(&v).unwrap()
        } else {
            serde_json::to_vec(&v).unwrap()
        };
        prop_assert_eq!(read(&text, tree).ok(), Some(v));
        prop_assert!(skips(&text));
    }

    /// On damaged documents it accepts and rejects exactly what
    /// serde_json does, reading and skipping, and reads the same tree
    /// when it accepts.
    #[test]
    fn agrees_with_serde_json_on_damaged_input(
        v in value(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..3, prop::sample::select(NOISE)), 1..4),
    ) {
        let mut text = serde_json::to_vec(&v).unwrap();
        for (at, op, byte) in edits {
            let i = at.index(text.len() + 1);
            match op {
                0 => text.insert(i, byte),
                1 if i < text.len() => { text.remove(i); }
                _ if i < text.len() => text[i] = byte,
                _ => text.push(byte),
            }
        }
        let (ours, theirs) = both(&text);
        prop_assert_eq!(ours, theirs, "input {:?}", String::from_utf8_lossy(&text));
        prop_assert_eq!(
            skips(&text),
            serde_json::from_slice::<IgnoredAny>(&text).is_ok(),
            "input {:?}", String::from_utf8_lossy(&text)
        );
    }
}

/// An input that starts with a prefix resumes at its comma, as if read
/// from its start; a prefix is only kept for an object.
#[test]
fn a_prefix_resumes_at_its_comma() {
    fn keys(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, Error> {
        let mut keys = Vec::new();
        while let Some(key) = r.key()? {
            keys.push(key.to_vec());
            r.skip()?;
        }
        Ok(keys)
    }
    let first = br#"{"a":1,"b":"x","c":[2]}"#;
    let mut prefix = Prefix::default();
    let mut at = None;
    read(first, |r| {
        r.open_object()?;
        r.key()?;
        r.skip()?;
        at = r.boundary();
        keys(r)
    })
    .unwrap();
    prefix.set(first, at.unwrap());
    assert_eq!(prefix.len(), br#"{"a":1,"#.len());
    let resume = |input: &[u8]| {
        let mut resumed = false;
        let out = read(input, |r| {
            resumed = r.open_object_after(&prefix)?;
            keys(r)
        });
        (resumed, out)
    };
    let (resumed, out) = resume(br#"{"a":1,"d":null}"#);
    assert!(resumed);
    assert_eq!(out.unwrap(), vec![b"d".to_vec()]);
    // Not the prefix: read from the start.
    let (resumed, out) = resume(br#"{"a":12,"d":null}"#);
    assert!(!resumed);
    assert_eq!(out.unwrap(), vec![b"a".to_vec(), b"d".to_vec()]);
    // Resumed, the rest is still checked.
    assert_eq!(resume(br#"{"a":1,"d":}"#).1, Err(Error));
    assert_eq!(resume(br#"{"a":1,}"#).1, Err(Error));
    // A list's comma makes no prefix.
    let list = br#"[1,2]"#;
    prefix.set(list, 2);
    assert!(prefix.is_empty());
}

/// Nesting is bounded like serde_json's trees (127 levels), skipped
/// values included (serde_json skips without a bound; this reader keeps
/// the bound there too).
#[test]
fn nesting_is_bounded() {
    for depth in [1, 127, 128, 129, 100_000] {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            let (ours, theirs) = both(text.as_bytes());
            assert_eq!(ours.is_some(), theirs.is_some(), "depth {depth}");
            assert_eq!(skips(text.as_bytes()), depth <= 127, "depth {depth}");
        }
    }
    // The bound counts the lists and objects around a skipped value.
    let two_then_skip = |r: &mut Reader<'_>| {
        r.open_list_or_null()?;
        while r.element()? {
            r.open_list_or_null()?;
            while r.element()? {
                r.skip()?;
            }
        }
        Ok(())
    };
    let text = format!("{}{}", "[".repeat(127), "]".repeat(127));
    assert_eq!(read(text.as_bytes(), two_then_skip), Ok(()));
    let text = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert_eq!(read(text.as_bytes(), two_then_skip), Err(Error));
}

#[test]
fn edge_cases_agree_with_serde_json() {
    let cases: &[&[u8]] = &[
        b"",
        b" ",
        b"null",
        b" null ",
        b"nul",
        b"nulll",
        b"-",
        b"-0",
        b"01",
        b"1.",
        b"1.5e",
        b"1e+5",
        b"18446744073709551615",
        b"18446744073709551616",
        b"-9223372036854775808",
        b"-9223372036854775809",
        b"1e999",
        br#""\ud83d\ude00""#,
        br#""\ud83d""#,
        br#""\ude00""#,
        br#""\u00e9\n\t\"""#,
        br#""\x""#,
        b"\"a\x01b\"",
        b"\"\xff\"",
        b"[1,]",
        b"[,1]",
        b"[1 2]",
        br#"{"a":1,}"#,
        br#"{"a" 1}"#,
        br#"{1:2}"#,
        br#"{"a":1}x"#,
        b"[]",
        b"{}",
        b"[[]]",
        b"[{},[],{\"a\":[{}]}]",
        b"\xef\xbb\xbf{}",
        b"\"abcdefgh\\\"ijklmnopq\"",
        b"\"0123456789abcdef\x1f\"",
        b"\"0123456789abcdef0123456789abcdef\"",
        b"\"0123456789abcde\"",
        b"\"0123456789abcdef",
    ];
    for case in cases {
        let (ours, theirs) = both(case);
        assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(case));
        assert_eq!(
            skips(case),
            serde_json::from_slice::<IgnoredAny>(case).is_ok(),
            "{:?}",
            String::from_utf8_lossy(case)
        );
    }
}

/// A field read by `name`: its count, the rest skipped.
fn field(input: &[u8], name: &[u8]) -> Result<Option<u64>, Error> {
    read(input, |r| {
        let mut n = None;
        r.open_object()?;
        while let Some(key) = r.key()? {
            if key == name {
                n = r.count()?;
            } else {
                r.skip()?;
            }
        }
        Ok(n)
    })
}

#[test]
fn keys_and_strings_arrive_unescaped() {
    assert_eq!(field(br#"{"k\u0069nd":3}"#, b"kind"), Ok(Some(3)));
    assert_eq!(field(br#"{"other":"x\"y","kind":4}"#, b"kind"), Ok(Some(4)));
    assert_eq!(field(br#"{"kind":3,"kind":4}"#, b"kind"), Ok(Some(4)));
    let s = read(br#""a\n\u00e9\ud83d\ude00""#, |r| {
        r.string_or_null(<[u8]>::to_vec)
    });
    assert_eq!(s, Ok(Some("a\né😀".as_bytes().to_vec())));
    assert!(
        read(br#"{"error"  :  "err\u006fr"}"#, |r| {
            let mut yes = false;
            r.open_object()?;
            while r.key()?.is_some() {
                yes = r.is_string(b"error")?;
            }
            Ok(yes)
        })
        .unwrap()
    );
}

#[test]
fn numbers_of_every_grammar() {
    let number = |text: &str| {
        let input = format!(r#"{{"a": {text} ,"b":1}}"#);
        read(input.as_bytes(), |r| {
            let mut n = None;
            r.open_object()?;
            while let Some(key) = r.key()? {
                if key == b"a" {
                    n = r.number()?;
                } else {
                    r.skip()?;
                }
            }
            Ok(n)
        })
    };
    assert_eq!(number("12"), Ok(Some(12.0)));
    assert_eq!(number("85.25"), Ok(Some(85.25)));
    assert_eq!(number("-0.5"), Ok(Some(-0.5)));
    assert_eq!(number("1.5e3"), Ok(Some(1500.0)));
    assert_eq!(number("null"), Ok(None));
    assert_eq!(number("1e999"), Ok(Some(f64::INFINITY)));
    for not_a_number in [r#""12""#, "[1]", "true", "{}"] {
        assert!(
            number(not_a_number).unwrap().unwrap().is_nan(),
            "{not_a_number}"
        );
    }
    assert!(number("1.").is_err() && number("01").is_err() && number("-").is_err());
}

/// What each probe answers for each kind of value.
#[test]
fn probes() {
    type Probe = fn(&mut Reader<'_>) -> Result<bool, Error>;
    let probes: [(&str, Probe); 4] = [
        ("nonempty", |r| r.nonempty()),
        ("present", |r| r.present()),
        ("not_null", |r| r.not_null()),
        ("is_true", |r| r.is_true()),
    ];
    // value, then nonempty / present / not_null / is_true
    let table: &[(&str, [bool; 4])] = &[
        (r#""x""#, [true, true, true, false]),
        (r#""\n""#, [true, true, true, false]),
        (r#""""#, [false, false, true, false]),
        ("null", [false, false, false, false]),
        ("[1]", [true, true, true, false]),
        ("[ ]", [false, false, true, false]),
        (r#"{"x":"y"}"#, [false, true, true, false]),
        ("{}", [false, true, true, false]),
        ("true", [false, true, true, true]),
        ("false", [false, false, true, false]),
        ("0", [false, true, true, false]),
        ("-2", [false, true, true, false]),
        ("1.5", [false, true, true, false]),
        (r#""true""#, [true, true, true, false]),
    ];
    for (text, want) in table {
        for ((name, probe), want) in probes.iter().zip(want) {
            let input = format!(r#"{{"a": {text} ,"b":1}}"#);
            let got = read(input.as_bytes(), |r| {
                let mut answer = None;
                r.open_object()?;
                while let Some(key) = r.key()? {
                    match key {
                        b"a" => answer = Some(probe(r)?),
                        _ => r.skip()?,
                    }
                }
                Ok(answer)
            });
            assert_eq!(got, Ok(Some(*want)), "{name} of {text}");
        }
    }
    for (text, want) in [
        ("7", Some(7)),
        ("0", Some(0)),
        ("18446744073709551614", Some(u64::MAX - 1)),
        ("18446744073709551615", Some(NOT_A_COUNT)),
        ("18446744073709551616", Some(NOT_A_COUNT)),
        ("-1", Some(NOT_A_COUNT)),
        ("-0", Some(NOT_A_COUNT)),
        ("1.5", Some(NOT_A_COUNT)),
        ("1e2", Some(NOT_A_COUNT)),
        (r#""7""#, Some(NOT_A_COUNT)),
        ("true", Some(NOT_A_COUNT)),
        ("null", None),
        ("[7]", Some(NOT_A_COUNT)),
        (r#"{"n":7}"#, Some(NOT_A_COUNT)),
    ] {
        let input = format!(r#"{{"a":{text}}}"#);
        assert_eq!(field(input.as_bytes(), b"a"), Ok(want), "{text}");
    }
    // Probes check what they skip.
    assert_eq!(field(br#"{"a":[1,}"#, b"a"), Err(Error));
    assert_eq!(field(br#"{"a":01}"#, b"a"), Err(Error));
}

/// Each reading method takes its own type or `null` where it says so,
/// and fails on any other; keys and elements need their commas.
#[test]
fn shapes_are_checked() {
    fn all(r: &mut Reader<'_>) -> Result<(), Error> {
        while r.key()?.is_some() {
            r.skip()?;
        }
        Ok(())
    }
    let object = |input: &[u8]| read(input, |r| r.open_object().and_then(|()| all(r)));
    assert_eq!(object(br#"{"a":1}"#), Ok(()));
    assert_eq!(object(br#" { "a" : 1 , "b" : [ ] } "#), Ok(()));
    for bad in [
        &b"null"[..],
        b"[]",
        b"\"x\"",
        b"1",
        br#"{"a":1,}"#,
        br#"{,"a":1}"#,
        br#"{"a":1 "b":2}"#,
        br#"{"a" 1}"#,
        br#"{"a":}"#,
        b"{",
    ] {
        assert_eq!(
            object(bad),
            Err(Error),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let or_null = |input: &[u8]| {
        read(input, |r| {
            let open = r.open_object_or_null()?;
            if open {
                all(r)?;
            }
            Ok(open)
        })
    };
    assert_eq!(or_null(b"null"), Ok(false));
    assert_eq!(or_null(b"{}"), Ok(true));
    assert_eq!(or_null(b"[]"), Err(Error));
    let list = |input: &[u8]| {
        read(input, |r| {
            let mut n = 0;
            if r.open_list_or_null()? {
                while r.element()? {
                    r.skip()?;
                    n += 1;
                }
            }
            Ok(n)
        })
    };
    assert_eq!(list(b"null"), Ok(0));
    assert_eq!(list(b"[ ]"), Ok(0));
    assert_eq!(list(b"[1,[2] , {}]"), Ok(3));
    for bad in [&b"{}"[..], b"[1,]", b"[,1]", b"[1 2]", b"[", b"[1"] {
        assert_eq!(list(bad), Err(Error), "{:?}", String::from_utf8_lossy(bad));
    }
    let string = |input: &[u8]| read(input, |r| r.string_or_null(<[u8]>::len));
    assert_eq!(string(b"null"), Ok(None));
    assert_eq!(string(b"\"abc\""), Ok(Some(3)));
    assert_eq!(string(b"3"), Err(Error));
    // Only whitespace may follow the value.
    assert_eq!(object(b" {} \n"), Ok(()));
    assert_eq!(object(b"{} {}"), Err(Error));
}
