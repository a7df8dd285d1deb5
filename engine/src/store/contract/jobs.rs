//! Delivery jobs: paged by due time per queue, leased and settled in steps, dead-lettered and
//! replayed, with each subscription's statistics.

use async_trait::async_trait;
use uuid::Uuid;

use crate::store::{
    DeadLetter, DeliveryStats, DeliveryStep, DuePage, DueQuery, Lane, StepOutcome, StoreError,
};

#[async_trait]
pub trait Jobs: Send + Sync + std::fmt::Debug {
    /// The jobs of `query.lanes` due at `query.now_ms`, within its limits ([`DueQuery`]). The
    /// page says whether a limit left due jobs (not in `query.skip`) unread.
    async fn due_jobs(&self, query: DueQuery) -> Result<DuePage, StoreError>;

    /// [`Jobs::due_jobs`] read on the caller's thread, when the store can answer without
    /// waiting (no lock a writer holds, no I/O): a shard then pages without a hop to tokio and
    /// back (issue 17). `None` when it cannot, and the caller asks `due_jobs`. Callable from a
    /// shard. A store that always waits on something answers `None`.
    fn due_jobs_at_once(&self, _query: &DueQuery) -> Option<DuePage> {
        None
    }

    /// One delivery step, atomically: records outcomes (retry times, dead letters, statistics,
    /// the failure streak), then leases the jobs to start and returns them with their events.
    async fn delivery_step(&self, step: DeliveryStep) -> Result<StepOutcome, StoreError>;

    /// A subscription's dead letters, oldest job id first, after `cursor`.
    async fn dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        cursor: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, Option<u128>), StoreError>;

    /// Turns dead letters back into jobs due at `now_ms` with a fresh attempt budget: all of the
    /// subscription's, or only `jobs`. Returns how many were replayed.
    async fn replay_dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        jobs: Option<Vec<u128>>,
        now_ms: i64,
    ) -> Result<u64, StoreError>;

    /// A subscription's delivery statistics (health, R-CP-12).
    async fn delivery_stats(
        &self,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<DeliveryStats, StoreError>;

    /// How many jobs wait (all lanes), for metrics and the load test.
    async fn pending_jobs(&self) -> Result<u64, StoreError>;

    /// The caller's next `due_jobs` of these lanes must read every queue: jobs were left to the
    /// store that a store keeping queues it knows to be quiet could not know of (ingest could
    /// not hand them over, or the lane could not take them). In memory, cheap; callable from a
    /// shard. A store that reads every queue on every page has nothing to do.
    fn wake_pages(&self, _lanes: &[Lane]) {}
}
