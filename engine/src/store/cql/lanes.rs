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

use super::jobs::{all, lane_i32};
use super::lwt::lwt;
use super::{unavailable, CqlStore};
use crate::store::{Lane, StoreError};

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
            self.known.clear();
            self.stats_rows.clear();
            tracing::debug!(lane, "holding a delivery lane");
        }
        self.holds.set(lane, Some(until));
        Ok(true)
    }

    /// Ends this process's holds on `lanes` (a clean stop: no lease of ours is left behind).
    pub(super) async fn let_go(&self, lanes: &[Lane]) -> Result<(), StoreError> {
        self.flush_stats(true).await?;
        let me = self.holds.owner;
        let held: Vec<Lane> = lanes
            .iter()
            .copied()
            .filter(|l| self.holds.until(*l).is_some())
            .collect();
        all(held.iter().map(|&lane| async move {
            self.holds.set(lane, None);
            self.session
                .execute_unpaged(&self.jt.lane_let_go, (lane_i32(lane), me))
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
