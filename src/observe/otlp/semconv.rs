//! The GenAI semantic conventions applied to a finished request: its
//! attributes, its span (with the newest conventions' attributes when they
//! are exported), and the protocol's `gen_ai.provider.name`. The
//! instruments are `instruments.rs`'.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use meter::{Api, Usage};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use crate::config::GenAiNames;
use crate::observe::occupancy::Occupancy;
use crate::observe::request::Charged;

/// A finished metered request, as it is exported.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request's labels, as its Prometheus histograms have them
    /// (`tenant` empty unless the histograms carry it).
    pub route: String,
    pub model: String,
    pub slo: String,
    pub tenant: String,
    /// The model the response says answered (`gen_ai.response.model`).
    pub response_model: Option<String>,
    /// The protocol it spoke.
    pub api: Api,
    /// `gen_ai.operation.name` and `gen_ai.provider.name`.
    pub operation: &'static str,
    pub provider: Cow<'static, str>,
    /// The upstream's host and port (`server.address`, `server.port`).
    pub server_address: String,
    pub server_port: u16,
    pub method: http::Method,
    pub status: Option<u16>,
    /// `ok`, or how it failed (`error.type`).
    pub outcome: &'static str,
    /// `good` or `bad` against its SLO class, when judged.
    pub verdict: Option<&'static str>,
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    /// For a request that ended `ok`.
    pub e2el: Option<Duration>,
    /// From the request head to its end, whatever the outcome.
    pub elapsed: Duration,
    /// What the upstream's usage report said (input tokens from there).
    pub usage: Usage,
    /// Output tokens: reported, else the stream's token events counted.
    pub output_tokens: Option<u64>,
    /// The gaps between its stream's token events, in seconds, each with
    /// how many there were, as its ITL sketch holds them (within its 1 %);
    /// only when the newest names are exported, which record each one.
    pub chunk_gaps: Vec<(f64, u64)>,
    /// The requests and engine figures it met when it was sent (span
    /// attributes only).
    pub occupancy: Occupancy,
    /// Its share of its route's GPUs (span attributes only), when the
    /// route has GPUs.
    pub charged: Option<Charged>,
    /// Its span, when it has one to export.
    pub span: Option<SpanIds>,
    /// When it ended.
    pub end: SystemTime,
    /// Its kind of turn (span attributes only).
    pub turn: meter::Turn,
    /// Its session's key and its number there, when it is in one (span
    /// attributes only).
    pub session: Option<(std::sync::Arc<str>, u64)>,
}

/// The ids of a request's span: its trace, its own id, its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanIds {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, when it sent one.
    pub parent: Option<[u8; 8]>,
}

/// `gen_ai.operation.name` of a request to `path` of `api`, and the
/// conventions' well-known `gen_ai.provider.name` of its protocol, when it
/// has one (OpenAI's, Anthropic's and Gemini's APIs, and the calls that
/// generate nothing on their paths; the self-hosted engines' own APIs have
/// none).
pub fn operation(api: Api, path: &str) -> (&'static str, Option<&'static str>) {
    let provider = match api {
        Api::OpenAi | Api::Responses => Some("openai"),
        Api::Anthropic => Some("anthropic"),
        Api::Gemini => Some("gcp.gemini"),
        Api::NonGenerating => {
            let path = path.trim_end_matches('/');
            if path.ends_with("/v1/embeddings") {
                Some("openai")
            } else if path.ends_with(":embedContent")
                || path.ends_with(":batchEmbedContents")
                || path.ends_with(":countTokens")
            {
                Some("gcp.gemini")
            } else {
                None
            }
        }
        Api::Ollama | Api::Tgi | Api::LlamaCpp | Api::Sglang | Api::Triton | Api::Generate => None,
    };
    (api.operation(path).name(), provider)
}

/// The `gen_ai.provider.name` of a request of `api`: the route's
/// `otel_provider_name` when set, else the protocol's well-known value,
/// else the protocol's name as a route's `protocol` key spells it
/// (`unknown` for a call that generates nothing).
pub fn provider_name(
    route: Option<&str>,
    well_known: Option<&'static str>,
    api: Api,
) -> Cow<'static, str> {
    match (route, well_known) {
        (Some(name), _) => Cow::Owned(name.to_owned()),
        (None, Some(name)) => Cow::Borrowed(name),
        // A call that generates nothing on a path no API owns.
        (None, None) if api == Api::NonGenerating => Cow::Borrowed("unknown"),
        (None, None) => Cow::Borrowed(api.name()),
    }
}

/// `server.address`: a host as a URL's authority has it, an IPv6
/// address without its brackets.
pub fn server_address(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The attributes metrics and spans share, with `response_model` as
/// `gen_ai.response.model`.
pub(super) fn common_attributes(r: &Request, response_model: Option<&str>) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", r.operation),
        KeyValue::new("gen_ai.provider.name", r.provider.clone()),
        KeyValue::new("gen_ai.request.model", r.model.clone()),
        KeyValue::new("server.address", r.server_address.clone()),
        KeyValue::new("server.port", i64::from(r.server_port)),
        KeyValue::new("tokenmeter.route", r.route.clone()),
    ];
    if !r.slo.is_empty() {
        a.push(KeyValue::new("tokenmeter.slo", r.slo.clone()));
    }
    if !r.tenant.is_empty() {
        a.push(KeyValue::new("tokenmeter.tenant", r.tenant.clone()));
    }
    if let Some(model) = response_model {
        a.push(KeyValue::new("gen_ai.response.model", model.to_owned()));
    }
    a
}

/// The most distinct response models the metrics carry; later new ones are
/// `other` (upstreams name them, so their number is not the proxy's to
/// choose). Spans carry each as it came.
const MAX_RESPONSE_MODELS: usize = 100;

/// The response models the metrics have carried so far.
#[derive(Default)]
pub(super) struct ResponseModels(std::collections::HashSet<String>);

impl ResponseModels {
    /// `name`, or `other` once [`MAX_RESPONSE_MODELS`] others were seen.
    pub(super) fn bounded<'a>(&mut self, name: &'a str) -> &'a str {
        if self.0.contains(name) {
            return name;
        }
        if self.0.len() < MAX_RESPONSE_MODELS {
            self.0.insert(name.to_owned());
            return name;
        }
        "other"
    }
}

/// The occupancy a request met at arrival, as span attributes: the load
/// its curve counts it at, the requests in flight, and the engine's figures
/// where they were read. Not on the metrics: a load is a span's detail,
/// and as an attribute of the histograms it would multiply their series.
fn occupancy_attributes(occupancy: &Occupancy, attributes: &mut Vec<KeyValue>) {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    attributes.push(KeyValue::new("tokenmeter.load", count(occupancy.curve())));
    attributes.push(KeyValue::new(
        "tokenmeter.load.in_flight",
        count(occupancy.in_flight),
    ));
    let Some(engine) = &occupancy.engine else {
        return;
    };
    for (key, value) in [
        ("tokenmeter.engine.running", engine.running),
        ("tokenmeter.engine.waiting", engine.waiting),
    ] {
        if let Some(n) = value {
            attributes.push(KeyValue::new(key, count(n)));
        }
    }
    if let Some(share) = engine.kv_cache_usage {
        attributes.push(KeyValue::new("tokenmeter.engine.kv_cache_usage", share));
    }
}

/// The span attributes only the newest conventions name: the time to the
/// first chunk of a stream, and the usage report's cached, cache-written
/// and reasoning tokens where it gives them.
fn latest_span_attributes(r: &Request, attributes: &mut Vec<KeyValue>) {
    if let Some(ttft) = r.ttft {
        attributes.push(KeyValue::new(
            "gen_ai.response.time_to_first_chunk",
            ttft.as_secs_f64(),
        ));
    }
    for (key, n) in [
        ("gen_ai.usage.cache_read.input_tokens", r.usage.cached_input),
        (
            "gen_ai.usage.cache_write.input_tokens",
            r.usage.cache_creation_input,
        ),
        ("gen_ai.usage.reasoning.output_tokens", r.usage.reasoning),
    ] {
        if let Some(n) = n {
            attributes.push(KeyValue::new(key, i64::try_from(n).unwrap_or(i64::MAX)));
        }
    }
}

/// The span of a finished request.
pub(super) fn span(
    r: &Request,
    ids: SpanIds,
    scope: &InstrumentationScope,
    names: GenAiNames,
) -> SpanData {
    let start = r.end.checked_sub(r.elapsed).unwrap_or(r.end);
    let mut attributes = common_attributes(r, r.response_model.as_deref());
    attributes.push(KeyValue::new(
        "http.request.method",
        r.method.as_str().to_owned(),
    ));
    if let Some(status) = r.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    attributes.push(KeyValue::new("tokenmeter.outcome", r.outcome));
    if let Some(verdict) = r.verdict {
        attributes.push(KeyValue::new("tokenmeter.slo.verdict", verdict));
    }
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    if let Some(n) = r.usage.input {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", count(n)));
    }
    if let Some(n) = r.output_tokens {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", count(n)));
    }
    if names.latest() {
        latest_span_attributes(r, &mut attributes);
    }
    if let Some(d) = r.tpot {
        attributes.push(KeyValue::new("tokenmeter.tpot_seconds", d.as_secs_f64()));
    }
    occupancy_attributes(&r.occupancy, &mut attributes);
    if r.turn != meter::Turn::None {
        attributes.push(KeyValue::new("tokenmeter.turn", r.turn.as_str()));
    }
    if let Some((key, turn)) = &r.session {
        attributes.push(KeyValue::new("gen_ai.conversation.id", key.to_string()));
        attributes.push(KeyValue::new("tokenmeter.session.turn", count(*turn)));
    }
    if let Some(c) = r.charged {
        let quantities = [
            ("tokenmeter.gpu.seconds", Some(c.gpu_seconds)),
            ("tokenmeter.gpu.energy", c.joules),
            ("tokenmeter.gpu.cost", c.cost),
        ];
        for (key, value) in quantities {
            if let Some(v) = value {
                attributes.push(KeyValue::new(key, v));
            }
        }
    }
    let status = match r.outcome {
        "ok" => Status::Ok,
        // The client left: not the server's error.
        "client_abort" | "client_timeout" => Status::Unset,
        outcome => Status::error(outcome),
    };
    if r.outcome != "ok" {
        attributes.push(KeyValue::new("error.type", r.outcome));
    }
    let mut events = SpanEvents::default();
    if let Some(ttft) = r.ttft {
        events.events.push(Event::new(
            "first_token",
            start + ttft,
            vec![KeyValue::new(
                "gen_ai.server.time_to_first_token",
                ttft.as_secs_f64(),
            )],
            0,
        ));
    }
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(ids.trace_id),
            SpanId::from_bytes(ids.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        ),
        parent_span_id: ids.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: ids.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(format!("{} {}", r.operation, r.model)),
        start_time: start,
        end_time: r.end,
        attributes,
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn provider_name_is_the_routes_else_the_protocols_well_known_value_else_its_name() {
        let (op, known) = operation(Api::OpenAi, "/v1/chat/completions");
        assert_eq!((op, known), ("chat", Some("openai")));
        assert_eq!(provider_name(None, known, Api::OpenAi), "openai");
        assert_eq!(
            provider_name(Some("azure.ai.openai"), known, Api::OpenAi),
            "azure.ai.openai"
        );
        for (api, path, name) in [
            (Api::Anthropic, "/v1/messages", "anthropic"),
            (
                Api::Gemini,
                "/v1beta/models/g:generateContent",
                "gcp.gemini",
            ),
            (Api::Responses, "/v1/responses", "openai"),
            (Api::NonGenerating, "/v1/embeddings", "openai"),
            (
                Api::NonGenerating,
                "/v1beta/models/e:embedContent",
                "gcp.gemini",
            ),
            (Api::NonGenerating, "/rerank", "unknown"),
        ] {
            let (_, known) = operation(api, path);
            assert_eq!(provider_name(None, known, api), name, "{api:?}");
        }
        for api in [
            Api::Tgi,
            Api::LlamaCpp,
            Api::Sglang,
            Api::Triton,
            Api::Ollama,
            Api::Generate,
        ] {
            let (_, known) = operation(api, "/generate");
            assert_eq!(known, None, "{api:?}");
            assert_eq!(provider_name(None, known, api), api.name());
            assert_eq!(provider_name(Some("vllm"), known, api), "vllm");
        }
    }

    #[test]
    fn server_address_drops_an_ipv6_addresses_brackets() {
        for (authority, address) in [
            ("127.0.0.1:8000", "127.0.0.1"),
            ("[::1]:8000", "::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("inference.example:443", "inference.example"),
        ] {
            let a: http::uri::Authority = authority.parse().unwrap();
            assert_eq!(server_address(a.host()), address);
        }
    }
}
