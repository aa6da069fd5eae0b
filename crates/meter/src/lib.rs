//! Metering: from the bytes of one response to the numbers of docs/metrics.md.
//!
//! [`StreamMeter`] is the state of one request, fed on the forwarding path
//! with the clock readings of the proxy: the response head, each body frame
//! as it is read from the upstream, and how the body ended. It frames the
//! bytes ([`sse`], [`ndjson`] or [`jsonarray`], chosen by the response's
//! content type), asks the protocol module of the request's [`Api`] what
//! each event is, stamps token events, and reports through a [`Recorder`].
//!
//! Every protocol module (`openai`, `responses`, `anthropic`, `tgi`,
//! `ollama`, `llamacpp`, `gemini`, `sglang`, `triton`) has the same shape: a
//! `classify(name, data)` that reads one framed event (or a whole
//! non-streamed body) into an [`EventInfo`], walking it with the pull reader
//! of [`json`]: keys matched as bytes, the rest skipped, never a JSON tree.
//!
//! It must not know about Prometheus, axum or config files, and it never
//! sees the forwarded bytes mutably: it reads a shared reference to each
//! frame, and a problem in the payload is reported as a [`ParseError`] and
//! degrades this request's numbers, never the stream.
//!
//! The rules of which number is observed when (docs/metrics.md) live in
//! `stream.rs`, in `Tally::finish`, so that every recorder applies them the
//! same way.

pub mod anthropic;
pub mod decompress;
pub mod gemini;
pub mod json;
pub mod jsonarray;
pub mod llamacpp;
pub mod ndjson;
pub mod nongenerating;
pub mod ollama;
pub mod openai;
pub mod responses;
pub mod sglang;
pub mod sse;
pub mod tgi;
pub mod triton;

mod api;
mod event;
mod framer;
mod model;
mod operation;
mod recorder;
mod repeat;
mod stream;
mod summary;
mod turn;

pub use api::Api;
pub use event::{EventInfo, ParseError, ServerTimings, Usage};
pub use model::{ID_MAX_BYTES, MODEL_MAX_CHARS, request_model, response_id, response_model};
pub use operation::Operation;
pub use recorder::{Recorder, Recording};
pub use stream::{Limits, StreamMeter};
pub use summary::{Outcome, Summary, TokenSource};
pub use turn::{RequestFacts, Turn, has_conversations, read_request};
