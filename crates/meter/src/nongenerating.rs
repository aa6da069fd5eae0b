//! The calls that generate nothing (embeddings, rerank, scoring, the
//! tokenizer): one JSON body, answered at once. The meter reads from it
//! only the input tokens its usage reports, and whether it is an error.
//!
//! The answers' shapes, by who sends them:
//! - OpenAI, vLLM, llama.cpp's `/v1/embeddings`, TEI's OpenAI route:
//!   `usage.prompt_tokens` (with `total_tokens`).
//! - vLLM's and Jina's rerank: `usage.total_tokens` only, all of it input.
//! - Ollama's `/api/embed`: `prompt_eval_count`.
//! - Cohere's `/v2/embed` and `/v2/rerank`: `meta.billed_units.input_tokens`
//!   where reported (rerank bills search units, not tokens).
//! - TEI's `/embed` and `/rerank`, llama.cpp's `/embedding`, Ollama's
//!   `/api/embeddings`, the tokenizers: no usage; the body may be a list.
//!
//! A tokenizer's answer lists tokens but reports no usage: no model ran on
//! them, so no input tokens are counted for it.

use super::event::{EventInfo, ParseError, Usage};
use super::json::{self, Error, Reader};

/// Reads a whole non-streamed body.
pub fn classify(_name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
    let mut input = None;
    let mut total = None;
    let mut error = false;
    json::read(data, |r| {
        if r.peek()? != b'{' {
            return r.skip();
        }
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"usage" => usage(r, &mut input, &mut total)?,
                b"prompt_eval_count" => input = r.count()?,
                b"meta" => input = billed_input(r)?.or(input),
                b"error" => error = r.present()?,
                _ => r.skip()?,
            }
        }
        Ok(())
    })?;
    Ok(EventInfo {
        usage: Usage {
            input: input.or(total),
            ..Usage::default()
        },
        error,
        ..EventInfo::default()
    })
}

/// `usage`: `prompt_tokens`, and `total_tokens` for an answer without it.
fn usage(
    r: &mut Reader<'_>,
    input: &mut Option<u64>,
    total: &mut Option<u64>,
) -> Result<(), Error> {
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"prompt_tokens" => *input = r.count()?,
                b"total_tokens" => *total = r.count()?,
                _ => r.skip()?,
            }
        }
    }
    Ok(())
}

/// Cohere's `meta`: `billed_units.input_tokens`.
fn billed_input(r: &mut Reader<'_>) -> Result<Option<u64>, Error> {
    let mut n = None;
    if r.open_object_or_null()? {
        while let Some(key) = r.key()? {
            match key {
                b"billed_units" => n = r.count_in(b"input_tokens")?,
                _ => r.skip()?,
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(body: &str) -> Option<u64> {
        classify(b"", body.as_bytes()).unwrap().usage.input
    }

    #[test]
    fn input_tokens_from_each_shape() {
        let openai = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2]}],"model":"e5","usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(input(openai), Some(8));
        let rerank = r#"{"id":"r","model":"bge","usage":{"total_tokens":31},"results":[{"index":1,"relevance_score":0.9}]}"#;
        assert_eq!(input(rerank), Some(31));
        let ollama = r#"{"model":"all-minilm","embeddings":[[0.01,0.02]],"total_duration":14143917,"load_duration":1019500,"prompt_eval_count":8}"#;
        assert_eq!(input(ollama), Some(8));
        let cohere = r#"{"id":"c","embeddings":{"float":[[0.1]]},"texts":["a"],"meta":{"api_version":{"version":"2"},"billed_units":{"input_tokens":3}}}"#;
        assert_eq!(input(cohere), Some(3));
        let cohere_rerank = r#"{"results":[],"id":"c","meta":{"billed_units":{"search_units":1}}}"#;
        assert_eq!(input(cohere_rerank), None);
        assert_eq!(input("[[0.1,0.2],[0.3,0.4]]"), None, "TEI /embed");
        assert_eq!(
            input(r#"[{"index":0,"embedding":[[0.5]]}]"#),
            None,
            "llama.cpp /embedding"
        );
        assert_eq!(
            input(r#"{"count":3,"max_model_len":4096,"tokens":[1,2,3]}"#),
            None,
            "vLLM /tokenize"
        );
    }

    #[test]
    fn an_error_body_is_an_error() {
        let info = classify(
            b"",
            br#"{"error":{"message":"too long","type":"invalid_request_error"}}"#,
        )
        .unwrap();
        assert!(info.error);
        assert!(!info.token);
    }

    #[test]
    fn a_broken_body_is_a_parse_error() {
        assert!(classify(b"", br#"{"usage":{"prompt_tokens":8"#).is_err());
        assert!(classify(b"", b"").is_err());
    }
}
