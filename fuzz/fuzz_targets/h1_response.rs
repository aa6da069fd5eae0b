//! The upstream HTTP/1.1 response reader (`crates/h1/`): response head
//! parser, then the body decoder its framing chooses (length, chunked with
//! trailers, close-delimited), fed in reads. Input layout: `[cut, cut,
//! wire...]` (see `h1::fuzz_response`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| h1::fuzz_response(data));
