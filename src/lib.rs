//! tokenmeter: a transparent metering reverse proxy for LLM inference.
//!
//! The product's crate: a library with a thin binary (`src/main.rs`), so
//! that tests drive the same code the binary runs. Modules follow the path
//! a request takes; a module may use those listed below it, never one
//! listed above it, and the workspace's crates (`crates/`) below them all:
//!
//! - [`app`]: wiring. Binds the sockets, starts the proxy, admin listener and
//!   simulator, handles signals and graceful shutdown.
//! - [`admin`]: the admin listener (`/metrics`, `/healthz`, `/readyz`, `/slo`,
//!   the live page), on its own socket, never the proxy's.
//! - [`in_force`]: what is in force: the configuration, the forwarding
//!   service built from it and its scrapes, one snapshot that `app` swaps
//!   whole on a reload and everyone else reads.
//! - [`proxy`]: forwarding. Routing, hop-by-hop headers, the upstream
//!   connections (`h1` for HTTP/1.1, hyper for HTTP/2), timeouts, errors
//!   turned into responses, and the response body that is forwarded
//!   untouched while the meter watches it.
//! - [`observe`]: everything about a request apart from forwarding it: the
//!   recorder the meter reports into and the fan-out of its end to the
//!   Prometheus metrics, the live SLO windows, the access log and the
//!   OpenTelemetry export; trace context and tenants.
//! - [`scrape`]: each route's inference server and GPUs, their own
//!   Prometheus pages scraped on an interval off the forwarding path, and
//!   their latest fresh readings and failure counts.
//! - [`dial`]: how an HTTP server is reached (host, port, TLS client and
//!   server name; TCP, then TLS), for an upstream and a scraped page alike.
//! - [`dashboard`]: the Grafana dashboard, built from the SLO classes.
//! - [`config`]: YAML, validated into immutable runtime types.
//!
//! The crates: `h1` (the HTTP/1.1 upstream client), `slo` (classes,
//! judging, live windows, rules), `meter` (bytes of a response → token
//! events, usage, outcome), `names` (the metric catalogue), `telemetry`
//! (reading an engine's and a DCGM exporter's pages), `sim` (the
//! simulator of the tests, the demo and the benchmark), and `bench` (the
//! benchmark rig, the `tokenmeter-bench` binary, outside the product).

pub mod admin;
pub mod app;
pub mod config;
pub mod dashboard;
pub mod dial;
pub mod in_force;
pub mod observe;
pub mod proxy;
pub mod scrape;
