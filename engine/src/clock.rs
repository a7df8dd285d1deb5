//! The engine's clock is the hub's one read of the wall clock (`hub_core::clock`). Pure code takes
//! `now` as an argument; I/O code asks here.

pub use hub_core::clock::now_ms;
