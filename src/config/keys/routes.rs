//! The keys of `routes[i]`: a route's keys.

use super::super::raw::fields_of;
use super::super::{GpuSelect, Route, RouteMatch, Timeouts, kind};
use super::key::{Table, key, mapping};

/// `routes`.
pub(super) static ROUTES: Table = Table {
    fields: fields_of::<Route>,
    keys: &[
        key(
            "name",
            "label value",
            "**required**",
            "Unique route name, used as the `route` label.",
        ),
        key(
            "match",
            "mapping",
            "every request",
            "Which requests this route accepts; all given conditions must hold.",
        )
        .keys(&ROUTES_MATCH),
        key(
            "upstream",
            "URL",
            "**required**",
            "Upstream base URL: `http` or `https`, with a host, without user info, query or \
            fragment. Every message and log line that shows an upstream or `otlp.endpoint` \
            URL, even one refused as invalid, shows it redacted: user info as `***@`, each \
            query value as `<redacted>` with its key kept (a bare item without `=` is \
            replaced whole), and the fragment as `#<redacted>`. Its path is kept as a base \
            path (without a trailing `/`) that request paths are appended to. An `http` \
            upstream is spoken to over HTTP/1.1; an `https` one over TLS (SNI, the \
            certificate verified as `tls.ca_file` says), in HTTP/2 when its server chooses \
            `h2` by ALPN, else HTTP/1.1. `--upstream` replaces it in every route, and then \
            it may be left out.",
        ),
        key(
            "protocol",
            "`auto` | `openai` | `responses` | `anthropic` | `tgi` | `ollama` | `llamacpp` | \
            `gemini` | `sglang` | `triton` | `none`",
            "`auto`",
            "Which requests are metered, and how their responses are read. `auto`: `POST` \
            requests to a known inference endpoint are metered with the protocol their path \
            implies (see below); others pass through unmetered. Any other name: every \
            request of the route is metered as that API, whatever its path (for servers on \
            unusual paths). `none`: forward only.",
        ),
        mapping("timeouts").keys(&ROUTES_TIMEOUTS),
        key(
            "preserve_host",
            "boolean",
            "`false`",
            "Forward the client's `Host` header instead of the upstream's authority.",
        ),
        key(
            "strip_prefix",
            "boolean",
            "`false`",
            "Remove the matched `path_prefix` before appending the request path to the \
            upstream's base path.",
        ),
        mapping("tls").keys(&ROUTES_TLS),
        key(
            "max_in_flight",
            "whole number ≥ 1",
            "no limit",
            "Most requests of this route in flight at once, from when the part of the request \
            body read ahead has arrived (so the request is about to go to the upstream) to \
            the end of the response body: a client still sending its body takes no slot. \
            Past it the proxy answers at once with `503`, `retry-after: 1`, \
            `x-tokenmeter-error: overloaded` and an OpenAI-style error body, without calling \
            the upstream; the refusal is counted in \
            `tokenmeter_rejected_requests_total{route,reason=\"max_in_flight\"}` and, for a \
            metered request, as outcome `proxy_error` (with the model its body named). The \
            count survives reloads: a limit added or lowered by a reload counts the requests \
            already running.",
        ),
        key(
            "slo",
            "label value",
            "none",
            "The route's SLO class, the `slo` label value (empty when unset). With \
            `slo_files`, it must name a class defined there; without, any label value is \
            accepted and nothing is judged.",
        ),
        key(
            "slo_by_model",
            "mapping of model name to class",
            "none",
            "SLO class by the request body's `model` (as sent, before the label is bounded), \
            taking precedence over `slo`: `{meta-llama/Llama-3.1-70B-Instruct: \
            document-generation}`. Each class as for `slo`.",
        ),
        key(
            "slo_by_operation",
            "mapping of operation to class",
            "none",
            "SLO class by what the request asks of the model (its `operation`, \
            [docs/metrics.md](metrics.md#operations): `chat`, `text_completion`, \
            `generate_content`, `embeddings`, `rerank`, `score`, `tokenize`, `detokenize`), \
            after `slo_by_model` and before `slo`: `{embeddings: embeddings, rerank: \
            embeddings}` judges a route's embeddings and rerank calls against the \
            `embeddings` class and the rest against the route's. Each class as for `slo`.",
        ),
        key(
            "slo_request_headers",
            "boolean",
            "`false`",
            "Judge a request that declares its own objectives (llm-d's `x-llm-d-slo-ttft-ms` \
            and `x-llm-d-slo-tpot-ms`, or their deprecated former names `x-slo-ttft-ms` and \
            `x-slo-tpot-ms`, and `x-slo-e2el-ms`, in milliseconds) against them, under the \
            class label `declared`, instead of the class `slo_header`, `slo_by_model`, \
            `slo_by_operation` or `slo` would choose \
            ([docs/metrics.md](metrics.md#objectives-a-client-declares)). A declaration with \
            a value that is not a positive number of milliseconds (at most a day) is not \
            used and is counted in `tokenmeter_slo_declarations_refused_total`. Does not \
            need `slo_files`.",
        ),
        mapping("slo_request_max").keys(&ROUTES_SLO_REQUEST_MAX),
        key(
            "slo_header",
            "header name",
            "none",
            "A request header by which a client may declare its class (`x-slo-class`). It \
            takes precedence over `slo_by_model`, `slo_by_operation` and `slo` (a request's \
            own declared objectives, with `slo_request_headers`, take precedence over it). A \
            value that names no defined class is ignored (the route's class applies), so \
            clients cannot create new label values. Requires `slo_files`.",
        ),
        mapping("tenant").keys(&ROUTES_TENANT),
        key(
            "engine_metrics",
            "URL",
            "not scraped",
            "The inference server's own Prometheus page (`http://vllm:8000/metrics`; SGLang, \
            TGI and llama.cpp with `--metrics` alike), scraped every `scrape_interval` for \
            its running and waiting requests, KV cache use and prefix cache figures \
            ([docs/metrics.md](metrics.md)). `http` or `https` (verified as `tls.ca_file` \
            says), with a host. User info, a query and a fragment are accepted and shown \
            redacted, as an upstream's would be.",
        ),
        key(
            "gpu_metrics",
            "URL",
            "not scraped",
            "The page of the NVIDIA DCGM exporter of the GPUs serving the route \
            (`http://dcgm-exporter:9400/metrics`), scraped as `engine_metrics` is.",
        ),
        mapping("gpu_select").keys(&ROUTES_GPU_SELECT),
        key(
            "scrape_interval",
            "duration",
            "that of `scrape.interval`",
            "How often this route's pages are scraped. Longer than `scrape.timeout`. Only \
            with `engine_metrics` or `gpu_metrics`.",
        ),
        key(
            "gpus",
            "whole number, at least 1",
            "not counted",
            "How many GPUs serve the route all the time, for a route without `gpu_metrics` \
            (which counts them; the two together are an error): its GPU-seconds, divided \
            among its requests ([chargeback](metrics.md#chargeback-who-used-the-gpus)).",
        ),
        key(
            "gpu_hourly_cost",
            "number, 0 to 1000000",
            "not priced",
            "What one of the route's GPUs costs an hour, in `cost.currency` (`2.5`): the \
            route's GPU-seconds are priced at it, from the configuration it is in on (a \
            reload that changes it applies from the reload on). Only with `gpus` or \
            `gpu_metrics`. A negative price, one above 1,000,000 per GPU-hour (far above any \
            GPU's price, and a bound that keeps the cost counters finite), or one that is \
            not a number, is an error.",
        ),
        key(
            "gpu_set",
            "`[a-zA-Z0-9_.:-]`, 1 to 64",
            "none",
            "The GPU set the route is in: the routes that name the same `gpu_set` share their \
            GPUs, counted once in one ledger whose GPU-seconds, energy and cost are divided \
            among the requests of all of them, under this name as the `gpu_set` label \
            ([chargeback](metrics.md#chargeback-who-used-the-gpus)). The routes of a set \
            give the same `gpus`, or the same `gpu_metrics` and `gpu_select`, and the same \
            `gpu_hourly_cost`: a difference is an error, as is a `gpu_set` on a route \
            without `gpus` or `gpu_metrics`, or one that is the name of a route outside the \
            set. Without it, the routes with the same `gpu_metrics` and `gpu_select` share \
            their GPUs all the same (their set named after its one route, or its routes' \
            names joined with `+`), and a route with `gpus` has its own.",
        ),
        key(
            "otel_provider_name",
            "`[a-z0-9_.]`, 1 to 64",
            "the protocol's",
            "The `gen_ai.provider.name` of the route's requests in the OpenTelemetry export \
            ([docs/metrics.md](metrics.md#opentelemetry)): the provider the conventions' \
            well-known values name (`azure.ai.openai`, `aws.bedrock`, `mistral_ai`), or a \
            name of your own for a self-hosted engine (`vllm`). Unset: `openai`, `anthropic` \
            or `gcp.gemini` for those APIs, else the protocol's name (`tgi`, `llamacpp`, \
            `ollama`, `sglang`, `triton`, `generate`).",
        ),
    ],
};

/// `routes.match`.
pub(super) static ROUTES_MATCH: Table = Table {
    fields: fields_of::<RouteMatch>,
    keys: &[
        key(
            "path_prefix",
            "string starting with `/`",
            "`/`",
            "The request path starts with this (plain string prefix: `/v1` also matches \
            `/v1beta`). No query, fragment or spaces.",
        ),
        key(
            "host",
            "host name or `[IPv6]`",
            "any host",
            "The request's host, without port, compared case-insensitively (stored lowercase).",
        ),
        key(
            "methods",
            "list of HTTP methods",
            "any method",
            "Accepted methods, case-insensitive (stored uppercase). Non-empty, no duplicates.",
        ),
    ],
};

/// `routes.timeouts`.
pub(super) static ROUTES_TIMEOUTS: Table = Table {
    fields: fields_of::<Timeouts>,
    keys: &[
        key(
            "connect",
            "duration",
            "`5s`",
            "TCP (and TLS) connection set-up.",
        ),
        key(
            "response_headers",
            "duration",
            "`10m`",
            "From sending the request to receiving the response head. Non-streamed responses \
            send their head when generation is done, so this is long. A request whose body \
            (past the part read ahead) is still arriving from the client when it runs out is \
            the client's doing: `408` and `client_timeout`, not the upstream's `504`.",
        ),
        key(
            "idle",
            "duration",
            "`5m`",
            "Longest silence between two response body frames, reset on every frame: a long \
            healthy stream never times out, a stalled one does.",
        ),
        key(
            "request_body",
            "duration",
            "`30s`",
            "Longest silence while the client sends its request body: before its first byte \
            and between any two of its frames, whether the body is being read ahead or \
            streamed to the upstream. Past it the client gets `408` (`x-tokenmeter-error: \
            request_body_timeout`) and the request is counted with outcome `client_timeout`.",
        ),
        key(
            "request_body_total",
            "duration",
            "`60s`",
            "Longest time the part of a request body the proxy reads ahead (up to \
            `proxy.max_request_body` for a metered request, `proxy.max_retry_body` for \
            another) may take to arrive, counted from the request head, however steadily it \
            trickles: a silence timeout alone lets a client that sends a byte a second hold \
            a request open for ever. Past it, `408` and `client_timeout`, as for silence. A \
            total deadline, as HAProxy's `timeout http-request` bounds a request it buffers, \
            rather than a minimum rate (nginx's `client_body_timeout` and Envoy's \
            `stream_idle_timeout` bound silence only; Envoy's `request_timeout`, off by \
            default, bounds the whole request): the part read ahead is bounded in size, so a \
            deadline is easy to reason about and cannot be gamed. The rest of a larger body \
            streams to the upstream under `request_body` alone. While the body is read ahead \
            the request is in `tokenmeter_requests_receiving_body`, not yet in \
            `llm_requests_in_flight` nor among the route's `max_in_flight`.",
        ),
    ],
};

/// `routes.tls`.
pub(super) static ROUTES_TLS: Table = Table {
    fields: fields_of::<kind::TlsFile>,
    keys: &[key(
        "ca_file",
        "path to a PEM file",
        "the web PKI roots",
        "The certificate authorities an `https` upstream's certificate, and those of the \
            route's `https` `engine_metrics` and `gpu_metrics` pages, are verified against, \
            instead of the built-in web PKI roots: for servers with an internal or \
            self-signed CA. Relative to the config file's directory; read (and checked: at \
            least one certificate, each usable as a trust anchor) when the configuration is \
            loaded or reloaded, so a rotated CA is picked up by a reload. An error for a \
            route whose upstream and pages are all `http`.",
    )],
};

/// `routes.slo_request_max`.
pub(super) static ROUTES_SLO_REQUEST_MAX: Table = Table {
    fields: fields_of::<kind::DeclaredMax>,
    keys: &[
        key(
            "ttft",
            "duration",
            "`60s`",
            "The largest TTFT bound a request may declare; a larger one is judged at this \
            bound.",
        ),
        key(
            "tpot",
            "duration",
            "`10s`",
            "The largest TPOT bound a request may declare.",
        ),
        key(
            "e2el",
            "duration",
            "`1h`",
            "The largest E2EL bound a request may declare.",
        ),
    ],
};

/// `routes.tenant`.
pub(super) static ROUTES_TENANT: Table = Table {
    fields: fields_of::<kind::TenantFile>,
    keys: &[
        key(
            "header",
            "header name",
            "none",
            "Attribute each request to the tenant this request header names (`x-tenant`, \
            `x-team`; behind llm-d, `x-llm-d-inference-fairness-id`, its fairness id): its \
            value, trimmed, is the `tenant` label of the counters and the access log's \
            `tenant`, bounded by `metrics.tenants`. A request without it is `unknown`; a \
            value that is not 1 to 64 visible ASCII characters is `other`. Headers that \
            carry credentials (`authorization`, `x-api-key`, `cookie`, ...) are refused: use \
            `tenant.api_keys`. Give `header` or `api_keys`, not both.",
        ),
        mapping("api_keys").keys(&ROUTES_TENANT_API_KEYS),
    ],
};

/// `routes.gpu_select`.
pub(super) static ROUTES_GPU_SELECT: Table = Table {
    fields: fields_of::<GpuSelect>,
    keys: &[
        key(
            "gpu",
            "list of strings",
            "any",
            "The GPUs of `gpu_metrics` that serve the route, by the exporter's `gpu` label \
            (the device index: `[\"0\", \"1\"]`). A GPU is selected when it matches every \
            list given; without `gpu_select`, every GPU on the page is. Only with \
            `gpu_metrics`.",
        ),
        key(
            "uuid",
            "list of strings",
            "any",
            "By the exporter's `UUID` label (`GPU-5fd4...`).",
        ),
        key(
            "hostname",
            "list of strings",
            "any",
            "By the exporter's `Hostname` label (the node).",
        ),
    ],
};

/// `routes.tenant.api_keys`.
pub(super) static ROUTES_TENANT_API_KEYS: Table = Table {
    fields: fields_of::<kind::ApiKeysFile>,
    keys: &[
        key(
            "headers",
            "list of header names",
            "`[authorization, x-api-key]`",
            "Where a request's API key is read, the first of them that carries one: from \
            `authorization`, the token of `Bearer <token>`; from any other header, its whole \
            value.",
        ),
        key(
            "keys",
            "mapping of key hash to tenant name",
            "**required** with `api_keys`",
            "Tenant name by the SHA-256 of an API key, in hex: \
            `{9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08: team-a}`. \
            `echo \"$KEY\" | tokenmeter hash-key` prints a key's hash (it reads keys from \
            standard input, one per line). A request whose key is not listed, or that has \
            none, is `unknown`. The configuration never holds a key: an entry that is not 64 \
            hex digits is an error that does not repeat it, and `/config` shows the tenant \
            names and the number of keys, never a hash. Tenant names are 1 to 64 visible \
            ASCII characters.",
        ),
    ],
};
