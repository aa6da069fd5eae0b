//! What a key's declaration holds, and the constructors the declarations
//! are written with.

/// One key of the configuration file: what the reference says of it
/// (`docs/configuration.md`'s row is written from these), and whether a
/// reload applies it.
#[derive(Debug)]
pub(crate) struct Key {
    /// Its name in the mapping it is written in.
    pub name: &'static str,
    /// What it holds, in the reference's words (`duration`, `list of
    /// strings`). Empty for a mapping without a row of its own.
    #[cfg_attr(not(test), allow(dead_code))] // Read where the reference is written.
    pub kind: &'static str,
    /// Its default in the reference's words: a value in backticks, the one
    /// the types hold (`reference.rs` checks it against them); `**required**`;
    /// words for no value (`none`, `any host`); or nothing.
    #[cfg_attr(not(test), allow(dead_code))] // Read where the reference is written.
    pub default: &'static str,
    /// What it does, for users: the reference's meaning column. Empty for a
    /// mapping without a row of its own (its keys have theirs).
    #[cfg_attr(not(test), allow(dead_code))] // Read where the reference is written.
    pub doc: &'static str,
    /// Whether a reload applies a change of it.
    pub reload: Reload,
    /// The keys of the mapping it holds (of each entry, for a list of
    /// mappings), if it holds one.
    pub table: Option<&'static Table>,
}

/// Whether a reload applies a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reload {
    /// A reload applies it (unless a key above it needs a restart).
    Live,
    /// Only a restart applies it: a reload that changes it warns. The note
    /// is, for a single value, its unit as written after it in the warning
    /// (`s`, ` bytes`, or nothing); for a mapping, what it is, in words.
    Restart(&'static str),
}

/// The keys of one mapping, with the list serde's derive of its type
/// accepts, against which they are checked (`keys/mod.rs`'s tests).
#[derive(Debug)]
pub(crate) struct Table {
    /// The field names the type's `Deserialize` asks for.
    pub fields: fn() -> &'static [&'static str],
    /// Its keys, in the reference's order.
    pub keys: &'static [Key],
}

/// A key with its row in the reference, applied on reload.
pub(super) const fn key(
    name: &'static str,
    kind: &'static str,
    default: &'static str,
    doc: &'static str,
) -> Key {
    Key {
        name,
        kind,
        default,
        doc,
        reload: Reload::Live,
        table: None,
    }
}

/// A mapping without a row of its own: its keys have theirs.
pub(super) const fn mapping(name: &'static str) -> Key {
    key(name, "", "", "")
}

impl Key {
    /// The same key, applied at start only.
    pub(super) const fn restart(self, note: &'static str) -> Key {
        Key {
            reload: Reload::Restart(note),
            ..self
        }
    }

    /// The same key, holding a mapping of these keys.
    pub(super) const fn keys(self, table: &'static Table) -> Key {
        Key {
            table: Some(table),
            ..self
        }
    }
}
