//! Fuzz target: see `hub_fuzz::endpoint`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hub_fuzz::endpoint(data));
