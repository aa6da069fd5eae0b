//! Reading a document into the types of `schema.rs`: positions, syntax
//! errors, and every key no type claimed, located in the file.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::schema::*;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// A key path as users write it: `routes[1].timeouts.idle`.
pub(crate) fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// A key in the file that no field claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownKey {
    /// Path of the key itself (its last segment is the key).
    pub path: Vec<Segment>,
    /// Where the key is written.
    pub pos: Option<Pos>,
    /// The keys allowed where it stands.
    pub expected: &'static [&'static str],
}

/// A value of a typed field that could not be read (see `super::super::located`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadValue {
    /// Where the value is written.
    pub pos: Option<Pos>,
    /// Its key path, found from where it is written (empty if it cannot be).
    pub key: String,
    pub message: String,
}

/// A file after stage one.
#[derive(Debug)]
pub(crate) struct Document<T> {
    pub config: T,
    /// In file order.
    pub unknown: Vec<UnknownKey>,
    /// In the order they were read.
    pub bad_values: Vec<BadValue>,
}

/// The one error stage one can give: bad YAML, or a value of the wrong shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub pos: Option<Pos>,
    /// Key path of the value at `pos`, when one could be found (else empty).
    pub key: String,
    pub message: String,
}

/// Reads a main config file into raw types, collecting every unknown key,
/// each with the keys `known` says are allowed where it stands (given the
/// key names of the mapping it is in, from the top).
pub(crate) fn read(
    text: &str,
    known: fn(&[&str]) -> &'static [&'static str],
) -> Result<Document<RawConfig>, SyntaxError> {
    read_as(text, known)
}

/// Reads an SLO file into raw types, collecting every unknown key.
pub(crate) fn read_slo(text: &str) -> Result<Document<RawSloFile>, SyntaxError> {
    read_as(text, known_slo_keys)
}

fn read_as<T: de::DeserializeOwned>(
    text: &str,
    known_keys: fn(&[&str]) -> &'static [&'static str],
) -> Result<Document<T>, SyntaxError> {
    // A document with nothing in it (the one of a configuration from flags
    // alone, or an empty file) is an empty mapping: every key left out.
    let text = if text.trim().is_empty() { "{}" } else { text };
    let mut ignored: Vec<Vec<Segment>> = Vec::new();
    let (result, problems) = super::super::located::collecting(|| {
        serde_saphyr::with_deserializer_from_str(text, |deserializer| {
            serde_ignored::deserialize(deserializer, |path| {
                if let Some(path) = key_path(&path) {
                    ignored.push(path);
                }
            })
        })
    });
    let config: T = result.map_err(|error| syntax_error(text, &error))?;

    // The second pass only runs when there is something to locate. It
    // cannot fail where the first pass succeeded, except on keys that are
    // not plain scalars inside an unknown key's value; then the keys are
    // still reported, without a position.
    let tree = if ignored.is_empty() && problems.is_empty() {
        None
    } else {
        shape(text)
    };
    let bad_values = problems
        .into_iter()
        .map(|problem| BadValue {
            key: problem
                .pos
                .zip(tree.as_ref())
                .and_then(|(at, tree)| value_path_at(tree, at))
                .map(|mut path| {
                    path.truncate(path.len().saturating_sub(problem.up));
                    path.extend(problem.below.map(|key| Segment::Key(key.to_owned())));
                    path
                })
                .map(|path| dotted(&path))
                .unwrap_or_default(),
            pos: problem.pos,
            message: problem.message,
        })
        .collect();
    let unknown = if ignored.is_empty() {
        Vec::new()
    } else {
        let mut unknown: Vec<UnknownKey> = ignored
            .into_iter()
            .map(|path| {
                let pos = tree.as_ref().and_then(|tree| key_pos(tree, &path));
                let parent = &path[..path.len().saturating_sub(1)];
                UnknownKey {
                    pos,
                    expected: known_keys(&keys_of(parent)),
                    path,
                }
            })
            .collect();
        unknown.sort_by_key(|key| (key.pos.is_none(), key.pos));
        unknown
    };
    Ok(Document {
        config,
        unknown,
        bad_values,
    })
}

/// Turns a path reported by `serde_ignored` into the path a user wrote, or
/// `None` for the bookkeeping entries that [`Spanned`] itself produces.
///
/// `Spanned<T>` is read as a newtype around a synthetic mapping: a marker key
/// (which it skips, so `serde_ignored` reports it) and the real value under
/// `value`. Option and newtype steps are not written in the file.
fn key_path(path: &serde_ignored::Path<'_>) -> Option<Vec<Segment>> {
    let mut chain = Vec::new();
    let mut step = Some(path);
    while let Some(current) = step {
        chain.push(current);
        step = match current {
            serde_ignored::Path::Root => None,
            serde_ignored::Path::Seq { parent, .. }
            | serde_ignored::Path::Map { parent, .. }
            | serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => Some(*parent),
        };
    }
    let mut segments = Vec::new();
    let mut in_spanned = false;
    for current in chain.into_iter().rev() {
        match current {
            serde_ignored::Path::Root => {}
            serde_ignored::Path::Some { .. } | serde_ignored::Path::NewtypeVariant { .. } => {}
            serde_ignored::Path::NewtypeStruct { .. } => {
                in_spanned = true;
                continue;
            }
            serde_ignored::Path::Seq { index, .. } => segments.push(Segment::Index(*index)),
            serde_ignored::Path::Map { key, .. } => {
                if key.starts_with("__serde_saphyr") {
                    return None;
                }
                if !(in_spanned && key == "value") {
                    segments.push(Segment::Key(key.clone()));
                }
            }
        }
        in_spanned = false;
    }
    Some(segments)
}

/// The keys of `path`, without list indices.
pub(crate) fn keys_of(path: &[Segment]) -> Vec<&str> {
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Key(key) => Some(key.as_str()),
            Segment::Index(_) => None,
        })
        .collect()
}

/// The keys allowed in the mapping at `parent` of an SLO file.
fn known_slo_keys(parent: &[&str]) -> &'static [&'static str] {
    match parent {
        [] => fields_of::<RawSloFile>(),
        ["classes"] => probed(SloClassKeys::deserialize(FieldsProbe)),
        ["classes", "objectives"] => fields_of::<ObjectivesKeys>(),
        ["classes", "goodput"] => probed(GoodputKeys::deserialize(FieldsProbe)),
        _ => &[],
    }
}

/// The field names a derived `Deserialize` struct asks for: the keys of
/// a mapping read into it.
pub(crate) fn fields_of<T: de::DeserializeOwned>() -> &'static [&'static str] {
    probed(T::deserialize(FieldsProbe))
}

/// The field names a deserializer run on [`FieldsProbe`] asked for (one
/// of serde's remote derives included).
fn probed<T>(read: Result<T, ProbeError>) -> &'static [&'static str] {
    match read {
        Err(ProbeError(Some(fields))) => fields,
        _ => &[],
    }
}

/// A deserializer that only records the field list of the struct asked for.
struct FieldsProbe;

#[derive(Debug)]
struct ProbeError(Option<&'static [&'static str]>);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field probe")
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        ProbeError(None)
    }
}

impl<'de> Deserializer<'de> for FieldsProbe {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, ProbeError> {
        Err(ProbeError(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ProbeError> {
        Err(ProbeError(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The document's shape with locations and nothing else: used to find where
/// a key or a value is written.
#[derive(Debug)]
enum Node {
    /// Keys are nodes too: a key that is not a scalar (`[a, b]: 1`) never
    /// matches a path, and does not make the pass fail.
    Map(Vec<(Spanned<Node>, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    /// A scalar's text, by which a key is matched.
    Scalar(String),
    /// No value (`key:`, `key: ~`).
    Null,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_owned()))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
                Ok(Node::Scalar(String::from_utf8_lossy(v).into_owned()))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Node::Map(entries))
            }
        }

        deserializer.deserialize_any(NodeVisitor)
    }
}

/// The document's shape, or `None` if it cannot be read. Any scalar is a
/// leaf here, `.inf` and `.nan` included (a bucket bound may be written so,
/// and its problem must still be located).
fn shape(text: &str) -> Option<Spanned<Node>> {
    let mut options = serde_saphyr::Options::default();
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    serde_saphyr::from_str_with_options::<Spanned<Node>>(text, options).ok()
}

impl Node {
    /// The text of a key that is a scalar.
    fn key(&self) -> Option<&str> {
        match self {
            Node::Scalar(text) => Some(text),
            _ => None,
        }
    }
}

/// Where the values of a document are written, found by key path: for the
/// rules across keys, which see typed values that keep no location. The
/// document's shape is read at the first question only, so a valid config
/// costs nothing.
pub(crate) struct Locator<'t> {
    text: &'t str,
    tree: std::cell::OnceCell<Option<Spanned<Node>>>,
}

impl<'t> Locator<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        Self {
            text,
            tree: std::cell::OnceCell::new(),
        }
    }

    /// Where the value at `dotted` (`routes[1].tls`, as [`dotted`] writes
    /// it; keys holding `.` or `[` cannot be asked for) is written, or
    /// `None` when it is not in the document.
    pub(crate) fn value(&self, dotted: &str) -> Option<Pos> {
        self.at(&segments(dotted)?)
    }

    /// Where the value at `path` is written.
    pub(crate) fn at(&self, path: &[Segment]) -> Option<Pos> {
        self.node(path).and_then(pos)
    }

    /// The text of the scalar at `dotted`, with where it is written.
    pub(crate) fn scalar(&self, dotted: &str) -> Option<(&str, Option<Pos>)> {
        let node = segments(dotted).and_then(|path| self.node(&path))?;
        match &node.value {
            Node::Scalar(text) => Some((text, pos(node))),
            _ => None,
        }
    }

    /// Whether the file gives the key at `dotted` a value (a bad one
    /// included; `key:` and `key: ~` give none).
    pub(crate) fn has_value(&self, dotted: &str) -> bool {
        segments(dotted)
            .and_then(|path| self.node(&path))
            .is_some_and(|node| !matches!(node.value, Node::Null))
    }

    fn node(&self, path: &[Segment]) -> Option<&Spanned<Node>> {
        let tree = self.tree.get_or_init(|| shape(self.text)).as_ref()?;
        let mut node = tree;
        for segment in path {
            node = match (&node.value, segment) {
                (Node::Map(entries), Segment::Key(key)) => {
                    &entries
                        .iter()
                        .rev()
                        .find(|(k, _)| k.value.key() == Some(key.as_str()))?
                        .1
                }
                (Node::Seq(items), Segment::Index(index)) => items.get(*index)?,
                _ => return None,
            };
        }
        Some(node)
    }
}

/// A dotted key path read back into its segments; `None` if it is not one.
pub(crate) fn segments(dotted: &str) -> Option<Vec<Segment>> {
    let mut out = Vec::new();
    for part in dotted.split('.') {
        let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if key.is_empty() {
            return None;
        }
        out.push(Segment::Key(key.to_owned()));
        while !rest.is_empty() {
            let (index, after) = rest.split_once(']')?;
            out.push(Segment::Index(index.parse().ok()?));
            rest = match after {
                "" => "",
                after => after.strip_prefix('[')?,
            };
        }
    }
    Some(out)
}

/// Where the last key of `path` is written.
fn key_pos(tree: &Spanned<Node>, path: &[Segment]) -> Option<Pos> {
    let mut node = tree;
    let mut found = None;
    for segment in path {
        match (&node.value, segment) {
            (Node::Map(entries), Segment::Key(key)) => {
                let (k, v) = entries
                    .iter()
                    .rev()
                    .find(|(k, _)| k.value.key() == Some(key.as_str()))?;
                found = pos(k);
                node = v;
            }
            (Node::Seq(items), Segment::Index(index)) => {
                node = items.get(*index)?;
                found = pos(node);
            }
            _ => return None,
        }
    }
    found
}

/// The path of the innermost value written at `at`, if any.
fn value_path_at(tree: &Spanned<Node>, at: Pos) -> Option<Vec<Segment>> {
    fn walk(
        node: &Spanned<Node>,
        at: Pos,
        path: &mut Vec<Segment>,
        best: &mut Option<Vec<Segment>>,
    ) {
        if pos(node) == Some(at) {
            *best = Some(path.clone());
        }
        match &node.value {
            Node::Map(entries) => {
                for (key, value) in entries {
                    if let Some(text) = key.value.key() {
                        path.push(Segment::Key(text.to_owned()));
                        walk(value, at, path, best);
                        path.pop();
                    }
                }
            }
            Node::Seq(items) => {
                for (index, item) in items.iter().enumerate() {
                    path.push(Segment::Index(index));
                    walk(item, at, path, best);
                    path.pop();
                }
            }
            Node::Scalar(_) | Node::Null => {}
        }
    }
    let mut best = None;
    walk(tree, at, &mut Vec::new(), &mut best);
    best.filter(|path| !path.is_empty())
}

fn syntax_error(text: &str, error: &serde_saphyr::Error) -> SyntaxError {
    use serde_saphyr::MessageFormatter;

    let pos = error.location().as_ref().and_then(location_pos);
    // The key is found when the document is well-formed YAML and only a value
    // has the wrong shape; a real syntax error leaves it empty.
    let key = pos
        .and_then(|at| {
            let tree = shape(text)?;
            value_path_at(&tree, at)
        })
        .map(|path| dotted(&path))
        .unwrap_or_default();
    let message = serde_saphyr::UserMessageFormatter
        .format_message(error.without_snippet())
        .into_owned();
    SyntaxError { pos, key, message }
}
