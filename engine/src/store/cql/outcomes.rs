//! Dead letters (R-DI-8) and delivery statistics (R-CP-12, the R-DI-10 streak) in the CQL store.
//!
//! Statistics are kept per lane (`delivery_stats`, one row per subscription and lane): a lane has
//! one holder, so its row is read, changed and written without a race; a reader merges the rows.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::jobs::{all, id_key};
use super::{unavailable, CqlStore};
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
                ),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn lane_stats(&self, key: &StatsKey) -> Result<LaneStats, StoreError> {
        let lane = i32::try_from(key.2).unwrap_or(i32::MAX);
        let row: Option<(Option<Vec<u8>>,)> = self
            .first_row(&self.jt.stats_lane, (&key.0, key.1, lane))
            .await?;
        row.and_then(|(b,)| b)
            .map_or(Ok(LaneStats::default()), |b| decode(&b))
    }

    async fn all_lane_stats(&self, tenant: &str, sub: Uuid) -> Result<Vec<LaneStats>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.jt.stats_all, (tenant, sub))
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut out = Vec::new();
        for row in rows.rows::<(Option<Vec<u8>>,)>().map_err(unavailable)? {
            if let (Some(blob),) = row.map_err(unavailable)? {
                out.push(decode(&blob)?);
            }
        }
        Ok(out)
    }

    /// Counts a step's attempts and dead letters in their lanes' rows; returns the merged streak
    /// of every subscription that saw a failure.
    pub(super) async fn record_outcomes(
        &self,
        attempts: &[(&JobRecord, &AttemptRecord)],
        dead: &[&JobRecord],
    ) -> Result<Vec<(String, Uuid, Streak)>, StoreError> {
        let key = |j: &JobRecord| (j.tenant.clone(), j.subscription, j.lane);
        let keys: HashSet<StatsKey> = attempts
            .iter()
            .map(|(j, _)| key(j))
            .chain(dead.iter().map(|j| key(j)))
            .collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let loaded = all(keys.into_iter().map(|k| async move {
            let stats = self.lane_stats(&k).await?;
            Ok::<_, StoreError>((k, stats))
        }))
        .await?;
        let mut rows: HashMap<StatsKey, LaneStats> = loaded.into_iter().collect();
        let mut failing: HashSet<(String, Uuid)> = HashSet::new();
        for (job, a) in attempts {
            if let Some(row) = rows.get_mut(&key(job)) {
                row.record(a);
            }
            if !a.success {
                failing.insert((job.tenant.clone(), job.subscription));
            }
        }
        for job in dead {
            if let Some(row) = rows.get_mut(&key(job)) {
                row.stats.dead_letters += 1;
            }
        }
        all(rows.iter().map(|((tenant, sub, lane), row)| async move {
            let lane = i32::try_from(*lane).unwrap_or(i32::MAX);
            self.session
                .execute_unpaged(&self.jt.stats_put, (tenant, *sub, lane, encode(row)))
                .await
                .map_err(unavailable)?;
            Ok(())
        }))
        .await?;
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
            let job = JobRecord {
                due_at_ms: now_ms,
                attempts: 0,
                starts: 0,
                last: None,
                ..letter.job.clone()
            };
            self.put_due(&job).await?;
            self.session
                .execute_unpaged(&self.jt.job_put, (&id_key(job.id)[..], encode(&job)))
                .await
                .map_err(unavailable)?;
            self.touch_queue(job.lane, &job.tenant, job.subscription)
                .await?;
            self.session
                .execute_unpaged(&self.jt.dead_delete, (tenant, sub, &id_key(job.id)[..]))
                .await
                .map_err(unavailable)?;
            self.count(job.lane, 1).await
        }))
        .await?;
        Ok(letters.len() as u64)
    }

    /// Pending jobs over every lane (a gauge: see `job_counts`).
    pub(super) async fn pending(&self) -> Result<u64, StoreError> {
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
}
