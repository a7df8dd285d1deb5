//! One attempt and what follows it: the attempt on the tokio side, its outcome into the breaker
//! and the next step's settlements, the live outcome broadcast, the subscription's delivery
//! marks and auto-disable.

use super::*;

impl DeliveryLane {
    /// One attempt: a webhook on this shard (`shard_webhook`), with the shard's opened signing
    /// keys (`KeyCache`), every other kind on the tokio side through the bridge, which opens its
    /// secret or credential in memory for it.
    pub(super) fn attempt(&self, lane: &mut LaneState, started: Started) -> AttemptFuture {
        let id = started.job.id;
        let now = crate::clock::now_ms();
        let lag = &mut lane.lag;
        let sub = lane.in_flight.get_mut(&id).map(|f| {
            // Until now the job is as it was paged: due when it became due, not at its lease.
            lag.started(now - f.job.due_at_ms);
            f.job = started.job;
            f.sub.clone()
        });
        let Some(sub) = sub else {
            return Box::pin(async move { (id, no_answer(), crate::clock::now_ms()) });
        };
        if let Some(webhooks) = lane.shard_webhooks_for(&sub) {
            let keys = lane.signing_keys.keys(&self.control.keyring, &sub, now);
            return Box::pin(async move {
                let begun = crate::clock::now_ms();
                let event = event_out(&started.event);
                let outcome = match keys {
                    Ok(keys) => {
                        let a = hub_core::sink::webhook_attempt(&sub, &event, begun);
                        webhooks.send(&a, &keys).await
                    }
                    Err(refused) => refused,
                };
                (id, outcome, begun)
            });
        }
        let keyring = self.control.keyring.clone();
        let sinks = self.control.sinks.clone();
        let reply = self.bridge.call(async move {
            let begun = crate::clock::now_ms();
            let outcome = attempt(&sinks, &keyring, &sub, &started.event, begun).await;
            (outcome, begun)
        });
        Box::pin(async move {
            match reply.await {
                Ok((outcome, begun)) => (id, outcome, begun),
                Err(_) => (id, no_answer(), crate::clock::now_ms()),
            }
        })
    }

    /// Turns a finished attempt into a settlement for the next step.
    pub(super) fn finished(&self, lane: &mut LaneState, (id, outcome, started_ms): AttemptDone) {
        let Some(f) = lane.in_flight.remove(&id) else {
            return;
        };
        lane.scheduler.done(&f.destination);
        if let Some(n) = lane.running.get_mut(&f.destination) {
            *n = n.saturating_sub(1);
        }
        let now = crate::clock::now_ms();
        lane.tally.attempt(now - started_ms);
        if let Some(b) = lane
            .breakers
            .get_mut(&*f.job.tenant)
            .and_then(|of_tenant| of_tenant.get_mut(&f.destination))
        {
            let was_closed = matches!(b.state, crate::delivery::breaker::State::Closed { .. });
            b.record(now, outcome.success);
            let is_closed = matches!(b.state, crate::delivery::breaker::State::Closed { .. });
            let open = &crate::telemetry::METRICS.breakers_open;
            match (was_closed, is_closed) {
                (true, false) => {
                    open.inc();
                }
                (false, true) => {
                    open.dec();
                }
                _ => {}
            }
        }
        crate::telemetry::AttemptSettled {
            tenant: &f.job.tenant,
            subscription: f.job.subscription,
            event_id: f.job.event_id,
            sink: f.sub.sink_kind,
            attempt: f.job.attempts + 1,
            outcome: &outcome,
            received_at_ms: f.job.received_at_ms,
        }
        .emit(now);
        if lane.marks.due(&f.sub, outcome.success, now) {
            let mark = hub_core::control_store::DeliveryMark::of(&f.sub, outcome.success, now);
            self.marks.send(mark);
        }
        let settled = after_attempt(
            &f.job,
            &curve_of(&f.sub),
            &outcome,
            started_ms,
            now,
            &mut lane.rng,
        );
        // Told to live streams once the step that records it is durable (`steps.rs`): a client
        // that saw `dead_lettered` finds the dead letter when it asks.
        lane.unpublished.extend(outcome_of(&f.job, &settled));
        let c = &self.counters;
        match &settled {
            Settled::Delivered(_) => c.delivered.fetch_add(1, Ordering::Relaxed),
            Settled::DeadLetter { .. } => {
                tracing::info!(
                    tenant = &*f.job.tenant,
                    subscription = %f.job.subscription,
                    event = %f.job.event_id,
                    attempts = f.job.attempts + 1,
                    "dead-lettered"
                );
                c.failed_attempts.fetch_add(1, Ordering::Relaxed);
                c.dead_lettered.fetch_add(1, Ordering::Relaxed)
            }
            _ => c.failed_attempts.fetch_add(1, Ordering::Relaxed),
        };
        lane.settle.push(Settlement { job: id, settled });
    }

    /// Auto-disable (R-DI-10): a streak that passes both gates stops the subscription, unless
    /// switched off. Failures before the last resume never count.
    pub(super) fn check_autodisable(
        &self,
        tenant: String,
        id: uuid::Uuid,
        streak: Streak,
        now: i64,
    ) {
        let Some(sub) = self.subs.get(&tenant, id) else {
            return;
        };
        let mut streak = streak;
        if let (Some(resumed), Some(first)) = (sub.marks.resumed_at_ms, streak.first_failure_ms) {
            if streak.last_failure_ms.is_some_and(|l| l < resumed) {
                return;
            }
            streak.first_failure_ms = Some(first.max(resumed));
        }
        let Some(verdict) = streak.verdict(now, &self.config.autodisable) else {
            return;
        };
        if !sub.enabled || sub.paused {
            return;
        }
        self.counters.auto_disabled.fetch_add(1, Ordering::Relaxed);
        let control = self.control.clone();
        // Fire and forget: the follower brings the change back; a lost race is retried by the
        // next failing step, since the streak stays.
        self.bridge.spawn(async move {
            for _ in 0..3 {
                let Ok(Some(current)) = control.store.get(&tenant, id).await else {
                    return;
                };
                if !current.enabled || current.paused {
                    return;
                }
                let mut next = current.clone();
                next.enabled = false;
                next.marks.disabled_at_ms = Some(verdict.at_ms);
                next.marks.disabled_reason = Some(verdict.reason.clone());
                next.revision += 1;
                next.updated_at_ms = crate::clock::now_ms();
                match control.store.replace(&next, current.revision).await {
                    Ok(()) => {
                        tracing::warn!(tenant, subscription = %id, reason = verdict.reason, "subscription auto-disabled");
                        if let Some(events) = control.events.get() {
                            let detail = serde_json::json!({
                                "subscription_id": id,
                                "name": next.name,
                                "endpoint": next.endpoint,
                                "reason": verdict.reason,
                                "disabled_at": hub_core::model::rfc3339(verdict.at_ms),
                            });
                            events.emit(&tenant, "destination.disabled", id, detail);
                        }
                        return;
                    }
                    Err(hub_core::control_store::ControlStoreError::Conflict) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, tenant, subscription = %id, "recording auto-disable failed");
                        return;
                    }
                }
            }
        });
    }
}

fn no_answer() -> Outcome {
    Outcome::refused(ErrorClass::RequestFailed, "the attempt did not report back")
}

/// One attempt for a stored event through the subscription's sink (R-DI-4).
pub async fn attempt(
    sinks: &Sinks,
    keyring: &Keyring,
    sub: &Subscription,
    event: &crate::store::StoredEvent,
    now_ms: i64,
) -> Outcome {
    sinks.deliver(keyring, sub, &event_out(event), now_ms).await
}

/// What every sink sends of a stored event.
fn event_out(event: &crate::store::StoredEvent) -> EventOut<'_> {
    let ev = &event.event;
    EventOut {
        id: ev.id,
        key: &ev.key,
        source: &ev.source,
        tenant: &ev.tenant,
        schema_version: &ev.schema_version,
        time: &ev.time,
        subject: ev.subject.as_deref(),
        content_type: ev.data_content_type.as_deref(),
        traceparent: ev.traceparent.as_deref(),
        tracestate: ev.tracestate.as_deref(),
        body: ev.payload.clone(),
    }
}

/// What live readers (GraphQL's `deliveryOutcomes`, gRPC's stream) are told of a settled
/// attempt (none for outcomes without an attempt).
fn outcome_of(job: &JobRecord, settled: &Settled) -> Option<hub_core::outcomes::DeliveryOutcome> {
    use hub_core::outcomes::{DeliveryOutcome, Settlement};
    let (settlement, record) = match settled {
        Settled::Delivered(r) => (Settlement::Delivered, Some(r)),
        Settled::RetryAt(_, r) => (Settlement::Retrying, Some(r)),
        Settled::DeadLetter { attempt, .. } => (Settlement::DeadLettered, attempt.as_ref()),
        _ => return None,
    };
    let record = record?;
    Some(DeliveryOutcome {
        tenant: job.tenant.to_string(),
        subscription: job.subscription,
        event_id: job.event_id,
        seq: job.event_seq,
        attempt: job.attempts + 1,
        settlement,
        at_ms: record.at_ms,
        duration_ms: record.duration_ms,
        error_class: record.error_class.clone(),
        status_code: record.status_code,
    })
}
