//! A lane's store steps: which held jobs to lease and which outcomes to write, the step's
//! answer (started, poisoned, not held), and undoing a step that failed.

use super::*;
use crate::fast_hash::FastSet;

impl DeliveryLane {
    /// Takes jobs for free workers and one round ahead; returns the ones to lease (the rest are
    /// settled now).
    ///
    /// Leasing ahead (up to `lease_ahead` × workers leased at once) keeps workers busy while the
    /// next store step is written: a finished attempt hands its worker to an already leased job,
    /// and one fsynced step leases many jobs. The cost: a crash also counts a recovery for the
    /// jobs leased but not yet started (never a duplicate: they were not attempted).
    pub(super) fn choose(&self, lane: &mut LaneState) -> Vec<u128> {
        let mut start = Vec::new();
        let now = crate::clock::now_ms();
        let busy = lane.in_flight.len();
        while busy + start.len() < (self.config.lease_ahead * self.config.workers) as usize {
            let Some((_, due)) = lane.scheduler.take_next() else {
                break;
            };
            let Some(job) = lane.held.remove(&due.job) else {
                lane.scheduler.done(&due.destination);
                continue;
            };
            lane.unhold(
                &due.destination,
                crate::delivery::fairness::holding_cap(self.config.held_max),
            );
            let sub = self.subs.get(&job.tenant, job.subscription);
            match self.admit(lane, &job, sub, &due.destination, now) {
                Ok(sub) => {
                    start.push(job.id);
                    let destination = due.destination;
                    lane.in_flight.insert(
                        job.id,
                        InFlight {
                            sub,
                            destination,
                            job,
                        },
                    );
                }
                Err(settled) => {
                    lane.scheduler.done(&due.destination);
                    lane.settle.push(Settlement {
                        job: job.id,
                        settled,
                    });
                }
            }
        }
        start
    }

    /// Takes jobs their ingest batch leased (`Handoff::Leased`) straight to `ready`, past the
    /// scheduler (the lane was idle when the batch asked), but through the same checks as a
    /// lease: a job that may not start now is settled, its start given back when deferred.
    pub(super) fn take_leased(&self, lane: &mut LaneState, started: Vec<Started>) {
        let now = crate::clock::now_ms();
        for s in started {
            let id = s.job.id;
            let sub = self.subs.get(&s.job.tenant, s.job.subscription);
            let destination = super::paging::destination_of(sub.as_deref());
            // Until its attempt the lane sees the job as due when it was created (`attempt`
            // measures the start's lag from there).
            let mut job = s.job.clone();
            job.due_at_ms = job.received_at_ms;
            match self.admit(lane, &job, sub, &destination, now) {
                Ok(sub) => {
                    lane.scheduler.running(&destination);
                    lane.recent.leased(id);
                    let flight = InFlight {
                        sub,
                        destination,
                        job,
                    };
                    lane.in_flight.insert(id, flight);
                    lane.ready.push_back(s);
                }
                Err(settled) => {
                    let settled = match settled {
                        Settled::Deferred(t) => Settled::Returned(t),
                        other => other,
                    };
                    lane.settle.push(Settlement { job: id, settled });
                }
            }
        }
    }

    /// Whether `job` of `sub` may start now (the subscription's state, its partner, the
    /// destination's breaker: `dispatch`), or how it is settled instead.
    fn admit(
        &self,
        lane: &mut LaneState,
        job: &JobRecord,
        sub: Option<Arc<Subscription>>,
        destination: &str,
        now: i64,
    ) -> Result<Arc<Subscription>, Settled> {
        // Looked up by `&str`; the keys are copied only for a new breaker.
        let breaker = match lane
            .breakers
            .get_mut(&*job.tenant)
            .and_then(|of_tenant| of_tenant.get_mut(destination))
        {
            Some(b) => b,
            None => lane
                .breakers
                .entry(job.tenant.to_string())
                .or_default()
                .entry(destination.to_owned())
                .or_insert_with(|| Breaker::new(self.config.breaker)),
        };
        let partner = sub.as_deref().and_then(|s| s.partner.as_deref()).map(|p| {
            match &self.control.partners {
                Some(directory) => directory.state(p, now),
                // No directory: nobody can say the partner is active.
                None => PartnerState::Unknown,
            }
        });
        let c = &self.counters;
        match dispatch(sub.as_deref(), partner, breaker, job, now) {
            Dispatch::Start => sub.ok_or(Settled::Cancelled),
            Dispatch::Defer(t) => {
                c.deferred.fetch_add(1, Ordering::Relaxed);
                Err(Settled::Deferred(t))
            }
            Dispatch::Cancel => {
                c.cancelled.fetch_add(1, Ordering::Relaxed);
                Err(Settled::Cancelled)
            }
            Dispatch::Bury(reason) => {
                c.dead_lettered.fetch_add(1, Ordering::Relaxed);
                Err(Settled::DeadLetter {
                    reason: reason.into(),
                    attempt: None,
                })
            }
        }
    }

    /// Sends the round's outcomes and the leases of `start` to the store as one step.
    pub(super) fn begin_step(&self, lane: &mut LaneState, start: Vec<u128>) -> StepInFlight {
        let now = crate::clock::now_ms();
        lane.tally.steps += 1;
        lane.tally.leased += start.len() as u64;
        lane.tally.settled += lane.settle.len() as u64;
        let step = DeliveryStep {
            settle: std::mem::take(&mut lane.settle),
            start: start.clone(),
            lease_until_ms: now + self.config.lease_ms,
            now_ms: now,
            recovery_limit: self.config.recovery_limit,
        };
        let kept = step.settle.clone();
        let store = self.store.clone();
        let reply: std::pin::Pin<Box<dyn std::future::Future<Output = StepReply>>> =
            if store.writes_anywhere() {
                // Queued for the store's writer straight from the shard (no tokio hop).
                Box::pin(async move { Ok(store.delivery_step(step).await) })
            } else {
                Box::pin(
                    self.bridge
                        .call(async move { store.delivery_step(step).await }),
                )
            };
        StepInFlight {
            reply,
            kept,
            published: std::mem::take(&mut lane.unpublished),
            start,
            now,
        }
    }

    /// Takes a written step in: leased jobs join `ready`; on failure the outcomes wait for the
    /// next step and the leases are given up (the jobs come back with a later page).
    pub(super) fn end_step(
        &self,
        lane: &mut LaneState,
        step: StepInFlight,
        written: StepReply,
    ) -> Result<(), StoreError> {
        lane.tally.step(crate::clock::now_ms() - step.now);
        let outcome = match written {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                self.undo_step(lane, step);
                return Err(e);
            }
            Err(e) => {
                self.undo_step(lane, step);
                return Err(StoreError::Unavailable(e.to_string()));
            }
        };
        for o in step.published {
            self.control.outcomes.publish(o);
        }
        for id in &outcome.poisoned {
            self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
            lane.release(*id);
        }
        if !outcome.not_held.is_empty() {
            tracing::debug!(
                jobs = outcome.not_held.len(),
                "leases refused: their lane is not held here"
            );
        }
        for id in &outcome.not_held {
            lane.release(*id);
        }
        for (tenant, id, streak) in outcome.streaks {
            self.check_autodisable(tenant, id, streak, step.now);
        }
        // A job asked for and neither started nor poisoned (the store no longer had it) must not
        // stay in flight: it would be skipped by every page and hold its destination's share.
        // Every job is answered in the usual step: the set is built only when one is missing.
        let answered = outcome.started.len() + outcome.poisoned.len() + outcome.not_held.len();
        if answered < step.start.len() {
            let answered: FastSet<u128> = outcome
                .started
                .iter()
                .map(|s| s.job.id)
                .chain(outcome.poisoned.iter().copied())
                .chain(outcome.not_held.iter().copied())
                .collect();
            for id in step.start.iter().filter(|id| !answered.contains(id)) {
                tracing::warn!(
                    job = format!("{id:032x}"),
                    "a job leased in this step was not found in the store"
                );
                lane.release(*id);
            }
        }
        for started in &outcome.started {
            lane.recent.leased(started.job.id);
        }
        lane.ready.extend(outcome.started);
        Ok(())
    }

    pub(super) fn undo_step(&self, lane: &mut LaneState, step: StepInFlight) {
        let mut kept = step.kept;
        kept.append(&mut lane.settle);
        lane.settle = kept;
        let mut published = step.published;
        published.append(&mut lane.unpublished);
        lane.unpublished = published;
        for id in step.start {
            lane.release(id);
        }
    }
}
