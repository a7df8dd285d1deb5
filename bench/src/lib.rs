//! criterion benchmarks of the hub's hot pure code live in `benches/`; run them with
//! `cargo bench -p hub-bench`. This crate has no library code of its own.
