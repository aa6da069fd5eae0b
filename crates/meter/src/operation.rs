//! What a metered request asks of the model ([`Operation`]): to generate
//! (chat, a text completion, Gemini's content), or one of the calls that
//! generate nothing (embeddings, rerank, scoring, the tokenizer), told
//! from the request's path. Its name is the `operation` label and
//! OpenTelemetry's `gen_ai.operation.name`.

/// What a metered request asks of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A chat turn: OpenAI chat completions, Responses, Anthropic
    /// Messages, Ollama's `/api/chat`.
    Chat,
    /// A completion of a prompt: OpenAI's legacy completions and the
    /// engines' native generate APIs.
    TextCompletion,
    /// Gemini's `generateContent`.
    GenerateContent,
    /// Vectors of the input.
    Embeddings,
    /// Documents ordered by their relevance to a query.
    Rerank,
    /// Similarity scores of pairs of texts (vLLM's `/score`).
    Score,
    /// Text to token ids, or counting the tokens of a prompt.
    Tokenize,
    /// Token ids to text.
    Detokenize,
}

impl Operation {
    /// Every operation, in the order the docs list them.
    pub const ALL: [Operation; 8] = [
        Operation::Chat,
        Operation::TextCompletion,
        Operation::GenerateContent,
        Operation::Embeddings,
        Operation::Rerank,
        Operation::Score,
        Operation::Tokenize,
        Operation::Detokenize,
    ];

    /// The `operation` label value: OpenTelemetry's `gen_ai.operation.name`
    /// where the GenAI conventions name it (`chat`, `text_completion`,
    /// `generate_content`, `embeddings`), else tokenmeter's own.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Chat => "chat",
            Operation::TextCompletion => "text_completion",
            Operation::GenerateContent => "generate_content",
            Operation::Embeddings => "embeddings",
            Operation::Rerank => "rerank",
            Operation::Score => "score",
            Operation::Tokenize => "tokenize",
            Operation::Detokenize => "detokenize",
        }
    }

    /// The operation a label value names.
    pub fn from_name(name: &str) -> Option<Operation> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether it generates tokens (and so has a TTFT, a TPOT...).
    pub fn generates(self) -> bool {
        matches!(
            self,
            Operation::Chat | Operation::TextCompletion | Operation::GenerateContent
        )
    }

    /// The call that generates nothing that `path` names, if it names one,
    /// by its last segment, so that any prefix works: `/v1/embeddings`,
    /// `/embeddings`, `/embedding` (llama.cpp), `/embed` (TEI, Ollama's
    /// `/api/embed`, Cohere's `/v2/embed`), `/embed_all` and
    /// `/embed_sparse` (TEI), Gemini's `:embedContent` and
    /// `:batchEmbedContents`; `/rerank` and `/reranking`; `/score`;
    /// `/tokenize` and Gemini's `:countTokens`; `/detokenize`.
    pub fn non_generating(path: &str) -> Option<Operation> {
        let path = path.trim_end_matches('/');
        let last = path.rsplit('/').next().unwrap_or_default();
        if let Some((_, verb)) = last.rsplit_once(':') {
            return match verb {
                "embedContent" | "batchEmbedContents" => Some(Operation::Embeddings),
                "countTokens" => Some(Operation::Tokenize),
                _ => None,
            };
        }
        match last {
            "embeddings" | "embedding" | "embed" | "embed_all" | "embed_sparse" => {
                Some(Operation::Embeddings)
            }
            "rerank" | "reranking" => Some(Operation::Rerank),
            "score" => Some(Operation::Score),
            "tokenize" => Some(Operation::Tokenize),
            "detokenize" => Some(Operation::Detokenize),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_read_back() {
        for op in Operation::ALL {
            assert_eq!(Operation::from_name(op.name()), Some(op));
        }
        assert_eq!(Operation::from_name("embedding"), None);
    }

    #[test]
    fn paths_that_only_look_alike_are_not_calls() {
        for path in [
            "/v1/embeddings/x",
            "/scores",
            "/v1/models",
            "/embedder",
            "/m:generateContent",
        ] {
            assert_eq!(Operation::non_generating(path), None, "{path}");
        }
    }
}
