//! `NdjsonFramer` on any bytes, fed whole and in pieces (input layout:
//! `[cut, cut, limit, wire...]`, see `tokenmeter_fuzz::framer_target`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use meter::ndjson::NdjsonFramer;

fuzz_target!(|data: &[u8]| tokenmeter_fuzz::framer_target::<NdjsonFramer>(data));
