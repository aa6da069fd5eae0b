//! The API family of a request ([`Api`]): its names in a route's
//! `protocol`, its detection from the method and path, and the protocol
//! module that reads its events.

use super::event::{EventInfo, ParseError};
use super::operation::Operation;
use super::{
    anthropic, gemini, llamacpp, nongenerating, ollama, openai, responses, sglang, tgi, triton,
};

/// The API family of a metered request: which protocol module reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions or legacy completions.
    OpenAi,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// Hugging Face TGI native (`/generate_stream`, `/generate`).
    Tgi,
    /// Ollama native (`/api/generate`, `/api/chat`), NDJSON.
    Ollama,
    /// llama.cpp server native (`/completion`).
    LlamaCpp,
    /// Google Gemini (`:streamGenerateContent`, `:generateContent`).
    Gemini,
    /// SGLang native (`/generate`).
    Sglang,
    /// Triton generate extension (`/v2/models/{model}/generate[_stream]`).
    Triton,
    /// `POST /generate`, served by both TGI and SGLang: resolved to one of
    /// them by the first payload that tells (SGLang's have `text` /
    /// `meta_info`, TGI's `token` / `generated_text` / `details`).
    Generate,
    /// A call that generates nothing (embeddings, rerank, scoring, the
    /// tokenizer; [`Operation::non_generating`]), whatever the server: one
    /// JSON body whose usage, if any, counts input tokens.
    NonGenerating,
}

impl Api {
    /// The APIs a route can name as its `protocol`, by those names: the
    /// one place they are spelled.
    pub const NAMED: [(&'static str, Api); 9] = [
        ("openai", Api::OpenAi),
        ("responses", Api::Responses),
        ("anthropic", Api::Anthropic),
        ("tgi", Api::Tgi),
        ("ollama", Api::Ollama),
        ("llamacpp", Api::LlamaCpp),
        ("gemini", Api::Gemini),
        ("sglang", Api::Sglang),
        ("triton", Api::Triton),
    ];

    /// The API a route's `protocol` names, if it names one.
    pub fn from_name(name: &str) -> Option<Api> {
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, api)| *api)
    }

    /// Its name in a route's `protocol`; `generate` (for `POST /generate`
    /// before its payload tells TGI from SGLang) and `non_generating`,
    /// which no route names, are told by the path.
    pub fn name(self) -> &'static str {
        match self {
            Api::Generate => "generate",
            Api::NonGenerating => "non_generating",
            _ => Self::NAMED
                .iter()
                .find(|(_, api)| *api == self)
                .map_or("generate", |(name, _)| name),
        }
    }

    /// How a request to `path` on a route whose `protocol` is `self` is
    /// read: as `self`, unless it is a `POST` of a call that generates
    /// nothing, whichever server answers it.
    pub fn on_route(self, method: &http::Method, path: &str) -> Api {
        if method == http::Method::POST && Operation::non_generating(path).is_some() {
            Api::NonGenerating
        } else {
            self
        }
    }

    /// The operation of a request to `path` read as `self` (a call that
    /// generates nothing is read as [`Api::NonGenerating`] whatever the
    /// route's protocol: [`Api::on_route`]).
    pub fn operation(self, path: &str) -> Operation {
        if self == Api::NonGenerating {
            return Operation::non_generating(path).unwrap_or(Operation::TextCompletion);
        }
        let path = path.trim_end_matches('/');
        let chat = path.ends_with("/chat/completions") || path.ends_with("/api/chat");
        match self {
            Api::Responses | Api::Anthropic => Operation::Chat,
            Api::Gemini => Operation::GenerateContent,
            Api::OpenAi | Api::Ollama if chat => Operation::Chat,
            Api::OpenAi
            | Api::Ollama
            | Api::Tgi
            | Api::LlamaCpp
            | Api::Sglang
            | Api::Triton
            | Api::Generate
            | Api::NonGenerating => Operation::TextCompletion,
        }
    }

    /// Guesses the API from a request, for routes with `protocol: auto`.
    /// Only `POST` requests to inference endpoints are metered; `GET
    /// /v1/models`, health checks, OpenAI's `GET /v1/chat/completions`
    /// (stored completions) and the like pass through unmetered.
    ///
    /// Paths are matched by their end, so any prefix (`/v1`, `/openai/v1`,
    /// a gateway's `/team-a`) works. `/completions` stays OpenAI's (llama.cpp
    /// also serves its native API there; set the route's protocol for that).
    pub fn detect(method: &http::Method, path: &str) -> Option<Api> {
        if method != http::Method::POST {
            return None;
        }
        let path = path.trim_end_matches('/');
        let last = path.rsplit('/').next().unwrap_or_default();
        // The cheap tests first: a colon in the last segment, the last
        // segment's name, before any search of a substring.
        if last.contains(':')
            && (last.contains(":streamGenerateContent") || last.contains(":generateContent"))
        {
            return Some(Api::Gemini);
        }
        if (last == "generate" || last == "generate_stream") && path.contains("/v2/models/") {
            return Some(Api::Triton);
        }
        let ends = |suffix: &str| path.ends_with(suffix);
        if ends("/chat/completions") || ends("/completions") {
            Some(Api::OpenAi)
        } else if ends("/responses") {
            Some(Api::Responses)
        } else if ends("/messages") {
            Some(Api::Anthropic)
        } else if ends("/api/generate") || ends("/api/chat") {
            Some(Api::Ollama)
        } else if ends("/generate_stream") {
            Some(Api::Tgi)
        } else if ends("/generate") {
            Some(Api::Generate)
        } else if ends("/completion") {
            Some(Api::LlamaCpp)
        } else if Operation::non_generating(path).is_some() {
            // Last: no path of a call that generates nothing ends like one
            // above, and the requests that generate are the most.
            Some(Api::NonGenerating)
        } else {
            None
        }
    }

    /// Reads one event (or a whole non-streamed body) on its own, without
    /// the state a stream keeps between events (see [`sglang::Cumulative`]).
    #[inline]
    pub fn classify(self, name: &[u8], data: &[u8]) -> Result<EventInfo, ParseError> {
        match self {
            Api::OpenAi => openai::classify(name, data),
            Api::Responses => responses::classify(name, data),
            Api::Anthropic => anthropic::classify(name, data),
            Api::Tgi => tgi::classify(name, data),
            Api::Ollama => ollama::classify(name, data),
            Api::LlamaCpp => llamacpp::classify(name, data),
            Api::Gemini => gemini::classify(name, data),
            Api::Sglang => sglang::classify(name, data),
            Api::Triton => triton::classify(name, data),
            Api::NonGenerating => nongenerating::classify(name, data),
            Api::Generate => match sglang::sniff(data) {
                Some(false) => tgi::classify(name, data),
                _ => sglang::classify(name, data),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_names_its_operation() {
        for (api, path, op) in [
            (Api::OpenAi, "/v1/chat/completions", Operation::Chat),
            (Api::OpenAi, "/v1/completions", Operation::TextCompletion),
            (Api::Ollama, "/api/chat", Operation::Chat),
            (Api::Ollama, "/api/generate", Operation::TextCompletion),
            (Api::Responses, "/v1/responses", Operation::Chat),
            (Api::Anthropic, "/v1/messages", Operation::Chat),
            (
                Api::Gemini,
                "/v1beta/models/g:streamGenerateContent",
                Operation::GenerateContent,
            ),
            (Api::Tgi, "/generate_stream", Operation::TextCompletion),
            (Api::NonGenerating, "/v1/embeddings", Operation::Embeddings),
            (Api::NonGenerating, "/embedding/", Operation::Embeddings),
            (Api::NonGenerating, "/api/embed", Operation::Embeddings),
            (Api::NonGenerating, "/api/embeddings", Operation::Embeddings),
            (Api::NonGenerating, "/embed_sparse", Operation::Embeddings),
            (
                Api::NonGenerating,
                "/v1beta/models/e:batchEmbedContents",
                Operation::Embeddings,
            ),
            (Api::NonGenerating, "/v2/rerank", Operation::Rerank),
            (Api::NonGenerating, "/reranking", Operation::Rerank),
            (Api::NonGenerating, "/score", Operation::Score),
            (Api::NonGenerating, "/v1/score", Operation::Score),
            (Api::NonGenerating, "/tokenize", Operation::Tokenize),
            (
                Api::NonGenerating,
                "/v1beta/models/g:countTokens",
                Operation::Tokenize,
            ),
            (Api::NonGenerating, "/detokenize", Operation::Detokenize),
            // A route whose protocol is fixed reads the call as
            // NonGenerating, and so names it by its path.
            (
                Api::OpenAi.on_route(&http::Method::POST, "/v1/embeddings"),
                "/v1/embeddings",
                Operation::Embeddings,
            ),
        ] {
            assert_eq!(api.operation(path), op, "{path}");
        }
    }
}
