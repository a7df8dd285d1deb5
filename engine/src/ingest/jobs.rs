//! Where ingest hands events to delivery: each durable batch carries, per event, the subscriptions
//! it matched (R-MA-1), so the store writes the jobs with the event (R-DI-1). After the write the
//! jobs go to the owning lane in memory when that lane is the only one that can deliver them
//! (the embedded store: one process), so a fresh job never goes back through the store to reach
//! a worker; otherwise the lane is nudged and pages them.

use std::sync::Arc;

use crate::delivery::follow::Subscriptions;
use crate::delivery::matching::EventFacts;
use crate::delivery::ownership::Ownership;
use crate::store::{BatchOutcome, IngestBatch, JobRecord, Lane, Matches};

/// How many handed-off batches may wait for a lane; past that the lane is nudged instead and
/// pages the jobs from the store (nothing is lost: they are durable before they are handed).
pub const HANDOFF_QUEUE: usize = 256;

/// The match index and each lane's wake-up and hand-off channels.
#[derive(Debug, Clone)]
pub struct JobRouting {
    pub subs: Arc<Subscriptions>,
    /// How jobs are numbered into lanes and which shard pages each.
    pub ownership: Arc<Ownership>,
    /// One per shard.
    pub wakes: Vec<async_channel::Sender<()>>,
    /// One per shard, beside `wakes`: jobs just written, for lanes that may take them in memory.
    pub handoffs: Vec<async_channel::Sender<Vec<JobRecord>>>,
    /// Whether the lane that owns a job is the only one that can deliver it (embedded store).
    /// On CQL another engine may hold the lane, so jobs are always paged there.
    pub in_memory: bool,
}

impl JobRouting {
    /// The lane of a unit's jobs (`Ownership::lane_of`).
    pub fn lane_of(&self, topic: &str, partition: i32) -> Lane {
        self.ownership.lane_of(topic, partition)
    }

    /// Matches every event of `batch` against the current index and names the lane.
    pub fn attach(&self, batch: &mut IngestBatch, lane: Lane) {
        let index = self.subs.index();
        batch.lane = lane;
        batch.matches = batch
            .events
            .iter()
            .map(|e| {
                Matches(index.jobs_for(&EventFacts {
                    tenant: &e.tenant,
                    key: &e.key,
                    source: &e.source,
                    major: e.schema_major,
                }))
            })
            .collect();
        if batch.matches.iter().all(|m| m.0.is_empty()) {
            batch.matches.clear();
        }
    }

    /// After `batch` is durable: hands its new jobs to their lane, or nudges the lane to page
    /// them.
    pub fn written(&self, batch: &IngestBatch, outcome: &BatchOutcome) {
        if batch.matches.is_empty() {
            return;
        }
        if self.in_memory {
            let jobs = jobs_written(batch, outcome);
            if jobs.is_empty() {
                return;
            }
            if let Some(h) = self.handoffs.get(self.ownership.shard_of(batch.lane)) {
                if h.try_send(jobs).is_ok() {
                    return;
                }
            }
        }
        self.wake(batch.lane);
    }

    /// Tells the lane that jobs were written (a full channel already carries a nudge).
    pub fn wake(&self, lane: Lane) {
        if let Some(w) = self.wakes.get(self.ownership.shard_of(lane)) {
            let _ = w.try_send(());
        }
    }
}

/// The jobs a durable batch created: one per match of each event stored for the first time
/// (a duplicate creates none), as the store wrote them (`JobRecord::created`).
pub fn jobs_written(batch: &IngestBatch, outcome: &BatchOutcome) -> Vec<JobRecord> {
    let mut stored = outcome.stored.iter().peekable();
    let mut jobs = Vec::new();
    for (event, matches) in batch.events.iter().zip(&batch.matches) {
        // `stored` is in batch order, so each entry is met once, at its own event; a repeat of
        // an id inside the batch is a duplicate and finds the next entry elsewhere.
        let Some((_, _, seq)) =
            stored.next_if(|(tenant, id, _)| *id == event.id && *tenant == event.tenant)
        else {
            continue;
        };
        jobs.extend(
            matches
                .0
                .iter()
                .map(|sub| JobRecord::created(event, *seq, *sub, batch.lane)),
        );
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InboxEvent;
    use uuid::Uuid;

    fn event(tenant: &str, id: Uuid) -> InboxEvent {
        InboxEvent {
            id,
            ..crate::store::conformance::event(tenant, "loan.created")
        }
    }

    #[test]
    fn r_di_1_the_jobs_handed_to_a_lane_are_those_the_store_wrote() {
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let (s1, s2) = (Uuid::now_v7(), Uuid::now_v7());
        let batch = IngestBatch {
            // `a` twice: the repeat is a duplicate inside the batch; `b` matched nothing.
            events: vec![
                event("t1", a),
                event("t1", a),
                event("t2", b),
                event("t1", c),
            ],
            matches: vec![
                Matches(vec![s1, s2]),
                Matches(vec![s1, s2]),
                Matches(vec![]),
                Matches(vec![s1]),
            ],
            lane: 3,
            ..IngestBatch::default()
        };
        let outcome = BatchOutcome {
            stored: vec![
                ("t1".into(), a, 7),
                ("t2".into(), b, 1),
                ("t1".into(), c, 8),
            ],
            duplicates: vec![("t1".into(), a)],
            quarantined: 0,
        };
        let jobs = jobs_written(&batch, &outcome);
        let got: Vec<_> = jobs
            .iter()
            .map(|j| (j.event_id, j.subscription, j.event_seq, j.lane))
            .collect();
        assert_eq!(got, vec![(a, s1, 7, 3), (a, s2, 7, 3), (c, s1, 8, 3)]);
        assert_eq!(jobs[0], JobRecord::created(&batch.events[0], 7, s1, 3));
    }

    #[test]
    fn r_di_1_a_batch_of_duplicates_hands_no_job() {
        let a = Uuid::now_v7();
        let batch = IngestBatch {
            events: vec![event("t1", a)],
            matches: vec![Matches(vec![Uuid::now_v7()])],
            ..IngestBatch::default()
        };
        let outcome = BatchOutcome {
            duplicates: vec![("t1".into(), a)],
            ..BatchOutcome::default()
        };
        assert!(jobs_written(&batch, &outcome).is_empty());
    }
}
