//! Streaming Hub engine.
//!
//! Data flow, in module order: `ingest` (Kafka or HTTP records) → `verdict` (pure: accept, drop,
//! quarantine) → `store` (dedup, `seq`, inbox; one durable unit per partition batch) → offset
//! commit. The `runtime` module holds the shard-per-core executors and the tokio bridge.
//!
//! Invariant (no loss): an offset is committed only after everything derived from its record is
//! durable.

pub mod runtime;
pub mod store;
pub mod verdict;
