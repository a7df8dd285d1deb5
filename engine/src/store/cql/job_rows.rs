//! How job rows are written: a job's every change is one row of its queue's partition
//! (`queued_jobs`), and the statements of one partition go in unlogged batches, one mutation
//! each, never a batch spanning partitions.

use uuid::Uuid;

use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;

use super::concurrently::all;
use super::jobs::{id_key, lane_i32, StoredJob};
use super::log::BoxedRow;
use super::{unavailable, CqlStore};
use crate::store::codec::encode;
use crate::store::{Lane, StoreError};

/// Most rows of one partition per unlogged batch (a batch's rows are applied as one mutation).
const ROWS_PER_BATCH: usize = 128;

/// The partition a statement writes: statements of one partition may share a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part<'a> {
    /// A queue's jobs (`queued_jobs`).
    Queue(Lane, &'a str, Uuid),
    /// A dedup partition: (tenant, UUIDv7 hour).
    Dedup(&'a str, i64),
    /// A lane's announced late rows (`late_jobs`).
    Late(Lane),
}

/// What a job-row statement does.
#[derive(Debug, Clone, Copy)]
pub(super) enum RowOp {
    /// Writes a new job at its claim's timestamp (µs).
    Create(i64),
    Put,
    Delete,
}

/// Statements that must land together: one unlogged batch of their partition.
pub(super) type Unit<'a> = (Part<'a>, Vec<(&'a PreparedStatement, BoxedRow<'a>)>);

/// The partition of a job's row.
pub(super) fn job_part(job: &StoredJob) -> Part<'_> {
    let r = &job.record;
    Part::Queue(r.lane, &r.tenant, r.subscription)
}

/// Orders jobs by queue, so the rows of one partition are consecutive.
pub(super) fn by_queue(a: &StoredJob, b: &StoredJob) -> std::cmp::Ordering {
    let (a, b) = (&a.record, &b.record);
    (a.lane, &a.tenant, a.subscription).cmp(&(b.lane, &b.tenant, b.subscription))
}

impl CqlStore {
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
        self.announce_if_late([job]).await
    }

    /// The statement that writes `job`'s row (at `row_due_ms`, holding the job) or deletes it.
    pub(super) fn job_row<'a>(
        &'a self,
        job: &'a StoredJob,
        op: RowOp,
    ) -> (&'a PreparedStatement, BoxedRow<'a>) {
        let r = &job.record;
        let (lane, tenant, sub, due, id) = (
            lane_i32(r.lane),
            &*r.tenant,
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
    pub(super) async fn in_units<'a>(&self, units: Vec<Unit<'a>>) -> Result<(), StoreError> {
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
        let moved = writes
            .iter()
            .filter(|(before, after)| before.row_due_ms != after.row_due_ms);
        self.announce_if_late(moved.map(|(_, after)| after)).await?;
        for (_, a) in writes {
            self.known.put(a.clone());
        }
        Ok(())
    }

    /// Removes jobs' rows.
    pub(super) async fn remove_jobs(&self, removes: &[StoredJob]) -> Result<(), StoreError> {
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
}
