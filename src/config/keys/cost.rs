//! The keys of `cost`: how GPU time is priced.

use super::super::CostSettings;
use super::super::raw::fields_of;
use super::key::{Table, key};

/// `cost`.
pub(super) static COST: Table = Table {
    fields: fields_of::<CostSettings>,
    keys: &[key(
        "currency",
        "1 to 16 of `[A-Za-z0-9_-]`",
        "`USD`",
        "The currency of every route's `gpu_hourly_cost`, the `currency` label of the \
            cost families (`USD`, `EUR`, `credits`). Applied at start only: a reload never \
            relabels the cost counters, and one that changes it logs that a restart is \
            needed.",
    )
    .restart("")],
};
