//! The telemetry crate's tests from outside, through its public face: one
//! test binary, one module per subject, so the crate links once.
//!
//! - `fixtures`: each server's page as the server writes it
//!   (`tests/data/`), whole and cut at every byte offset;
//! - `props`: whatever the bytes, parsing and reading end without panic,
//!   within the limits.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on purpose.

mod fixtures;
mod props;
