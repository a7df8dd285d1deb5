//! Streaming Hub engine.
//!
//! Data flow, in module order: `ingest` (Kafka or HTTP records) → `verdict` (pure: accept, drop,
//! quarantine) → `store` (dedup, `seq`, inbox and the jobs of every match; one durable unit per
//! partition batch) → offset commit → `delivery` (lanes per shard: tenant-fair scheduling, one
//! attempt per lease, retries, dead letters). `runtime` holds the shard-per-core executors and the
//! tokio bridge; `hub` wires the stages; `api` is the HTTP surface (ingest, admin, metrics) and
//! `reader` what the control plane's `/v1` reads of the store; `config` and `telemetry` are what
//! operators touch.
//!
//! Invariant (no loss): an offset is committed only after everything derived from its record is
//! durable.

pub mod api;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod fast_hash;
pub mod hub;
pub mod ingest;
pub mod matching;
pub mod reader;
pub mod readiness;
pub mod runtime;
pub mod store;
pub mod telemetry;
pub mod verdict;
