//! The store's own upkeep and figures: retention (R-OP-5), and what `/metrics`, readiness and
//! the load test read about its writes.

use async_trait::async_trait;

use crate::store::{timings, CqlRequests, Expired, StoreError};

#[async_trait]
pub trait StoreOps: Send + Sync + std::fmt::Debug {
    /// Removes, up to a bounded amount of work per call, what has outlived its window (R-OP-5):
    /// events, dedup marks, quarantine records, DLQ observations and dead letters. A store whose
    /// rows expire by themselves (CQL's TTLs) has nothing to do here.
    async fn expire(&self, now_ms: i64) -> Result<Expired, StoreError>;

    /// Time spent per phase of `Ingest::write_batch` since start (for `/metrics` and the load
    /// test).
    fn write_timings(&self) -> Vec<timings::PhaseTotal> {
        Vec::new()
    }

    /// The requests a CQL store sent since start, by statement (for `/metrics` and the load
    /// test's statements and Paxos rounds per delivered event). Empty for other stores.
    fn cql_requests(&self) -> Vec<CqlRequests> {
        Vec::new()
    }

    /// Why writes fail now, when the store knows it without trying one (the embedded store keeps
    /// its last failed commit until one lands); readiness reports it.
    fn write_failure(&self) -> Option<String> {
        None
    }
}
