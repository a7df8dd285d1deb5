//! Jobs in the CQL store: created with their event's batch (R-DI-1), leased and settled.
//!
//! Without multi-partition transactions, a job lives in one row of its queue's partition
//! (`queued_jobs`: the row's key is the job's place in the due order, its value a [`StoredJob`]),
//! so every change of a job is one write to one partition and none can be half done:
//!
//! - **create**: the job rows, then the queue's `touched` — after the event's append and before
//!   the unit's offset moves (a committed offset implies its jobs exist). Creation rows are written
//!   `USING TIMESTAMP` of the event's dedup claim, so a replay writing them again can never undo a
//!   later lease, move or delete (a newer timestamp always wins). A replayed event's jobs take the
//!   stored copy's `received_at_ms`, so a replay writes byte for byte the rows of the first
//!   attempt: rows of equal timestamp and different keys would be two jobs.
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

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;

use super::claim::Appended;
use super::job_events::EventAt;
use super::log::BoxedRow;
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::codec::encode;
use crate::store::{
    lease_job, settle_job, AttemptRecord, DeadLetter, DeliveryStep, InboxEvent, IngestBatch,
    JobChange, JobRecord, Lane, Started, StepOutcome, StoreError, EVENT_GONE,
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

/// The partition a statement writes: statements of one partition may share a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part<'a> {
    /// A queue's jobs (`queued_jobs`).
    Queue(Lane, &'a str, Uuid),
    /// A dedup partition: (tenant, UUIDv7 hour).
    Dedup(&'a str, i64),
}

/// What a job-row statement does.
#[derive(Debug, Clone, Copy)]
enum RowOp {
    /// Writes a new job at its claim's timestamp (µs).
    Create(i64),
    Put,
    Delete,
}

/// Statements that must land together: one unlogged batch of their partition.
type Unit<'a> = (Part<'a>, Vec<(&'a PreparedStatement, BoxedRow<'a>)>);

/// The partition of a job's row.
fn job_part(job: &StoredJob) -> Part<'_> {
    let r = &job.record;
    Part::Queue(r.lane, r.tenant.as_str(), r.subscription)
}

/// Orders jobs by queue, so the rows of one partition are consecutive.
fn by_queue(a: &StoredJob, b: &StoredJob) -> std::cmp::Ordering {
    let (a, b) = (&a.record, &b.record);
    (a.lane, &a.tenant, a.subscription).cmp(&(b.lane, &b.tenant, b.subscription))
}

/// What one delivery step writes.
#[derive(Default)]
struct Plan {
    /// (before, after): rewritten in place, or moved (the after's row written and the before's
    /// deleted in one batch).
    writes: Vec<(StoredJob, StoredJob)>,
    removes: Vec<StoredJob>,
    letters: Vec<DeadLetter>,
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
        // A first creation is the stored truth (nothing else wrote these jobs yet); a replay's
        // may have lost to later writes.
        for (first, (job, _)) in firsts.into_iter().zip(stored) {
            if first {
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

    /// The jobs among `ids` this process knows (see the module's last paragraph).
    fn known_jobs(&self, ids: &[u128]) -> HashMap<u128, StoredJob> {
        ids.iter()
            .filter_map(|id| self.known.get(*id))
            .map(|j| (j.record.id, j))
            .collect()
    }

    /// Writes a job's row at `row_due_ms` (a job brought back from the dead letters).
    pub(super) async fn put_job(&self, job: &StoredJob) -> Result<(), StoreError> {
        let r = &job.record;
        self.paging
            .due_written(r.lane, &r.tenant, r.subscription, job.row_due_ms);
        let (stmt, row) = self.job_row(job, RowOp::Put);
        self.session
            .execute_unpaged(stmt, row)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// The statement that writes `job`'s row (at `row_due_ms`, holding the job) or deletes it.
    fn job_row<'a>(
        &'a self,
        job: &'a StoredJob,
        op: RowOp,
    ) -> (&'a PreparedStatement, BoxedRow<'a>) {
        let r = &job.record;
        let (lane, tenant, sub, due, id) = (
            lane_i32(r.lane),
            r.tenant.as_str(),
            r.subscription,
            job.row_due_ms,
            id_key(r.id).to_vec(),
        );
        match op {
            RowOp::Create(ts) => (
                &self.jt.job_create,
                Box::new((lane, tenant, sub, due, id, encode(job), ts)),
            ),
            RowOp::Put => (
                &self.jt.job_put,
                Box::new((lane, tenant, sub, due, id, encode(job))),
            ),
            RowOp::Delete => (&self.jt.job_delete, Box::new((lane, tenant, sub, due, id))),
        }
    }

    /// Runs statements, the ones of one partition (consecutive, same [`Part`]) as unlogged
    /// batches of at most `ROWS_PER_BATCH`; the rest alone; all concurrently.
    pub(super) async fn in_batches<'a>(
        &self,
        statements: Vec<(Part<'a>, &'a PreparedStatement, BoxedRow<'a>)>,
    ) -> Result<(), StoreError> {
        self.in_units(
            statements
                .into_iter()
                .map(|(part, stmt, row)| (part, vec![(stmt, row)]))
                .collect(),
        )
        .await
    }

    /// As [`Self::in_batches`], keeping each unit's statements in one batch. A batch never spans
    /// partitions: that saves the client requests but makes the coordinator fan out, and the
    /// server warns of every one (Cassandra past 10 partitions; the driver echoes each warning
    /// into the log).
    async fn in_units<'a>(&self, units: Vec<Unit<'a>>) -> Result<(), StoreError> {
        let mut groups: Vec<Unit<'a>> = Vec::new();
        for (part, unit) in units {
            match groups.last_mut() {
                Some((p, members))
                    if *p == part && members.len() + unit.len() <= ROWS_PER_BATCH =>
                {
                    members.extend(unit);
                }
                _ => groups.push((part, unit)),
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

    /// Writes jobs' new states: a lease in place; a move as the new row and the old row's delete
    /// in one batch.
    pub(super) async fn write_jobs(
        &self,
        writes: &[(StoredJob, StoredJob)],
    ) -> Result<(), StoreError> {
        let mut sorted: Vec<&(StoredJob, StoredJob)> = writes.iter().collect();
        sorted.sort_by(|(a, _), (b, _)| by_queue(a, b));
        let units = sorted
            .into_iter()
            .map(|(before, after)| {
                let mut unit = vec![self.job_row(after, RowOp::Put)];
                if before.row_due_ms != after.row_due_ms {
                    let r = &after.record;
                    self.paging
                        .due_written(r.lane, &r.tenant, r.subscription, after.row_due_ms);
                    unit.push(self.job_row(before, RowOp::Delete));
                }
                (job_part(after), unit)
            })
            .collect();
        self.in_units(units).await?;
        for (_, a) in writes {
            self.known.put(a.clone());
        }
        Ok(())
    }

    /// Removes jobs' rows.
    async fn remove_jobs(&self, removes: &[StoredJob]) -> Result<(), StoreError> {
        let mut sorted: Vec<&StoredJob> = removes.iter().collect();
        sorted.sort_by(|a, b| by_queue(a, b));
        let units = sorted
            .into_iter()
            .map(|j| (job_part(j), vec![self.job_row(j, RowOp::Delete)]))
            .collect();
        self.in_units(units).await?;
        for j in removes {
            self.known.forget(j.record.id);
        }
        Ok(())
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
        let jobs = self.known_jobs(&ids);
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
                continue; // settled by an earlier step, or not this process's (module doc)
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
            let records: Vec<&JobRecord> = leases.iter().map(|(job, _)| &job.record).collect();
            let events = self.job_events(&records).await?;
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
