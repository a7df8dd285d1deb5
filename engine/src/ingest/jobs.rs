//! Where ingest hands events to delivery: each durable batch carries, per event, the subscriptions
//! it matched (R-MA-1), so the store writes the jobs with the event (R-DI-1). After the write the
//! jobs go to the owning lane in memory when that lane is the only one that can deliver them
//! (the embedded store: one process), so a fresh job never goes back through the store to reach
//! a worker; otherwise the lane is nudged and pages them.
//!
//! When the lane is idle and its store `leases_at_ingest`, the batch even writes the jobs leased
//! (`FreshLeases`): the lane starts them from the hand-off with no lease step of its own, so a
//! delivery at a low rate costs the event's sync and its outcome's, not a third for the lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::delivery::ownership::Ownership;
use crate::matching::follow::Subscriptions;
use crate::matching::{EventFacts, MatchIndex};
use crate::store::{
    BatchOutcome, InboxEvent, IngestBatch, JobRecord, Lane, Matches, Started, Store, StoredEvent,
};

/// How many batches of due jobs may wait for a lane; past that the lane is nudged instead and
/// pages the jobs from the store (nothing is lost: they are durable before they are handed).
pub const HANDOFF_QUEUE: usize = 256;

/// What ingest hands a lane after a durable batch.
#[derive(Debug)]
pub enum Handoff {
    /// Jobs due now, for the lane's scheduler to lease.
    Due(Vec<JobRecord>),
    /// Jobs the batch wrote leased, with their events: the lane only starts them. They must
    /// reach it (until the lease lapses no page finds them), so they are never refused: the
    /// lane opens `FreshLeases` only while it is idle, which bounds them.
    Leased(Vec<Started>),
}

/// Which lanes take jobs leased by their ingest batch now: those whose store
/// `leases_at_ingest` and that are idle (nothing held, nothing waiting for a worker). A busy lane
/// leases through its scheduler, so tenant fairness and the destination caps decide the order.
#[derive(Debug)]
pub struct FreshLeases {
    lease_ms: i64,
    /// One per shard.
    open: Vec<AtomicBool>,
}

impl FreshLeases {
    pub fn new(shards: usize, lease_ms: i64) -> Self {
        Self {
            lease_ms,
            open: (0..shards.max(1)).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Shard `shard`'s lane says whether it takes leased jobs now.
    pub fn set_open(&self, shard: usize, open: bool) {
        if let Some(o) = self.open.get(shard) {
            if o.load(Ordering::Relaxed) != open {
                o.store(open, Ordering::Relaxed);
            }
        }
    }

    /// Until when a batch for shard `shard`'s lane leases its jobs, if that lane takes them.
    fn lease_for(&self, shard: usize, now_ms: i64) -> Option<i64> {
        let open = self.open.get(shard)?.load(Ordering::Relaxed);
        open.then_some(now_ms + self.lease_ms)
    }
}

/// The match index and each lane's wake-up and hand-off channels.
#[derive(Debug, Clone)]
pub struct JobRouting {
    pub subs: Arc<Subscriptions>,
    /// How jobs are numbered into lanes and which shard pages each.
    pub ownership: Arc<Ownership>,
    /// One per shard.
    pub wakes: Vec<async_channel::Sender<()>>,
    /// One per shard, beside `wakes`: jobs just written, for lanes that may take them in memory.
    /// Unbounded for `Handoff::Leased`; `Handoff::Due` stops at [`HANDOFF_QUEUE`].
    pub handoffs: Vec<async_channel::Sender<Handoff>>,
    /// When a lane may be handed its jobs in memory.
    pub hand_over: HandOver,
    /// Which lanes take jobs leased by their batch now.
    pub fresh: Arc<FreshLeases>,
}

/// When ingest may hand the jobs it wrote to their lane in memory.
#[derive(Debug, Clone)]
pub enum HandOver {
    /// One process holds the store (embedded): the shard that writes a job is the only one that
    /// delivers it.
    Always,
    /// Engines share the store (CQL): while this process holds the job's lane, which a lease
    /// checks again (a lane lost meanwhile refuses the lease and its next holder pages the
    /// job); otherwise the lane's holder pages it.
    WhileHeld(Arc<dyn Store>),
}

impl HandOver {
    fn now(&self, lane: Lane) -> bool {
        match self {
            Self::Always => true,
            Self::WhileHeld(store) => store.holds_lane(lane, crate::clock::now_ms()),
        }
    }
}

impl JobRouting {
    /// The lane of a unit's jobs (`Ownership::lane_of`).
    pub fn lane_of(&self, topic: &str, partition: i32) -> Lane {
        self.ownership.lane_of(topic, partition)
    }

    /// Matches every event of `batch` against the current index and names the lane (off a
    /// shard; a shard matches with its own copy, [`JobRouting::attach_with`]).
    pub fn attach(&self, batch: &mut IngestBatch, lane: Lane) {
        self.attach_with(batch, lane, &self.subs.index());
    }

    /// [`JobRouting::attach`] against `index`.
    pub fn attach_with(&self, batch: &mut IngestBatch, lane: Lane, index: &MatchIndex) {
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
        batch.lease_until_ms = match (self.hand_over.now(lane), batch.matches.is_empty()) {
            (true, false) => self
                .fresh
                .lease_for(self.ownership.shard_of(lane), crate::clock::now_ms()),
            _ => None,
        };
    }

    /// After `batch` is durable: hands its new jobs to their lane, or nudges the lane to page
    /// them.
    pub fn written(&self, batch: &IngestBatch, outcome: &BatchOutcome) {
        if batch.matches.is_empty() {
            return;
        }
        if self.hand_over.now(batch.lane) {
            let Some(h) = self.handoffs.get(self.ownership.shard_of(batch.lane)) else {
                return self.wake(batch.lane);
            };
            let handed = if outcome.jobs_leased {
                let started = leased_written(batch, outcome);
                started.is_empty() || h.try_send(Handoff::Leased(started)).is_ok()
            } else {
                let jobs = jobs_written(batch, outcome);
                jobs.is_empty()
                    || (h.len() < HANDOFF_QUEUE && h.try_send(Handoff::Due(jobs)).is_ok())
            };
            if handed {
                return;
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
/// (a duplicate creates none), as the store wrote them (`JobRecord::created`, leased when the
/// batch leases).
pub fn jobs_written(batch: &IngestBatch, outcome: &BatchOutcome) -> Vec<JobRecord> {
    written(batch, outcome).map(|(job, _, _)| job).collect()
}

/// The jobs a durable batch wrote leased, each with its stored event, ready for an attempt.
pub fn leased_written(batch: &IngestBatch, outcome: &BatchOutcome) -> Vec<Started> {
    written(batch, outcome)
        .map(|(job, event, seq)| Started {
            job,
            event: StoredEvent {
                seq,
                event: event.clone(),
            },
        })
        .collect()
}

/// Each job a durable batch created, with its event and the event's `seq`.
fn written<'a>(
    batch: &'a IngestBatch,
    outcome: &'a BatchOutcome,
) -> impl Iterator<Item = (JobRecord, &'a InboxEvent, u64)> + 'a {
    let mut stored = outcome.stored.iter().peekable();
    batch
        .events
        .iter()
        .zip(&batch.matches)
        .filter_map(move |(event, matches)| {
            // `stored` is in batch order, so each entry is met once, at its own event; a repeat
            // of an id inside the batch is a duplicate and finds the next entry elsewhere.
            let (_, _, seq) =
                stored.next_if(|(tenant, id, _)| *id == event.id && *tenant == event.tenant)?;
            Some((event, matches, *seq))
        })
        .flat_map(move |(event, matches, seq)| {
            matches.0.iter().map(move |sub| {
                let lease = batch.lease_until_ms.filter(|_| outcome.jobs_leased);
                let job = JobRecord::created(event, seq, *sub, batch.lane).leased_until(lease);
                (job, event, seq)
            })
        })
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
            jobs_leased: false,
        };
        let jobs = jobs_written(&batch, &outcome);
        let got: Vec<_> = jobs
            .iter()
            .map(|j| (j.event_id, j.subscription, j.event_seq, j.lane))
            .collect();
        assert_eq!(got, vec![(a, s1, 7, 3), (a, s2, 7, 3), (c, s1, 8, 3)]);
        assert_eq!(jobs[0], JobRecord::created(&batch.events[0], 7, s1, 3));
    }

    fn routing(shards: usize) -> (JobRouting, Vec<async_channel::Receiver<Handoff>>) {
        let (handoffs, handed): (Vec<_>, Vec<_>) =
            (0..shards).map(|_| async_channel::unbounded()).unzip();
        let (wakes, _): (Vec<_>, Vec<_>) = (0..shards).map(|_| async_channel::bounded(1)).unzip();
        let routing = JobRouting {
            subs: Arc::default(),
            ownership: Arc::new(Ownership::new(
                crate::delivery::ownership::Numbering::ByShard,
                shards,
            )),
            wakes,
            handoffs,
            hand_over: HandOver::Always,
            fresh: Arc::new(FreshLeases::new(shards, 60_000)),
        };
        (routing, handed)
    }

    #[test]
    fn r_di_8_only_an_idle_lane_gets_its_fresh_jobs_leased_and_handed_with_their_events() {
        let (routing, handed) = routing(2);
        assert_eq!(
            routing.fresh.lease_for(1, 1_000),
            None,
            "closed until a lane opens"
        );
        routing.fresh.set_open(1, true);
        assert_eq!(routing.fresh.lease_for(1, 1_000), Some(61_000));
        assert_eq!(routing.fresh.lease_for(0, 1_000), None, "per lane");

        let (a, sub) = (Uuid::now_v7(), Uuid::now_v7());
        let batch = IngestBatch {
            events: vec![event("t1", a)],
            matches: vec![Matches(vec![sub])],
            lane: 1,
            lease_until_ms: Some(61_000),
            ..IngestBatch::default()
        };
        let outcome = BatchOutcome {
            stored: vec![("t1".into(), a, 4)],
            jobs_leased: true,
            ..BatchOutcome::default()
        };
        routing.written(&batch, &outcome);
        let Ok(Handoff::Leased(started)) = handed[1].try_recv() else {
            panic!("the leased job goes to its lane with its event");
        };
        assert_eq!(started.len(), 1);
        assert_eq!(
            (started[0].job.starts, started[0].job.due_at_ms),
            (1, 61_000)
        );
        assert_eq!((started[0].event.seq, started[0].event.event.id), (4, a));

        // The store wrote the jobs unleased although the batch asked (CQL: a replay, or a lane
        // no longer held): they go to the scheduler as they are.
        let unleased = BatchOutcome {
            jobs_leased: false,
            ..outcome
        };
        routing.written(&batch, &unleased);
        let Ok(Handoff::Due(jobs)) = handed[1].try_recv() else {
            panic!("a job not leased goes to its lane's scheduler");
        };
        assert_eq!(
            (jobs[0].starts, jobs[0].due_at_ms),
            (0, batch.events[0].received_at_ms)
        );
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
