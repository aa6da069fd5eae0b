//! The `metrics` section: metric naming, label bounds, histogram
//! buckets and native histograms, read as these types (see the module above for how a key is
//! added).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `metrics`: metric naming, label bounds and histogram buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricsSettings {
    /// Prefix of the domain metrics (`llm` gives
    /// `llm_time_to_first_token_seconds`). Matches `[a-zA-Z_][a-zA-Z0-9_]*`.
    #[serde(deserialize_with = "super::kind::namespace")]
    pub namespace: String,
    /// How values of the `model` label are bounded.
    pub models: LabelBounds,
    /// How values of the `tenant` label are bounded, for routes with a
    /// `tenant`.
    pub tenants: TenantLabels,
    /// Largest token count accepted from an upstream's usage report, per field.
    /// A report with a larger count, or with a count that is not a whole number
    /// (negative, fractional, a string), is not counted: the request's metering
    /// degrades (`implausible_usage` parse error) and the token counters never
    /// take a bogus value. A count, at least 1.
    #[serde(deserialize_with = "super::kind::token_count")]
    pub max_usage_tokens: u64,
    /// A gap between two token events longer than this is a stall, counted in
    /// `llm_stalls_total` and `llm_stalled_seconds_total`. A duration.
    #[serde(with = "super::kind::duration")]
    pub stall_threshold: Duration,
    /// A request whose forwarding waited on its client for more than this share
    /// of its time is a slow reader's (the access line's `slow_reader`,
    /// `llm_slow_reader_requests_total`). A percentage; held as a share (0 to
    /// 1).
    #[serde(deserialize_with = "super::kind::percentage")]
    pub slow_reader_share: f64,
    /// Histogram bucket upper bounds, per metric. A metric left out keeps its
    /// default buckets.
    pub buckets: Buckets,
    /// The native histograms kept beside the classic buckets of every
    /// latency and token-count histogram, served in the Prometheus protobuf
    /// exposition.
    pub native_histograms: NativeHistograms,
}

/// `metrics.native_histograms`: Prometheus native histograms (exponential
/// buckets) beside the classic ones, in the protobuf exposition only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NativeHistograms {
    /// Keep native buckets for each series of the latency and token-count
    /// histograms and write them in the protobuf exposition (text scrapes
    /// never carry them). A boolean. Applied at start only.
    #[serde(deserialize_with = "super::kind::boolean")]
    pub enabled: bool,
    /// The resolution a series starts at: `2^schema` buckets per power of
    /// two, each bound `2^(2^-schema)` times the previous (3: 8 an octave, a
    /// factor of 1.09). From -4 to 8. Applied at start only.
    #[serde(deserialize_with = "super::kind::native_schema")]
    pub schema: i8,
    /// The most buckets a series spans, from its lowest populated bucket to
    /// its highest: a value that would widen it past this halves the
    /// series' resolution (its schema minus one, each pair of buckets merged)
    /// until it fits. At least 1. Applied at start only.
    #[serde(deserialize_with = "super::kind::count")]
    pub max_buckets: usize,
}

impl Default for NativeHistograms {
    fn default() -> Self {
        // Schema 3 is client_golang's bucket factor of 1.1 (a quantile
        // within 4.5 %); 160 of its buckets span 20 octaves, a millisecond
        // to 17 minutes or 1 to a million tokens, before the first halving.
        Self {
            enabled: true,
            schema: 3,
            max_buckets: 160,
        }
    }
}

/// How the values of a label a client chooses (`model`, `tenant`) are
/// bounded, so a client sending random names cannot blow up the number of
/// series. Read as `metrics.models`; `metrics.tenants` is read by
/// [`TenantLabels`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LabelBounds {
    /// Only these model names are used as label values; any other is
    /// reported as `other`. Non-empty names, no duplicates. Default: no
    /// allow-list.
    #[serde(deserialize_with = "super::kind::model_names")]
    pub allow: Option<Vec<String>>,
    /// Without `allow`: the first this-many distinct model names that the
    /// upstream answered with a 2xx are used as label values (a name is `other`
    /// until then, so names the upstream refuses never take a slot); later new
    /// names are reported as `other`. At least 1.
    #[serde(deserialize_with = "super::kind::count")]
    pub max_distinct: usize,
}

impl Default for LabelBounds {
    fn default() -> Self {
        Self {
            allow: None,
            max_distinct: 100,
        }
    }
}

/// How values of the `tenant` label are bounded, and where it is used.
/// The file writes the bounds beside `histograms` ([`TenantsRead`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "TenantsRead")]
pub struct TenantLabels {
    /// The bounds, as for models.
    #[serde(flatten)]
    pub bounds: LabelBounds,
    /// Whether the latency and token-count histograms carry the tenant too
    /// (the counters always do).
    pub histograms: bool,
}

/// `metrics.tenants` as the file writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TenantsRead {
    /// Only these tenant names are used as label values; any other is
    /// reported as `other`. Non-empty names, no duplicates. Default: no
    /// allow-list.
    #[serde(deserialize_with = "super::kind::tenant_names")]
    allow: Option<Vec<String>>,
    /// Without `allow`: the first this-many distinct tenant names that the
    /// upstream answered with a 2xx are used as label values (a name is `other`
    /// until then); later new names are reported as `other`. At least 1.
    #[serde(deserialize_with = "super::kind::optional_count")]
    max_distinct: Option<usize>,
    /// Also label the latency and token-count histograms by tenant (the
    /// counters always are). Each tenant then has a histogram series of its own
    /// per route, model and class: many more series. A boolean. Applied at
    /// start only.
    #[serde(deserialize_with = "super::kind::boolean")]
    histograms: bool,
}

impl From<TenantsRead> for TenantLabels {
    fn from(read: TenantsRead) -> Self {
        let defaults = LabelBounds::default();
        Self {
            bounds: LabelBounds {
                allow: read.allow,
                max_distinct: read.max_distinct.unwrap_or(defaults.max_distinct),
            },
            histograms: read.histograms,
        }
    }
}

/// `metrics.buckets`: histogram bucket upper bounds, latencies in seconds,
/// token counts in tokens. Each list is non-empty, of finite numbers
/// greater than zero, strictly increasing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Buckets {
    /// Time to first token, in seconds.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub time_to_first_token: Vec<f64>,
    /// Time until the upstream's response headers arrive, in seconds.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub time_to_response_headers: Vec<f64>,
    /// Time per output token after the first, in seconds.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub time_per_output_token: Vec<f64>,
    /// Time between two consecutive token events, in seconds.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub inter_token_latency: Vec<f64>,
    /// End-to-end request latency, in seconds.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub e2e_request_latency: Vec<f64>,
    /// Output (completion) tokens per request.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub output_tokens: Vec<f64>,
    /// Input (prompt) tokens per request.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub input_tokens: Vec<f64>,
    /// The proxy's own time on a request's path, in seconds.
    #[serde(deserialize_with = "super::kind::bucket_bounds")]
    pub proxy_time: Vec<f64>,
}

impl Default for Buckets {
    fn default() -> Self {
        Self {
            // 1 ms .. 10 min: fast prefix-cached prompts to long queues.
            time_to_first_token: vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            ],
            time_to_response_headers: vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 120.0, 300.0, 600.0,
            ],
            // TPOT and ITL: 0.5 ms .. 10 s.
            time_per_output_token: vec![
                0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
            inter_token_latency: vec![
                0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
            // E2EL: 10 ms .. 1 h.
            e2e_request_latency: vec![
                0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
                45.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
            ],
            output_tokens: vec![
                1.0, 4.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
                16384.0, 32768.0, 65536.0,
            ],
            input_tokens: vec![
                16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
                65536.0, 131072.0, 262144.0, 1048576.0,
            ],
            // The proxy's own time: 50 µs .. 2.5 s (connecting included).
            proxy_time: vec![
                0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                0.25, 0.5, 1.0, 2.5,
            ],
        }
    }
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            namespace: "llm".to_owned(),
            models: LabelBounds::default(),
            tenants: TenantLabels::default(),
            max_usage_tokens: 10_000_000,
            stall_threshold: Duration::from_secs(1),
            slow_reader_share: 0.2,
            buckets: Buckets::default(),
            native_histograms: NativeHistograms::default(),
        }
    }
}
