//! Fuzz target: see `hub_fuzz::request_headers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hub_fuzz::request_headers(data));
