//! What a lane holds: the lanes it pages (following ownership, renewing holds), pages of due
//! jobs, jobs ingest hands over, and the scheduler they wait in.

use super::*;

impl DeliveryLane {
    /// Renews the holds on this shard's lanes without paging.
    pub(super) async fn keep_lanes(&self, lane: &LaneState) {
        let (store, lanes) = (self.store.clone(), lane.lanes.clone());
        if let Ok(Err(e)) = self
            .bridge
            .call(async move { store.keep_lanes(lanes).await })
            .await
        {
            store_failed(FailedStage::DeliveryPage);
            tracing::warn!(error = %e, "renewing delivery lane holds failed");
        }
    }

    /// Takes up the lanes this shard now owns and gives up those it no longer does: leased jobs
    /// of a lane given up that no worker has started are left to its next holder (they count a
    /// recovery there), then the hold goes, so the new owner need not wait for it to lapse.
    /// Attempts already running finish and settle here.
    pub(super) async fn follow_ownership(&self, lane: &mut LaneState) {
        let now = self.ownership.lanes_of(self.shard);
        if now == lane.lanes {
            return;
        }
        let gone: Vec<Lane> = lane
            .lanes
            .iter()
            .copied()
            .filter(|l| !now.contains(l))
            .collect();
        tracing::info!(shard = self.shard, lanes = ?now, gone = ?gone, "delivery lanes changed");
        lane.lanes = now;
        if gone.is_empty() {
            return;
        }
        let (left, kept): (Vec<Started>, Vec<Started>) = lane
            .ready
            .drain(..)
            .partition(|s| gone.contains(&s.job.lane));
        lane.ready.extend(kept);
        for s in left {
            lane.release(s.job.id);
        }
        let store = self.store.clone();
        if let Ok(Err(e)) = self
            .bridge
            .call(async move { store.release_lanes(gone).await })
            .await
        {
            tracing::warn!(error = %e, "could not let go of delivery lanes");
        }
    }

    /// Pages due jobs into the scheduler; true when the store says a limit (the lane's room, or
    /// a queue's share of a page) left due jobs unread.
    pub(super) async fn fetch(&self, lane: &mut LaneState) -> Result<bool, StoreError> {
        let room = self.config.held_max.saturating_sub(lane.held.len());
        let skip = lane
            .held
            .keys()
            .chain(lane.in_flight.keys())
            .copied()
            .collect();
        lane.rotation = lane.rotation.wrapping_add(1);
        let now = crate::clock::now_ms();
        let (rooms, reopened) = self.reopened_rooms(lane);
        let query = DueQuery {
            lanes: lane.lanes.clone(),
            now_ms: now,
            per_tenant: self.config.per_tenant,
            limit: room,
            rotation: lane.rotation,
            skip,
            pass_over: lane.spilled.passed_over(),
            rooms,
        };
        let page = match self.store.due_jobs_at_once(&query) {
            Some(page) => page,
            None => {
                let store = self.store.clone();
                self.bridge
                    .call(async move { store.due_jobs(query).await })
                    .await
                    .map_err(|e| StoreError::Unavailable(e.to_string()))??
            }
        };
        if !page.jobs.is_empty() {
            tracing::debug!(jobs = page.jobs.len(), more = page.more, "paged due jobs");
        }
        lane.tally.pages += 1;
        lane.tally.paged += page.jobs.len() as u64;
        lane.tally.page_ms += crate::clock::now_ms() - now;
        for job in page.jobs {
            lane.tally.paged_held += u64::from(self.hold(lane, job));
        }
        for subscription in page.cut {
            if let Some(destination) = reopened.get(&subscription) {
                lane.spilled.destination(destination, subscription);
            }
        }
        Ok(page.more)
    }

    /// The rooms of the destinations down to half since the last page, over the subscriptions
    /// they had turned away, and each such subscription's destination.
    fn reopened_rooms(&self, lane: &mut LaneState) -> (SharedRooms, FastMap<u128, String>) {
        let cap = crate::delivery::fairness::holding_cap(self.config.held_max);
        let mut rooms = SharedRooms::default();
        let mut of = FastMap::default();
        for (destination, subscriptions) in lane.spilled.take_reopened() {
            let holding = lane.held_per_destination.get(destination.as_str());
            let room = cap.saturating_sub(holding.copied().unwrap_or(0));
            rooms.add(subscriptions.iter().copied(), room);
            of.extend(subscriptions.into_iter().map(|s| (s, destination.clone())));
        }
        (rooms, of)
    }

    /// Takes jobs ingest handed over. Jobs left to the store (no room) are paged once there is
    /// room for them (`Spilled`); the store is told, so that page reads every queue.
    pub(super) fn take_or_wake(&self, lane: &mut LaneState, handed: Handoff) {
        if !self.take_handed(lane, handed) {
            self.store.wake_pages(&lane.lanes);
        }
    }

    /// Holds jobs ingest handed over (or readies the ones it leased); false when some were left
    /// to the store (no room, or their destination's share of held memory is full), so a page
    /// must fetch them later.
    fn take_handed(&self, lane: &mut LaneState, handed: Handoff) -> bool {
        let jobs = match handed {
            Handoff::Due(jobs) => jobs,
            Handoff::Leased(started) => {
                self.fresh.taken(self.shard, started.len());
                self.take_leased(lane, started);
                return true;
            }
        };
        let mut all = true;
        let count = jobs.len();
        lane.tally.handed += count as u64;
        // Subscriptions whose destination turned a job of this hand-off away: it has no room
        // for their later ones either (a backlog's hand-off can be 100,000 jobs of one
        // destination, each a subscription lookup only to be left behind).
        let mut refused = FastSet::default();
        for (i, job) in jobs.into_iter().enumerate() {
            if lane.held.len() >= self.config.held_max {
                lane.tally.handed_left += (count - i) as u64;
                lane.spilled.lane = true;
                return false;
            }
            // Already paged from the store (and perhaps leased) before the hand-off came.
            if lane.recent.contains(job.id) {
                continue;
            }
            let subscription = job.subscription.as_u128();
            let held = !refused.contains(&subscription) && self.hold(lane, job);
            if !held {
                refused.insert(subscription);
            }
            lane.tally.handed_left += u64::from(!held);
            all &= held;
        }
        all
    }

    /// Gives a due job to the scheduler, unless it is held or running already; false when its
    /// destination already holds its share of memory (the job stays in the store).
    pub(super) fn hold(&self, lane: &mut LaneState, job: JobRecord) -> bool {
        if lane.held.contains_key(&job.id) || lane.in_flight.contains_key(&job.id) {
            return true;
        }
        let sub = self.subs.get(&job.tenant, job.subscription);
        let destination = destination_of(sub.as_deref());
        let cap = crate::delivery::fairness::holding_cap(self.config.held_max);
        let holding = lane.held_per_destination.get_mut(destination.as_str());
        if holding.as_deref().copied().unwrap_or(0) >= cap {
            lane.spilled
                .destination(&destination, job.subscription.as_u128());
            return false;
        }
        // One lookup; the destination's name is copied only the first time it is held.
        match holding {
            Some(n) => *n += 1,
            None => {
                lane.held_per_destination.insert(destination.clone(), 1);
            }
        }
        let weight = weight_of(sub.as_ref().and_then(|s| s.plan_tier.as_deref()));
        lane.scheduler.push(
            &job.tenant,
            weight,
            Due {
                job: job.id,
                destination,
            },
        );
        lane.held.insert(job.id, job);
        true
    }
}

/// Where a subscription's attempts go: what the breakers and the per-destination caps count by.
pub(super) fn destination_of(sub: Option<&Subscription>) -> String {
    sub.and_then(|s| s.endpoint.clone()).unwrap_or_default()
}
