//! Who delivers a lane (CQL): an engine holds a lane for a short time, renewed while it pages it,
//! taken and renewed by lightweight transactions on the `lanes` row. Only the holder pages a
//! lane, so two engines never lease the same job at once; an engine that dies loses its lanes
//! when their hold lapses. A lease counts only for the process that took it (`jobs.rs`), so the
//! next holder finds the dead holder's leased jobs due at once, each lapse counted as a recovery
//! (R-DI-8), instead of waiting for each lease to run out.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::TryStreamExt;
use uuid::Uuid;

use super::concurrently::all;
use super::jobs::lane_i32;
use super::lwt::lwt;
use super::{unavailable, CqlStore};
use crate::store::{Lane, LaneReport, LaneSurvey, LaneSurveyFound, StoreError};

/// How recent an engine's ask for a lane must be for the holder of a stray to give it up.
const WANTED_FOR_MS: i64 = 10_000;

/// How long a hold lasts, and how early it is renewed.
const HOLD_MS: i64 = 10_000;
const RENEW_BEFORE_MS: i64 = 5_000;

/// This process's holds.
#[derive(Debug)]
pub(super) struct Holds {
    /// Who this process is in the `lanes` table.
    pub owner: Uuid,
    /// Lanes held, with when the hold ends.
    held: Mutex<HashMap<Lane, i64>>,
    /// Lanes another process holds, with when its hold ends as last read: not asked again
    /// before then (each ask is a serial read).
    others: Mutex<HashMap<Lane, i64>>,
}

impl Holds {
    pub fn new() -> Self {
        Self {
            owner: Uuid::now_v7(),
            held: Mutex::new(HashMap::new()),
            others: Mutex::new(HashMap::new()),
        }
    }

    fn held_elsewhere(&self, lane: Lane, now: i64) -> bool {
        self.others
            .lock()
            .ok()
            .and_then(|o| o.get(&lane).copied())
            .is_some_and(|until| until >= now)
    }

    fn elsewhere(&self, lane: Lane, until: Option<i64>) {
        if let Ok(mut o) = self.others.lock() {
            match until {
                Some(u) => o.insert(lane, u),
                None => o.remove(&lane),
            };
        }
    }

    /// Whether this process holds `lane` at `now` (a lease is taken only then).
    pub fn holds(&self, lane: Lane, now: i64) -> bool {
        self.until(lane).is_some_and(|u| u > now)
    }

    fn until(&self, lane: Lane) -> Option<i64> {
        self.held.lock().ok().and_then(|h| h.get(&lane).copied())
    }

    fn set(&self, lane: Lane, until: Option<i64>) {
        if let Ok(mut h) = self.held.lock() {
            match until {
                Some(u) => h.insert(lane, u),
                None => h.remove(&lane),
            };
        }
    }
}

impl CqlStore {
    /// The lanes of `lanes` this process holds now, taking or renewing holds as needed.
    pub(super) async fn hold_lanes(
        &self,
        lanes: &[Lane],
        now: i64,
    ) -> Result<Vec<Lane>, StoreError> {
        let checks = all(lanes.iter().map(|&lane| async move {
            if self
                .holds
                .until(lane)
                .is_some_and(|u| u - now > RENEW_BEFORE_MS)
            {
                return Ok((lane, true));
            }
            if self.holds.held_elsewhere(lane, now) {
                return Ok((lane, false));
            }
            Ok::<_, StoreError>((lane, self.try_hold(lane, now).await?))
        }))
        .await?;
        let mut held: Vec<Lane> = checks
            .into_iter()
            .filter(|(_, h)| *h)
            .map(|(l, _)| l)
            .collect();
        held.sort_unstable();
        Ok(held)
    }

    async fn try_hold(&self, lane: Lane, now: i64) -> Result<bool, StoreError> {
        let me = self.holds.owner;
        let until = now + HOLD_MS;
        let row: Option<(Option<Uuid>, Option<i64>)> = self
            .first_row(&self.jt.lane_read, (lane_i32(lane),))
            .await?;
        let (applied, taken) = match row {
            None => {
                let answer = lwt(self
                    .session
                    .execute_unpaged(&self.jt.lane_create, (lane_i32(lane), me, until))
                    .await
                    .map_err(unavailable)?)?;
                (answer.applied, true)
            }
            Some((owner, held_until)) => {
                let ours = owner == Some(me);
                if !ours && held_until.is_some_and(|u| u >= now) {
                    self.holds.elsewhere(lane, held_until);
                    (false, false)
                } else {
                    let answer = lwt(self
                        .session
                        .execute_unpaged(
                            &self.jt.lane_take,
                            (me, until, lane_i32(lane), owner, held_until),
                        )
                        .await
                        .map_err(unavailable)?)?;
                    (answer.applied, !ours)
                }
            }
        };
        if !applied {
            // Lost a race for it: someone holds it for about a hold's length.
            self.holds.set(lane, None);
            self.holds.elsewhere(lane, Some(now + HOLD_MS));
            return Ok(false);
        }
        self.holds.elsewhere(lane, None);
        if taken {
            // Another process may have written this lane's jobs and statistics since we last
            // held it.
            self.known.forget_lane(lane);
            self.stats_rows.forget_lane(lane);
            self.late_reads.forget_lane(lane);
            tracing::debug!(lane, "holding a delivery lane");
        }
        self.holds.set(lane, Some(until));
        Ok(true)
    }

    /// Ends this process's holds on `lanes` (a clean stop: no lease of ours is left behind).
    pub(super) async fn let_go(&self, lanes: &[Lane]) -> Result<(), StoreError> {
        self.flush_stats(true).await?;
        self.write_counts(true).await?;
        let me = self.holds.owner;
        let held: Vec<Lane> = lanes
            .iter()
            .copied()
            .filter(|l| self.holds.until(*l).is_some())
            .collect();
        // The hold ends now rather than at zero: a lane given up lapses like any other, so the
        // survey of strays waits its grace before adopting it (an assigned engine takes it first).
        let now = crate::clock::now_ms();
        all(held.iter().map(|&lane| async move {
            self.holds.set(lane, None);
            self.session
                .execute_unpaged(&self.jt.lane_let_go, (now, lane_i32(lane), me))
                .await
                .map_err(unavailable)?;
            Ok(())
        }))
        .await?;
        Ok(())
    }

    /// A lane's queues: (tenant, subscription, write time of `touched` in µs).
    pub(super) async fn lane_queues(
        &self,
        lane: Lane,
    ) -> Result<Vec<(String, Uuid, Option<i64>)>, StoreError> {
        self.session
            .execute_iter(self.jt.queue_list.clone(), (lane_i32(lane),))
            .await
            .map_err(unavailable)?
            .rows_stream::<(String, Uuid, Option<i64>)>()
            .map_err(unavailable)?
            .try_collect()
            .await
            .map_err(unavailable)
    }
}

impl CqlStore {
    /// `Store::survey_lanes`: a few plain reads per lane not held here, every few seconds.
    pub(super) async fn survey(&self, survey: LaneSurvey) -> Result<LaneSurveyFound, StoreError> {
        let me = self.holds.owner;
        let now = survey.now_ms;
        // Assigned lanes not held here: ask for those another process holds (a stray it
        // adopted, or a partition it has not let go of yet); for those nobody holds any more,
        // forget the last hold read, so the next page takes them at once instead of waiting out
        // that hold's end.
        all(survey
            .assigned
            .iter()
            .filter(|l| !self.holds.holds(**l, now))
            .map(|&lane| async move {
                let row: Option<(Option<Uuid>, Option<i64>)> = self
                    .first_row(&self.jt.lane_peek, (lane_i32(lane),))
                    .await?;
                match row {
                    Some((Some(holder), Some(until))) if holder != me && until >= now => {
                        self.holds.elsewhere(lane, Some(until));
                        self.session
                            .execute_unpaged(&self.jt.lane_want, (lane_i32(lane), me, now))
                            .await
                            .map_err(unavailable)?;
                    }
                    _ => self.holds.elsewhere(lane, None),
                }
                Ok(())
            }))
        .await?;
        let listed: Vec<i32> = self
            .session
            .execute_iter(self.jt.lanes_listed.clone(), ())
            .await
            .map_err(unavailable)?
            .rows_stream::<(i32,)>()
            .map_err(unavailable)?
            .map_ok(|(l,)| l)
            .try_collect()
            .await
            .map_err(unavailable)?;
        let listed: std::collections::HashSet<Lane> = listed
            .into_iter()
            .filter_map(|l| Lane::try_from(l).ok())
            .collect();
        let candidates: Vec<Lane> = listed
            .iter()
            .copied()
            .filter(|l| {
                !survey.assigned.contains(l)
                    && !survey.strays.contains(l)
                    && !self.holds.holds(*l, now)
            })
            .collect();
        let unheld = all(candidates.iter().map(|&lane| async move {
            let row: Option<(Option<Uuid>, Option<i64>)> = self
                .first_row(&self.jt.lane_peek, (lane_i32(lane),))
                .await?;
            let lapsed = row
                .and_then(|(_, until)| until)
                .is_none_or(|until| until < now - survey.grace_ms);
            Ok::<_, StoreError>(lapsed.then_some(lane))
        }))
        .await?;
        let give_up = all(survey.strays.iter().map(|&lane| {
            let listed = &listed;
            async move {
                if !listed.contains(&lane) {
                    return Ok::<_, StoreError>(Some(lane));
                }
                let asked: Option<(Option<Uuid>, Option<i64>)> = self
                    .first_row(&self.jt.lane_wanted, (lane_i32(lane),))
                    .await?;
                let wanted = asked.is_some_and(|(engine, at)| {
                    engine.is_some_and(|e| e != me) && at.is_some_and(|at| at > now - WANTED_FOR_MS)
                });
                Ok(wanted.then_some(lane))
            }
        }))
        .await?;
        let mut found = LaneSurveyFound {
            unheld: unheld.into_iter().flatten().collect(),
            give_up: give_up.into_iter().flatten().collect(),
        };
        found.unheld.sort_unstable();
        found.give_up.sort_unstable();
        Ok(found)
    }

    /// `Store::lane_report`.
    pub(super) async fn report(&self, lanes: Vec<Lane>) -> Result<Vec<LaneReport>, StoreError> {
        self.write_counts(true).await?;
        let now = crate::clock::now_ms();
        all(lanes.into_iter().map(|lane| async move {
            let row: Option<(Option<Uuid>, Option<i64>)> = self
                .first_row(&self.jt.lane_peek, (lane_i32(lane),))
                .await?;
            let count: Option<(Option<scylla::value::Counter>,)> = self
                .first_row(&self.jt.count_lane, (lane_i32(lane),))
                .await?;
            let (holder, until) = row.unwrap_or((None, None));
            Ok(LaneReport {
                lane,
                holder: holder.map(|h| h.to_string()),
                held_until_ms: until,
                held_here: self.holds.holds(lane, now),
                pending: Some(count.and_then(|(n,)| n).map_or(0, |c| c.0).max(0)),
            })
        }))
        .await
    }
}
