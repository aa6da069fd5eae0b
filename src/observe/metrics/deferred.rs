//! What a request observes before the labels of its histograms are final.
//!
//! A request that named no model takes its `model` label from the model its
//! response names, which llama.cpp's stream names only in its terminal
//! event: until then its time to headers and TTFT are kept here, and
//! observed on its series once they are known (its ITL gaps are held as
//! every request's are, `held.rs`).

/// The observations of a request whose series are not known yet.
#[derive(Default)]
pub(super) struct Deferred {
    pub(super) headers: Option<f64>,
    pub(super) ttft: Option<f64>,
    pub(super) ttft_visible: Option<f64>,
}
