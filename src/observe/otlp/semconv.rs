//! The GenAI semantic conventions (v1.41.0) applied to a finished
//! request: its attributes, its span, the instruments' names, units and
//! bucket boundaries, and the protocol's `gen_ai.provider.name`.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use meter::Api;
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

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
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
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

// The explicit bucket boundaries the GenAI semantic conventions (v1.41.0,
// docs/gen-ai/gen-ai-metrics.md) advise for each instrument.

/// `gen_ai.server.time_to_first_token`, in seconds.
pub const TTFT_BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// `gen_ai.server.time_per_output_token`, in seconds.
pub const TPOT_BOUNDS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// `gen_ai.client.operation.duration`, in seconds.
pub const DURATION_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// `gen_ai.client.token.usage`, in tokens.
pub const TOKEN_BOUNDS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// The SDK's instruments, under the GenAI semantic conventions' names.
pub(super) struct Instruments {
    ttft: Histogram<f64>,
    tpot: Histogram<f64>,
    duration: Histogram<f64>,
    tokens: Histogram<u64>,
}

impl Instruments {
    pub(super) fn new(provider: &SdkMeterProvider) -> Self {
        let meter = provider.meter("tokenmeter");
        let seconds = |name: &'static str, description: &'static str, bounds: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(bounds.to_vec())
                .build()
        };
        Self {
            ttft: seconds(
                "gen_ai.server.time_to_first_token",
                "Time to generate the first token, from the request head (tokenmeter's TTFT).",
                &TTFT_BOUNDS,
            ),
            tpot: seconds(
                "gen_ai.server.time_per_output_token",
                "Time per output token after the first (tokenmeter's TPOT).",
                &TPOT_BOUNDS,
            ),
            duration: seconds(
                "gen_ai.client.operation.duration",
                "Request duration: E2EL for a request that ended ok, else how long it lasted (with error.type).",
                &DURATION_BOUNDS,
            ),
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Input and output tokens per completed request.")
                .with_boundaries(TOKEN_BOUNDS.to_vec())
                .build(),
        }
    }

    /// Records `r`'s measurements, its response model as `response_model`
    /// says (bounded).
    pub(super) fn record(&self, r: &Request, response_model: Option<&str>) {
        let mut attributes = common_attributes(r, response_model);
        if r.outcome != "ok" {
            attributes.push(KeyValue::new("error.type", r.outcome));
        }
        if let Some(d) = r.ttft {
            self.ttft.record(d.as_secs_f64(), &attributes);
        }
        if let Some(d) = r.tpot {
            self.tpot.record(d.as_secs_f64(), &attributes);
        }
        self.duration
            .record(r.e2el.unwrap_or(r.elapsed).as_secs_f64(), &attributes);
        // As Prometheus's token histograms: completed requests only.
        if r.e2el.is_some() {
            for (kind, n) in [("input", r.input_tokens), ("output", r.output_tokens)] {
                if let Some(n) = n {
                    let mut with_kind = attributes.clone();
                    with_kind.push(KeyValue::new("gen_ai.token.type", kind));
                    self.tokens.record(n, &with_kind);
                }
            }
        }
    }
}

/// The attributes metrics and spans share, with `response_model` as
/// `gen_ai.response.model`.
fn common_attributes(r: &Request, response_model: Option<&str>) -> Vec<KeyValue> {
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

/// The span of a finished request.
pub(super) fn span(r: &Request, ids: SpanIds, scope: &InstrumentationScope) -> SpanData {
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
    if let Some(n) = r.input_tokens {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(n) = r.output_tokens {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", n as i64));
    }
    if let Some(d) = r.tpot {
        attributes.push(KeyValue::new("tokenmeter.tpot_seconds", d.as_secs_f64()));
    }
    occupancy_attributes(&r.occupancy, &mut attributes);
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
}
