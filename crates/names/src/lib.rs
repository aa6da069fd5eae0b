//! The catalogue of every metric family tokenmeter exports: its name, kind,
//! labels and help text. The exporter (`metrics`), the rules generator
//! (`slo::rules`) and the dashboard generator (`dashboard`) all name
//! metrics through it, and a test checks that docs/metrics.md lists each
//! one, so a name is spelled once.
//!
//! Domain families are named `<namespace>_<suffix>` (`metrics.namespace`,
//! `llm` by default); the proxy's own health families have the fixed prefix
//! `tokenmeter_`.

mod family;
mod sessions;

pub use family::{Family, Kind};
pub use sessions::*;

use family::{domain, own};

/// The labels of the domain families of finished requests, in this order.
/// `tenant` is empty unless the route attributes requests to tenants (and,
/// on the histograms, unless `metrics.tenants.histograms` is on);
/// `operation` is what the request asks of the model (`chat`,
/// `embeddings`...).
pub const LABELS: [&str; 5] = ["route", "model", "slo", "tenant", "operation"];

use Kind::{Counter, Gauge, Histogram};

pub const TTFT: Family = domain(
    "time_to_first_token_seconds",
    Histogram,
    &LABELS,
    "Time from the request head to the first token event of a streamed response (TTFT).",
);
pub const TTFT_VISIBLE: Family = domain(
    "time_to_first_visible_token_seconds",
    Histogram,
    &LABELS,
    "Time from the request head to the first visible token event (text, refusal or tool call; not reasoning) of a streamed response. Minus TTFT: how long a reasoning model thought before answering.",
);
pub const RESPONSE_HEADERS: Family = domain(
    "time_to_response_headers_seconds",
    Histogram,
    &LABELS,
    "Time from the request head to the upstream's response head.",
);
pub const TPOT: Family = domain(
    "time_per_output_token_seconds",
    Histogram,
    &LABELS,
    "Per request: (last token event - first token event) / (output tokens - 1), for completed streams with at least 2 tokens (TPOT).",
);
pub const ITL: Family = domain(
    "inter_token_latency_seconds",
    Histogram,
    &LABELS,
    "Each gap between consecutive token events of a stream, one observation per gap (ITL).",
);
pub const E2EL: Family = domain(
    "e2e_request_latency_seconds",
    Histogram,
    &LABELS,
    "Time from the request head to the end of the stream (its protocol's terminal event, or the end of the body), for requests completed with outcome ok (E2EL).",
);
pub const OUTPUT_TOKENS: Family = domain(
    "output_tokens",
    Histogram,
    &LABELS,
    "Output tokens per completed request (upstream usage when reported, else token events).",
);
pub const INPUT_TOKENS: Family = domain(
    "input_tokens",
    Histogram,
    &LABELS,
    "Input (prompt) tokens per completed request, as reported by the upstream.",
);
pub const REQUESTS: Family = domain(
    "requests_total",
    Counter,
    &[
        "route",
        "model",
        "slo",
        "tenant",
        "operation",
        "outcome",
        "status_class",
    ],
    "Metered requests by how they ended (outcome) and the HTTP status class the client received.",
);
pub const OUTPUT_TOKENS_TOTAL: Family = domain(
    "output_tokens_total",
    Counter,
    &["route", "model", "slo", "tenant", "operation", "source"],
    "Output tokens, by where the count comes from (source: usage = upstream report, events = counted token events, a lower bound).",
);
pub const INPUT_TOKENS_TOTAL: Family = domain(
    "input_tokens_total",
    Counter,
    &LABELS,
    "Input (prompt) tokens reported by the upstream.",
);
pub const CACHED_INPUT_TOKENS_TOTAL: Family = domain(
    "cached_input_tokens_total",
    Counter,
    &LABELS,
    "Input tokens the upstream reports as served from its prefix (KV) cache.",
);
pub const REASONING_OUTPUT_TOKENS_TOTAL: Family = domain(
    "reasoning_output_tokens_total",
    Counter,
    &LABELS,
    "Output tokens the upstream reports as spent on reasoning.",
);
pub const STALLS: Family = domain(
    "stalls_total",
    Counter,
    &LABELS,
    "Gaps between two token events of a request longer than metrics.stall_threshold, counted when the request ends.",
);
pub const STALLED_SECONDS: Family = domain(
    "stalled_seconds_total",
    Counter,
    &LABELS,
    "The length of those gaps, summed, counted when the request ends.",
);
pub const SERVER_QUEUE: Family = domain(
    "server_queue_seconds",
    Histogram,
    &LABELS,
    "Per request whose server reported it: the time it waited in the server before the engine started on it (the server's own timing).",
);
pub const SERVER_PREFILL: Family = domain(
    "server_prefill_seconds",
    Histogram,
    &LABELS,
    "Per request whose server reported it: from the engine starting on it to its first output token (the server's own timing).",
);
pub const SERVER_DECODE: Family = domain(
    "server_decode_seconds",
    Histogram,
    &LABELS,
    "Per request whose server reported it: from its first output token to its last (the server's own timing).",
);
pub const OUTSIDE_ENGINE: Family = domain(
    "time_outside_engine_seconds",
    Histogram,
    &LABELS,
    "Per request: TTFT minus the server's reported queue and prefill: network, HTTP server, tokenization and the proxy, before the first token.",
);
pub const OUTSIDE_ENGINE_NEGATIVE: Family = domain(
    "outside_engine_negative_total",
    Counter,
    &LABELS,
    "Requests whose server's reported queue and prefill added up to more than the TTFT the proxy measured (clocks that disagree); not observed as outside time.",
);
pub const CLIENT_WAIT: Family = domain(
    "client_wait_seconds",
    Histogram,
    &LABELS,
    "Per response: how long forwarding waited on the client to take the bytes it was sent (its receive window full); not part of any latency.",
);
pub const SLOW_READERS: Family = domain(
    "slow_reader_requests_total",
    Counter,
    &LABELS,
    "Requests whose client held forwarding up for more than metrics.slow_reader_share of their time.",
);
pub const PROXY_TIME: Family = domain(
    "proxy_time_seconds",
    Histogram,
    &LABELS,
    "Per request held whole and sent to an HTTP/1.1 upstream: the proxy's own time on its path, from the request being all there to its being written to the upstream (connecting included).",
);
pub const IN_FLIGHT: Family = domain(
    "requests_in_flight",
    Gauge,
    &["route", "model", "slo"],
    "Metered requests currently in progress.",
);
pub const SLO_REQUESTS: Family = domain(
    "slo_requests_total",
    Counter,
    &["route", "model", "slo", "tenant", "operation", "verdict"],
    "Requests judged against their SLO class (verdict: good = outcome ok and every required threshold met; bad = a required threshold exceeded, whatever the outcome). Requests that failed before any threshold passed are not judged.",
);
pub const SLO_VIOLATIONS: Family = domain(
    "slo_violations_total",
    Counter,
    &["route", "model", "slo", "tenant", "operation", "objective"],
    "Judged requests that exceeded the threshold of an SLO objective (ttft, tpot, e2el).",
);
pub const SLO_GOOD_OUTPUT_TOKENS: Family = domain(
    "slo_good_output_tokens_total",
    Counter,
    &LABELS,
    "Output tokens of requests judged good against their SLO class (token goodput).",
);
pub const SLO_TARGET: Family = domain(
    "slo_objective_target",
    Gauge,
    &["slo", "objective"],
    "Target share of requests meeting an SLO objective (objective=goodput: share of judged requests that are good).",
);
pub const SLO_THRESHOLD: Family = domain(
    "slo_threshold_seconds",
    Gauge,
    &["slo", "objective"],
    "Per-request threshold of an SLO objective; also an exact bucket bound of its histogram (for thresholds changed by a reload, only after a restart).",
);
/// The labels of the latency–load curve's counters, but for the last one
/// (`verdict` or `objective`): a request's load at arrival is bucketed by
/// `load_le`, the upper bound of its bucket (`+Inf` above 2048).
pub const LOAD_LABELS: [&str; 4] = ["route", "model", "slo", "load_le"];
pub const SLO_LOAD_REQUESTS: Family = domain(
    "slo_load_requests_total",
    Counter,
    &["route", "model", "slo", "load_le", "verdict"],
    "Requests judged against their SLO class (verdict: good or bad), by the load they met at arrival (load_le: the upper bound of its bucket; the load is the requests in flight to the route and model when it was sent, itself included, or the engine's running and waiting requests where the route's engine is scraped).",
);
pub const SLO_LOAD_VIOLATIONS: Family = domain(
    "slo_load_violations_total",
    Counter,
    &["route", "model", "slo", "load_le", "objective"],
    "Judged requests that exceeded the threshold of an SLO objective (ttft, tpot, e2el), by the load they met at arrival (load_le, as for slo_load_requests_total).",
);
pub const SLO_CAPACITY: Family = domain(
    "slo_capacity_concurrency",
    Gauge,
    &["route", "model", "slo", "window", "bound"],
    "The knee of the class's latency-load curve over a live window (1m, 5m, 1h): the largest load at arrival at which every target of the class still held, from buckets with enough judged requests (bound: measured, or lower when no load above it broke a target); 0 when even a load of 1 breaks one; absent when unknown.",
);
pub const SLO_HEADROOM: Family = domain(
    "slo_headroom_concurrency",
    Gauge,
    &["route", "model", "slo", "window", "bound"],
    "The knee minus the load now: how many more concurrent requests the route and model take before the class passes its knee (0 at the knee, negative past it; a lower bound when bound=lower).",
);

/// The latency–load curve's families (all in [`ALL`]).
pub const CAPACITY: [Family; 4] = [
    SLO_LOAD_REQUESTS,
    SLO_LOAD_VIOLATIONS,
    SLO_CAPACITY,
    SLO_HEADROOM,
];
pub const PARSE_ERRORS: Family = own(
    "tokenmeter_stream_parse_errors_total",
    Counter,
    &["route", "kind"],
    "Payload problems that degraded metering of a request (the bytes were forwarded unchanged).",
);
pub const UNROUTED: Family = own(
    "tokenmeter_unrouted_requests_total",
    Counter,
    &[],
    "Requests that matched no route and were answered 404 by the proxy.",
);
pub const PASSTHROUGH: Family = own(
    "tokenmeter_passthrough_requests_total",
    Counter,
    &["route"],
    "Requests forwarded without metering (not an inference endpoint, or protocol: none).",
);
pub const REJECTED: Family = own(
    "tokenmeter_rejected_requests_total",
    Counter,
    &["route", "reason"],
    "Requests the proxy answered itself without forwarding them (reason: max_in_flight = 503, the route's limit of requests in flight was reached; bad_host = 400, an HTTP/1.1 request without a Host header or any request with two, counted before routing with route empty).",
);
pub const DECLARATIONS_REFUSED: Family = own(
    "tokenmeter_slo_declarations_refused_total",
    Counter,
    &["route", "objective"],
    "Objectives clients declared in a request header (x-llm-d-slo-ttft-ms, x-llm-d-slo-tpot-ms, their former names x-slo-ttft-ms and x-slo-tpot-ms, x-slo-e2el-ms) on a route with slo_request_headers that were not a plausible duration (a positive number of milliseconds, at most a day): the request was judged against its class as if it had declared nothing.",
);
pub const GATEWAY_SHED: Family = own(
    "tokenmeter_gateway_shed_requests_total",
    Counter,
    &["route", "reason"],
    "Requests a gateway between the proxy and the engine shed and answered itself, by the reason its response gave (llm-d's x-llm-d-request-dropped-reason: rejected-saturated, evicted...; other past 16 distinct reasons or for one that is not 1 to 64 visible ASCII characters). Their outcome is proxy_error, never upstream_error; the answer was forwarded as it came.",
);
pub const UPSTREAM_RETRIES: Family = own(
    "tokenmeter_upstream_retries_total",
    Counter,
    &["route", "reason"],
    "Requests sent again, once, on a new upstream connection after a reused one was closed under them before any byte of a response (the keep-alive race; reason: closed = the upstream ended the connection, reset = it reset it). Only requests the proxy held whole are sent again.",
);
pub const MODEL_OVERFLOW: Family = own(
    "tokenmeter_model_label_overflow_total",
    Counter,
    &[],
    "Requests whose model name was reported as \"other\" (not allow-listed, past the distinct-name cap, or never answered with a 2xx while slots were free).",
);
pub const TENANT_OVERFLOW: Family = own(
    "tokenmeter_tenant_label_overflow_total",
    Counter,
    &[],
    "Requests whose tenant was reported as \"other\" (not allow-listed, past the distinct-name cap, not a usable label value, or never answered with a 2xx while slots were free).",
);
pub const RELOADS: Family = own(
    "tokenmeter_config_reload_total",
    Counter,
    &["result"],
    "Configuration reloads (file change or SIGHUP) by result: success (the new config serves new requests) or failure (the old one stays; the errors are logged).",
);
pub const LAST_RELOAD_SUCCESS: Family = own(
    "tokenmeter_config_last_reload_success_timestamp_seconds",
    Gauge,
    &[],
    "Unix time of the last successful configuration load (start-up or reload).",
);
pub const LAST_RELOAD_SUCCESSFUL: Family = own(
    "tokenmeter_config_last_reload_successful",
    Gauge,
    &[],
    "1 if the last configuration reload succeeded (or none was tried), 0 if it failed and an older config is running.",
);
pub const OPEN_CONNECTIONS: Family = own(
    "tokenmeter_open_connections",
    Gauge,
    &["listener"],
    "Client connections open on a listener (listener: proxy or admin).",
);
pub const MAX_CONNECTIONS: Family = own(
    "tokenmeter_max_connections",
    Gauge,
    &["listener"],
    "Most client connections a listener keeps open at once; more wait in the kernel's accept queue.",
);
pub const RECEIVING_BODY: Family = own(
    "tokenmeter_requests_receiving_body",
    Gauge,
    &["route"],
    "Requests whose body the proxy is still reading ahead, before it sends them to the upstream (they are not yet in the requests in flight).",
);
pub const SHED_CONNECTIONS: Family = own(
    "tokenmeter_shed_connections_total",
    Counter,
    &["reason"],
    "Client connections closed early while the proxy listener was overloaded (reason: idle = kept alive between requests; head = no complete request head within the overload timeout; body = a request body read ahead that did not arrive within the overload timeout, answered 408).",
);
pub const TLS_HANDSHAKE_FAILURES: Family = own(
    "tokenmeter_tls_handshake_failures_total",
    Counter,
    &["listener", "reason"],
    "TLS handshakes that did not complete on a listener with TLS (listener: proxy or admin; reason: timeout = not done within the request head timeout; closed = the client closed or reset the connection; protocol = not TLS, or no version, cipher or ALPN protocol in common; certificate = a client certificate missing, refused or not verified; other).",
);
pub const LOG_LINES_DROPPED: Family = own(
    "tokenmeter_log_lines_dropped_total",
    Counter,
    &[],
    "Log lines (access log included) dropped because standard error was not read fast enough: logging never blocks forwarding.",
);
pub const OTLP_DROPPED: Family = own(
    "tokenmeter_otlp_dropped_total",
    Counter,
    &["signal", "reason"],
    "What OTLP export lost. signal=traces counts spans, signal=metrics finished requests whose measurements were not recorded; reason=queue_full (the export queue was full: the collector is slow or down) or export_failed (the collector refused or did not answer).",
);
pub const OTLP_EXPORT_FAILURES: Family = own(
    "tokenmeter_otlp_export_failures_total",
    Counter,
    &["signal"],
    "OTLP export calls (signal: metrics or traces) that failed or timed out. A failed metrics export loses nothing: the next one carries the cumulative values.",
);

/// The labels of a GPU figure: `stat` is `mean` (over the route's GPUs
/// that report it) or `max` (the busiest).
pub const GPU_LABELS: [&str; 2] = ["route", "stat"];
pub const ENGINE_INFO: Family = domain(
    "engine_info",
    Gauge,
    &["route", "server"],
    "The inference server the route's engine page was read as (server: vllm, sglang, tgi, llamacpp); always 1, absent while the page is not read.",
);
pub const ENGINE_RUNNING: Family = domain(
    "engine_requests_running",
    Gauge,
    &["route", "model"],
    "Requests in the engine's running batch at its latest scrape (model: as the server labels it, empty for a server of one model).",
);
pub const ENGINE_WAITING: Family = domain(
    "engine_requests_waiting",
    Gauge,
    &["route", "model"],
    "Requests queued in the engine, waiting for room in its batch, at its latest scrape.",
);
pub const ENGINE_KV_CACHE: Family = domain(
    "engine_kv_cache_usage_ratio",
    Gauge,
    &["route", "model"],
    "Share of the engine's KV cache in use at its latest scrape, 0 to 1.",
);
pub const ENGINE_PREFIX_HIT: Family = domain(
    "engine_prefix_cache_hit_ratio",
    Gauge,
    &["route", "model"],
    "The engine's prefix cache hit ratio, 0 to 1: its own recent rate, or the prompt tokens found over those looked up between its two latest scrapes that saw lookups.",
);
pub const GPUS: Family = domain(
    "gpus",
    Gauge,
    &["route"],
    "GPUs serving the route (those of its GPU endpoint its selector picks) at their latest scrape.",
);
pub const GPU_UTILIZATION: Family = domain(
    "gpu_utilization_ratio",
    Gauge,
    &GPU_LABELS,
    "DCGM_FI_DEV_GPU_UTIL of the route's GPUs as a ratio, 0 to 1 (stat: mean or max).",
);
pub const GPU_FRAMEBUFFER_USED: Family = domain(
    "gpu_framebuffer_used_bytes",
    Gauge,
    &GPU_LABELS,
    "DCGM_FI_DEV_FB_USED of the route's GPUs, in bytes (stat: mean or max).",
);
pub const GPU_GRAPHICS_ENGINE_ACTIVE: Family = domain(
    "gpu_graphics_engine_active_ratio",
    Gauge,
    &GPU_LABELS,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE of the route's GPUs, 0 to 1 (stat: mean or max).",
);
pub const GPU_SM_ACTIVE: Family = domain(
    "gpu_sm_active_ratio",
    Gauge,
    &GPU_LABELS,
    "DCGM_FI_PROF_SM_ACTIVE of the route's GPUs, 0 to 1: compute occupancy (stat: mean or max).",
);
pub const GPU_DRAM_ACTIVE: Family = domain(
    "gpu_dram_active_ratio",
    Gauge,
    &GPU_LABELS,
    "DCGM_FI_PROF_DRAM_ACTIVE of the route's GPUs, 0 to 1: memory bandwidth use (stat: mean or max).",
);
pub const GOOD_TOKENS_PER_GPU_SECOND: Family = domain(
    "slo_good_output_tokens_per_gpu_second",
    Gauge,
    &["route", "slo", "window"],
    "Output tokens of good requests per second over a live window (1m, 5m, 1h), per GPU the route has at its latest scrape.",
);
pub const TOKENS_PER_GPU_SECOND: Family = domain(
    "output_tokens_per_gpu_second",
    Gauge,
    &["route", "slo", "window"],
    "Output tokens of every request per second over a live window (1m, 5m, 1h), per GPU the route has at its latest scrape.",
);
pub const SCRAPE_FAILURES: Family = own(
    "tokenmeter_scrape_failures_total",
    Counter,
    &["route", "target", "reason"],
    "Failed scrapes of a route's engine or GPU endpoint (target: engine or gpu; reason: connect, tls, timeout, http, status, too_large, parse, unrecognized); its figures are removed after three intervals without a good scrape.",
);

/// The families of the engines' and GPUs' figures, read by the scraper.
pub const TELEMETRY: [Family; 14] = [
    ENGINE_INFO,
    ENGINE_RUNNING,
    ENGINE_WAITING,
    ENGINE_KV_CACHE,
    ENGINE_PREFIX_HIT,
    GPUS,
    GPU_UTILIZATION,
    GPU_FRAMEBUFFER_USED,
    GPU_GRAPHICS_ENGINE_ACTIVE,
    GPU_SM_ACTIVE,
    GPU_DRAM_ACTIVE,
    GOOD_TOKENS_PER_GPU_SECOND,
    TOKENS_PER_GPU_SECOND,
    SCRAPE_FAILURES,
];
/// The labels of the GPU time, energy and money charged to requests that
/// ended (`gpu_set`: the GPUs the route shares; `good`: `true` or `false`).
pub const CHARGE_LABELS: [&str; 6] = ["route", "gpu_set", "model", "tenant", "slo", "good"];
/// With the currency of the price.
pub const COST_CHARGE_LABELS: [&str; 7] = [
    "route", "gpu_set", "model", "tenant", "slo", "good", "currency",
];

pub const GPU_SECONDS: Family = domain(
    "gpu_seconds_total",
    Counter,
    &["gpu_set"],
    "GPU-seconds of the GPU set: its GPU count (gpus, or its GPU page's while fresh) integrated over time.",
);
pub const GPU_ENERGY: Family = domain(
    "gpu_energy_joules_total",
    Counter,
    &["gpu_set"],
    "Energy of the GPU set's GPUs, joules: each GPU's DCGM energy counter's growth, divided as it moves, else its power usage integrated over time.",
);
pub const GPU_COST: Family = domain(
    "gpu_cost_total",
    Counter,
    &["gpu_set", "currency"],
    "Cost of the GPU set's GPU-seconds at its gpu_hourly_cost.",
);
pub const REQUEST_GPU_SECONDS: Family = domain(
    "request_gpu_seconds_total",
    Counter,
    &CHARGE_LABELS,
    "GPU-seconds charged to requests that ended, by their share of the batch while in flight (good: judged good or not).",
);
pub const REQUEST_GPU_ENERGY: Family = domain(
    "request_gpu_energy_joules_total",
    Counter,
    &CHARGE_LABELS,
    "GPU energy charged to requests that ended, joules, by their share of the batch.",
);
pub const REQUEST_GPU_COST: Family = domain(
    "request_gpu_cost_total",
    Counter,
    &COST_CHARGE_LABELS,
    "GPU cost charged to requests that ended, by their share of the batch.",
);
pub const GPU_IN_FLIGHT_SECONDS: Family = domain(
    "gpu_in_flight_seconds",
    Gauge,
    &["gpu_set"],
    "GPU-seconds accrued by the GPU set's requests still in flight.",
);
pub const GPU_IN_FLIGHT_ENERGY: Family = domain(
    "gpu_in_flight_energy_joules",
    Gauge,
    &["gpu_set"],
    "GPU energy accrued by the GPU set's requests still in flight, joules.",
);
pub const GPU_IN_FLIGHT_COST: Family = domain(
    "gpu_in_flight_cost",
    Gauge,
    &["gpu_set", "currency"],
    "GPU cost accrued by the GPU set's requests still in flight.",
);
pub const GPU_OTHER_REPLICAS_SECONDS: Family = domain(
    "gpu_other_replicas_seconds_total",
    Counter,
    &["gpu_set"],
    "GPU-seconds left to the engine's requests that came another way (its running and waiting requests beyond this replica's).",
);
pub const GPU_OTHER_REPLICAS_ENERGY: Family = domain(
    "gpu_other_replicas_energy_joules_total",
    Counter,
    &["gpu_set"],
    "GPU energy left to the engine's requests that came another way, joules.",
);
pub const GPU_OTHER_REPLICAS_COST: Family = domain(
    "gpu_other_replicas_cost_total",
    Counter,
    &["gpu_set", "currency"],
    "GPU cost left to the engine's requests that came another way.",
);
pub const GPU_IDLE_SECONDS: Family = domain(
    "gpu_idle_seconds_total",
    Counter,
    &["gpu_set"],
    "GPU-seconds with no request in flight on the GPU set's engine.",
);
pub const GPU_IDLE_ENERGY: Family = domain(
    "gpu_idle_energy_joules_total",
    Counter,
    &["gpu_set"],
    "GPU energy with no request in flight on the GPU set's engine, joules.",
);
pub const GPU_IDLE_COST: Family = domain(
    "gpu_idle_cost_total",
    Counter,
    &["gpu_set", "currency"],
    "GPU cost with no request in flight on the GPU set's engine.",
);
pub const GPU_ENERGY_RESETS: Family = own(
    "tokenmeter_gpu_energy_resets_total",
    Counter,
    &["gpu_set"],
    "GPU energy counters of the GPU set that went back (a driver reload): the span before has no energy from them.",
);
pub const GPU_ENERGY_IMPLAUSIBLE: Family = own(
    "tokenmeter_gpu_energy_implausible_samples_total",
    Counter,
    &["gpu_set"],
    "GPU energy counter samples of the GPU set skipped as implausible: a growth above 5 kW per GPU since the counter last moved.",
);
pub const GPU_ENERGY_AWAITING: Family = domain(
    "gpu_energy_awaiting_seconds",
    Gauge,
    &["gpu_set"],
    "GPU-seconds of the GPU set since its GPUs' energy counters last moved, whose joules are divided when they next move.",
);
pub const GPU_HOURLY_COST: Family = domain(
    "gpu_hourly_cost",
    Gauge,
    &["gpu_set", "currency"],
    "The price of one of the GPU set's GPUs for an hour, as the configuration in force says.",
);

/// The families of chargeback: a GPU set's GPU time, energy and money, and
/// how they are divided (docs/metrics.md, "Chargeback").
pub const CHARGEBACK: [Family; 19] = [
    GPU_SECONDS,
    GPU_ENERGY,
    GPU_COST,
    REQUEST_GPU_SECONDS,
    REQUEST_GPU_ENERGY,
    REQUEST_GPU_COST,
    GPU_IN_FLIGHT_SECONDS,
    GPU_IN_FLIGHT_ENERGY,
    GPU_IN_FLIGHT_COST,
    GPU_OTHER_REPLICAS_SECONDS,
    GPU_OTHER_REPLICAS_ENERGY,
    GPU_OTHER_REPLICAS_COST,
    GPU_IDLE_SECONDS,
    GPU_IDLE_ENERGY,
    GPU_IDLE_COST,
    GPU_ENERGY_RESETS,
    GPU_ENERGY_IMPLAUSIBLE,
    GPU_ENERGY_AWAITING,
    GPU_HOURLY_COST,
];
pub const BUILD_INFO: Family = own(
    "tokenmeter_build_info",
    Gauge,
    &["version"],
    "Build information; always 1.",
);

/// Every family, in the order docs/metrics.md lists them.
pub const ALL: [Family; 54] = [
    TTFT,
    TTFT_VISIBLE,
    RESPONSE_HEADERS,
    TPOT,
    ITL,
    E2EL,
    OUTPUT_TOKENS,
    INPUT_TOKENS,
    REQUESTS,
    OUTPUT_TOKENS_TOTAL,
    INPUT_TOKENS_TOTAL,
    CACHED_INPUT_TOKENS_TOTAL,
    REASONING_OUTPUT_TOKENS_TOTAL,
    STALLS,
    STALLED_SECONDS,
    SERVER_QUEUE,
    SERVER_PREFILL,
    SERVER_DECODE,
    OUTSIDE_ENGINE,
    OUTSIDE_ENGINE_NEGATIVE,
    CLIENT_WAIT,
    SLOW_READERS,
    PROXY_TIME,
    IN_FLIGHT,
    SLO_REQUESTS,
    SLO_VIOLATIONS,
    SLO_GOOD_OUTPUT_TOKENS,
    SLO_TARGET,
    SLO_THRESHOLD,
    SLO_LOAD_REQUESTS,
    SLO_LOAD_VIOLATIONS,
    SLO_CAPACITY,
    SLO_HEADROOM,
    PARSE_ERRORS,
    UNROUTED,
    PASSTHROUGH,
    REJECTED,
    DECLARATIONS_REFUSED,
    GATEWAY_SHED,
    UPSTREAM_RETRIES,
    MODEL_OVERFLOW,
    TENANT_OVERFLOW,
    RELOADS,
    LAST_RELOAD_SUCCESS,
    LAST_RELOAD_SUCCESSFUL,
    OPEN_CONNECTIONS,
    MAX_CONNECTIONS,
    RECEIVING_BODY,
    SHED_CONNECTIONS,
    TLS_HANDSHAKE_FAILURES,
    LOG_LINES_DROPPED,
    OTLP_DROPPED,
    OTLP_EXPORT_FAILURES,
    BUILD_INFO,
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "tests.rs"]
mod tests;
