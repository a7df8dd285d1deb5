//! Paging due jobs (CQL): per lane, per queue (tenant, subscription), by due time.
//!
//! Settled jobs leave tombstones at the front of their queue's partition for an hour, and a read
//! through them fails past the server's limit (Cassandra's `tombstone_failure_threshold`,
//! 100,000: a queue taking 220 events/s gets there in six minutes). So a queue is never read from
//! its start once it has a floor: the due time of the first live row seen last time, and at most
//! `FLOOR_TRAILS_MS` behind the time of that page. A row can appear below a floor only if it became
//! readable more than that after its due time (a replayed creation, a stalled batch); its writer
//! announces it and the holder reads it by its key (`late_rows.rs`). A queue this process has not
//! paged starts from its hint, the floor its last holder wrote down (`floor_hints.rs`), or from
//! its start when it has none; if that read fails, from a minute back, and the read from the
//! start is tried again every `WHOLE_AGAIN_MS` (`after_failed_whole_read`).
//!
//! Within a queue, a page goes on after the last row the previous page read (the lane holds
//! those, or leased them: their rows stay in place), until a page comes back short — the queue's
//! tail — and the next starts from the floor again. So a long backlog is read once per pass, not
//! once per page.
//!
//! Cost that follows work (issue 17): a queue whose page reached its tail and found nothing to
//! return is **quiet** — not read again until the earliest of: a job row this process writes to
//! it comes due (a retry, a replay), a lease of ours on one of its jobs runs out, the lane is
//! woken (`wake_pages`: the lane was handed jobs it could not take, or ingest could not hand them
//! over), or `QUIET_AT_MOST_MS` passes (what another process wrote; a job the lane let go of).
//! Jobs ingest hands over reach the lane without a page. A lane's queue list is likewise read
//! again only every `LIST_EVERY_MS`, or when this process creates a queue it did not list.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::concurrently::all;
use super::floor_hints::{hint_due, hint_for};
use super::jobs::{id_of, lane_i32, StoredJob};
use super::late_rows::FLOOR_TRAILS_MS;
use super::queue_touches::IDLE_BEFORE_DROP_MS;
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::codec::decode;
use crate::store::{DuePage, DueQuery, Lane, StoreError};

/// How often a failed read of a queue from its start is tried again.
const WHOLE_AGAIN_MS: i64 = 30_000;
/// How far back a queue never paged is read when its read from the start failed.
const FALLBACK_BACK_MS: i64 = 60_000;
/// Queues paged at once.
const QUEUES_AT_ONCE: usize = 16;
/// Extra rows read per queue past `per_tenant`, for the caller's held jobs to be skipped.
const SKIP_ROOM: usize = 256;
/// How often a lane with no queues is listed again.
const EMPTY_LANE_EVERY_MS: i64 = 500;
/// How often a lane's queue list is read again when this process created no queue in it.
const LIST_EVERY_MS: i64 = 2_000;
/// The longest a quiet queue goes unread.
const QUIET_AT_MOST_MS: i64 = 2_000;

/// Where a queue's next page starts.
#[derive(Debug, Clone)]
struct Floor {
    from_ms: i64,
    /// Not paged by this process yet: the next page starts from the queue's hint.
    unread: bool,
    /// When a failed read from the queue's start is tried again (`i64::MAX`: none failed).
    whole_again_at_ms: i64,
    /// The hint this process last read or wrote for the queue (`i64::MIN`: none), and when.
    hint_ms: i64,
    hint_at_ms: i64,
    /// The last row the previous page read, when it was not the queue's tail.
    after: Option<(i64, Vec<u8>)>,
    /// While `now` is before this, nothing of the queue is due that this process does not know
    /// of; `i64::MIN` when not quiet.
    quiet_until_ms: i64,
    /// The earliest due time of a row this process wrote to the queue that no page has read
    /// since it came due (`i64::MAX`: none): a quiet queue is read again by then.
    wake_at_ms: i64,
    /// The lane's wake count when the page that found the queue quiet began.
    lane_wakes: u64,
    /// Due rows this process wrote to the queue, counted: a page that read while one was
    /// written keeps its wake.
    writes: u64,
}

impl Floor {
    /// A queue to read from its hint at its next page.
    fn unread() -> Self {
        Self {
            from_ms: i64::MIN,
            unread: true,
            whole_again_at_ms: i64::MAX,
            hint_ms: i64::MIN,
            hint_at_ms: i64::MIN,
            after: None,
            quiet_until_ms: i64::MIN,
            wake_at_ms: i64::MAX,
            lane_wakes: 0,
            writes: 0,
        }
    }
}

/// A paged row: due time, job id, the job.
type PagedRow = (i64, Vec<u8>, Option<Vec<u8>>);

/// What one page of a queue reads.
#[derive(Clone, Copy)]
struct PageRead<'a> {
    q: &'a Queue,
    from: i64,
    after: Option<&'a (i64, Vec<u8>)>,
    now: i64,
    read: usize,
}

/// Where a queue is read from when its read from the start failed (a queue with no hint, past
/// the server's tombstone limit: one written before hints were, or whose hint lapsed): from its
/// floor if it has one, else `FALLBACK_BACK_MS` back. A job below that waits for a read from the
/// start that succeeds, tried again after `WHOLE_AGAIN_MS` (never lost); a queue is never dropped
/// on such a page, nor is a hint written from it.
fn after_failed_whole_read(floor: Option<&Floor>, now: i64) -> i64 {
    match floor {
        Some(f) if f.from_ms != i64::MIN => f.from_ms.min(now),
        _ => now - FALLBACK_BACK_MS,
    }
}

/// Rows read past `want` when going on after a cursor (a few may be held by the lane).
const CURSOR_SLACK: usize = 16;

/// Paging state of this process (floors per queue, lanes' queue lists, lanes' wakes).
#[derive(Debug, Default)]
pub(super) struct PagingState {
    floors: Mutex<HashMap<(Lane, String, Uuid), Floor>>,
    lists: Mutex<HashMap<Lane, Listed>>,
    wakes: Mutex<HashMap<Lane, u64>>,
}

/// A lane's queues as last listed: (tenant, subscription, write time of `touched` in µs).
#[derive(Debug, Clone)]
struct Listed {
    at_ms: i64,
    queues: Vec<(String, Uuid, Option<i64>)>,
}

type Queue = (Lane, String, Uuid, Option<i64>);

/// Where a page of a queue starts: the floor, the last page's cursor, and the queue's hint as
/// this process last read or wrote it, with when.
type PageStart = (i64, Option<(i64, Vec<u8>)>, (i64, i64));

impl PagingState {
    /// A job was just written to a queue of `lane` by this process: list the lane again at the
    /// next page unless the queue is listed already.
    pub fn queue_touched(&self, lane: Lane, tenant: &str, sub: Uuid) {
        let mut lists = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        let listed = lists
            .get(&lane)
            .is_some_and(|l| l.queues.iter().any(|(t, s, _)| t == tenant && *s == sub));
        if !listed {
            lists.remove(&lane);
        }
    }

    /// This process wrote a job's row at `due_ms` to a queue: a quiet queue wakes by then.
    pub fn due_written(&self, lane: Lane, tenant: &str, sub: Uuid, due_ms: i64) {
        let mut floors = self.floors.lock().unwrap_or_else(|p| p.into_inner());
        // A queue never paged gets a floor that pages it from its start, so that a first page
        // reading meanwhile sees the write.
        let f = floors
            .entry((lane, tenant.to_owned(), sub))
            .or_insert_with(Floor::unread);
        f.wake_at_ms = f.wake_at_ms.min(due_ms);
        f.writes += 1;
    }

    /// The next page of these lanes reads every queue.
    pub fn wake(&self, lanes: &[Lane]) {
        let mut wakes = self.wakes.lock().unwrap_or_else(|p| p.into_inner());
        for lane in lanes {
            *wakes.entry(*lane).or_default() += 1;
        }
    }

    fn wakes_of(&self, lane: Lane) -> u64 {
        let wakes = self.wakes.lock().unwrap_or_else(|p| p.into_inner());
        wakes.get(&lane).copied().unwrap_or(0)
    }

    /// The lane's queues as listed within their time, if any.
    fn listed(&self, lane: Lane, clock: i64) -> Option<Vec<(String, Uuid, Option<i64>)>> {
        let lists = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        let l = lists.get(&lane)?;
        let every = if l.queues.is_empty() {
            EMPTY_LANE_EVERY_MS
        } else {
            LIST_EVERY_MS
        };
        (clock - l.at_ms < every).then(|| l.queues.clone())
    }

    fn list(&self, lane: Lane, clock: i64, queues: Vec<(String, Uuid, Option<i64>)>) {
        let mut lists = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        lists.insert(
            lane,
            Listed {
                at_ms: clock,
                queues,
            },
        );
    }

    fn forget_list(&self, lane: Lane) {
        let mut lists = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        lists.remove(&lane);
    }
}

impl CqlStore {
    pub(super) async fn page_due(&self, query: &DueQuery) -> Result<DuePage, StoreError> {
        let (now, per_tenant, limit) = (query.now_ms, query.per_tenant, query.limit);
        // Holds, floors' scan times and the empty-lane cache follow the clock; `now` (the
        // caller's) only says which jobs are due.
        let clock = now_ms();
        let held = self.hold_lanes(&query.lanes, clock).await?;
        // Rows that may lie below their queue's floor, by their keys (`late_rows.rs`).
        let late = all(held.iter().map(|&lane| self.late_due(lane, query, clock))).await?;
        let mut out = DuePage::default();
        let mut served_late = HashSet::new();
        let mut rooms = query.rooms.clone();
        for page in late {
            for job in &page.jobs {
                rooms.spend(job.subscription.as_u128(), 1);
            }
            out.jobs.extend(page.jobs);
            out.more |= page.more;
            served_late.extend(page.queues);
        }
        let mut queues: Vec<Queue> = Vec::new();
        let listed = all(held.iter().map(|&lane| async move {
            if let Some(queues) = self.paging.listed(lane, clock) {
                return Ok((lane, queues));
            }
            let found = self.lane_queues(lane).await?;
            self.paging.list(lane, clock, found.clone());
            Ok::<_, StoreError>((lane, found))
        }))
        .await?;
        for (lane, found) in listed {
            let read =
                (found.into_iter()).filter(|(_, s, _)| !query.pass_over.contains(&s.as_u128()));
            queues.extend(read.map(|(t, s, w)| (lane, t, s, w)));
        }
        if !served_late.is_empty() {
            // Paged from its floor at the next page (`more`): a queue's announced jobs and its
            // page from the floor would make twice its share, and could name one job twice.
            let before = queues.len();
            queues.retain(|(l, t, s, _)| !served_late.contains(&(*l, t.clone(), *s)));
            out.more |= queues.len() < before;
        }
        if queues.is_empty() {
            return Ok(out);
        }
        queues.sort_unstable_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
        let start = (query.rotation % queues.len() as u64) as usize;
        queues.rotate_left(start);
        for chunk in queues.chunks(QUEUES_AT_ONCE) {
            if out.jobs.len() >= limit {
                // Queues not read may hold due jobs.
                out.more = true;
                break;
            }
            // A spent room's queues are not read: named cut, paged once it has room.
            let (spent, read): (Vec<&Queue>, Vec<&Queue>) =
                chunk.iter().partition(|q| rooms.spent(q.2.as_u128()));
            out.cut.extend(spent.iter().map(|q| q.2.as_u128()));
            if read.is_empty() {
                continue;
            }
            // The room left shared by the chunk's queues: a queue's cursor moves past what it
            // read, so reading more than can be returned would pass over jobs until the tail.
            // A shared room is split the same way among its queues in the chunk.
            let want = per_tenant.min((limit - out.jobs.len()).div_ceil(read.len()));
            let sharing = rooms.sharing(read.iter().map(|q| q.2.as_u128()));
            let made: Vec<_> = (read.iter().zip(&sharing))
                .map(|(q, &n)| {
                    let part = rooms.part(q.2.as_u128(), n, want);
                    self.page_queue(q, now, clock, part, &query.skip)
                })
                .collect();
            let pages: Vec<DuePage> = futures::stream::iter(made)
                .buffered(QUEUES_AT_ONCE)
                .try_collect()
                .await?;
            for (q, page) in read.iter().zip(pages) {
                let subscription = q.2.as_u128();
                rooms.spend(subscription, page.jobs.len());
                if page.more {
                    out.left_unread(&rooms, subscription);
                }
                let room = limit - out.jobs.len();
                out.more |= page.jobs.len() > room;
                out.jobs.extend(page.jobs.into_iter().take(room));
            }
        }
        Ok(out)
    }

    /// Up to `want` due jobs of one queue (not in `skip`); `more` when the queue has rows past
    /// those read, or due jobs among them beyond `want`.
    async fn page_queue(
        &self,
        q: &Queue,
        now: i64,
        clock: i64,
        want: usize,
        skip: &HashSet<u128>,
    ) -> Result<DuePage, StoreError> {
        let (lane, tenant, sub, _) = q;
        let key = (*lane, tenant.clone(), *sub);
        let floor = self
            .paging
            .floors
            .lock()
            .ok()
            .and_then(|f| f.get(&key).cloned());
        let lane_wakes = self.paging.wakes_of(*lane);
        let start = self.page_start(q, floor.as_ref(), lane_wakes, now, clock);
        let (from, after, hint) = match start.await? {
            Some(start) => start,
            None => return Ok(DuePage::default()),
        };
        let read = match after {
            Some(_) => want + CURSOR_SLACK,
            None => want + SKIP_ROOM.min(skip.len()),
        };
        let page = PageRead {
            q,
            from,
            after: after.as_ref(),
            now,
            read,
        };
        let (rows, from, whole_failed) = match self.read_page(&page).await {
            Ok(rows) => (rows, from, false),
            Err(e) if from == i64::MIN => {
                let from = after_failed_whole_read(floor.as_ref(), now);
                tracing::warn!(
                    lane, tenant, subscription = %sub, error = %e,
                    "a read of a queue from its start failed (past the server's tombstone \
                     limit?): its jobs are read from a minute back, and the read from the start \
                     is tried again in 30 s"
                );
                (
                    self.read_page(&PageRead { from, ..page }).await?,
                    from,
                    true,
                )
            }
            Err(e) => return Err(e),
        };
        let tail = rows.len() < read;
        // Behind the page's time on this process's clock, whatever the caller's `now` says.
        let trails = now.min(clock) - FLOOR_TRAILS_MS;
        let mut next = Floor {
            from_ms: match (&after, rows.first()) {
                (Some(_), _) => from,
                (None, Some((due, _, _))) => (*due).min(trails).max(from),
                (None, None) => from.max(trails),
            },
            unread: false,
            whole_again_at_ms: if whole_failed {
                clock + WHOLE_AGAIN_MS
            } else {
                i64::MAX
            },
            hint_ms: hint.0,
            hint_at_ms: hint.1,
            after: (!tail)
                .then(|| rows.last().map(|(due, id, _)| (*due, id.clone())))
                .flatten(),
            quiet_until_ms: i64::MIN,
            wake_at_ms: i64::MAX,
            lane_wakes,
            writes: floor.as_ref().map_or(0, |f| f.writes),
        };
        // A floor from a failed read is a guess: no hint comes of it.
        let hint_now = hint_for(next.from_ms, clock);
        let write_hint = !whole_failed && hint_due(next.hint_ms, next.hint_at_ms, hint_now, clock);
        if write_hint {
            (next.hint_ms, next.hint_at_ms) = (hint_now, clock);
        }
        let page_out = if rows.is_empty() {
            self.keep_floor(&key, next, now, tail.then_some(now + QUIET_AT_MOST_MS));
            if tail && after.is_none() && !whole_failed {
                self.drop_if_empty(q, from).await?;
            }
            DuePage::default()
        } else {
            self.due_of_page(&key, next, rows, now, want, skip, tail, after.is_some())?
        };
        if write_hint {
            if let Err(e) = self.write_floor_hint(*lane, tenant, *sub, hint_now).await {
                tracing::warn!(lane, tenant, subscription = %sub, error = %e,
                    "a queue's floor hint was not written: its next holder starts further back");
            }
        }
        Ok(page_out)
    }

    /// Where a queue's page starts: `(from, after, (hint, hint read or written at))`; `None` when
    /// the queue is quiet and need not be read. A queue this process has not paged starts from
    /// its hint (its start without one); after a failed read from the start, from the start
    /// again once `WHOLE_AGAIN_MS` passed; else from its floor, or after the last page's cursor.
    async fn page_start(
        &self,
        q: &Queue,
        floor: Option<&Floor>,
        lane_wakes: u64,
        now: i64,
        clock: i64,
    ) -> Result<Option<PageStart>, StoreError> {
        let (lane, tenant, sub, _) = q;
        let Some(f) = floor.filter(|f| !f.unread) else {
            let hint = self.floor_hint(*lane, tenant, *sub).await?;
            let from = hint.unwrap_or(i64::MIN);
            return Ok(Some((
                from,
                None,
                hint.map_or((i64::MIN, i64::MIN), |h| (h, clock)),
            )));
        };
        let hint = (f.hint_ms, f.hint_at_ms);
        // The caller's `now` before the floor (a clock set back): read it all.
        if clock >= f.whole_again_at_ms || f.from_ms > now {
            return Ok(Some((i64::MIN, None, hint)));
        }
        let quiet = now < f.quiet_until_ms.min(f.wake_at_ms) && f.lane_wakes == lane_wakes;
        if quiet {
            return Ok(None);
        }
        Ok(Some((f.from_ms, f.after.clone(), hint)))
    }

    /// The due jobs among a page's rows, keeping the queue's floor.
    #[allow(clippy::too_many_arguments)]
    fn due_of_page(
        &self,
        key: &(Lane, String, Uuid),
        next: Floor,
        rows: Vec<PagedRow>,
        now: i64,
        want: usize,
        skip: &HashSet<u128>,
        tail: bool,
        went_on: bool,
    ) -> Result<DuePage, StoreError> {
        let me = self.holds.owner;
        let mut out = Vec::new();
        // Rows past those read, or, for a page that went on from the last one's cursor, rows
        // before it that the last page passed over: the next page starts from the floor.
        let mut more = !tail || went_on;
        // Quiet at most until the first lease of ours on the page runs out.
        let mut quiet_until = now + QUIET_AT_MOST_MS;
        for (due, id, job) in rows {
            let id = id_of(&id)?;
            if skip.contains(&id) {
                continue;
            }
            if out.len() >= want {
                let due_too = self.paged_job(due, id, job.as_deref())?;
                more |= due_too.is_some_and(|j| !j.leased_by(me, now));
                continue;
            }
            let Some(job) = self.paged_job(due, id, job.as_deref())? else {
                continue;
            };
            // Leased by this process and the lease runs: not due. A lease of another process (an
            // earlier holder of the lane) counts for nothing: due now.
            if job.leased_by(me, now) {
                quiet_until = quiet_until.min(job.record.due_at_ms);
            } else {
                out.push(job.record.clone());
            }
            self.known.put(job);
        }
        // Rows skipped because the lane holds their jobs count as quiet too: the lane leases
        // them, or lets them go and a page within `QUIET_AT_MOST_MS` finds them again.
        let quiet = tail && out.is_empty();
        self.keep_floor(key, next, now, quiet.then_some(quiet_until));
        out.sort_by_key(|j| (j.due_at_ms, j.id));
        Ok(DuePage {
            jobs: out,
            more,
            cut: HashSet::new(),
        })
    }

    /// The rows of one page of a queue: due by `now`, from `from` or after `after`.
    async fn read_page(&self, page: &PageRead<'_>) -> Result<Vec<PagedRow>, StoreError> {
        let (lane, tenant, sub, _) = page.q;
        let (lane_i, now) = (lane_i32(*lane), page.now);
        let read_i = i32::try_from(page.read).unwrap_or(i32::MAX);
        let answer = match page.after {
            Some((due, id)) => {
                let values = (lane_i, tenant, *sub, *due, id.as_slice(), now, read_i);
                self.session
                    .execute_unpaged(&self.jt.job_page_after, values)
                    .await
            }
            None => {
                let values = (lane_i, tenant, *sub, page.from, now, read_i);
                self.session
                    .execute_unpaged(&self.jt.job_page, values)
                    .await
            }
        };
        answer
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?
            .rows::<PagedRow>()
            .map_err(unavailable)?
            .collect::<Result<_, _>>()
            .map_err(unavailable)
    }

    /// The job of a paged row: what this process last wrote of it when that is the row read (a
    /// write of ours may be under way), else the row's.
    pub(super) fn paged_job(
        &self,
        due: i64,
        id: u128,
        row: Option<&[u8]>,
    ) -> Result<Option<StoredJob>, StoreError> {
        if let Some(known) = self.known.get(id).filter(|k| k.row_due_ms == due) {
            return Ok(Some(known));
        }
        let Some(row) = row else { return Ok(None) };
        let job: StoredJob = decode(row)?;
        Ok((job.record.id == id && job.row_due_ms == due).then_some(job))
    }

    /// Keeps a queue's floor after a page that read what was due at `now`, quiet until
    /// `quiet_until` when given. A wake for a row this process wrote stays unless the page read
    /// after that row came due.
    fn keep_floor(
        &self,
        key: &(Lane, String, Uuid),
        mut next: Floor,
        now: i64,
        quiet_until: Option<i64>,
    ) {
        let mut floors = self.paging.floors.lock().unwrap_or_else(|p| p.into_inner());
        next.quiet_until_ms = quiet_until.unwrap_or(i64::MIN);
        if let Some(kept) = floors.get(key) {
            let written_meanwhile = kept.writes != next.writes;
            if written_meanwhile || kept.wake_at_ms > now {
                next.wake_at_ms = kept.wake_at_ms;
            }
            next.writes = kept.writes;
        }
        floors.insert(key.clone(), next);
    }

    /// Deletes a queue with no jobs at all and untouched for `IDLE_BEFORE_DROP_MS` — only the
    /// version of it that was read (`USING TIMESTAMP` of its `touched`): a job created meanwhile
    /// touched it later and keeps it, or (`queue_touches.rs`) skipped its touch because its
    /// creator touched it less than 20 s before, which the idle time rules out. "No jobs": none
    /// from the floor `from` on (due or not), and none below it that an announcement names.
    async fn drop_if_empty(&self, q: &Queue, from: i64) -> Result<(), StoreError> {
        let (lane, tenant, sub, touched_us) = q;
        let Some(touched_us) = *touched_us else {
            return Ok(());
        };
        if now_ms().saturating_mul(1_000) - touched_us < IDLE_BEFORE_DROP_MS * 1_000 {
            return Ok(());
        }
        if self.late_reads.names(*lane, tenant, *sub) {
            return Ok(());
        }
        let lane_i = lane_i32(*lane);
        let any: Option<(i64,)> = self
            .first_row(&self.jt.job_any, (lane_i, tenant, *sub, from))
            .await?;
        if any.is_some() {
            return Ok(());
        }
        self.session
            .execute_unpaged(&self.jt.queue_drop, (touched_us, lane_i, tenant, *sub))
            .await
            .map_err(unavailable)?;
        self.touches.dropped(*lane, tenant, *sub);
        if let Ok(mut f) = self.paging.floors.lock() {
            f.remove(&(*lane, tenant.clone(), *sub));
        }
        self.paging.forget_list(*lane);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_1_a_queue_whose_read_from_its_start_failed_is_read_from_a_minute_back() {
        let now = 1_000_000;
        assert_eq!(
            after_failed_whole_read(None, now),
            now - FALLBACK_BACK_MS,
            "never paged"
        );
        assert_eq!(
            after_failed_whole_read(Some(&Floor::unread()), now),
            now - FALLBACK_BACK_MS,
            "never paged, a row written meanwhile"
        );
        let floor = Floor {
            from_ms: now - 5_000,
            unread: false,
            ..Floor::unread()
        };
        assert_eq!(after_failed_whole_read(Some(&floor), now), now - 5_000);
        let ahead = Floor {
            from_ms: now + 5_000,
            unread: false,
            ..Floor::unread()
        };
        assert_eq!(
            after_failed_whole_read(Some(&ahead), now),
            now,
            "never past now"
        );
    }
}
