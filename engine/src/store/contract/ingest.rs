//! What ingest writes: a unit's ownership, its batches (dedup, seq, inbox, quarantine, jobs)
//! and its durable offset.

use std::sync::Arc;

use async_trait::async_trait;

use crate::store::{BatchOutcome, Fence, IngestBatch, StoreError, UnitId};

#[async_trait]
pub trait Ingest: Send + Sync + std::fmt::Debug {
    /// Takes ownership of a unit for a new generation (one higher than any before) and returns it
    /// with the unit's durable next offset.
    async fn claim_unit(&self, unit: &UnitId) -> Result<(Fence, Option<i64>), StoreError>;

    /// Persists one unit's batch: dedup on `(tenant, id)` (first write wins), a `seq` per new
    /// event, the inbox rows, the quarantine rows (once per Kafka position) and the unit's next
    /// offset. When it returns
    /// `Ok`, all of it is durable. Refused with `Fenced` when `fence` is stale.
    async fn write_batch(
        &self,
        unit: &UnitId,
        fence: Fence,
        batch: Arc<IngestBatch>,
    ) -> Result<BatchOutcome, StoreError>;

    /// The unit's durable next offset, if anything was ever written for it.
    async fn unit_offset(&self, unit: &UnitId) -> Result<Option<i64>, StoreError>;

    /// Records event keys seen in accepted events `(key, origin, major)` for a control plane in
    /// another process (R-CP-15). The embedded store has no such reader: a no-op.
    async fn record_catalog_keys(
        &self,
        keys: Vec<(String, String, u32)>,
    ) -> Result<(), StoreError> {
        let _ = keys;
        Ok(())
    }

    /// Whether `claim_unit`, `write_batch` and `Jobs::delivery_step` may be awaited on any
    /// executor (a shard included): they only queue their write for another thread and await its
    /// answer, never blocking the caller's thread nor needing tokio. The shards then call them
    /// directly, with no hop through the tokio bridge (issue 17). False unless a store says so.
    fn writes_anywhere(&self) -> bool {
        false
    }

    /// How long a unit's offset may trail its durable batches while the unit's records keep
    /// coming, when moving it costs the store a round of its own (CQL: a Paxos round per
    /// batch). The shard then writes a batch without `next_offset` while the unit's offset moved
    /// less than this long ago, commits to Kafka only what an offset move made durable, and
    /// moves what is left at most this long after (`ingest/unit_advance.rs`). `None` (the
    /// default): every batch moves it, as part of the same durable write.
    fn unit_advance_every(&self) -> Option<std::time::Duration> {
        None
    }

    /// The least time between the starts of a shard's ingest passes, when a batch costs the store
    /// rounds per tenant whatever its size (CQL): a pass that waits for company pays fewer per
    /// event. `None` (the default): a pass starts as soon as the last is written.
    fn pass_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether an ingest batch may write its new jobs already leased (`IngestBatch::
    /// lease_until_ms`), their first start counted, so a lane starts them from the hand-off
    /// without a lease step of its own (issue 17: one sync per event, not two). A store says so
    /// only when its leases cannot strand a job: one process holds it and a crash's leases are
    /// released when it opens (the log), or a lease counts only for the process that took it
    /// and the job's row stays where the lane's next holder pages it at once (CQL). It reports
    /// what it did in `BatchOutcome::jobs_leased`. False unless a store says so.
    fn leases_at_ingest(&self) -> bool {
        false
    }
}
