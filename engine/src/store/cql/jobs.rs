//! Jobs in the CQL store: created with their event's batch (R-DI-1), leased and settled.
//!
//! Without multi-partition transactions, a job's state lives in one row (`jobs`: a [`StoredJob`])
//! and its place in the due index (`job_due`) is kept by ordering writes so a crash never loses a
//! job:
//!
//! - **create**: job row, then due row, then the queue's `touched` — after the event's append and
//!   before the unit's offset moves (a committed offset implies its jobs exist). Creation rows
//!   are written `USING TIMESTAMP` of the event's dedup claim, so a replay writing them again can
//!   never undo a later lease, settlement or delete (a newer timestamp always wins). A replayed
//!   event's jobs take the stored copy's `received_at_ms`, so a replay writes byte for byte the
//!   rows of the first attempt: rows of equal timestamp and different values would be settled by
//!   the server keeping either, and a job row naming a due row the crash never wrote is never paged.
//! - **lease**: the job row alone (one write): `starts + 1`, the lease's end, and who leased it.
//!   The due row stays where it is; paging passes over a job leased by this process until the
//!   lease ends. A lease taken by another process (a lane's earlier holder) counts for nothing:
//!   the job is due again at once, its lapsed start counted as a recovery (R-DI-8).
//! - **move** (retry, defer): new due row, then job row, then delete the old due row. A crash in
//!   between leaves an extra due row the job row does not name; paging deletes it once it is old.
//! - **remove** (delivered, cancelled, dead-lettered): dead letter first if any, then the job
//!   row, then the due row.
//!
//! The process holding a lane is the only writer of its jobs (ingest only creates), so it keeps
//! the jobs it paged in memory and a step reads the store only for jobs it does not know.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;

use super::claim::Appended;
use super::log::BoxedRow;
use super::{as_i64, unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::codec::{decode, encode};
use crate::store::{
    lease_job, settle_job, AttemptRecord, DeadLetter, DeliveryStep, InboxEvent, IngestBatch,
    JobChange, JobRecord, Lane, Started, StepOutcome, StoreError, StoredEvent, EVENT_GONE,
};

/// Reads or writes of one phase in flight at once.
const CONCURRENCY: usize = 64;
/// Most rows of one partition per unlogged batch (a batch's rows are applied as one mutation).
const ROWS_PER_BATCH: usize = 128;

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
/// `KNOWN_MAX` it starts over (a miss is one read).
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
                k.clear();
            }
            k.insert(job.record.id, job);
        }
    }

    pub fn forget(&self, id: u128) {
        if let Ok(mut k) = self.0.lock() {
            k.remove(&id);
        }
    }

    /// After a lane changed hands: another process may have written its jobs.
    pub fn clear(&self) {
        if let Ok(mut k) = self.0.lock() {
            k.clear();
        }
    }
}

/// The partition a statement writes: statements of one partition may share a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part<'a> {
    Job(u128),
    Queue(Lane, &'a str, Uuid),
    /// A dedup partition: (tenant, UUIDv7 hour).
    Dedup(&'a str, i64),
}

/// What one delivery step writes, in the order that keeps every job findable.
#[derive(Default)]
struct Plan {
    /// (before, after): the after's due row is written first (when it moves), then the job row,
    /// then the before's due row is deleted (when it moved).
    writes: Vec<(StoredJob, StoredJob)>,
    removes: Vec<StoredJob>,
    letters: Vec<DeadLetter>,
}

impl CqlStore {
    /// Writes the jobs of a batch's appended events (one per matching subscription); true when
    /// it wrote them leased by this process, as the batch asked (`IngestBatch::lease_until_ms`).
    /// It does so only for first creations in a lane this process holds: a replay writes the
    /// rows its first attempt wrote, and a lease in a lane held elsewhere counts for nothing.
    /// The due row stays where an unleased job's would be, as after a lease step: a lane's next
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
        // Job rows first, then due rows: a due row whose job row is missing is taken for the
        // leftover of a removed job (see `paging.rs`), so it must never be seen first.
        let stored: Vec<(StoredJob, i64)> = jobs
            .iter()
            .map(|(_, job, ts)| (self.created(job, lease), *ts))
            .collect();
        let job_rows = stored
            .iter()
            .map(|(job, ts)| {
                let row: BoxedRow<'_> =
                    Box::new((id_key(job.record.id).to_vec(), encode(job), *ts));
                (Part::Job(job.record.id), &self.jt.job_create, row)
            })
            .collect();
        self.in_batches(job_rows).await?;
        #[cfg(feature = "conformance")]
        self.crash_point()?;
        // Sorted by queue: rows of one partition in one batch are applied as one mutation.
        let mut by_queue: Vec<&(StoredJob, i64)> = stored.iter().collect();
        by_queue.sort_by(|(a, _), (b, _)| {
            (&a.record.tenant, a.record.subscription)
                .cmp(&(&b.record.tenant, b.record.subscription))
        });
        let due_rows = by_queue
            .into_iter()
            .map(|(job, ts)| {
                let r = &job.record;
                let row: BoxedRow<'_> = Box::new((
                    lane_i32(r.lane),
                    r.tenant.as_str(),
                    r.subscription,
                    job.row_due_ms,
                    id_key(r.id).to_vec(),
                    *ts / 1000,
                    *ts,
                ));
                let part = Part::Queue(r.lane, r.tenant.as_str(), r.subscription);
                (part, &self.jt.due_create, row)
            })
            .collect();
        self.in_batches(due_rows).await?;
        // A first creation is the stored truth (nothing else wrote these jobs yet); a replay's
        // may have lost to later writes.
        for ((first, _, _), (job, _)) in jobs.iter().zip(stored) {
            if *first {
                self.known.put(job);
            }
        }
        let queues: HashSet<(&str, Uuid)> = jobs
            .iter()
            .map(|(_, j, _)| (j.tenant.as_str(), j.subscription))
            .collect();
        all(queues
            .into_iter()
            .map(|(tenant, sub)| self.touch_queue(batch.lane, tenant, sub)))
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
    /// writes byte for byte the rows the first attempt wrote or began to: a job row differing in
    /// its due time would tie with the first at the claim's write timestamp, the server would keep
    /// either, and one naming a due row that the crash never wrote is a job no page finds.
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
        let found = all(replayed.map(|a| async move {
            let event = &batch.events[a.index];
            let stored = self.stored_event(&event.tenant, a.seq, event.id).await?;
            Ok::<_, StoreError>(stored.map(|s| (a.index, s.event.received_at_ms)))
        }))
        .await?;
        Ok(found.into_iter().flatten().collect())
    }

    pub(super) async fn touch_queue(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
    ) -> Result<(), StoreError> {
        self.paging.queue_touched(lane, tenant, sub);
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

    /// A job as stored: from memory when this process wrote or paged it, else read.
    pub(super) async fn load_job(&self, id: u128) -> Result<Option<StoredJob>, StoreError> {
        if let Some(known) = self.known.get(id) {
            return Ok(Some(known));
        }
        self.read_job(id).await
    }

    pub(super) async fn read_job(&self, id: u128) -> Result<Option<StoredJob>, StoreError> {
        let row: Option<(Option<Vec<u8>>,)> =
            self.first_row(&self.jt.job_get, (&id_key(id)[..],)).await?;
        row.and_then(|(r,)| r).map(|r| decode(&r)).transpose()
    }

    async fn load_jobs(&self, ids: &[u128]) -> Result<HashMap<u128, StoredJob>, StoreError> {
        let found = all(ids.iter().map(|id| self.load_job(*id))).await?;
        Ok(found
            .into_iter()
            .flatten()
            .map(|j| (j.record.id, j))
            .collect())
    }

    /// Writes a job's due row at `row_due_ms`.
    pub(super) async fn put_due(&self, job: &StoredJob) -> Result<(), StoreError> {
        let r = &job.record;
        self.paging
            .due_written(r.lane, &r.tenant, r.subscription, job.row_due_ms);
        self.session
            .execute_unpaged(
                &self.jt.due_put,
                (
                    lane_i32(r.lane),
                    &r.tenant,
                    r.subscription,
                    job.row_due_ms,
                    &id_key(r.id)[..],
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

    /// Runs statements, the ones of one partition (consecutive, same [`Part`]) as unlogged
    /// batches of at most `ROWS_PER_BATCH`; the rest alone; all concurrently. A batch never spans
    /// partitions: that saves the client requests but makes the coordinator fan out, and the
    /// server warns of every one (Cassandra past 10 partitions; the driver echoes each warning
    /// into the log).
    pub(super) async fn in_batches<'a>(
        &self,
        statements: Vec<(Part<'a>, &PreparedStatement, BoxedRow<'a>)>,
    ) -> Result<(), StoreError> {
        let mut groups: Vec<(Part<'a>, Vec<(&PreparedStatement, BoxedRow<'a>)>)> = Vec::new();
        for (part, stmt, row) in statements {
            match groups.last_mut() {
                Some((p, members)) if *p == part && members.len() < ROWS_PER_BATCH => {
                    members.push((stmt, row));
                }
                _ => groups.push((part, vec![(stmt, row)])),
            }
        }
        all(groups.into_iter().map(|(_, mut members)| async move {
            if members.len() == 1 {
                let (stmt, row) = members.pop().expect("one member");
                self.session
                    .execute_unpaged(stmt, row)
                    .await
                    .map_err(unavailable)?;
                return Ok(());
            }
            let mut b = Batch::new(BatchType::Unlogged);
            b.set_consistency(Consistency::LocalQuorum);
            let mut values: Vec<BoxedRow<'a>> = Vec::with_capacity(members.len());
            for (stmt, row) in members {
                b.append_statement(stmt.clone());
                values.push(row);
            }
            self.session.batch(&b, values).await.map_err(unavailable)?;
            Ok(())
        }))
        .await?;
        Ok(())
    }

    /// Due-row statements of `jobs` (at `row_due_ms`), grouped so each batch is one queue's.
    fn due_rows<'a>(
        &'a self,
        jobs: impl Iterator<Item = &'a StoredJob>,
        delete: bool,
    ) -> Vec<(Part<'a>, &'a PreparedStatement, BoxedRow<'a>)> {
        let mut jobs: Vec<&StoredJob> = jobs.collect();
        jobs.sort_by(|a, b| {
            let (a, b) = (&a.record, &b.record);
            (a.lane, &a.tenant, a.subscription).cmp(&(b.lane, &b.tenant, b.subscription))
        });
        let now = now_ms();
        jobs.into_iter()
            .map(|j| {
                let r = &j.record;
                let key = id_key(r.id).to_vec();
                let (lane, tenant, sub, due) = (
                    lane_i32(r.lane),
                    r.tenant.as_str(),
                    r.subscription,
                    j.row_due_ms,
                );
                let part = Part::Queue(r.lane, tenant, sub);
                if delete {
                    let row: BoxedRow<'a> = Box::new((lane, tenant, sub, due, key));
                    (part, &self.jt.due_delete, row)
                } else {
                    self.paging.due_written(r.lane, tenant, sub, due);
                    let row: BoxedRow<'a> = Box::new((lane, tenant, sub, due, key, now));
                    (part, &self.jt.due_put, row)
                }
            })
            .collect()
    }

    /// Writes jobs' new states (see the module's write order).
    pub(super) async fn write_jobs(
        &self,
        writes: &[(StoredJob, StoredJob)],
    ) -> Result<(), StoreError> {
        let moved = |(b, a): &&(StoredJob, StoredJob)| b.row_due_ms != a.row_due_ms;
        let new_rows = self.due_rows(writes.iter().filter(moved).map(|(_, a)| a), false);
        self.in_batches(new_rows).await?;
        let job_rows = writes
            .iter()
            .map(|(_, a)| {
                let row: BoxedRow<'_> = Box::new((id_key(a.record.id).to_vec(), encode(a)));
                (Part::Job(a.record.id), &self.jt.job_put, row)
            })
            .collect();
        self.in_batches(job_rows).await?;
        for (_, a) in writes {
            self.known.put(a.clone());
        }
        let old_rows = self.due_rows(writes.iter().filter(moved).map(|(b, _)| b), true);
        self.in_batches(old_rows).await
    }

    /// Removes jobs: the job rows, then their due rows.
    async fn remove_jobs(&self, removes: &[StoredJob]) -> Result<(), StoreError> {
        let job_rows = removes
            .iter()
            .map(|j| {
                let row: BoxedRow<'_> = Box::new((id_key(j.record.id).to_vec(),));
                (Part::Job(j.record.id), &self.jt.job_delete, row)
            })
            .collect();
        self.in_batches(job_rows).await?;
        for j in removes {
            self.known.forget(j.record.id);
        }
        self.in_batches(self.due_rows(removes.iter(), true)).await
    }

    /// The event a job delivers, if still stored (retention may have expired it).
    async fn job_event(&self, job: &JobRecord) -> Result<Option<StoredEvent>, StoreError> {
        self.stored_event(&job.tenant, job.event_seq, job.event_id)
            .await
    }

    /// The tenant's event at `seq`, if it is still stored and is event `id`.
    async fn stored_event(
        &self,
        tenant: &str,
        seq: u64,
        id: Uuid,
    ) -> Result<Option<StoredEvent>, StoreError> {
        if let Some(encoded) = self.recent.get(tenant, seq, id) {
            return Ok(Some(StoredEvent {
                seq,
                event: decode(&encoded)?,
            }));
        }
        let key = (tenant, as_i64(self.bucket_of(seq))?, as_i64(seq)?);
        let row: Option<(Option<Uuid>, Option<Vec<u8>>)> =
            self.first_row(&self.jt.log_event_at, key).await?;
        match row {
            Some((Some(found), Some(blob))) if found == id => Ok(Some(StoredEvent {
                seq,
                event: decode(&blob)?,
            })),
            _ => Ok(None),
        }
    }

    /// Writes a plan: dead letters first, then the job rows it rewrites and removes.
    async fn apply(&self, plan: &Plan) -> Result<(), StoreError> {
        all(plan.letters.iter().map(|l| self.put_dead_letter(l))).await?;
        futures::future::try_join(
            self.write_jobs(&plan.writes),
            self.remove_jobs(&plan.removes),
        )
        .await?;
        Ok(())
    }

    /// One delivery step: outcomes and leases (R-DI-8).
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
        let bury = |job: &StoredJob, last: JobRecord, reason: String, plan: &mut Plan| {
            plan.removes.push(job.clone());
            plan.letters.push(DeadLetter {
                job: last,
                reason,
                dead_at_ms: step.now_ms,
            });
        };

        for s in &step.settle {
            let Some(job) = jobs.get(&s.job) else {
                continue; // replayed, cancelled or settled by an earlier step
            };
            let (change, attempt) = settle_job(&job.record, &s.settled);
            if let Some(a) = attempt {
                attempts.push((&job.record, a));
            }
            match change {
                JobChange::Remove => plan.removes.push(job.clone()),
                JobChange::Rewrite(next) => plan.writes.push((job.clone(), StoredJob::new(next))),
                JobChange::Bury(last, reason) => {
                    dead.push(&job.record);
                    bury(job, last, reason, &mut plan);
                }
            }
        }

        // Leases go on beside the outcomes: different jobs, so the two need not wait for each
        // other (a step's round trips are most of a CQL lane's time).
        let mut leasing = Plan::default();
        let mut leases = Vec::new();
        // The lane's hold is the fence: a lane given up (revoked, or its hold lapsed while this
        // process was stopped) leases nothing more here; its next holder delivers those jobs.
        let clock = crate::clock::now_ms();
        for id in &step.start {
            let Some(job) = jobs.get(id) else { continue };
            if !self.holds.holds(job.record.lane, clock) {
                out.not_held.push(*id);
                continue;
            }
            match lease_job(&job.record, step.lease_until_ms, step.recovery_limit) {
                Ok(next) => leases.push((job, next)),
                Err(reason) => {
                    dead.push(&job.record);
                    bury(job, job.record.clone(), reason, &mut leasing);
                    out.poisoned.push(*id);
                }
            }
        }
        let outcomes = self.apply(&plan);
        let starts = async {
            let events = all(leases.iter().map(|(job, _)| self.job_event(&job.record))).await?;
            let (mut started, mut gone) = (Vec::new(), Vec::new());
            for ((job, next), event) in leases.iter().zip(events) {
                match event {
                    Some(event) => {
                        let leased = StoredJob {
                            record: next.clone(),
                            row_due_ms: job.row_due_ms,
                            leased_by: Some(self.holds.owner),
                        };
                        leasing.writes.push(((*job).clone(), leased));
                        started.push(Started {
                            job: next.clone(),
                            event,
                        });
                    }
                    None => {
                        gone.push(job.record.id);
                        bury(job, job.record.clone(), EVENT_GONE.into(), &mut leasing);
                    }
                }
            }
            self.apply(&leasing).await?;
            Ok::<_, StoreError>((started, gone, leasing.removes))
        };
        let ((), (started, gone, lease_removes)) =
            futures::future::try_join(outcomes, starts).await?;
        out.started = started;
        for id in gone {
            if let Some(job) = jobs.get(&id) {
                dead.push(&job.record);
            }
            out.poisoned.push(id);
        }
        let mut removed: HashMap<Lane, i64> = HashMap::new();
        for j in plan.removes.iter().chain(&lease_removes) {
            *removed.entry(j.record.lane).or_default() -= 1;
        }
        all(removed.into_iter().map(|(lane, n)| self.count(lane, n))).await?;
        out.streaks = self.record_outcomes(&attempts, &dead).await?;
        Ok(out)
    }
}
