//! Dead letters (R-DI-8) and delivery statistics (R-CP-12, the R-DI-10 streak) in the CQL store.
//!
//! Statistics are kept per lane (`delivery_stats`, one row per subscription and lane): a lane has
//! one holder, so its row is read, changed and written without a race; a reader merges the rows.
//! The holder keeps its rows in memory and writes a changed one at most once a second (and at a
//! clean stop): a crash loses at most a second of counts, never a job or a dead letter.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::concurrently::all;
use super::jobs::{id_key, lane_i32, StoredJob};
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::delivery::autodisable::Streak;
use crate::store::codec::{decode, encode};
use crate::store::{
    AttemptRecord, DeadLetter, DeliveryStats, JobRecord, Lane, StoreError, RECENT_OUTCOMES,
};

/// One lane's share of a subscription's statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LaneStats {
    pub stats: DeliveryStats,
    /// The lane's latest success: a success in any lane ends every lane's failure streak.
    pub last_success_ms: Option<i64>,
}

impl LaneStats {
    fn record(&mut self, a: &AttemptRecord) {
        self.stats.record(a);
        if a.success {
            self.last_success_ms = Some(self.last_success_ms.map_or(a.at_ms, |s| s.max(a.at_ms)));
        }
    }
}

/// A subscription's statistics from its lanes' rows: totals summed, the newest outcomes, and the
/// failure streak since the latest success in any lane. A lane keeps only the first and last
/// failure of its streak; when another lane's success falls between them, the streak is taken
/// to start at that lane's last failure (later than the truth, never earlier: auto-disable may
/// come late, never early).
pub(super) fn merge(rows: &[LaneStats]) -> DeliveryStats {
    let mut out = DeliveryStats::default();
    let last_success = rows.iter().filter_map(|r| r.last_success_ms).max();
    let mut recent: Vec<AttemptRecord> = Vec::new();
    for r in rows {
        out.delivered += r.stats.delivered;
        out.failed_attempts += r.stats.failed_attempts;
        out.dead_letters += r.stats.dead_letters;
        recent.extend(r.stats.recent.iter().cloned());
        let (Some(first), Some(last)) = (
            r.stats.streak.first_failure_ms,
            r.stats.streak.last_failure_ms,
        ) else {
            continue;
        };
        if last_success.is_some_and(|s| last <= s) {
            continue;
        }
        let first = match last_success {
            Some(s) if first <= s => last,
            _ => first,
        };
        let streak = &mut out.streak;
        streak.first_failure_ms = Some(streak.first_failure_ms.map_or(first, |f| f.min(first)));
        streak.last_failure_ms = Some(streak.last_failure_ms.map_or(last, |l| l.max(last)));
    }
    recent.sort_by_key(|a| a.at_ms);
    let extra = recent.len().saturating_sub(RECENT_OUTCOMES);
    recent.drain(..extra);
    out.recent = recent;
    out
}

type StatsKey = (String, Uuid, Lane);

/// How often a changed statistics row is written.
const FLUSH_EVERY_MS: i64 = 1_000;

/// How often an idle lane's poll looks for changed rows to write.
const IDLE_CHECK_MS: i64 = 250;

/// This process's statistics rows (of the lanes it holds), as last changed, and when an idle
/// poll last looked for rows to write.
#[derive(Debug, Default)]
pub(super) struct StatsRows(Mutex<HashMap<StatsKey, Kept>>, std::sync::atomic::AtomicI64);

#[derive(Debug)]
struct Kept {
    stats: LaneStats,
    written_ms: i64,
    dirty: bool,
}

impl StatsRows {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StatsKey, Kept>> {
        // A poisoned lock only means a panic elsewhere mid-update of counters: keep going.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether an idle poll should look for rows to write now (at most every `IDLE_CHECK_MS`).
    fn check_idle(&self, now: i64) -> bool {
        use std::sync::atomic::Ordering;
        let last = self.1.load(Ordering::Relaxed);
        now - last >= IDLE_CHECK_MS
            && self
                .1
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Rows changed and not written for `FLUSH_EVERY_MS` (all changed rows when `all`).
    fn due(&self, now: i64, all: bool) -> Vec<(StatsKey, LaneStats)> {
        self.lock()
            .iter()
            .filter(|(_, k)| k.dirty && (all || now - k.written_ms >= FLUSH_EVERY_MS))
            .map(|(key, k)| (key.clone(), k.stats.clone()))
            .collect()
    }

    fn written(&self, keys: &[(StatsKey, LaneStats)], now: i64) {
        let mut rows = self.lock();
        for (key, stats) in keys {
            if let Some(k) = rows.get_mut(key) {
                k.written_ms = now;
                k.dirty = k.stats != *stats; // changed again meanwhile: still to write
            }
        }
    }

    /// This process's rows of one subscription, by lane.
    fn of(&self, tenant: &str, sub: Uuid) -> Vec<(Lane, LaneStats)> {
        self.lock()
            .iter()
            .filter(|((t, s, _), _)| t == tenant && *s == sub)
            .map(|((_, _, lane), k)| (*lane, k.stats.clone()))
            .collect()
    }

    /// After `lane` changed hands: the rows another process wrote win over ours. Only that
    /// lane's: the rows of lanes held all along may hold outcomes not written yet.
    pub fn forget_lane(&self, lane: Lane) {
        self.lock().retain(|(_, _, l), _| *l != lane);
    }
}

impl CqlStore {
    pub(super) async fn put_dead_letter(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let job = &letter.job;
        self.session
            .execute_unpaged(
                &self.jt.dead_put,
                (
                    &job.tenant,
                    job.subscription,
                    &id_key(job.id)[..],
                    encode(letter),
                    // A dead letter lives as long as its event (R-OP-5).
                    Self::ttl(self.settings.retention_ttl_s),
                ),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn lane_stats(&self, key: &StatsKey) -> Result<LaneStats, StoreError> {
        let lane = lane_i32(key.2);
        let row: Option<(Option<Vec<u8>>,)> = self
            .first_row(&self.jt.stats_lane, (&key.0, key.1, lane))
            .await?;
        row.and_then(|(b,)| b)
            .map_or(Ok(LaneStats::default()), |b| decode(&b))
    }

    /// A subscription's rows by lane: as stored, with this process's newer rows over them.
    async fn all_lane_stats(&self, tenant: &str, sub: Uuid) -> Result<Vec<LaneStats>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.jt.stats_all, (tenant, sub))
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut by_lane: HashMap<Lane, LaneStats> = HashMap::new();
        for row in rows.rows::<(i32, Option<Vec<u8>>)>().map_err(unavailable)? {
            if let (lane, Some(blob)) = row.map_err(unavailable)? {
                by_lane.insert(Lane::try_from(lane).unwrap_or(0), decode(&blob)?);
            }
        }
        by_lane.extend(self.stats_rows.of(tenant, sub));
        Ok(by_lane.into_values().collect())
    }

    /// From a lane's poll: the rows a last settlement changed reach the store within about a
    /// second even when no further step comes (a reader in another process — a control
    /// process, another engine — merges the stored rows).
    pub(super) async fn flush_idle_stats(&self) -> Result<(), StoreError> {
        if self.stats_rows.check_idle(now_ms()) {
            self.flush_stats(false).await?;
        }
        Ok(())
    }

    /// Writes this process's changed rows (those kept a second, or all of them).
    pub(super) async fn flush_stats(&self, all_rows: bool) -> Result<(), StoreError> {
        let now = now_ms();
        let due = self.stats_rows.due(now, all_rows);
        all(due.iter().map(|((tenant, sub, lane), row)| async move {
            let lane = lane_i32(*lane);
            self.session
                .execute_unpaged(&self.jt.stats_put, (tenant, *sub, lane, encode(row)))
                .await
                .map_err(unavailable)?;
            Ok(())
        }))
        .await?;
        self.stats_rows.written(&due, now);
        Ok(())
    }

    /// Counts a step's attempts and dead letters in their lanes' rows; returns the merged streak
    /// of every subscription that saw a failure.
    pub(super) async fn record_outcomes(
        &self,
        attempts: &[(&JobRecord, &AttemptRecord)],
        dead: &[&JobRecord],
    ) -> Result<Vec<(String, Uuid, Streak)>, StoreError> {
        let key = |j: &JobRecord| (j.tenant.to_string(), j.subscription, j.lane);
        let keys: HashSet<StatsKey> = attempts
            .iter()
            .map(|(j, _)| key(j))
            .chain(dead.iter().map(|j| key(j)))
            .collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let missing: Vec<StatsKey> = {
            let rows = self.stats_rows.lock();
            keys.into_iter().filter(|k| !rows.contains_key(k)).collect()
        };
        let loaded = all(missing.into_iter().map(|k| async move {
            let stats = self.lane_stats(&k).await?;
            Ok::<_, StoreError>((k, stats))
        }))
        .await?;
        let mut failing: HashSet<(String, Uuid)> = HashSet::new();
        {
            let now = now_ms();
            let mut rows = self.stats_rows.lock();
            for (k, stats) in loaded {
                rows.entry(k).or_insert(Kept {
                    stats,
                    written_ms: now,
                    dirty: false,
                });
            }
            for (job, a) in attempts {
                if let Some(row) = rows.get_mut(&key(job)) {
                    row.stats.record(a);
                    row.dirty = true;
                }
                if !a.success {
                    failing.insert((job.tenant.to_string(), job.subscription));
                }
            }
            for job in dead {
                if let Some(row) = rows.get_mut(&key(job)) {
                    row.stats.stats.dead_letters += 1;
                    row.dirty = true;
                }
            }
        }
        self.flush_stats(false).await?;
        all(failing.into_iter().map(|(tenant, sub)| async move {
            let merged = merge(&self.all_lane_stats(&tenant, sub).await?);
            Ok::<_, StoreError>((tenant, sub, merged.streak))
        }))
        .await
    }

    pub(super) async fn subscription_stats(
        &self,
        tenant: &str,
        sub: Uuid,
    ) -> Result<DeliveryStats, StoreError> {
        Ok(merge(&self.all_lane_stats(tenant, sub).await?))
    }

    pub(super) async fn list_dead_letters(
        &self,
        tenant: &str,
        sub: Uuid,
        cursor: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, Option<u128>), StoreError> {
        let after = cursor.map_or([0u8; 0].to_vec(), |c| id_key(c).to_vec());
        // One more than asked: whether a next page exists.
        let want = i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX);
        let rows = self
            .session
            .execute_unpaged(&self.jt.dead_page, (tenant, sub, after, want))
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut out: Vec<DeadLetter> = Vec::new();
        for row in rows.rows::<(Vec<u8>, Vec<u8>)>().map_err(unavailable)? {
            let (_, letter) = row.map_err(unavailable)?;
            out.push(decode(&letter)?);
        }
        if out.len() > limit {
            out.truncate(limit);
            let next = out.last().map(|d| d.job.id);
            return Ok((out, next));
        }
        Ok((out, None))
    }

    /// Turns dead letters back into jobs due at `now_ms` with a fresh attempt budget.
    pub(super) async fn replay(
        &self,
        tenant: &str,
        sub: Uuid,
        only: Option<Vec<u128>>,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        let mut letters = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = self.list_dead_letters(tenant, sub, cursor, 500).await?;
            letters.extend(
                page.into_iter()
                    .filter(|d| only.as_ref().is_none_or(|ids| ids.contains(&d.job.id))),
            );
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        // The job first (a fresh row, newer than any tombstone of its earlier life), then the
        // dead letter goes: a crash in between leaves both, and a second replay is harmless.
        all(letters.iter().map(|letter| async move {
            let job = StoredJob::new(letter.job.revived(now_ms));
            let r = &job.record;
            self.known.forget(r.id);
            self.put_job(&job).await?;
            self.touch_queue(r.lane, &r.tenant, r.subscription).await?;
            self.session
                .execute_unpaged(&self.jt.dead_delete, (tenant, sub, &id_key(r.id)[..]))
                .await
                .map_err(unavailable)?;
            self.count(r.lane, 1).await
        }))
        .await?;
        Ok(letters.len() as u64)
    }

    /// Pending jobs over every lane (a gauge: see `job_counts`).
    pub(super) async fn pending(&self) -> Result<u64, StoreError> {
        self.write_counts(true).await?;
        let rows = self
            .session
            .execute_unpaged(&self.jt.count_all, ())
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut n: i64 = 0;
        for row in rows
            .rows::<(Option<scylla::value::Counter>,)>()
            .map_err(unavailable)?
        {
            if let (Some(c),) = row.map_err(unavailable)? {
                n += c.0;
            }
        }
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(at_ms: i64, success: bool) -> AttemptRecord {
        AttemptRecord {
            at_ms,
            success,
            error_class: None,
            status_code: None,
            detail: String::new(),
            duration_ms: 1,
        }
    }

    fn lane(outcomes: &[(i64, bool)]) -> LaneStats {
        let mut s = LaneStats::default();
        for (at, ok) in outcomes {
            s.record(&attempt(*at, *ok));
        }
        s
    }

    #[test]
    fn r_cp_12_lanes_merge_into_totals_and_the_newest_outcomes() {
        let a = lane(&[(1, true), (3, false)]);
        let b = lane(&(0..30).map(|i| (10 + i, true)).collect::<Vec<_>>());
        let m = merge(&[a, b]);
        assert_eq!((m.delivered, m.failed_attempts), (31, 1));
        assert_eq!(m.recent.len(), RECENT_OUTCOMES);
        assert_eq!(m.recent.last().map(|a| a.at_ms), Some(39));
        assert!(m.recent.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    }

    #[test]
    fn r_di_10_a_success_in_any_lane_ends_every_lanes_streak() {
        let failing = lane(&[(100, false), (200, false)]);
        let ok_later = lane(&[(300, true)]);
        assert_eq!(
            merge(&[failing.clone(), ok_later]).streak,
            Streak::default()
        );
        // A success between a lane's first and last failure: the streak starts no earlier than
        // the last failure after it.
        let ok_between = lane(&[(150, true)]);
        let m = merge(&[failing.clone(), ok_between]);
        assert_eq!(m.streak.first_failure_ms, Some(200));
        assert_eq!(m.streak.last_failure_ms, Some(200));
        // No success anywhere: the earliest first failure and the latest last one.
        let other = lane(&[(50, false), (120, false)]);
        let m = merge(&[failing, other]);
        assert_eq!(
            (m.streak.first_failure_ms, m.streak.last_failure_ms),
            (Some(50), Some(200))
        );
    }

    /// Taking one lane forgets that lane's rows only: a row of a lane held all along may hold
    /// outcomes not written yet (a CI run lost one when taking any lane cleared them all).
    #[test]
    fn r_cp_12_taking_a_lane_keeps_the_unwritten_rows_of_the_others() {
        let rows = StatsRows::default();
        let sub = Uuid::now_v7();
        for l in [1, 2] {
            rows.lock().insert(
                ("t".to_owned(), sub, l),
                Kept {
                    stats: lane(&[(100, false)]),
                    written_ms: 0,
                    dirty: true,
                },
            );
        }
        rows.forget_lane(2);
        let kept = rows.of("t", sub);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0, 1);
        assert_eq!(
            rows.due(0, true).len(),
            1,
            "lane 1's outcome is still to be written"
        );
    }
}
