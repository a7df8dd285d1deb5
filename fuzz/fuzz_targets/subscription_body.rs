//! Fuzz target: see `hub_fuzz::subscription_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hub_fuzz::subscription_body(data));
