//! Who delivers a lane (CQL): an engine holds a lane for a short time, renewed while it pages it,
//! taken and renewed by lightweight transactions on the `lanes` row. Only the holder pages a
//! lane, so two engines never lease the same job at once; an engine that dies loses its lanes
//! when their hold lapses, and whoever takes a lane after another holder releases that holder's
//! job leases at once (they are due now, each keeping its `starts`, so the lapse counts as a
//! recovery, R-DI-8) instead of waiting for each lease to lapse.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::TryStreamExt;
use uuid::Uuid;

use super::jobs::{all, id_of};
use super::lwt::lwt;
use super::{unavailable, CqlStore};
use crate::store::{JobRecord, Lane, StoreError};

/// How long a hold lasts, and how early it is renewed.
const HOLD_MS: i64 = 10_000;
const RENEW_BEFORE_MS: i64 = 5_000;
/// How far ahead a released holder's leases are looked for: beyond any lease's length.
const LEASE_HORIZON_MS: i64 = 10 * 60_000;

/// This process's holds.
#[derive(Debug)]
pub(super) struct Holds {
    /// Who this process is in the `lanes` table.
    pub owner: Uuid,
    /// Lanes held, with when the hold ends.
    held: Mutex<HashMap<Lane, i64>>,
}

impl Holds {
    pub fn new() -> Self {
        Self {
            owner: Uuid::now_v7(),
            held: Mutex::new(HashMap::new()),
        }
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

fn lane_i32(lane: Lane) -> i32 {
    i32::try_from(lane).unwrap_or(i32::MAX)
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
        let (applied, release) = match row {
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
            self.holds.set(lane, None);
            return Ok(false);
        }
        if release {
            let released = self.release_leases(lane, now).await?;
            if released > 0 {
                tracing::info!(
                    lane,
                    released,
                    "took a lane: its earlier holder's leases are due now"
                );
            }
        }
        self.holds.set(lane, Some(until));
        Ok(true)
    }

    /// Makes every leased job of `lane` due now (its holder is gone).
    async fn release_leases(&self, lane: Lane, now: i64) -> Result<usize, StoreError> {
        let mut released = 0;
        for (tenant, sub, _) in self.lane_queues(lane).await? {
            let rows = self
                .session
                .execute_iter(
                    self.jt.due_page.clone(),
                    (
                        lane_i32(lane),
                        &tenant,
                        sub,
                        now + 1,
                        now + LEASE_HORIZON_MS,
                        i32::MAX,
                    ),
                )
                .await
                .map_err(unavailable)?
                .rows_stream::<(i64, Vec<u8>, Option<i64>)>()
                .map_err(unavailable)?
                .try_collect::<Vec<_>>()
                .await
                .map_err(unavailable)?;
            let ids = rows
                .iter()
                .map(|(_, id, _)| id_of(id))
                .collect::<Result<Vec<_>, _>>()?;
            let jobs = all(ids.into_iter().map(|id| self.load_job(id))).await?;
            let moves: Vec<(JobRecord, JobRecord)> = jobs
                .into_iter()
                .flatten()
                .filter(|j| j.starts > j.attempts && j.due_at_ms > now)
                .map(|j| {
                    let due = JobRecord {
                        due_at_ms: now,
                        ..j.clone()
                    };
                    (j, due)
                })
                .collect();
            released += moves.len();
            self.move_jobs(&moves).await?;
        }
        Ok(released)
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
