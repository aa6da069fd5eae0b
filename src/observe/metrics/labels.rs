//! The bounds of the labels clients choose (`model`, `tenant`): an
//! allow-list, or the first names the upstream answered with a 2xx, then
//! `other`.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus::IntCounter;

use crate::config::LabelBounds;

/// The label of a request whose body could not be read for its model.
pub const UNKNOWN: &str = "unknown";
/// The label of a name past the bounds.
pub const OTHER: &str = "other";

/// The bounds of one label clients choose, and the counter of the requests
/// reported as `other` for it.
pub(super) struct Bounded {
    pub(super) labeler: Labeler,
    pub(super) overflow: IntCounter,
}

impl Bounded {
    /// The label of a request naming `name` (not empty), or `other` while
    /// it is pending (set in `pending`) or refused (counted).
    pub(super) fn label(&self, name: &str, pending: &mut Option<String>) -> String {
        match self.labeler.label(name) {
            Label::Use => name.to_owned(),
            Label::Pending => {
                *pending = Some(name.to_owned());
                OTHER.to_owned()
            }
            Label::Other => {
                self.overflow.inc();
                OTHER.to_owned()
            }
        }
    }
}

/// Bounds the values of a label clients choose (`model`, `tenant`).
pub(super) struct Labeler {
    allow: Option<HashSet<String>>,
    max_distinct: usize,
    /// Names admitted so far without an allow-list.
    seen: Mutex<HashSet<String>>,
}

impl Labeler {
    pub(super) fn new(cfg: &LabelBounds) -> Self {
        Self {
            allow: cfg.allow.as_ref().map(|a| a.iter().cloned().collect()),
            max_distinct: cfg.max_distinct,
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// What label a request naming `name` gets: its own, `other` for now
    /// (a name not admitted yet while slots are free), or `other` for good
    /// (not allow-listed, or no slot left).
    pub(super) fn label(&self, name: &str) -> Label {
        match &self.allow {
            Some(allow) if allow.contains(name) => Label::Use,
            Some(_) => Label::Other,
            None => {
                let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                if seen.contains(name) {
                    Label::Use
                } else if seen.len() < self.max_distinct {
                    Label::Pending
                } else {
                    Label::Other
                }
            }
        }
    }

    /// Admits `name` to a label slot (the upstream answered it), if it has
    /// one or one is free.
    pub(super) fn admit(&self, name: &str) -> bool {
        if let Some(allow) = &self.allow {
            return allow.contains(name);
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(name) {
            return true;
        }
        if seen.len() < self.max_distinct {
            seen.insert(name.to_owned());
            return true;
        }
        false
    }
}

/// What label a request's name gets.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Label {
    Use,
    /// Not admitted yet: `other` until the upstream answers it with a 2xx.
    Pending,
    Other,
}
