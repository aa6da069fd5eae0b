//! The legs: which proxy (or none) a leg sends through.

/// A proxy (or none) under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LegKind {
    /// Straight to the simulator: the rig's own floor.
    Direct,
    /// tokenmeter, metering on.
    Tokenmeter,
    /// tokenmeter forwarding with metering off (`protocol: none`).
    Unmetered,
    /// nginx, the reference proxy.
    Nginx,
    /// Another tokenmeter binary (`--baseline-bin`), metering on, configured
    /// as the `tokenmeter` leg: an A/B comparison of two builds.
    Baseline,
}

impl LegKind {
    pub fn name(self) -> &'static str {
        match self {
            LegKind::Direct => "direct",
            LegKind::Tokenmeter => "tokenmeter",
            LegKind::Unmetered => "unmetered",
            LegKind::Nginx => "nginx",
            LegKind::Baseline => "baseline",
        }
    }
}
