//! A deterministic OpenAI-compatible upstream simulator. (Skeleton: filled in next.)

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
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            ttft: Duration::from_millis(200),
            itl: Duration::from_millis(20),
            tokens: 50,
            model: "sim-model".to_owned(),
        }
    }
}
