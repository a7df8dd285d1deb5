//! Fuzz target: see `hub_fuzz::verdict`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hub_fuzz::verdict(data));
