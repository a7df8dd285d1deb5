//! The embedded durable store for a single node: redb (a copy-on-write B-tree with ACID
//! transactions) in one file, no external process.
//!
//! Each `write_batch` lands in one redb write transaction committed with fsync, shared with the
//! other batches waiting at that moment (`group_commit`): dedup marks, `seq` numbers, inbox rows,
//! quarantine rows and the unit's offset become durable together or not at all. redb has one
//! writer at a time, so `seq` is allocated and made visible in the same transaction and a reader
//! can never see `seq = n` before `seq < n` (R-IN-8).

mod delivery;
#[cfg(test)]
mod full_disk_tests;
mod group_commit;
mod retention;
mod tables;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use hub_core::ownership::EngineOwnership;
use hub_core::redb_handle::{DbHandle, StorageFailure};
use redb::{Database, ReadableTable};
use uuid::Uuid;

use super::codec::{decode, encode};
use super::timings::{PhaseTimings, PhaseTotal};
use super::{
    BatchOutcome, DeadLetter, DeliveryStats, DeliveryStep, DlqObservation, DuePage, DueQuery,
    EventLog, Fence, Forensics, ForensicsFilter, Ingest, IngestBatch, Jobs, LaneHolds, Page,
    QuarantineRecord, StepOutcome, StoreError, StoreOps, StoredEvent, UnitId,
};
use crate::store::unavailable;
use tables::*;

/// The embedded store. Cheap to clone; all clones share one database file.
#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<DbHandle>,
    /// One phase: the whole fsynced transaction of a group of batches.
    timings: Arc<PhaseTimings>,
    commits: Arc<group_commit::Committer>,
    retention: super::Retention,
    /// Where the next retention pass goes on walking dead letters.
    dead_letter_cursor: Arc<std::sync::Mutex<retention::DeadLetterCursor>>,
    /// The engine's ownership report: one process writes and reads it, so it stays in memory.
    ownership: Arc<std::sync::Mutex<Option<EngineOwnership>>>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedStore")
    }
}

impl StorageFailure for StoreError {
    fn unavailable(why: String) -> Self {
        StoreError::Unavailable(why)
    }

    fn is_storage_failure(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    fn reason(&self) -> String {
        match self {
            StoreError::Unavailable(why) => why.clone(),
            other => other.to_string(),
        }
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the database file at `path`, creating its directory.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(unavailable)?;
        }
        let db = Database::create(path).map_err(unavailable)?;
        let txn = db.begin_write().map_err(unavailable)?;
        create_tables(&txn).map_err(unavailable)?;
        txn.commit().map_err(unavailable)?;
        let released = delivery::release_leases(&db, crate::clock::now_ms())?;
        if released > 0 {
            tracing::info!(released, "released delivery leases of the previous run");
        }
        let db = Arc::new(DbHandle::new(path, db));
        let timings = Arc::new(PhaseTimings::new(&["group_transaction"]));
        let commits = Arc::new(group_commit::start(db.clone(), timings.clone())?);
        Ok(Self {
            db,
            timings,
            commits,
            retention: super::Retention::default(),
            dead_letter_cursor: Arc::default(),
            ownership: Arc::default(),
        })
    }

    /// The windows `expire` keeps rows for (default: `Retention::default()`).
    pub fn with_retention(mut self, retention: super::Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Runs blocking redb work off the async threads.
    async fn blocking<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    {
        let handle = self.db.clone();
        // On the blocking thread: a reopen holds the handle for a moment.
        tokio::task::spawn_blocking(move || handle.run(work))
            .await
            .map_err(unavailable)?
    }
}

#[async_trait]
impl Ingest for EmbeddedStore {
    async fn claim_unit(&self, unit: &UnitId) -> Result<(Fence, Option<i64>), StoreError> {
        let unit = unit.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let claimed = {
                let mut units = txn.open_table(UNITS).map_err(unavailable)?;
                let key = (unit.topic.as_str(), unit.partition);
                let (generation, next) = units
                    .get(key)
                    .map_err(unavailable)?
                    .map_or((0, -1), |g| g.value());
                units
                    .insert(key, (generation + 1, next))
                    .map_err(unavailable)?;
                (
                    Fence {
                        generation: generation + 1,
                    },
                    (next >= 0).then_some(next),
                )
            };
            txn.commit().map_err(unavailable)?;
            Ok(claimed)
        })
        .await
    }

    async fn write_batch(
        &self,
        unit: &UnitId,
        fence: Fence,
        batch: Arc<IngestBatch>,
    ) -> Result<BatchOutcome, StoreError> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let job = group_commit::Work::Ingest {
            unit: unit.clone(),
            fence,
            batch,
            reply,
        };
        self.commits.submit(job)?;
        outcome
            .await
            .map_err(|_| StoreError::Unavailable("the embedded committer stopped".into()))?
    }

    async fn unit_offset(&self, unit: &UnitId) -> Result<Option<i64>, StoreError> {
        let unit = unit.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let units = txn.open_table(UNITS).map_err(unavailable)?;
            let next = units
                .get((unit.topic.as_str(), unit.partition))
                .map_err(unavailable)?;
            Ok(next.map(|g| g.value().1).filter(|n| *n >= 0))
        })
        .await
    }
}

#[async_trait]
impl EventLog for EmbeddedStore {
    async fn read_events(
        &self,
        tenant: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let events = txn.open_table(EVENTS).map_err(unavailable)?;
            let start = after.saturating_add(1);
            let range = events
                .range((tenant.as_str(), start)..=(tenant.as_str(), u64::MAX))
                .map_err(unavailable)?;
            let mut out = Vec::with_capacity(limit.min(1024));
            for row in range.take(limit) {
                let (_, value) = row.map_err(unavailable)?;
                out.push(decode::<StoredEvent>(value.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn pull_position(&self, tenant: &str, subscription: Uuid) -> Result<u64, StoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(PULL_POSITIONS).map_err(unavailable)?;
            let row = table
                .get((tenant.as_str(), subscription.as_u128()))
                .map_err(unavailable)?;
            Ok(row.map_or(0, |g| g.value()))
        })
        .await
    }

    async fn advance_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| {
            // One writer at a time: the read and the write below are one compare and set.
            let txn = db.begin_write().map_err(unavailable)?;
            let moved = {
                let mut table = txn.open_table(PULL_POSITIONS).map_err(unavailable)?;
                let key = (tenant.as_str(), subscription.as_u128());
                let now = table
                    .get(key)
                    .map_err(unavailable)?
                    .map_or(0, |g| g.value());
                if now == from {
                    table.insert(key, to).map_err(unavailable)?;
                }
                now == from
            };
            txn.commit().map_err(unavailable)?;
            Ok(moved)
        })
        .await
    }
}

#[async_trait]
impl Forensics for EmbeddedStore {
    async fn list_quarantine(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<QuarantineRecord>, StoreError> {
        let filter = filter.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(QUARANTINE).map_err(unavailable)?;
            scan_page(
                table.range(cursor..).map_err(unavailable)?,
                limit,
                |r: &QuarantineRecord| filter.keeps_quarantined(r),
            )
        })
        .await
    }

    async fn record_dlq(&self, obs: Vec<DlqObservation>) -> Result<(), StoreError> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut table = txn.open_table(DLQ).map_err(unavailable)?;
                let mut seen = txn.open_table(DLQ_SEEN).map_err(unavailable)?;
                let mut counters = txn.open_table(COUNTERS).map_err(unavailable)?;
                let mut next = counters
                    .get(DLQ_NEXT)
                    .map_err(unavailable)?
                    .map_or(0, |g| g.value());
                for o in &obs {
                    let key = (o.topic.as_str(), o.partition, o.offset);
                    if seen.get(key).map_err(unavailable)?.is_some() {
                        continue;
                    }
                    seen.insert(key, next).map_err(unavailable)?;
                    table
                        .insert(next, encode(o).as_slice())
                        .map_err(unavailable)?;
                    next += 1;
                }
                counters.insert(DLQ_NEXT, next).map_err(unavailable)?;
            }
            txn.commit().map_err(unavailable)
        })
        .await
    }

    async fn list_dlq(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<DlqObservation>, StoreError> {
        let filter = filter.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(DLQ).map_err(unavailable)?;
            scan_page(
                table.range(cursor..).map_err(unavailable)?,
                limit,
                |o: &DlqObservation| filter.keeps_observation(o),
            )
        })
        .await
    }
}

#[async_trait]
impl Jobs for EmbeddedStore {
    async fn due_jobs(&self, query: DueQuery) -> Result<DuePage, StoreError> {
        self.blocking(move |db| delivery::due_jobs(db, &query))
            .await
    }

    async fn delivery_step(&self, step: DeliveryStep) -> Result<StepOutcome, StoreError> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        self.commits
            .submit(group_commit::Work::Step { step, reply })?;
        outcome
            .await
            .map_err(|_| StoreError::Unavailable("the embedded committer stopped".into()))?
    }

    async fn dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        cursor: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, Option<u128>), StoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| delivery::dead_letters(db, &tenant, subscription, cursor, limit))
            .await
    }

    async fn replay_dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        jobs: Option<Vec<u128>>,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let n = delivery::replay(&txn, &tenant, subscription, jobs.as_deref(), now_ms)?;
            txn.commit().map_err(unavailable)?;
            Ok(n)
        })
        .await
    }

    async fn delivery_stats(
        &self,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<DeliveryStats, StoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| delivery::stats(db, &tenant, subscription))
            .await
    }

    async fn pending_jobs(&self) -> Result<u64, StoreError> {
        self.blocking(delivery::pending).await
    }
}

#[async_trait]
impl LaneHolds for EmbeddedStore {
    async fn publish_ownership(&self, report: &EngineOwnership) -> Result<(), StoreError> {
        if let Ok(mut kept) = self.ownership.lock() {
            *kept = Some(report.clone());
        }
        Ok(())
    }

    async fn ownership_reports(&self) -> Result<Vec<EngineOwnership>, StoreError> {
        Ok(self
            .ownership
            .lock()
            .ok()
            .and_then(|kept| kept.clone())
            .into_iter()
            .collect())
    }
}

#[async_trait]
impl StoreOps for EmbeddedStore {
    async fn expire(&self, now_ms: i64) -> Result<super::Expired, StoreError> {
        let (retention, cursor) = (self.retention, self.dead_letter_cursor.clone());
        self.blocking(move |db| {
            let mut cursor = cursor.lock().unwrap_or_else(|e| e.into_inner());
            retention::expire(db, retention, now_ms, &mut cursor)
        })
        .await
    }

    fn write_timings(&self) -> Vec<PhaseTotal> {
        self.timings.snapshot()
    }

    fn write_failure(&self) -> Option<String> {
        self.db.write_failure()
    }
}

/// Reads rows from a cursor, keeps those `keep` accepts, stops at `limit`.
fn scan_page<'a, T, R>(
    range: R,
    limit: usize,
    keep: impl Fn(&T) -> bool,
) -> Result<Page<T>, StoreError>
where
    T: serde::de::DeserializeOwned,
    R: Iterator<
        Item = Result<
            (
                redb::AccessGuard<'a, u64>,
                redb::AccessGuard<'a, &'static [u8]>,
            ),
            redb::StorageError,
        >,
    >,
{
    let mut items = Vec::new();
    for row in range {
        let (key, value) = row.map_err(unavailable)?;
        if items.len() == limit {
            return Ok(Page {
                items,
                next_cursor: Some(key.value()),
            });
        }
        let item: T = decode(value.value())?;
        if keep(&item) {
            items.push(item);
        }
    }
    Ok(Page {
        items,
        next_cursor: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_op_2_embedded_store_passes_the_conformance_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(&dir.path().join("hub.redb")).expect("open");
        let store: Arc<dyn crate::store::Store> = Arc::new(store);
        crate::store::conformance::run_all(store.clone(), "embedded").await;
        crate::store::conformance_jobs::run_all(store, "embedded", 60).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_op_5_embedded_store_expires_everything_after_its_window() {
        use crate::store::conformance_retention as retention;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(&dir.path().join("hub.redb"))
            .expect("open")
            .with_retention(retention::short_windows());
        retention::everything_expires_after_its_window(Arc::new(store), "embedded", 7).await;
    }

    #[tokio::test]
    async fn r_in_7_embedded_store_keeps_everything_across_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hub.redb");
        let unit = UnitId::new("lerian.streaming.lender", 0);
        let ev = crate::store::conformance::event("t-1", "x.created");
        {
            let store = EmbeddedStore::open(&path).expect("open");
            let (fence, _) = store.claim_unit(&unit).await.expect("claim");
            let batch = IngestBatch {
                events: vec![ev.clone()],
                quarantined: vec![],
                next_offset: Some(7),
                ..Default::default()
            };
            store
                .write_batch(&unit, fence, Arc::new(batch))
                .await
                .expect("write");
        }
        let store = EmbeddedStore::open(&path).expect("reopen");
        assert_eq!(store.unit_offset(&unit).await.expect("offset"), Some(7));
        let read = store.read_events("t-1", 0, 10).await.expect("read");
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].event, ev);
    }
}
