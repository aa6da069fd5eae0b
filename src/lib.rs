//! tokenmeter: a transparent metering reverse proxy for LLM inference.
//!
//! The crate is a library with a thin binary (`src/main.rs`), so that tests
//! and benchmarks drive the same code the binary runs. Modules follow the
//! path a request takes; a module may use those listed below it, never one
//! listed above it:
//!
//! - [`app`]: wiring. Binds the sockets, starts the proxy, admin listener and
//!   simulator, handles signals and graceful shutdown.
//! - [`admin`]: the admin listener (`/metrics`, `/healthz`, `/readyz`), on its
//!   own socket, never the proxy's.
//! - [`proxy`]: forwarding. Routing, hop-by-hop headers, the upstream client,
//!   timeouts, errors turned into responses, and the response body that is
//!   forwarded untouched while the meter watches it.
//! - [`metrics`]: the Prometheus registry of the families of [`names`], and
//!   the per-request recorder that the meter reports into.
//! - [`slo`]: judging one finished request against its SLO class (good, bad
//!   or not counted, and which objectives it violated). Pure, no I/O.
//! - [`meter`]: incremental SSE framing and protocol classification (one file
//!   per protocol) turning a byte stream into token events, usage and an
//!   outcome. Knows nothing of Prometheus, HTTP servers or config files.
//! - [`config`]: YAML, validated into immutable runtime types.
//! - [`names`]: the catalogue of every exported metric family (name, kind,
//!   labels, help), used by the exporter, the rules and the dashboard.
//! - [`sim`]: a deterministic OpenAI-compatible upstream used by tests and the
//!   demo; with `x-sim-stamp` it stamps each chunk with its send time.
//! - [`bench`]: `tokenmeter bench`, the load generator and rig that measure
//!   the proxy's cost against the simulator, metering off, and nginx. Uses
//!   `sim` and the binary's `serve` as child processes, never the proxy's
//!   internals.

pub mod admin;
pub mod app;
pub mod config;
pub mod dashboard;
pub mod metrics;
pub mod proxy;

/// Entry points of the fuzz targets (`fuzz/`), built only with `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz {
    pub use crate::proxy::fuzz_response as h1_response;
}
