//! Paging due jobs (CQL): per lane, per queue (tenant, subscription), by due time.
//!
//! Settled jobs leave tombstones at the front of their queue's partition. So that a page does not
//! walk them each time, each queue pages from a floor: the due time of the first live row seen
//! last time (rows below it are gone). A job can appear below the floor — a replayed creation
//! keeps its claim's time — so each queue is also paged from its start at least every
//! `FULL_SCAN_EVERY_MS`: such a job waits at most that long, it is never lost.
//!
//! Within a queue, a page goes on after the last row the previous page read (the lane holds
//! those, or leased them: their rows stay in place), until a page comes back short — the queue's
//! tail — and the next starts from the floor again. So a long backlog is read once per pass, not
//! once per page.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::jobs::{all, id_of, lane_i32};
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::{JobRecord, Lane, StoreError};

const FULL_SCAN_EVERY_MS: i64 = 30_000;
/// How far behind `now` the floor of a queue with nothing due may move up to: a job created now
/// carries its claim's time, a little earlier.
const FLOOR_LAG_MS: i64 = 60_000;
/// A due row whose job says another due time is left over from a move that crashed — once it is
/// this old; a younger one may be a move still under way.
const STALE_AFTER_MS: i64 = 60_000;
/// Queues paged at once.
const QUEUES_AT_ONCE: usize = 16;
/// Extra rows read per queue past `per_tenant`, for the caller's held jobs to be skipped.
const SKIP_ROOM: usize = 256;
/// How often a lane with no queues is listed again.
const EMPTY_LANE_EVERY_MS: i64 = 500;

/// Where a queue's next page starts.
#[derive(Debug, Clone)]
struct Floor {
    from_ms: i64,
    full_scan_at_ms: i64,
    /// The last row the previous page read, when it was not the queue's tail.
    after: Option<(i64, Vec<u8>)>,
}

/// Rows read past `want` when going on after a cursor (a few may be held by the lane).
const CURSOR_SLACK: usize = 16;

/// Paging state of this process (floors per queue, lanes last seen empty).
#[derive(Debug, Default)]
pub(super) struct PagingState {
    floors: Mutex<HashMap<(Lane, String, Uuid), Floor>>,
    empty_lanes: Mutex<HashMap<Lane, i64>>,
}

type Queue = (Lane, String, Uuid, Option<i64>);

impl PagingState {
    /// A job was just created in `lane` by this process: list it at the next page.
    pub fn lane_touched(&self, lane: Lane) {
        if let Ok(mut e) = self.empty_lanes.lock() {
            e.remove(&lane);
        }
    }
}

impl CqlStore {
    pub(super) async fn page_due(
        &self,
        lanes: &[Lane],
        now: i64,
        per_tenant: usize,
        limit: usize,
        rotation: u64,
        skip: Arc<HashSet<u128>>,
    ) -> Result<Vec<JobRecord>, StoreError> {
        // Holds, floors' scan times and the empty-lane cache follow the clock; `now` (the
        // caller's) only says which jobs are due.
        let clock = now_ms();
        let held = self.hold_lanes(lanes, clock).await?;
        let mut queues: Vec<Queue> = Vec::new();
        let listed = all(held.iter().map(|&lane| async move {
            let recently_empty = self
                .paging
                .empty_lanes
                .lock()
                .ok()
                .and_then(|e| e.get(&lane).copied())
                .is_some_and(|at| clock - at < EMPTY_LANE_EVERY_MS);
            if recently_empty {
                return Ok((lane, Vec::new()));
            }
            let found = self.lane_queues(lane).await?;
            if let Ok(mut e) = self.paging.empty_lanes.lock() {
                if found.is_empty() {
                    e.insert(lane, clock);
                } else {
                    e.remove(&lane);
                }
            }
            Ok::<_, StoreError>((lane, found))
        }))
        .await?;
        for (lane, found) in listed {
            queues.extend(found.into_iter().map(|(t, s, w)| (lane, t, s, w)));
        }
        if queues.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        queues.sort_unstable_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
        let start = (rotation % queues.len() as u64) as usize;
        queues.rotate_left(start);
        let mut out = Vec::new();
        for chunk in queues.chunks(QUEUES_AT_ONCE) {
            // The room left shared by the chunk's queues: a queue's cursor moves past what it
            // read, so reading more than can be returned would pass over jobs until the tail.
            let want = per_tenant.min((limit - out.len()).div_ceil(chunk.len()));
            let made: Vec<_> = chunk
                .iter()
                .map(|q| self.page_queue(q, now, clock, want, &skip))
                .collect();
            let pages: Vec<Vec<JobRecord>> = futures::stream::iter(made)
                .buffered(QUEUES_AT_ONCE)
                .try_collect()
                .await?;
            for page in pages {
                let room = limit - out.len();
                out.extend(page.into_iter().take(room));
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Up to `want` due jobs of one queue (not in `skip`).
    async fn page_queue(
        &self,
        q: &Queue,
        now: i64,
        clock: i64,
        want: usize,
        skip: &HashSet<u128>,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let (lane, tenant, sub, touched_us) = q;
        let key = (*lane, tenant.clone(), *sub);
        let floor = self
            .paging
            .floors
            .lock()
            .ok()
            .and_then(|f| f.get(&key).cloned());
        let full = floor
            .as_ref()
            .is_none_or(|f| clock - f.full_scan_at_ms >= FULL_SCAN_EVERY_MS || f.from_ms > now);
        let (from, after) = match &floor {
            Some(f) if !full => (f.from_ms, f.after.clone()),
            _ => (i64::MIN, None),
        };
        let lane_i = lane_i32(*lane);
        let read = match after {
            Some(_) => want + CURSOR_SLACK,
            None => want + SKIP_ROOM.min(skip.len()),
        };
        let read_i = i32::try_from(read).unwrap_or(i32::MAX);
        let answer = match &after {
            Some((due, id)) => {
                let values = (lane_i, tenant, *sub, *due, id.as_slice(), now, read_i);
                self.session
                    .execute_unpaged(&self.jt.due_page_after, values)
                    .await
            }
            None => {
                let values = (lane_i, tenant, *sub, from, now, read_i);
                self.session
                    .execute_unpaged(&self.jt.due_page, values)
                    .await
            }
        };
        let rows: Vec<(i64, Vec<u8>, Option<i64>)> = answer
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?
            .rows::<(i64, Vec<u8>, Option<i64>)>()
            .map_err(unavailable)?
            .collect::<Result<_, _>>()
            .map_err(unavailable)?;

        let next = Floor {
            from_ms: match (&after, rows.first()) {
                (Some(_), _) => from,
                (None, Some((due, _, _))) => *due,
                (None, None) => from.max(now - FLOOR_LAG_MS),
            },
            full_scan_at_ms: match &floor {
                Some(f) if !full => f.full_scan_at_ms,
                _ => clock,
            },
            after: (rows.len() == read)
                .then(|| rows.last().map(|(due, id, _)| (*due, id.clone())))
                .flatten(),
        };
        if let Ok(mut f) = self.paging.floors.lock() {
            f.insert(key.clone(), next);
        }
        if rows.is_empty() {
            if full && after.is_none() {
                self.drop_if_empty(*lane, tenant, *sub, *touched_us).await?;
            }
            return Ok(Vec::new());
        }

        let mut candidates = Vec::new();
        for (due, id, written) in rows {
            let id = id_of(&id)?;
            if !skip.contains(&id) && candidates.len() < want {
                candidates.push((due, id, written));
            }
        }
        let loaded = all(candidates.iter().map(|&(due, id, written)| async move {
            Ok::<_, StoreError>((due, id, written, self.load_job(id).await?))
        }))
        .await?;
        let me = self.holds.owner;
        let mut out = Vec::with_capacity(loaded.len());
        let mut stale = Vec::new();
        for (due, id, written, job) in loaded {
            match job {
                // Leased by this process and the lease runs: not due. A lease of another process
                // (an earlier holder of the lane) counts for nothing: due now.
                Some(job) if job.row_due_ms == due => {
                    if !job.leased_by(me, now) {
                        out.push(job.record.clone());
                    }
                    self.known.put(job);
                }
                // Its job is gone, or names another row and this one is a crashed move's leftover.
                None => stale.push((due, id)),
                Some(_) if written.is_none_or(|w| clock - w > STALE_AFTER_MS) => {
                    stale.push((due, id))
                }
                Some(_) => {} // a move under way: the job is paged at its new row
            }
        }
        all(stale
            .iter()
            .map(|&(due, id)| self.delete_due(*lane, tenant, *sub, due, id)))
        .await?;
        out.sort_by_key(|j| (j.due_at_ms, j.id));
        Ok(out)
    }

    /// Deletes a queue with no jobs at all — only the version of it that was read (`USING
    /// TIMESTAMP` of its `touched`): a job created meanwhile touched it later and keeps it.
    async fn drop_if_empty(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
        touched_us: Option<i64>,
    ) -> Result<(), StoreError> {
        let Some(touched_us) = touched_us else {
            return Ok(());
        };
        let lane_i = lane_i32(lane);
        let any: Option<(i64,)> = self
            .first_row(&self.jt.due_any, (lane_i, tenant, sub))
            .await?;
        if any.is_some() {
            return Ok(());
        }
        self.session
            .execute_unpaged(&self.jt.queue_drop, (touched_us, lane_i, tenant, sub))
            .await
            .map_err(unavailable)?;
        if let Ok(mut f) = self.paging.floors.lock() {
            f.remove(&(lane, tenant.to_owned(), sub));
        }
        Ok(())
    }
}
