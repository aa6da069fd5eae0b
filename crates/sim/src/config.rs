//! The simulator's default schedule.

use std::num::NonZeroU32;
use std::time::Duration;

/// The default schedule of every simulated response; requests may override
/// parts of it through `x-sim-*` headers.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Delay from the request to the first token.
    pub ttft: Duration,
    /// Delay between consecutive tokens.
    pub itl: Duration,
    /// Output tokens per choice (capped by the request's `max_tokens`).
    pub tokens: u32,
    /// Model name reported when the request names none.
    pub model: String,
    /// Whether chat streams begin with a role-only chunk per choice, as vLLM
    /// and OpenAI send; turning it off tests clients that clock TTFT on the
    /// first body byte.
    pub role_chunk: bool,
    /// Whether every response is stamped with send times (as if each
    /// request carried `x-sim-stamp: 1`).
    pub stamp: bool,
    /// Batch-limited mode: at most this many requests generate at once,
    /// the others wait in a FIFO queue, and `GET /metrics` serves the
    /// engine state in vLLM's names. `None`: every request starts at once
    /// and there is no `/metrics`.
    pub slots: Option<NonZeroU32>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            ttft: Duration::from_millis(200),
            itl: Duration::from_millis(20),
            tokens: 50,
            model: "sim-model".to_owned(),
            role_chunk: true,
            stamp: false,
            slots: None,
        }
    }
}
