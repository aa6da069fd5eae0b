//! What a family is: its name, kind, labels and help, and how the
//! catalogue makes one.

/// What kind of Prometheus family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Histogram,
    Counter,
    Gauge,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The name after the namespace, or the whole name of a family of the
    /// proxy's own (see [`Family::namespaced`]).
    pub suffix: &'static str,
    /// Named under the configured namespace (domain metrics), or as it is.
    pub namespaced: bool,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl Family {
    /// The family's name under `namespace`.
    pub fn name(&self, namespace: &str) -> String {
        if self.namespaced {
            format!("{namespace}_{}", self.suffix)
        } else {
            self.suffix.to_owned()
        }
    }
}

pub(crate) const fn domain(
    suffix: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Family {
    Family {
        suffix,
        namespaced: true,
        kind,
        labels,
        help,
    }
}

pub(crate) const fn own(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Family {
    Family {
        suffix: name,
        namespaced: false,
        kind,
        labels,
        help,
    }
}
