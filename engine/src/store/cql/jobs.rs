//! Jobs in the CQL store: created with their event's batch (R-DI-1), leased and settled.
//!
//! Without multi-partition transactions, a job lives in one row of its queue's partition
//! (`queued_jobs`: the row's key is the job's place in the due order, its value a [`StoredJob`]),
//! so every change of a job is one write to one partition and none can be half done:
//!
//! - **create**: the job rows, then an announcement of each row written late (`late_rows.rs`: a
//!   replay's, a stalled batch's, which may lie below the floor its queue is paged from), then the
//!   queue's `touched` (unless this process touched it in the last 20 s: `queue_touches.rs`) —
//!   after the event's append and before the unit's offset moves (a committed offset implies its
//!   jobs exist). Creation rows are written `USING TIMESTAMP` of the event's dedup claim, so a
//!   replay writing them again can never undo a later lease, move or delete (a newer timestamp
//!   always wins). A replayed event's jobs take the stored copy's `received_at_ms`, so a replay
//!   writes byte for byte the rows of the first attempt: rows of equal timestamp and different
//!   keys would be two jobs.
//! - **lease**: the row rewritten in place: `starts + 1`, the lease's end, and who leased it.
//!   Paging passes over a job leased by this process until the lease ends. A lease taken by
//!   another process (a lane's earlier holder) counts for nothing: the job is due again at once,
//!   its lapsed start counted as a recovery (R-DI-8).
//! - **move** (retry, defer): one batch of the partition writes the row at the new due time and
//!   deletes the old one; the server applies it as one mutation.
//! - **remove** (delivered, cancelled, dead-lettered): dead letter first if any, then the row.
//!
//! The process holding a lane is the only writer of its jobs (ingest only creates), so it keeps
//! the jobs it wrote or paged in memory ([`Known`]), and a step acts only on those: a job it does
//! not know was settled meanwhile or belongs to another holder, and a page finds it if it is still
//! due.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::claim::Appended;
use super::concurrently::all;
use super::job_events::EventAt;
use super::job_rows::{by_queue, job_part, RowOp};
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::{InboxEvent, IngestBatch, JobRecord, Lane, StoreError};

/// A replay rewrites an own claim's jobs only this long after the claim: long before the job
/// tables forget their tombstones (`gc_grace_seconds`, one hour), so a rewrite never revives a
/// job that was delivered and deleted.
const REWRITE_WINDOW_MS: i64 = 30 * 60_000;

/// A job id as stored: 16 bytes, big-endian (clustering order is the id's order).
pub(super) fn id_key(id: u128) -> [u8; 16] {
    id.to_be_bytes()
}

pub(super) fn id_of(key: &[u8]) -> Result<u128, StoreError> {
    let bytes: [u8; 16] = key
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("job id of {} bytes", key.len())))?;
    Ok(u128::from_be_bytes(bytes))
}

/// A lane as CQL stores it (`int`); lanes stay far below `i32::MAX`.
pub(super) fn lane_i32(lane: Lane) -> i32 {
    i32::try_from(lane).unwrap_or(i32::MAX)
}

/// A job as the `jobs` row keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StoredJob {
    /// The job; while leased, `due_at_ms` is the lease's end.
    pub record: JobRecord,
    /// The due time of the job's row in `job_due` (a lease does not move it).
    pub row_due_ms: i64,
    /// The process that took the current lease, if leased.
    pub leased_by: Option<Uuid>,
}

impl StoredJob {
    pub fn new(record: JobRecord) -> Self {
        Self {
            row_due_ms: record.due_at_ms,
            record,
            leased_by: None,
        }
    }

    /// Whether `owner` holds a live lease on it at `now`.
    pub fn leased_by(&self, owner: Uuid, now: i64) -> bool {
        self.leased_by == Some(owner) && self.record.due_at_ms > now
    }
}

/// Jobs this process paged or wrote, as stored (see the module's last paragraph). Bounded: past
/// `KNOWN_MAX` it forgets the jobs that are not under a running lease (a page finds them again).
#[derive(Debug, Default)]
pub(super) struct Known(Mutex<HashMap<u128, StoredJob>>);

const KNOWN_MAX: usize = 100_000;

impl Known {
    pub fn get(&self, id: u128) -> Option<StoredJob> {
        self.0.lock().ok().and_then(|k| k.get(&id).cloned())
    }

    pub fn put(&self, job: StoredJob) {
        if let Ok(mut k) = self.0.lock() {
            if k.len() >= KNOWN_MAX {
                let now = now_ms();
                k.retain(|_, j| j.leased_by.is_some() && j.record.due_at_ms > now);
                if k.len() >= KNOWN_MAX / 2 {
                    k.clear(); // leases beyond any lane's bound: start over rather than grow
                }
            }
            k.insert(job.record.id, job);
        }
    }

    pub fn forget(&self, id: u128) {
        if let Ok(mut k) = self.0.lock() {
            k.remove(&id);
        }
    }

    /// After `lane` changed hands: another process may have written its jobs.
    pub fn forget_lane(&self, lane: Lane) {
        if let Ok(mut k) = self.0.lock() {
            k.retain(|_, j| j.record.lane != lane);
        }
    }
}

impl CqlStore {
    /// Writes the jobs of a batch's appended events (one per matching subscription); true when
    /// it wrote them leased by this process, as the batch asked (`IngestBatch::lease_until_ms`).
    /// It does so only for first creations in a lane this process holds: a replay writes the
    /// rows its first attempt wrote, and a lease in a lane held elsewhere counts for nothing.
    /// The row stays where an unleased job's would be, as after a lease step: a lane's next
    /// holder finds the job at once.
    pub(super) async fn create_jobs(
        &self,
        batch: &IngestBatch,
        appended: &[Appended],
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let first_received = self.first_received(batch, appended, now).await?;
        let lease = batch.lease_until_ms.filter(|_| {
            appended
                .iter()
                .all(|a| a.first && now - a.claimed_at <= REWRITE_WINDOW_MS)
                && self.holds.holds(batch.lane, now)
        });
        let mut jobs = Vec::new();
        for a in appended {
            if now - a.claimed_at > REWRITE_WINDOW_MS {
                continue; // an old own claim replayed: its jobs were written long ago
            }
            let event: &InboxEvent = &batch.events[a.index];
            for sub in batch
                .matches
                .get(a.index)
                .map_or(&[][..], |m| m.0.as_slice())
            {
                let mut job = JobRecord::created(event, a.seq, *sub, batch.lane);
                if let Some(&at) = first_received.get(&a.index) {
                    job.received_at_ms = at;
                    job.due_at_ms = at;
                }
                jobs.push((a.first, job, a.claimed_at.saturating_mul(1000)));
            }
        }
        if jobs.is_empty() {
            return Ok(false);
        }
        let stored: Vec<(StoredJob, i64)> = jobs
            .iter()
            .map(|(_, job, ts)| (self.created(job, lease), *ts))
            .collect();
        let firsts: Vec<bool> = jobs.iter().map(|(first, _, _)| *first).collect();
        let mut order: Vec<usize> = (0..stored.len()).collect();
        order.sort_by(|&a, &b| by_queue(&stored[a].0, &stored[b].0));
        let rows = order
            .iter()
            .map(|&i| {
                let (job, ts) = &stored[i];
                (job_part(job), vec![self.job_row(job, RowOp::Create(*ts))])
            })
            .collect();
        self.in_units(rows).await?;
        #[cfg(feature = "conformance")]
        self.crash_point()?;
        // A replay's rows are due at the first receipt, a stalled batch's long ago: below the
        // floor their queue's holder pages from, unless announced.
        self.announce_if_late(stored.iter().map(|(job, _)| job))
            .await?;
        // A first creation is the stored truth (nothing else wrote these jobs yet); a replay's
        // may have lost to later writes.
        for (first, (job, _)) in firsts.into_iter().zip(stored) {
            if first {
                self.known.put(job);
            }
        }
        let queues: HashSet<(&str, Uuid)> = jobs
            .iter()
            .map(|(_, j, _)| (&*j.tenant, j.subscription))
            .collect();
        let now = now_ms();
        all(queues
            .into_iter()
            .map(|(tenant, sub)| self.touch_queue_unless_fresh(batch.lane, tenant, sub, now)))
        .await?;
        // Only first creations move the pending gauge: a replay (after a rebalance or a restart,
        // every batch since the last offset commit) writes rows that exist already, or that were
        // delivered and stay deleted, and counting them again left the gauge above zero for good.
        // A crash between a first claim and this count leaves those jobs uncounted instead — a
        // gauge a little low after a crash, never one that stays up.
        let created = jobs.iter().filter(|(first, _, _)| *first).count();
        self.count(batch.lane, created as i64).await?;
        Ok(lease.is_some())
    }

    /// A new job as stored: leased by this process when `lease` says until when, its row where
    /// the unleased job's is.
    fn created(&self, job: &JobRecord, lease: Option<i64>) -> StoredJob {
        let unleased = StoredJob::new(job.clone());
        match lease {
            Some(_) => StoredJob {
                record: job.clone().leased_until(lease),
                leased_by: Some(self.holds.owner),
                ..unleased
            },
            None => unleased,
        }
    }

    /// For each replayed event with jobs (not appended by this write): when the stored copy was
    /// received. Its jobs take that time, not the replay's later `received_at_ms`, so a replay
    /// writes byte for byte the rows the first attempt wrote or began to: a row at another due
    /// time would be a second copy of the job.
    async fn first_received(
        &self,
        batch: &IngestBatch,
        appended: &[Appended],
        now: i64,
    ) -> Result<HashMap<usize, i64>, StoreError> {
        let replayed = appended.iter().filter(|a| {
            !a.first
                && now - a.claimed_at <= REWRITE_WINDOW_MS
                && batch.matches.get(a.index).is_some_and(|m| !m.0.is_empty())
        });
        let replayed: Vec<&Appended> = replayed.collect();
        let asked: Vec<EventAt<'_>> = replayed
            .iter()
            .map(|a| {
                let event = &batch.events[a.index];
                (event.tenant.as_str(), a.seq, event.id)
            })
            .collect();
        let found = self.events_at(&asked).await?;
        Ok(replayed
            .iter()
            .zip(found)
            .filter_map(|(a, stored)| Some((a.index, stored?.event.received_at_ms)))
            .collect())
    }

    /// A job was created in the queue: touches its row unless this process did so lately
    /// (`queue_touches.rs`); either way the lane's list is read again if it lacks the queue.
    async fn touch_queue_unless_fresh(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
        now: i64,
    ) -> Result<(), StoreError> {
        if self.touches.due(lane, tenant, sub, now) {
            return self.touch_queue(lane, tenant, sub).await;
        }
        self.paging.queue_touched(lane, tenant, sub);
        Ok(())
    }

    pub(super) async fn touch_queue(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
    ) -> Result<(), StoreError> {
        self.paging.queue_touched(lane, tenant, sub);
        let at = now_ms();
        self.session
            .execute_unpaged(&self.jt.queue_touch, (at, lane_i32(lane), tenant, sub))
            .await
            .map_err(unavailable)?;
        self.touches.touched(lane, tenant, sub, at);
        Ok(())
    }
}
