//! The integration tests: one test binary (`cargo test --test it`), one
//! module per subject, all on real sockets, with the shared rig in
//! `common`. Their data stays beside this folder: `tests/data/`,
//! `tests/compat/`, `tests/page/` and `tests/otlp/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on purpose.

mod common;

mod attribution;
mod bench;
mod chaos;
mod cli;
mod compat;
mod config;
mod deploy;
mod forwarding;
mod hardening;
mod metering;
mod otlp;
mod outcomes;
mod page;
mod prometheus;
mod protocols;
mod reload;
mod sim;
mod slo;
mod tls;
mod transparency;
