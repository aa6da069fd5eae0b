//! The integration tests: one test binary, `it`, one module per subject,
//! all on real sockets, with the shared rig in `common`. Their data stays
//! beside this folder: `tests/data/`, `tests/compat/`, `tests/page/` and
//! `tests/otlp/`.
//!
//! A test that runs an external tool says so at the end of its name:
//! `_needs_tool_<tool>`, or `_needs_tools_<tool>_and_<tool>` for two; the
//! tools are `promtool`, `prometheus`, `chromium` and `node` (the admin
//! page's browser test), `uvicorn` and `aiohttp` (Python server stacks),
//! `otlp_receiver` (Python with `opentelemetry-proto` and `grpcio`),
//! `grpc_tools` (Python's `grpcio-tools`, whose protoc compiles the
//! client model's `metrics.proto` for the protobuf exposition's test),
//! `hadolint`, `yamllint`, `kubernetes_validate`, `docker_compose`,
//! `llama_server` (llama.cpp's server, built by `tests/llamacpp/build.sh`,
//! with Python's `gguf` for its tiny model), and `duckdb` (Python's `duckdb`,
//! which runs docs/operations.md's join over access-log files).
//! `.ci/run` installs them all (the Python ones into the virtual
//! environment `target/venv`, whose `bin` it puts first on `PATH`, where
//! every test finds its tool) and the README's test command runs every
//! test: none is ignored or behind a feature. Without the tools, the
//! README's other command runs the rest. (What every Linux system has,
//! `kill` and util-linux's `prlimit`, does not count.)
//!
//! This binary alone is `cargo build && cargo test --test it`: `bench.rs`
//! runs `tokenmeter bench`, which runs the `tokenmeter-bench` binary from
//! beside `tokenmeter`, and `cargo test --test it` builds the root package
//! only. `cargo build` builds both (the workspace's default members), as
//! does the README's command, for `crates/bench`'s own test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on purpose.

mod common;

mod attribution;
mod bench;
mod capacity;
mod chaos;
mod chargeback;
mod chargeback_fleet;
mod chargeback_reload;
mod chargeback_sets;
mod chargeback_windows;
mod cli;
mod commands;
mod compat;
mod config;
mod deploy;
mod exposition;
mod forwarding;
mod hardening;
mod layout;
mod listeners_tls;
mod live_itl;
mod llamacpp;
mod llm_d;
mod metering;
mod native;
mod operations;
mod otlp;
mod otlp_names;
mod outcomes;
mod page;
mod prometheus;
mod protocols;
mod reload;
mod sessions;
mod sessions_agents;
mod sessions_flood;
mod sim;
mod slo;
mod slo_tools;
mod telemetry;
mod tls;
mod transparency;
mod turns;
