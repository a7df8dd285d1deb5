//! The forensic records: quarantined records and producers' dead-letter observations.

use async_trait::async_trait;

use crate::store::{DlqObservation, ForensicsFilter, Page, QuarantineRecord, StoreError};

#[async_trait]
pub trait Forensics: Send + Sync + std::fmt::Debug {
    /// Quarantine records, oldest first, starting at `cursor`.
    async fn list_quarantine(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<QuarantineRecord>, StoreError>;

    /// Records a producer dead-letter observation (idempotent on topic/partition/offset).
    async fn record_dlq(&self, obs: Vec<DlqObservation>) -> Result<(), StoreError>;

    /// DLQ observations, oldest first, starting at `cursor`.
    async fn list_dlq(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<DlqObservation>, StoreError>;
}
