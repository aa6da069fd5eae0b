//! meter
