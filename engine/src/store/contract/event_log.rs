//! A tenant's log as its readers see it: events in `seq` order, and the read positions of pull
//! subscriptions.

use async_trait::async_trait;
use uuid::Uuid;

use crate::store::{StoreError, StoredEvent};

#[async_trait]
pub trait EventLog: Send + Sync + std::fmt::Debug {
    /// A tenant's events with `seq > after`, in `seq` order, at most `limit`. A reader never
    /// skips an event: once `seq = n` was returned, no `seq < n` appears later (R-IN-8).
    async fn read_events(
        &self,
        tenant: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// A pull subscription's durable read position: the last `seq` handed to a reader that read
    /// without `after` (0 before the first read).
    async fn pull_position(&self, tenant: &str, subscription: Uuid) -> Result<u64, StoreError>;

    /// Moves a pull subscription's read position from `from` to `to`, only if it is still
    /// `from` (compare and set): `false` when another reader moved it first, and then nothing
    /// changed. Readers sharing a subscription thus get disjoint pages (R-CP-14).
    async fn advance_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError>;
}
