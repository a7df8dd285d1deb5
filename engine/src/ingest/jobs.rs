//! Where ingest hands events to delivery: each durable batch carries, per event, the subscriptions
//! it matched (R-MA-1), so the store writes the jobs with the event (R-DI-1). After the write the
//! jobs go to the owning lane in memory when that lane is the only one that can deliver them
//! (the embedded store: one process), so a fresh job never goes back through the store to reach
//! a worker; otherwise the lane is nudged and pages them.
//!
//! When the lane is idle and its store `leases_at_ingest`, the batch even writes the jobs leased
//! (`FreshLeases`): the lane starts them from the hand-off with no lease step of its own, so a
//! delivery at a low rate costs the event's sync and its outcome's, not a third for the lease.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
///
/// Leased at ingest, a job bypasses the scheduler and the lane's bound on what it leases ahead;
/// so a lane's jobs leased at ingest and not yet taken by it are counted, and no batch leases
/// past `most` of them. Without the count, a backlog read while the lane looked idle (its first
/// hand-off not yet taken) was leased whole: a hundred thousand jobs in memory, outside tenant
/// fairness, under leases that lapse before their turn.
#[derive(Debug)]
pub struct FreshLeases {
    lease_ms: i64,
    /// Most jobs leased at ingest a lane has not taken yet (its workers × rounds leased ahead).
    most: usize,
    /// One per shard.
    gates: Vec<FreshGate>,
}

#[derive(Debug, Default)]
struct FreshGate {
    /// The lane is idle.
    open: AtomicBool,
    /// Jobs leased at ingest the lane has not taken yet.
    outstanding: AtomicUsize,
}

impl FreshLeases {
    pub fn new(shards: usize, lease_ms: i64, most: usize) -> Self {
        Self {
            lease_ms,
            most,
            gates: (0..shards.max(1)).map(|_| FreshGate::default()).collect(),
        }
    }

    /// Shard `shard`'s lane says whether it takes leased jobs now.
    pub fn set_open(&self, shard: usize, open: bool) {
        if let Some(g) = self.gates.get(shard) {
            if g.open.load(Ordering::Relaxed) != open {
                g.open.store(open, Ordering::Relaxed);
            }
        }
    }

    /// Shard `shard`'s lane took `jobs` leased at ingest from its hand-off.
    pub fn taken(&self, shard: usize, jobs: usize) {
        if let Some(g) = self.gates.get(shard) {
            let _ = g
                .outstanding
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    Some(n.saturating_sub(jobs))
                });
        }
    }

    /// Until when a batch of `jobs` for shard `shard`'s lane leases them, if that lane takes
    /// them: it is idle and they fit under `most`. They count until the lane takes them, or
    /// the reservation is dropped.
    fn lease_for(
        self: &Arc<Self>,
        shard: usize,
        jobs: usize,
        now_ms: i64,
    ) -> Option<(i64, FreshReservation)> {
        let g = self.gates.get(shard)?;
        if !g.open.load(Ordering::Relaxed) {
            return None;
        }
        g.outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n + jobs <= self.most).then_some(n + jobs)
            })
            .ok()?;
        let reservation = FreshReservation {
            fresh: self.clone(),
            shard,
            jobs,
        };
        Some((now_ms + self.lease_ms, reservation))
    }
}

/// The jobs one batch leases at ingest, counted against their lane's `FreshLeases::most` from
/// the match until the lane takes them. Whatever the batch does not hand over (a duplicate
/// creates no job; a batch refused, revoked or dropped hands none) is given back when this
/// drops, on every path.
#[derive(Debug)]
#[must_use = "dropping it gives the batch's leases back at once"]
pub struct FreshReservation {
    fresh: Arc<FreshLeases>,
    shard: usize,
    jobs: usize,
}

impl Drop for FreshReservation {
    fn drop(&mut self) {
        self.fresh.taken(self.shard, self.jobs);
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
    pub fn attach(&self, batch: &mut IngestBatch, lane: Lane) -> Option<FreshReservation> {
        self.attach_with(batch, lane, &self.subs.index())
    }

    /// [`JobRouting::attach`] against `index`. When the batch leases its jobs for an idle lane,
    /// the reservation that counts them goes with the batch to [`JobRouting::written`].
    pub fn attach_with(
        &self,
        batch: &mut IngestBatch,
        lane: Lane,
        index: &MatchIndex,
    ) -> Option<FreshReservation> {
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
        batch.lease_until_ms = None;
        if batch.matches.is_empty() || !self.hand_over.now(lane) {
            return None;
        }
        let jobs = batch.matches.iter().map(|m| m.0.len()).sum();
        let shard = self.ownership.shard_of(lane);
        let (until, reservation) = self.fresh.lease_for(shard, jobs, crate::clock::now_ms())?;
        batch.lease_until_ms = Some(until);
        Some(reservation)
    }

    /// After `batch` is durable: hands its new jobs to their lane, or nudges the lane to page
    /// them. The leased ones handed over count against the lane's bound until it takes them;
    /// `reserved` gives the rest back.
    pub fn written(
        &self,
        batch: &IngestBatch,
        outcome: &BatchOutcome,
        reserved: Option<FreshReservation>,
    ) {
        if batch.matches.is_empty() {
            return;
        }
        if self.hand_over.now(batch.lane) {
            let Some(h) = self.handoffs.get(self.ownership.shard_of(batch.lane)) else {
                return self.wake(batch.lane);
            };
            let handed = if outcome.jobs_leased {
                let started = leased_written(batch, outcome);
                let count = started.len();
                let sent = count == 0 || h.try_send(Handoff::Leased(started)).is_ok();
                if let Some(mut r) = reserved.filter(|_| sent) {
                    r.jobs = r.jobs.saturating_sub(count);
                }
                sent
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
            fresh: Arc::new(FreshLeases::new(shards, 60_000, 4)),
        };
        (routing, handed)
    }

    /// Reserves `jobs` for shard `shard`'s lane, if it takes them: the lease's end.
    fn lease(routing: &JobRouting, shard: usize, jobs: usize) -> Option<i64> {
        let (until, reserved) = routing.fresh.lease_for(shard, jobs, 1_000)?;
        std::mem::forget(reserved);
        Some(until)
    }

    #[test]
    fn r_di_8_only_an_idle_lane_gets_its_fresh_jobs_leased_and_handed_with_their_events() {
        let (routing, handed) = routing(2);
        assert_eq!(lease(&routing, 1, 1), None, "closed until a lane opens");
        routing.fresh.set_open(1, true);
        assert_eq!(lease(&routing, 0, 1), None, "per lane");

        let (a, sub) = (Uuid::now_v7(), Uuid::now_v7());
        let mut batch = IngestBatch {
            events: vec![event("t1", a)],
            ..IngestBatch::default()
        };
        let index = MatchIndex::default();
        assert!(routing.attach_with(&mut batch, 1, &index).is_none());
        batch.matches = vec![Matches(vec![sub])];
        let (until, reserved) = routing.fresh.lease_for(1, 1, 1_000).expect("open");
        assert_eq!(until, 61_000);
        batch.lease_until_ms = Some(until);
        let outcome = BatchOutcome {
            stored: vec![("t1".into(), a, 4)],
            jobs_leased: true,
            ..BatchOutcome::default()
        };
        routing.written(&batch, &outcome, Some(reserved));
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
        routing.written(&batch, &unleased, None);
        let Ok(Handoff::Due(jobs)) = handed[1].try_recv() else {
            panic!("a job not leased goes to its lane's scheduler");
        };
        assert_eq!(
            (jobs[0].starts, jobs[0].due_at_ms),
            (0, batch.events[0].received_at_ms)
        );
    }

    /// Jobs leased at ingest count against the lane's bound until it takes them: an idle lane
    /// whose hand-off waits is not leased a backlog behind it.
    #[test]
    fn r_di_2_jobs_leased_at_ingest_stay_within_the_lanes_bound_until_it_takes_them() {
        let (routing, handed) = routing(1);
        routing.fresh.set_open(0, true);
        let batch_of = |events: usize, leased_until: Option<i64>| {
            let ids: Vec<Uuid> = (0..events).map(|_| Uuid::now_v7()).collect();
            let batch = IngestBatch {
                events: ids.iter().map(|id| event("t1", *id)).collect(),
                matches: ids.iter().map(|_| Matches(vec![Uuid::now_v7()])).collect(),
                lease_until_ms: leased_until,
                ..IngestBatch::default()
            };
            let outcome = BatchOutcome {
                stored: ids.iter().map(|id| ("t1".into(), *id, 1)).collect(),
                jobs_leased: leased_until.is_some(),
                ..BatchOutcome::default()
            };
            (batch, outcome)
        };
        assert_eq!(lease(&routing, 0, 5), None, "more than the bound at once");
        let (until, first) = routing.fresh.lease_for(0, 3, 1_000).expect("within");
        assert_eq!(lease(&routing, 0, 2), None, "3 reserved + 2 > 4");
        let (batch, outcome) = batch_of(3, Some(until));
        routing.written(&batch, &outcome, Some(first));
        assert_eq!(
            lease(&routing, 0, 2),
            None,
            "handed, not yet taken: still counted"
        );
        let Ok(Handoff::Leased(started)) = handed[0].try_recv() else {
            panic!("handed over");
        };
        routing.fresh.taken(0, started.len());
        let (_, again) = routing
            .fresh
            .lease_for(0, 4, 1_000)
            .expect("taken: room again");

        // A batch that hands fewer jobs than it reserved (duplicates), or none (dropped), gives
        // the rest back.
        let (batch, mut outcome) = batch_of(4, Some(until));
        outcome.stored.truncate(1);
        routing.written(&batch, &outcome, Some(again));
        assert_eq!(lease(&routing, 0, 4), None, "the one handed still counts");
        routing.fresh.taken(0, 1);
        let (_, dropped) = routing.fresh.lease_for(0, 4, 1_000).expect("all back");
        drop(dropped);
        assert_eq!(
            lease(&routing, 0, 4),
            Some(61_000),
            "a dropped batch gives all back"
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
