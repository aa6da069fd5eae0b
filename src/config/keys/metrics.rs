//! The keys of `metrics`: metric naming, label bounds and histogram buckets.

use super::super::raw::fields_of;
use super::super::{Buckets, LabelBounds, MetricsSettings, NativeHistograms, TenantLabels};
use super::key::{Table, key, mapping};

/// `metrics`.
pub(super) static METRICS: Table = Table {
    fields: fields_of::<MetricsSettings>,
    keys: &[
        key(
            "namespace",
            "string matching `[a-zA-Z_][a-zA-Z0-9_]*`",
            "`llm`",
            "Prefix of the domain metrics (`llm` gives `llm_time_to_first_token_seconds`).",
        )
        .restart(""),
        mapping("models")
            .restart("model label bounds")
            .keys(&METRICS_MODELS),
        mapping("tenants")
            .restart("tenant label bounds")
            .keys(&METRICS_TENANTS),
        key(
            "stall_threshold",
            "duration",
            "`1s`",
            "A gap between two token events of a stream longer than this is a stall: counted, \
            with its length, in `llm_stalls_total` and `llm_stalled_seconds_total` when the \
            request ends (docs/metrics.md). A stream that pauses 4 s in the middle looks \
            fine in TPOT and terrible to its reader; this shows it.",
        ),
        key(
            "slow_reader_share",
            "percentage",
            "`20%`",
            "A request whose forwarding waited on its client (its receive window full) for \
            more than this share of its time is a slow reader's: counted in \
            `llm_slow_reader_requests_total`, marked `slow_reader` in the access line, and \
            left out of the judging of classes with `exclude_slow_readers` \
            (docs/metrics.md). `1%` to `100%`.",
        ),
        key(
            "max_usage_tokens",
            "integer ≥ 1",
            "`10000000`",
            "Largest token count accepted from an upstream's usage report, per field. A \
            report with a larger count, or one that is not a whole number (negative, \
            fractional, a string), is not counted: the request's metering degrades \
            (`tokenmeter_stream_parse_errors_total{kind=\"implausible_usage\"}`) and the \
            token counters never take a bogus value or wrap.",
        ),
        mapping("buckets")
            .restart("histogram bucket bounds")
            .keys(&METRICS_BUCKETS),
        mapping("native_histograms")
            .restart("native histograms")
            .keys(&METRICS_NATIVE_HISTOGRAMS),
    ],
};

/// `metrics.models`.
pub(super) static METRICS_MODELS: Table = Table {
    fields: fields_of::<LabelBounds>,
    keys: &[
        key(
            "allow",
            "list of strings",
            "none",
            "Only these model names are used as `model` label values; any other is reported \
            as `other`. Non-empty list of non-empty names, no duplicates.",
        ),
        key(
            "max_distinct",
            "integer ≥ 1",
            "`100`",
            "Without `allow`: the first this-many distinct model names that the upstream \
            answered with a 2xx are used as label values; later new names are reported as \
            `other`. A name is reported as `other` until its first 2xx, so names clients \
            make up, which the upstream refuses (404), never take a slot; the last quarter \
            of the slots go only to names answered with a 2xx twice within an hour, so names \
            sent once to an upstream that answers anything cannot take them all \
            ([docs/metrics.md](metrics.md#the-metrics)). Upstreams that accept any name \
            (llama.cpp's server ignores `model`) should be given `allow`: it is the strict \
            mode.",
        ),
    ],
};

/// `metrics.tenants`.
pub(super) static METRICS_TENANTS: Table = Table {
    fields: fields_of::<TenantLabels>,
    keys: &[
        key(
            "allow",
            "list of strings",
            "none",
            "Only these tenant names are used as `tenant` label values; any other is reported \
            as `other`. Non-empty list of non-empty names, no duplicates.",
        ),
        key(
            "max_distinct",
            "integer ≥ 1",
            "`100`",
            "Without `allow`: the first this-many distinct tenant names that the upstream \
            answered with a 2xx are used as label values (`other` until then, and for later \
            new names), as for models.",
        ),
        key(
            "histograms",
            "boolean",
            "`false`",
            "Also label the latency and token-count histograms by tenant (the counters always \
            are): up to 336 more series per tenant, route, model and class with the default \
            buckets (see [docs/metrics.md](metrics.md#tenants)).",
        ),
    ],
};

/// `metrics.buckets`.
pub(super) static METRICS_BUCKETS: Table = Table {
    fields: fields_of::<Buckets>,
    keys: &[
        key(
            "time_to_first_token",
            "bucket list, seconds",
            "1 ms … 600 s (26 bounds)",
            "Time to first token.",
        ),
        key(
            "time_to_response_headers",
            "bucket list, seconds",
            "1 ms … 600 s (18 bounds)",
            "Time until the upstream's response headers arrive.",
        ),
        key(
            "time_per_output_token",
            "bucket list, seconds",
            "0.5 ms … 10 s (22 bounds)",
            "Time per output token after the first.",
        ),
        key(
            "inter_token_latency",
            "bucket list, seconds",
            "0.5 ms … 10 s (22 bounds)",
            "Time between two consecutive token events.",
        ),
        key(
            "e2e_request_latency",
            "bucket list, seconds",
            "10 ms … 3600 s (23 bounds)",
            "End-to-end request latency.",
        ),
        key(
            "output_tokens",
            "bucket list, tokens",
            "1 … 65536 (15 bounds)",
            "Output (completion) tokens per request.",
        ),
        key(
            "input_tokens",
            "bucket list, tokens",
            "16 … 1048576 (15 bounds)",
            "Input (prompt) tokens per request.",
        ),
        key(
            "proxy_time",
            "bucket list, seconds",
            "50 µs … 2.5 s (15 bounds)",
            "The proxy's own time on a request's path (`llm_proxy_time_seconds`).",
        ),
    ],
};

/// `metrics.native_histograms`.
pub(super) static METRICS_NATIVE_HISTOGRAMS: Table = Table {
    fields: fields_of::<NativeHistograms>,
    keys: &[
        key(
            "enabled",
            "boolean",
            "`true`",
            "Keep a native histogram (exponential buckets) beside the classic buckets of \
            every latency and token-count histogram, and write it in the Prometheus protobuf \
            exposition, which Prometheus asks for when its native histograms are on \
            ([docs/metrics.md](metrics.md#native-histograms)). Text scrapes (0.0.4 and \
            OpenMetrics) never carry them and are unchanged.",
        ),
        key(
            "schema",
            "integer, -4 to 8",
            "`3`",
            "The resolution a series starts at: `2^schema` buckets per power of two, each \
            bound `2^(2^-schema)` times the one below (3: eight an octave, a factor of 1.09, \
            a quantile within 4.5 %).",
        ),
        key(
            "max_buckets",
            "integer ≥ 1",
            "`160`",
            "The most buckets a series' native histogram spans, from its lowest populated \
            bucket to its highest: a value that would widen it past this lowers the series' \
            schema by one, merging each pair of buckets, until it fits (at schema -4, 73 \
            buckets hold every value). At schema 3, 160 buckets span 20 octaves (1 ms to 17 \
            min, 1 to a million tokens) before the first halving. Memory per series: at most \
            8 bytes a bucket.",
        ),
    ],
};
