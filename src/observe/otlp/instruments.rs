//! The SDK's instruments under the GenAI semantic conventions' names, and
//! what each finished request records in them: the names of
//! semantic-conventions v1.41.0 by default, the newest ones
//! (semantic-conventions-genai, `gen_ai_latest_experimental`) or both, as
//! [`GenAiNames`] says; each instrument once, whichever set names it.
//!
//! Instruments of a set that is not exported are not made, so a collector
//! never sees their names.

use meter::{Api, Usage};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;

use super::semconv::{Request, common_attributes};
use crate::config::GenAiNames;

// The explicit bucket boundaries the GenAI semantic conventions advise for
// each instrument (v1.41.0's docs/gen-ai/gen-ai-metrics.md, and
// semantic-conventions-genai's docs/gen-ai/client-inference.md,
// client-embeddings.md and gen-ai-token-metrics.md, which keep the same
// duration and token boundaries).

/// `gen_ai.server.time_to_first_token`, in seconds.
pub const TTFT_BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// `gen_ai.server.time_per_output_token`, in seconds.
pub const TPOT_BOUNDS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// `gen_ai.client.operation.duration`, `gen_ai.client.inference.duration`,
/// `…inference.time_to_first_chunk`, `…inference.time_per_output_chunk`
/// and `gen_ai.client.embeddings.duration`, in seconds.
pub const DURATION_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// `gen_ai.client.token.usage`, `gen_ai.client.inference.operation.*` and
/// `gen_ai.client.embeddings.operation.input_tokens`, in tokens.
pub const TOKEN_BOUNDS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// The instruments of every set exported.
pub(super) struct Instruments {
    /// The server's TTFT and TPOT, whose names no set changed.
    ttft: Histogram<f64>,
    tpot: Histogram<f64>,
    /// `gen_ai.client.operation.duration`: every operation's with the
    /// names of v1.41.0; with the newest alone, only the operations its
    /// documents do not cover (rerank, score, the tokenizer).
    operation_duration: Histogram<f64>,
    released: Option<Released>,
    latest: Option<Latest>,
}

/// What only v1.41.0 names.
struct Released {
    tokens: Histogram<u64>,
}

/// What only the newest conventions name.
struct Latest {
    inference_duration: Histogram<f64>,
    first_chunk: Histogram<f64>,
    per_chunk: Histogram<f64>,
    /// `gen_ai.client.inference.usage.*`, in [`Usage`]'s order: input,
    /// output, cache read, cache write, reasoning.
    usage: [Counter<u64>; 5],
    input_tokens: Histogram<u64>,
    output_tokens: Histogram<u64>,
    embeddings_duration: Histogram<f64>,
    embeddings_tokens: Histogram<u64>,
}

fn seconds(
    meter: &Meter,
    name: &'static str,
    about: &'static str,
    bounds: &[f64],
) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit("s")
        .with_description(about)
        .with_boundaries(bounds.to_vec())
        .build()
}

fn tokens(meter: &Meter, name: &'static str, about: &'static str) -> Histogram<u64> {
    meter
        .u64_histogram(name)
        .with_unit("{token}")
        .with_description(about)
        .with_boundaries(TOKEN_BOUNDS.to_vec())
        .build()
}

impl Instruments {
    pub(super) fn new(provider: &SdkMeterProvider, names: GenAiNames) -> Self {
        let meter = provider.meter("tokenmeter");
        let counter = |name: &'static str, about: &'static str| {
            meter
                .u64_counter(name)
                .with_unit("{token}")
                .with_description(about)
                .build()
        };
        Self {
            ttft: seconds(
                &meter,
                "gen_ai.server.time_to_first_token",
                "Time to generate the first token, from the request head (tokenmeter's TTFT).",
                &TTFT_BOUNDS,
            ),
            tpot: seconds(
                &meter,
                "gen_ai.server.time_per_output_token",
                "Time per output token after the first (tokenmeter's TPOT).",
                &TPOT_BOUNDS,
            ),
            operation_duration: seconds(
                &meter,
                "gen_ai.client.operation.duration",
                "Request duration: E2EL for a request that ended ok, else how long it lasted (with error.type).",
                &DURATION_BOUNDS,
            ),
            released: names.released().then(|| Released {
                tokens: tokens(
                    &meter,
                    "gen_ai.client.token.usage",
                    "Input and output tokens per completed request.",
                ),
            }),
            latest: names.latest().then(|| Latest {
                inference_duration: seconds(
                    &meter,
                    "gen_ai.client.inference.duration",
                    "Inference duration: E2EL for a request that ended ok, else how long it lasted (with error.type).",
                    &DURATION_BOUNDS,
                ),
                first_chunk: seconds(
                    &meter,
                    "gen_ai.client.inference.time_to_first_chunk",
                    "Time from the request head to the first token event of a stream (tokenmeter's TTFT).",
                    &DURATION_BOUNDS,
                ),
                per_chunk: seconds(
                    &meter,
                    "gen_ai.client.inference.time_per_output_chunk",
                    "Each gap between a stream's token events after the first (tokenmeter's ITL).",
                    &DURATION_BOUNDS,
                ),
                usage: [
                    counter(
                        "gen_ai.client.inference.usage.input_tokens",
                        "Input tokens, cached ones included.",
                    ),
                    counter(
                        "gen_ai.client.inference.usage.output_tokens",
                        "Output tokens, reasoning included.",
                    ),
                    counter(
                        "gen_ai.client.inference.usage.cache_read.input_tokens",
                        "Input tokens served from the prompt cache.",
                    ),
                    counter(
                        "gen_ai.client.inference.usage.cache_write.input_tokens",
                        "Input tokens written to the prompt cache.",
                    ),
                    counter(
                        "gen_ai.client.inference.usage.reasoning.output_tokens",
                        "Output tokens spent on reasoning.",
                    ),
                ],
                input_tokens: tokens(
                    &meter,
                    "gen_ai.client.inference.operation.input_tokens",
                    "Input tokens per inference request.",
                ),
                output_tokens: tokens(
                    &meter,
                    "gen_ai.client.inference.operation.output_tokens",
                    "Output tokens per inference request.",
                ),
                embeddings_duration: seconds(
                    &meter,
                    "gen_ai.client.embeddings.duration",
                    "Embeddings request duration, with error.type when it did not end ok.",
                    &DURATION_BOUNDS,
                ),
                embeddings_tokens: tokens(
                    &meter,
                    "gen_ai.client.embeddings.operation.input_tokens",
                    "Input tokens per embeddings request.",
                ),
            }),
        }
    }

    /// Records `r`'s measurements, its response model as `response_model`
    /// says (bounded).
    pub(super) fn record(&self, r: &Request, response_model: Option<&str>) {
        let common = common_attributes(r, response_model);
        let mut attributes = common.clone();
        if r.outcome != "ok" {
            attributes.push(KeyValue::new("error.type", r.outcome));
        }
        if let Some(d) = r.ttft {
            self.ttft.record(d.as_secs_f64(), &attributes);
        }
        if let Some(d) = r.tpot {
            self.tpot.record(d.as_secs_f64(), &attributes);
        }
        let duration = r.e2el.unwrap_or(r.elapsed).as_secs_f64();
        let kind = Kind::of(r.operation);
        if self.released.is_some() || (self.latest.is_some() && kind == Kind::Other) {
            self.operation_duration.record(duration, &attributes);
        }
        if let Some(released) = &self.released {
            released.record(r, &attributes);
        }
        if let Some(latest) = &self.latest {
            match kind {
                Kind::Inference => latest.inference(r, duration, &common, &attributes),
                Kind::Embeddings => {
                    latest.embeddings_duration.record(duration, &attributes);
                    if let Some(n) = r.usage.input {
                        latest.embeddings_tokens.record(n, &attributes);
                    }
                }
                Kind::Other => {}
            }
        }
    }
}

/// Which of the newest conventions' documents covers an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Client inference: chat, text completion, Gemini's content.
    Inference,
    /// Client embeddings.
    Embeddings,
    /// tokenmeter's own operations (rerank, score, the tokenizer), which
    /// no document of the newest conventions covers.
    Other,
}

impl Kind {
    fn of(operation: &str) -> Self {
        match meter::Operation::from_name(operation) {
            Some(op) if op.generates() => Kind::Inference,
            Some(meter::Operation::Embeddings) => Kind::Embeddings,
            _ => Kind::Other,
        }
    }
}

impl Released {
    fn record(&self, r: &Request, attributes: &[KeyValue]) {
        // As Prometheus's token histograms: completed requests only.
        if r.e2el.is_none() {
            return;
        }
        for (kind, n) in [("input", r.usage.input), ("output", r.output_tokens)] {
            if let Some(n) = n {
                let mut with_kind = attributes.to_vec();
                with_kind.push(KeyValue::new("gen_ai.token.type", kind));
                self.tokens.record(n, &with_kind);
            }
        }
    }
}

impl Latest {
    /// An inference request: its duration, its stream's chunks, and its
    /// tokens, whatever its outcome (the conventions count the tokens a
    /// failed request used too, and `0` where no usage came).
    fn inference(&self, r: &Request, duration: f64, common: &[KeyValue], attributes: &[KeyValue]) {
        self.inference_duration.record(duration, attributes);
        // The chunk histograms carry no error.type in the conventions.
        if let Some(d) = r.ttft {
            self.first_chunk.record(d.as_secs_f64(), common);
        }
        for &(gap, n) in &r.chunk_gaps {
            for _ in 0..n {
                self.per_chunk.record(gap, common);
            }
        }
        let input = r.usage.input;
        let output = r.output_tokens;
        self.input_tokens.record(input.unwrap_or(0), attributes);
        self.output_tokens.record(output.unwrap_or(0), attributes);
        // Whether a usage report came (an output count of token events
        // alone is no report).
        let reported = r.usage != Usage::default();
        let modality = modality(r.api, r.operation);
        let figures = [
            (input, modality),
            (output, modality),
            (r.usage.cached_input, modality),
            (r.usage.cache_creation_input, modality),
            // Reasoning is text in every API tokenmeter reads.
            (r.usage.reasoning, TEXT),
        ];
        for (counter, (n, modality)) in self.usage.iter().zip(figures) {
            let (n, modality) = match n {
                Some(n) => (n, modality),
                // No usage at all came: `0`, of a modality unknown.
                None if !reported => (0, UNKNOWN),
                None => continue,
            };
            let mut with_modality = common.to_vec();
            with_modality.push(KeyValue::new("gen_ai.token.modality", modality));
            counter.add(n, &with_modality);
        }
    }
}

const TEXT: &str = "text";
const UNKNOWN: &str = "unknown";

/// The `gen_ai.token.modality` of a request's tokens: `text` for OpenAI's
/// legacy completions, whose prompt and answer are text (or token ids of
/// text); `unknown` for every other API, whose requests may carry images
/// or audio and whose usage, as tokenmeter reads it, does not say how
/// many of the tokens were which.
fn modality(api: Api, operation: &str) -> &'static str {
    match (api, operation) {
        (Api::OpenAi, "text_completion") => TEXT,
        _ => UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_are_increasing() {
        for bounds in [
            &TTFT_BOUNDS[..],
            &TPOT_BOUNDS,
            &DURATION_BOUNDS,
            &TOKEN_BOUNDS,
        ] {
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
        }
    }

    #[test]
    fn operations_go_to_the_document_that_covers_them() {
        for (operation, kind) in [
            ("chat", Kind::Inference),
            ("text_completion", Kind::Inference),
            ("generate_content", Kind::Inference),
            ("embeddings", Kind::Embeddings),
            ("rerank", Kind::Other),
            ("tokenize", Kind::Other),
        ] {
            assert_eq!(Kind::of(operation), kind, "{operation}");
        }
    }

    #[test]
    fn only_legacy_completions_are_known_to_be_text() {
        assert_eq!(modality(Api::OpenAi, "text_completion"), TEXT);
        for (api, operation) in [
            (Api::OpenAi, "chat"),
            (Api::Anthropic, "chat"),
            (Api::Gemini, "generate_content"),
            (Api::Tgi, "text_completion"),
            (Api::Ollama, "text_completion"),
        ] {
            assert_eq!(modality(api, operation), UNKNOWN, "{api:?} {operation}");
        }
    }
}
