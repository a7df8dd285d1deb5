//! Job rows that may lie below the floor their queue is paged from, announced so that the lane's
//! holder reads each by its key (`late_jobs`).
//!
//! A holder pages a queue from a floor (`paging.rs`) and never from the partition's start: the
//! start is an hour of tombstones on a busy queue, past the server's limit. That is sound only if
//! every live row below a floor is found another way. A floor trails the time of the page that
//! set it by `FLOOR_TRAILS_MS` and never passes a live row the page saw, so a row is missed only
//! when it became readable more than that after its due time: a replayed creation (due at its
//! first receipt), a batch that stalled, a slow dead-letter replay. Its writer, which knows when
//! its write ended, announces any row written more than `LATE_AFTER_MS` after its due time. The
//! second between the two allows for clocks of different processes.
//!
//! Announcements are rare by design (replays, stalls); each costs a read by key every
//! `READ_EVERY_MS` until its row is gone, and then its own delete.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures::TryStreamExt;
use uuid::Uuid;

use super::concurrently::all;
use super::job_rows::Part;
use super::jobs::{id_key, id_of, lane_i32, StoredJob};
use super::log::BoxedRow;
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::{DueQuery, JobRecord, Lane, StoreError};

/// A row written this long after its due time is announced.
pub(super) const LATE_AFTER_MS: i64 = 2_000;
/// How far behind the time of the page that set it a floor stays, at least.
pub(super) const FLOOR_TRAILS_MS: i64 = 3_000;
const _: () = assert!(FLOOR_TRAILS_MS >= LATE_AFTER_MS + 1_000);
/// How often a holder reads its lanes' announcements.
const READ_EVERY_MS: i64 = 5_000;
/// Announcements read per lane at once; the rest wait until these rows are gone.
const READ_AT_ONCE: i32 = 1_000;

/// Whether a job row due at `row_due_ms`, whose write ended at `written_ms`, must be announced.
pub(super) fn needs_announcing(row_due_ms: i64, written_ms: i64) -> bool {
    written_ms.saturating_sub(row_due_ms) > LATE_AFTER_MS
}

/// Per lane: when its announcements were last read, and the queues they named live rows of.
#[derive(Debug, Default)]
pub(super) struct LateReads(Mutex<HashMap<Lane, LateRead>>);

#[derive(Debug)]
struct LateRead {
    at_ms: i64,
    queues: HashSet<(String, Uuid)>,
}

impl LateReads {
    fn due(&self, lane: Lane, clock: i64) -> bool {
        let reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        reads
            .get(&lane)
            .is_none_or(|r| clock.saturating_sub(r.at_ms) >= READ_EVERY_MS)
    }

    fn read(&self, lane: Lane, clock: i64, queues: HashSet<(String, Uuid)>) {
        let mut reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        reads.insert(
            lane,
            LateRead {
                at_ms: clock,
                queues,
            },
        );
    }

    /// The lane changed hands: read its announcements at the next page.
    pub fn forget_lane(&self, lane: Lane) {
        let mut reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        reads.remove(&lane);
    }

    /// Whether the last read named a live row of the queue (it must not be dropped).
    pub fn names(&self, lane: Lane, tenant: &str, sub: Uuid) -> bool {
        let reads = self.0.lock().unwrap_or_else(|p| p.into_inner());
        reads
            .get(&lane)
            .is_none_or(|r| r.queues.contains(&(tenant.to_owned(), sub)))
    }
}

/// An announcement as read: tenant, subscription, due time, job id.
type Named = (String, Uuid, i64, Vec<u8>);

impl CqlStore {
    /// Announces those of `jobs`' rows, just written, that were written late.
    pub(super) async fn announce_if_late<'a>(
        &self,
        jobs: impl IntoIterator<Item = &'a StoredJob>,
    ) -> Result<(), StoreError> {
        let written = now_ms();
        let late: Vec<&StoredJob> = jobs
            .into_iter()
            .filter(|j| needs_announcing(j.row_due_ms, written))
            .collect();
        if late.is_empty() {
            return Ok(());
        }
        tracing::debug!(rows = late.len(), "job rows written late, announced");
        let keys: Vec<(i32, [u8; 16])> = late
            .iter()
            .map(|j| (lane_i32(j.record.lane), id_key(j.record.id)))
            .collect();
        let statements = late
            .iter()
            .zip(&keys)
            .map(|(job, (lane_i, id))| {
                let r = &job.record;
                let row: BoxedRow<'_> =
                    Box::new((*lane_i, &*r.tenant, r.subscription, job.row_due_ms, &id[..]));
                (Part::Late(r.lane), &self.jt.late_announce, row)
            })
            .collect();
        self.in_batches(statements).await
    }

    /// The due jobs of `lane`'s announced rows (every `READ_EVERY_MS`, or at once after a page
    /// that left some unread), at most `per_tenant` of a queue and `limit` in all, none in `skip`
    /// nor leased by this process; announcements whose rows are gone are deleted.
    pub(super) async fn late_due(
        &self,
        lane: Lane,
        query: &DueQuery,
        clock: i64,
    ) -> Result<LatePage, StoreError> {
        if !self.late_reads.due(lane, clock) {
            return Ok(LatePage::default());
        }
        let lane_i = lane_i32(lane);
        let mut named: Vec<Named> = self
            .session
            .execute_iter(self.jt.late_list.clone(), (lane_i, READ_AT_ONCE))
            .await
            .map_err(unavailable)?
            .rows_stream::<Named>()
            .map_err(unavailable)?
            .try_collect()
            .await
            .map_err(unavailable)?;
        // A full destination's subscriptions: their rows are not read (nor their announcements
        // forgotten) until it has room (`DueQuery::pass_over`).
        named.retain(|(_, sub, _, _)| !query.pass_over.contains(&sub.as_u128()));
        let rows = all(named.iter().map(|(tenant, sub, due, id)| async move {
            let row: Option<(Option<Vec<u8>>,)> = self
                .first_row(&self.jt.job_at, (lane_i, tenant, *sub, *due, id.as_slice()))
                .await?;
            match row {
                Some((job,)) => self.paged_job(*due, id_of(id)?, job.as_deref()),
                None => Ok(None),
            }
        }))
        .await?;
        let (me, now) = (self.holds.owner, query.now_ms);
        let (mut page, mut live, mut gone) = (LatePage::default(), HashSet::new(), Vec::new());
        let mut per_queue: HashMap<(&str, Uuid), usize> = HashMap::new();
        for (named, job) in named.iter().zip(rows) {
            let Some(job) = job else {
                gone.push(named);
                continue;
            };
            live.insert((named.0.clone(), named.1));
            let due = named.2 <= now && !job.leased_by(me, now);
            if due && !query.skip.contains(&job.record.id) {
                let taken = per_queue.entry((&named.0, named.1)).or_default();
                if *taken >= query.per_tenant || page.jobs.len() >= query.limit {
                    page.more = true;
                } else {
                    *taken += 1;
                    page.jobs.push(job.record.clone());
                    page.queues.insert((lane, named.0.clone(), named.1));
                }
            }
            self.known.put(job);
        }
        let forget = gone
            .into_iter()
            .map(|(tenant, sub, due, id)| {
                let row: BoxedRow<'_> = Box::new((lane_i, &**tenant, *sub, *due, id.as_slice()));
                (Part::Late(lane), &self.jt.late_forget, row)
            })
            .collect();
        self.in_batches(forget).await?;
        let read_at = if page.more { i64::MIN } else { clock };
        self.late_reads.read(lane, read_at, live);
        Ok(page)
    }
}

/// What a read of a lane's announcements found due.
#[derive(Debug, Default)]
pub(super) struct LatePage {
    pub jobs: Vec<JobRecord>,
    /// Due jobs left unread (a queue's share or the page's size): read again at the next page.
    pub more: bool,
    /// The queues the jobs are of: not paged from their floors in the same page, so that no
    /// queue gets more than its share.
    pub queues: HashSet<(Lane, String, Uuid)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_1_rows_written_late_are_announced_and_no_others() {
        let written = 1_000_000;
        assert!(!needs_announcing(written - 500, written), "fresh");
        assert!(!needs_announcing(written + 60_000, written), "due ahead");
        assert!(
            needs_announcing(written - LATE_AFTER_MS - 1, written),
            "a replay, a stalled batch"
        );
    }
}
