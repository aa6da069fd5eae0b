//! The chaos test: the real `tokenmeter serve` binary in front of
//! a `tokenmeter sim` child, 100 concurrent streaming clients, and on a
//! schedule: the upstream killed with SIGKILL and restarted on the same
//! port, the config reloaded with SIGHUP every 200 ms (two valid files and a
//! broken one in turn), a burst of 200 idle and trickling connections
//! pressing `proxy.max_connections`, and one client in ten leaving
//! mid-stream.
//!
//! Afterwards: every metered request sent is counted exactly once in
//! `llm_requests_total` (and has exactly one access-log line), no response
//! carries another request's bytes, each completed stream is byte-identical
//! to what the simulator sends for that request (its per-response `id` and
//! `created` masked), every cut stream is a prefix of it, the proxy is alive
//! with its RSS back near where it started, no counter went down between
//! scrapes, and nothing panicked. The figures are printed at the end (run
//! with `--nocapture` to see them).
//!
//! The scenario (`scenario.rs`) drives the child processes (`processes.rs`),
//! scrapes the admin listener (`metrics.rs`) and sends and checks the
//! requests (`requests.rs`).

mod metrics;
mod processes;
mod requests;
mod scenario;

use std::time::Duration;

/// Concurrent streaming clients.
const CLIENTS: u64 = 100;
/// How long the clients keep starting new requests.
const LOAD: Duration = Duration::from_secs(32);
/// Connections of the burst.
const BURST: u64 = 200;
/// The proxy's connection limit: the 100 clients and the burst exceed it.
const MAX_CONNECTIONS: u64 = 128;
/// The proxy's `request_head_timeout`.
const HEAD_TIMEOUT: Duration = Duration::from_secs(4);
/// The whole scenario, start-up to the last check: it takes under 40 s, but
/// each of its waits is bounded on its own (a client's connect, writes and
/// reads, the burst's caps, the settling), and on a loaded machine several
/// can run to their bounds one after another.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(300);
/// How far the proxy's RSS may stay above where it stood after warm-up.
const RSS_SLACK_KIB: u64 = 64 * 1024;
/// Token schedule of the proxied streams.
const TTFT_MS: u64 = 10;
const ITL_MS: u64 = 8;
