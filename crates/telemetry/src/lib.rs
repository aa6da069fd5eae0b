//! Reading the pages an inference server and an NVIDIA DCGM exporter serve
//! on their Prometheus endpoints, so that tokenmeter can re-export their
//! figures under its own names, whatever the server.
//!
//! Three layers, each a pure function of the one below:
//!
//! - [`parse()`]: the text exposition format (0.0.4, and OpenMetrics' text
//!   as far as samples go) into a [`Page`] of [`Sample`]s, bounded by
//!   [`Limits`], refusing garbage with a [`ParseError`];
//! - [`read_engine`]: a server's page into [`EngineFigures`] per model
//!   (vLLM, SGLang, TGI, llama.cpp, told apart by their names);
//! - [`read_gpus`]: a DCGM exporter's page into its [`Gpu`]s, which
//!   [`GpuReading::aggregate`] sums up for the GPUs a [`GpuSelector`]
//!   picks.
//!
//! This crate does no I/O, reads no clock and knows no registry: the
//! scraper that fetches the pages (and bounds their size) and the families
//! that export the figures belong to the product. Nothing here panics,
//! whatever the bytes; a figure a page does not hold is `None`, never 0.

pub mod engine;
pub mod gpu;
pub mod parse;

pub use engine::{EngineFigures, EngineReading, ModelReading, Server, detect, read_engine};
pub use gpu::{
    Gpu, GpuAggregate, GpuEnergy, GpuFigures, GpuLabel, GpuReading, GpuSelector, Spread, read_gpus,
};
pub use parse::{Limits, MetricType, Page, ParseError, Sample, Syntax, parse};
