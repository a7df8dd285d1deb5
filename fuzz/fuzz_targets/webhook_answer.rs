//! Fuzz target: see `hub_fuzz::webhook_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hub_fuzz::webhook_answer(data));
