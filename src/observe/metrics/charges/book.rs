//! What the owner and its windows share: a GPU set's book (its ledger and
//! how its figures are shown) and the key its requests are charged under.

use std::sync::Arc;

use slo::ledger::Ledger;

/// What a request that ended is charged under: its labels (the ledger is
/// its GPU set's), and whether it was good.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ChargeKey {
    pub(super) route: Arc<str>,
    pub(super) model: Arc<str>,
    pub(super) tenant: Arc<str>,
    pub(super) slo: Arc<str>,
    pub(super) good: bool,
}

/// How a GPU set's figures are shown, as its routes' configuration says.
#[derive(Debug, Clone, Default)]
pub(super) struct BillShown {
    /// It has a GPU page, whose energy is read.
    pub(super) energy: bool,
    /// Its price's currency, when it is priced.
    pub(super) currency: Option<Arc<str>>,
    /// Its `gpu_hourly_cost`, when it is priced.
    pub(super) price: Option<f64>,
    /// Its `gpus`, when its GPUs are counted rather than read.
    pub(super) fixed: Option<u32>,
}

/// One GPU set's ledger and how a plan shows it.
pub(super) struct Book {
    /// Its `gpu_set` label value.
    pub(super) set: Arc<str>,
    /// Its routes, in the configuration's order.
    pub(super) routes: Arc<[Arc<str>]>,
    pub(super) ledger: Arc<Ledger<ChargeKey>>,
    pub(super) shown: BillShown,
}
