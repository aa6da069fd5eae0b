//! The meter's tests from outside the crate, through its public face: one
//! test binary, one module per subject, so the crate links once.
//!
//! - `api`: how a request's API is told from its path, how the content type
//!   decides the framing, and what non-streamed bodies yield;
//! - `fixtures`: every captured stream of `tests/data/streams`, whole and
//!   cut at every byte offset, against its `expected.yaml`;
//! - `props`: property tests of metering, for every protocol.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on purpose.

mod api;
mod fixtures;
mod props;
