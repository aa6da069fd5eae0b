//! The upstream HTTP/1.1 response reader (`src/proxy/h1/`): response head
//! parser, then the body decoder its framing chooses (length, chunked with
//! trailers, close-delimited), fed in reads. Input layout: `[cut, cut,
//! wire...]` (see `tokenmeter::fuzz::h1_response`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tokenmeter::fuzz::h1_response(data));
