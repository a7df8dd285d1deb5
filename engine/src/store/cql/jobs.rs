//! Jobs in the CQL store: created with their event's batch (R-DI-1), moved, leased and settled.
//!
//! Without multi-partition transactions, a job's state lives in one row (`jobs`) and its place
//! in the due index (`job_due`) is kept by ordering writes so a crash never loses a job:
//!
//! - **create**: job row, then due row, then the queue's `touched` — after the event's append and
//!   before the unit's offset moves (a committed offset implies its jobs exist). Creation rows
//!   are written `USING TIMESTAMP` of the event's dedup claim, so a replay writing them again can
//!   never undo a later lease, settlement or delete (a newer timestamp always wins). A replay's
//!   event carries a later `received_at_ms`, so its creation may add a second due row: the job
//!   row names one of them, and paging deletes the other (see `paging.rs`).
//! - **move** (lease, retry, defer, release): new due row, then job row, then delete the old due
//!   row. A crash in between leaves an extra due row whose job names another due time; paging
//!   skips it, and deletes it once it is old (see `paging.rs`).
//! - **remove** (delivered, cancelled, dead-lettered): dead letter first if any, then the job
//!   row, then the due row.

use std::collections::{HashMap, HashSet};

use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::claim::Appended;
use super::{as_i64, unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::codec::{decode, encode};
use crate::store::{
    job_id, lease_job, settle_job, AttemptRecord, DeadLetter, DeliveryStep, InboxEvent,
    IngestBatch, JobChange, JobRecord, Lane, Started, StepOutcome, StoreError, StoredEvent,
    EVENT_GONE,
};

/// Reads or writes of one phase in flight at once.
const CONCURRENCY: usize = 64;

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

fn lane_i32(lane: Lane) -> i32 {
    i32::try_from(lane).unwrap_or(i32::MAX)
}

/// Runs writes (or reads) at most `CONCURRENCY` at a time; answers in the order asked. Not `async`: the futures are made
/// here, so the closure that made them is not part of the returned future (a `Send` future
/// holding such closures trips the compiler's higher-ranked lifetime check).
pub(super) fn all<F, T>(
    futures: impl IntoIterator<Item = F>,
) -> impl std::future::Future<Output = Result<Vec<T>, StoreError>>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let made: Vec<F> = futures.into_iter().collect();
    futures::stream::iter(made)
        .buffered(CONCURRENCY)
        .try_collect()
}

/// What one delivery step writes, in the order that keeps every job findable.
#[derive(Default)]
struct Plan {
    /// (before, after): the after's due row is written first, its old one deleted last.
    moves: Vec<(JobRecord, JobRecord)>,
    removes: Vec<JobRecord>,
    letters: Vec<DeadLetter>,
}

impl CqlStore {
    /// Writes the jobs of a batch's appended events (one per matching subscription).
    pub(super) async fn create_jobs(
        &self,
        batch: &IngestBatch,
        appended: &[Appended],
    ) -> Result<(), StoreError> {
        let now = now_ms();
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
                jobs.push((
                    JobRecord {
                        id: job_id(event.id, *sub),
                        lane: batch.lane,
                        tenant: event.tenant.clone(),
                        subscription: *sub,
                        event_id: event.id,
                        event_seq: a.seq,
                        received_at_ms: event.received_at_ms,
                        due_at_ms: event.received_at_ms,
                        attempts: 0,
                        starts: 0,
                        last: None,
                    },
                    a.claimed_at.saturating_mul(1000),
                ));
            }
        }
        if jobs.is_empty() {
            return Ok(());
        }
        all(jobs.iter().map(|(job, ts)| async move {
            let key = id_key(job.id);
            self.session
                .execute_unpaged(&self.jt.job_create, (&key[..], encode(job), *ts))
                .await
                .map_err(unavailable)?;
            self.session
                .execute_unpaged(
                    &self.jt.due_create,
                    (
                        lane_i32(job.lane),
                        &job.tenant,
                        job.subscription,
                        job.due_at_ms,
                        &key[..],
                        *ts / 1000,
                        *ts,
                    ),
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        }))
        .await?;
        let queues: HashSet<(&str, Uuid)> = jobs
            .iter()
            .map(|(j, _)| (j.tenant.as_str(), j.subscription))
            .collect();
        all(queues
            .into_iter()
            .map(|(tenant, sub)| self.touch_queue(batch.lane, tenant, sub)))
        .await?;
        self.count(batch.lane, jobs.len() as i64).await
    }

    pub(super) async fn touch_queue(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
    ) -> Result<(), StoreError> {
        self.paging.lane_touched(lane);
        self.session
            .execute_unpaged(
                &self.jt.queue_touch,
                (now_ms(), lane_i32(lane), tenant, sub),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Moves a lane's pending-jobs gauge.
    pub(super) async fn count(&self, lane: Lane, delta: i64) -> Result<(), StoreError> {
        if delta != 0 {
            self.session
                .execute_unpaged(
                    &self.jt.count_add,
                    (scylla::value::Counter(delta), lane_i32(lane)),
                )
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    pub(super) async fn load_job(&self, id: u128) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<(Option<Vec<u8>>,)> =
            self.first_row(&self.jt.job_get, (&id_key(id)[..],)).await?;
        row.and_then(|(r,)| r).map(|r| decode(&r)).transpose()
    }

    async fn load_jobs(&self, ids: &[u128]) -> Result<HashMap<u128, JobRecord>, StoreError> {
        let found = all(ids.iter().map(|id| self.load_job(*id))).await?;
        Ok(found.into_iter().flatten().map(|j| (j.id, j)).collect())
    }

    async fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(&self.jt.job_put, (&id_key(job.id)[..], encode(job)))
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    pub(super) async fn put_due(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(
                &self.jt.due_put,
                (
                    lane_i32(job.lane),
                    &job.tenant,
                    job.subscription,
                    job.due_at_ms,
                    &id_key(job.id)[..],
                    now_ms(),
                ),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    pub(super) async fn delete_due(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
        due_ms: i64,
        id: u128,
    ) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(
                &self.jt.due_delete,
                (lane_i32(lane), tenant, sub, due_ms, &id_key(id)[..]),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Moves jobs to their new state (see the module's write order).
    pub(super) async fn move_jobs(
        &self,
        moves: &[(JobRecord, JobRecord)],
    ) -> Result<(), StoreError> {
        all(moves
            .iter()
            .filter(|(b, a)| b.due_at_ms != a.due_at_ms)
            .map(|(_, a)| self.put_due(a)))
        .await?;
        all(moves.iter().map(|(_, a)| self.put_job(a))).await?;
        all(moves
            .iter()
            .filter(|(b, a)| b.due_at_ms != a.due_at_ms)
            .map(|(b, _)| self.delete_due(b.lane, &b.tenant, b.subscription, b.due_at_ms, b.id)))
        .await?;
        Ok(())
    }

    /// The event a job delivers, if still stored (retention may have expired it).
    async fn job_event(&self, job: &JobRecord) -> Result<Option<StoredEvent>, StoreError> {
        let key = (
            job.tenant.as_str(),
            as_i64(self.bucket_of(job.event_seq))?,
            as_i64(job.event_seq)?,
        );
        let row: Option<(Option<Uuid>, Option<Vec<u8>>)> =
            self.first_row(&self.jt.log_event_at, key).await?;
        match row {
            Some((Some(id), Some(blob))) if id == job.event_id => Ok(Some(StoredEvent {
                seq: job.event_seq,
                event: decode(&blob)?,
            })),
            _ => Ok(None),
        }
    }

    /// One delivery step: outcomes first, then leases (R-DI-8).
    pub(super) async fn step(&self, step: DeliveryStep) -> Result<StepOutcome, StoreError> {
        let ids: Vec<u128> = step
            .settle
            .iter()
            .map(|s| s.job)
            .chain(step.start.iter().copied())
            .collect();
        let jobs = self.load_jobs(&ids).await?;
        let mut plan = Plan::default();
        let mut out = StepOutcome::default();
        let mut attempts: Vec<(&JobRecord, &AttemptRecord)> = Vec::new();
        let mut dead: Vec<&JobRecord> = Vec::new();

        for s in &step.settle {
            let Some(job) = jobs.get(&s.job) else {
                continue; // replayed, cancelled or settled by an earlier step
            };
            let (change, attempt) = settle_job(job, &s.settled);
            if let Some(a) = attempt {
                attempts.push((job, a));
            }
            match change {
                JobChange::Remove => plan.removes.push(job.clone()),
                JobChange::Rewrite(next) => plan.moves.push((job.clone(), next)),
                JobChange::Bury(last, reason) => {
                    dead.push(job);
                    plan.removes.push(job.clone());
                    plan.letters.push(DeadLetter {
                        job: last,
                        reason,
                        dead_at_ms: step.now_ms,
                    });
                }
            }
        }

        let mut leases = Vec::new();
        for id in &step.start {
            let Some(job) = jobs.get(id) else { continue };
            match lease_job(job, step.lease_until_ms, step.recovery_limit) {
                Ok(next) => leases.push((job, next)),
                Err(reason) => {
                    dead.push(job);
                    plan.removes.push(job.clone());
                    plan.letters.push(DeadLetter {
                        job: job.clone(),
                        reason,
                        dead_at_ms: step.now_ms,
                    });
                    out.poisoned.push(*id);
                }
            }
        }
        let events = all(leases.iter().map(|(job, _)| self.job_event(job))).await?;
        for ((job, next), event) in leases.into_iter().zip(events) {
            match event {
                Some(event) => {
                    plan.moves.push((job.clone(), next.clone()));
                    out.started.push(Started { job: next, event });
                }
                None => {
                    dead.push(job);
                    plan.removes.push(job.clone());
                    plan.letters.push(DeadLetter {
                        job: job.clone(),
                        reason: EVENT_GONE.into(),
                        dead_at_ms: step.now_ms,
                    });
                    out.poisoned.push(job.id);
                }
            }
        }

        all(plan.letters.iter().map(|l| self.put_dead_letter(l))).await?;
        self.move_jobs(&plan.moves).await?;
        all(plan.removes.iter().map(|j| async move {
            self.session
                .execute_unpaged(&self.jt.job_delete, (&id_key(j.id)[..],))
                .await
                .map_err(unavailable)?;
            self.delete_due(j.lane, &j.tenant, j.subscription, j.due_at_ms, j.id)
                .await
        }))
        .await?;
        let mut removed: HashMap<Lane, i64> = HashMap::new();
        for j in &plan.removes {
            *removed.entry(j.lane).or_default() -= 1;
        }
        all(removed.into_iter().map(|(lane, n)| self.count(lane, n))).await?;
        out.streaks = self.record_outcomes(&attempts, &dead).await?;
        Ok(out)
    }
}
