//! What the store keeps for delivery: jobs (one per match, written with their event), their
//! leases and outcomes, dead letters, and per-subscription delivery statistics (health and the
//! auto-disable streak).

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use uuid::Uuid;

use crate::delivery::autodisable::Streak;

/// Which shard's delivery lane owns a job: the shard that owned the event's partition when the
/// job was created (DESIGN invariant 2). A shard pages every lane `l` with `l % shards == id`,
/// so a restart with another shard count still reaches every job.
pub type Lane = u32;

/// A job's identity: the event and the subscription, so a replayed creation is the same job.
pub fn job_id(event: Uuid, subscription: Uuid) -> u128 {
    event.as_u128() ^ subscription.as_u128().rotate_left(64)
}

/// What a page of due jobs is asked for ([`crate::store::Jobs::due_jobs`]).
#[derive(Debug, Clone, Default)]
pub struct DueQuery {
    /// The lanes paged.
    pub lanes: Vec<Lane>,
    /// Jobs due at or before this time.
    pub now_ms: i64,
    /// At most this many of each queue (a tenant's subscription).
    pub per_tenant: usize,
    /// At most this many in all.
    pub limit: usize,
    /// Queues are taken in turn starting at this one (modulo their count), so each gets the
    /// page's head in turn.
    pub rotation: u64,
    /// Jobs the caller holds already: passed over.
    pub skip: HashSet<u128>,
    /// Subscriptions whose queues are not read at all: the caller would only drop their jobs
    /// (their destination holds its share of the lane's memory, R-DI-3), and pages again once
    /// it has room for them.
    pub pass_over: HashSet<u128>,
    /// Rooms several queues share: what a destination may still hold of the lane's memory,
    /// over the subscriptions that post to it (R-DI-3). A page returns about that many of
    /// their queues together, not each queue's share, and names a queue its room cut short
    /// in [`DuePage::cut`].
    pub rooms: SharedRooms,
}

/// Rooms shared by the queues of several subscriptions ([`DueQuery::rooms`]).
#[derive(Debug, Clone, Default)]
pub struct SharedRooms {
    /// Each subscription's room, by its number in `left`.
    of: HashMap<u128, usize>,
    left: Vec<usize>,
}

impl SharedRooms {
    /// One room of `room` jobs shared by `subscriptions`' queues.
    pub fn add(&mut self, subscriptions: impl IntoIterator<Item = u128>, room: usize) {
        let number = self.left.len();
        self.left.push(room);
        self.of
            .extend(subscriptions.into_iter().map(|s| (s, number)));
    }

    /// How many of `want` jobs of `subscription`'s queue its room leaves (all of them for a
    /// subscription no room names).
    pub fn fit(&self, subscription: u128, want: usize) -> usize {
        self.of
            .get(&subscription)
            .map_or(want, |&number| want.min(self.left[number]))
    }

    /// `n` jobs of `subscription`'s queue were taken: its room holds that many fewer.
    pub fn spend(&mut self, subscription: u128, n: usize) {
        if let Some(&number) = self.of.get(&subscription) {
            self.left[number] = self.left[number].saturating_sub(n);
        }
    }

    /// For queues read at once, by subscription: how many of them share each one's room
    /// (1 for a queue no room names).
    pub fn sharing(&self, subscriptions: impl Iterator<Item = u128> + Clone) -> Vec<usize> {
        let room = |s: &u128| self.of.get(s).copied();
        subscriptions
            .clone()
            .map(|s| match room(&s) {
                Some(r) => subscriptions.clone().filter(|o| room(o) == Some(r)).count(),
                None => 1,
            })
            .collect()
    }

    /// The part of its room `subscription`'s queue may return when `sharing` queues of that
    /// room are read at once: an even part, rounded up (a queue read past what it returns would
    /// lose its place, so the parts may pass the room by fewer than `sharing` jobs).
    pub fn part(&self, subscription: u128, sharing: usize, want: usize) -> usize {
        self.fit(subscription, usize::MAX)
            .div_ceil(sharing.max(1))
            .min(want)
    }

    /// Whether `subscription`'s queue shares a room that is spent.
    pub fn spent(&self, subscription: u128) -> bool {
        self.fit(subscription, 1) == 0
    }
}

/// A page of due jobs, and whether a limit (a queue's share or the page's size) left due jobs
/// unread: the lane then pages again as soon as it has room instead of at its next poll.
#[derive(Debug, Default)]
pub struct DuePage {
    pub jobs: Vec<JobRecord>,
    pub more: bool,
    /// Subscriptions whose queues still hold due jobs their shared room left unread
    /// ([`DueQuery::rooms`]): the caller pages them again once their destination has room,
    /// and `more` does not count them.
    pub cut: HashSet<u128>,
}

impl DuePage {
    /// `subscription`'s queue still holds due jobs this page left unread: named in `cut` when
    /// its shared room is spent (the caller pages it once its destination has room), else
    /// `more`. The one rule all three stores follow.
    pub fn left_unread(&mut self, rooms: &SharedRooms, subscription: u128) {
        if rooms.spent(subscription) {
            self.cut.insert(subscription);
        } else {
            self.more = true;
        }
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: u128,
    pub lane: Lane,
    /// Shared: a job's tenant is copied into every record read of it (pages, steps).
    pub tenant: Arc<str>,
    pub subscription: Uuid,
    pub event_id: Uuid,
    pub event_seq: u64,
    /// When the hub received the event (the 24-hour last-attempt rule counts from here).
    pub received_at_ms: i64,
    /// When the job is next due; while leased, when the lease lapses.
    pub due_at_ms: i64,
    /// Attempts with a recorded outcome.
    pub attempts: u32,
    /// Leases taken (attempts started). `starts - attempts` is how many started attempts never
    /// recorded an outcome: recoveries (R-DI-8).
    pub starts: u32,
    pub last: Option<AttemptRecord>,
}

impl JobRecord {
    /// A new job: `event` (stored at `seq`) for subscription `sub`, in `lane`, due at once.
    pub fn created(event: &super::InboxEvent, seq: u64, sub: Uuid, lane: Lane) -> Self {
        Self {
            id: job_id(event.id, sub),
            lane,
            tenant: Arc::from(event.tenant.as_str()),
            subscription: sub,
            event_id: event.id,
            event_seq: seq,
            received_at_ms: event.received_at_ms,
            due_at_ms: event.received_at_ms,
            attempts: 0,
            starts: 0,
            last: None,
        }
    }

    /// The job leased by the batch that creates it, when the batch carries a lease
    /// (`IngestBatch::lease_until_ms`): one start counted and due when the lease lapses, as
    /// `lease_job` would leave it.
    #[must_use]
    pub fn leased_until(mut self, lease_until_ms: Option<i64>) -> Self {
        if let Some(until) = lease_until_ms {
            self.starts += 1;
            self.due_at_ms = until;
        }
        self
    }

    /// A dead letter's job brought back by a replay: due at `now_ms` with a fresh attempt budget.
    pub fn revived(&self, now_ms: i64) -> Self {
        Self {
            due_at_ms: now_ms,
            attempts: 0,
            starts: 0,
            last: None,
            ..self.clone()
        }
    }

    /// Started attempts that never recorded an outcome (worker crash, lease lapsed).
    pub fn recoveries(&self) -> u32 {
        self.starts.saturating_sub(self.attempts)
    }
}

/// The outcome of one attempt, as kept on the job, in dead letters and in health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub at_ms: i64,
    pub success: bool,
    pub error_class: Option<String>,
    pub status_code: Option<u16>,
    pub detail: String,
    pub duration_ms: u64,
}

/// What becomes of a job after a worker (or the scheduler) looked at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Delivered: the job is done.
    Delivered(AttemptRecord),
    /// Failed; try again at this time (counts an attempt).
    RetryAt(i64, AttemptRecord),
    /// Not attempted (open breaker); due again at this time, no attempt counted.
    Deferred(i64),
    /// Leased with its ingest batch but not attempted (open breaker, inactive partner): due
    /// again at this time, its start given back, so no recovery is counted (R-DI-8).
    Returned(i64),
    /// No more attempts: kept as a dead letter with this reason.
    DeadLetter {
        reason: String,
        attempt: Option<AttemptRecord>,
    },
    /// The subscription no longer wants it (paused, deleted): dropped, not dead-lettered.
    Cancelled,
}

/// One job's settlement.
#[derive(Debug, Clone)]
pub struct Settlement {
    pub job: u128,
    pub settled: Settled,
}

/// One delivery step of a lane, applied atomically: record these outcomes, then lease these jobs.
#[derive(Debug, Clone, Default)]
pub struct DeliveryStep {
    pub settle: Vec<Settlement>,
    pub start: Vec<u128>,
    /// When the leases of `start` lapse.
    pub lease_until_ms: i64,
    pub now_ms: i64,
    /// A job whose started attempts lapsed this many times is dead-lettered as poison instead of
    /// started again (R-DI-8).
    pub recovery_limit: u32,
}

/// A leased job with its event, ready for one attempt.
#[derive(Debug, Clone)]
pub struct Started {
    pub job: JobRecord,
    pub event: super::StoredEvent,
}

/// What a delivery step did.
#[derive(Debug, Clone, Default)]
pub struct StepOutcome {
    pub started: Vec<Started>,
    /// Jobs dead-lettered as poison instead of being started.
    pub poisoned: Vec<u128>,
    /// Jobs not leased: this process no longer holds their lane (another engine delivers them).
    pub not_held: Vec<u128>,
    /// Subscriptions whose failure streak now calls for auto-disable, with the streak.
    pub streaks: Vec<(String, Uuid, Streak)>,
}

/// A dead-lettered job (R-DI-8): no more attempts; listed and replayed per subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub job: JobRecord,
    pub reason: String,
    pub dead_at_ms: i64,
}

/// Delivery statistics of one subscription: recent outcomes, totals, the open failure streak.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryStats {
    /// Newest last, at most [`RECENT_OUTCOMES`].
    pub recent: Vec<AttemptRecord>,
    pub delivered: u64,
    pub failed_attempts: u64,
    pub dead_letters: u64,
    pub streak: Streak,
}

/// How many recent outcomes health keeps per subscription.
pub const RECENT_OUTCOMES: usize = 20;

impl DeliveryStats {
    /// Counts one attempt's outcome; a success clears the failure streak (R-DI-10).
    pub fn record(&mut self, attempt: &AttemptRecord) {
        if attempt.success {
            self.delivered += 1;
            self.streak.success();
        } else {
            self.failed_attempts += 1;
            self.streak.failure(attempt.at_ms);
        }
        self.recent.push(attempt.clone());
        self.keep_recent();
    }

    /// The totals and streak of these statistics with no recent outcome: where a step starts
    /// counting the outcomes it adds ([`DeliveryStats::take_step`]).
    pub fn totals(&self) -> Self {
        Self {
            recent: Vec::new(),
            delivered: self.delivered,
            failed_attempts: self.failed_attempts,
            dead_letters: self.dead_letters,
            streak: self.streak,
        }
    }

    /// Takes a step's statistics (`step`: started from [`DeliveryStats::totals`], so its
    /// `recent` holds only the outcomes the step added): its totals and streak, and its
    /// outcomes after the recent ones kept.
    pub fn take_step(&mut self, step: Self) {
        self.delivered = step.delivered;
        self.failed_attempts = step.failed_attempts;
        self.dead_letters = step.dead_letters;
        self.streak = step.streak;
        self.recent.extend(step.recent);
        self.keep_recent();
    }

    fn keep_recent(&mut self) {
        if self.recent.len() > RECENT_OUTCOMES {
            let extra = self.recent.len() - RECENT_OUTCOMES;
            self.recent.drain(..extra);
        }
    }
}

/// The jobs an ingest batch creates for one event: the matching subscriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matches(pub Vec<Uuid>);

/// What a settlement does to a stored job; both stores apply it the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobChange {
    /// The job is done (delivered or cancelled): removed.
    Remove,
    /// The job stays, rewritten (its due time moves with it).
    Rewrite(JobRecord),
    /// The job becomes a dead letter with this reason (in its last state).
    Bury(JobRecord, String),
}

/// The change a settlement makes to `job`, and the attempt outcome it records in the
/// subscription's statistics (if an attempt was made).
pub fn settle_job<'a>(
    job: &JobRecord,
    settled: &'a Settled,
) -> (JobChange, Option<&'a AttemptRecord>) {
    match settled {
        Settled::Delivered(a) => (JobChange::Remove, Some(a)),
        Settled::RetryAt(at, a) => {
            let mut next = job.clone();
            next.attempts += 1;
            next.due_at_ms = *at;
            next.last = Some(a.clone());
            (JobChange::Rewrite(next), Some(a))
        }
        Settled::Deferred(at) => {
            let mut next = job.clone();
            next.due_at_ms = *at;
            (JobChange::Rewrite(next), None)
        }
        Settled::Returned(at) => {
            let mut next = job.clone();
            next.due_at_ms = *at;
            next.starts = next.starts.saturating_sub(1);
            (JobChange::Rewrite(next), None)
        }
        Settled::DeadLetter { reason, attempt } => {
            let mut last = job.clone();
            if let Some(a) = attempt {
                last.attempts += 1;
                last.last = Some(a.clone());
            }
            (JobChange::Bury(last, reason.clone()), attempt.as_ref())
        }
        Settled::Cancelled => (JobChange::Remove, None),
    }
}

/// Leases `job` until `lease_until_ms` (one more start), or says why it is poison instead: its
/// started attempts lapsed `recovery_limit` times without an outcome (R-DI-8).
pub fn lease_job(
    job: &JobRecord,
    lease_until_ms: i64,
    recovery_limit: u32,
) -> Result<JobRecord, String> {
    if job.recoveries() >= recovery_limit {
        return Err(format!(
            "poison: {} started attempts ended without an outcome",
            job.recoveries()
        ));
    }
    let mut next = job.clone();
    next.starts += 1;
    next.due_at_ms = lease_until_ms;
    Ok(next)
}

/// Why a job whose event is gone is dead-lettered.
pub const EVENT_GONE: &str = "event no longer stored";

/// What the survey of lanes asks (`Store::survey_lanes`).
#[derive(Debug, Clone, Default)]
pub struct LaneSurvey {
    /// Lanes of the partitions the consumer group assigned this engine.
    pub assigned: Vec<Lane>,
    /// Lanes this engine adopted.
    pub strays: Vec<Lane>,
    pub grace_ms: i64,
    pub now_ms: i64,
}

/// What the survey of lanes found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneSurveyFound {
    /// Lanes with queues, neither assigned nor adopted here, whose hold lapsed `grace_ms` ago
    /// (or that nobody ever held).
    pub unheld: Vec<Lane>,
    /// Strays to give up: an engine assigned their partition asks for them, or no queue is left.
    pub give_up: Vec<Lane>,
}

/// One lane's holder and backlog (the operator view).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LaneReport {
    pub lane: Lane,
    /// The process holding it (its id in the store), when the store has holds.
    pub holder: Option<String>,
    pub held_until_ms: Option<i64>,
    /// Whether this process holds it now.
    pub held_here: bool,
    /// Jobs waiting in it, when the store counts them per lane.
    pub pending: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_3_a_shared_room_is_spent_by_every_queue_that_shares_it() {
        let mut rooms = SharedRooms::default();
        rooms.add([1, 2], 5);
        assert_eq!(rooms.fit(3, 100), 100, "a queue no room names");
        assert_eq!(rooms.fit(1, 100), 5);
        rooms.spend(1, 4);
        assert_eq!(
            rooms.fit(2, 100),
            1,
            "what one queue took, the other cannot"
        );
        assert!(!rooms.spent(2));
        rooms.spend(2, 3);
        assert!(rooms.spent(1) && rooms.spent(2) && !rooms.spent(3));
        let mut rooms = SharedRooms::default();
        rooms.add([1, 2, 3], 7);
        assert_eq!(rooms.sharing([1, 2, 4].into_iter()), vec![2, 2, 1]);
        assert_eq!(rooms.part(1, 2, 100), 4, "half of 7, rounded up");
        assert_eq!(rooms.part(1, 2, 3), 3, "never past the queue's own share");
    }

    fn outcome(at_ms: i64, success: bool) -> AttemptRecord {
        AttemptRecord {
            at_ms,
            success,
            error_class: None,
            status_code: Some(if success { 204 } else { 503 }),
            detail: String::new(),
            duration_ms: 1,
        }
    }

    /// The log store writes a step's statistics as its totals and the outcomes it added; taken
    /// one after another they give what recording every outcome on the whole statistics gives.
    #[test]
    fn r_cp_12_steps_of_added_outcomes_rebuild_the_recent_outcomes_and_totals() {
        let mut whole = DeliveryStats::default();
        let mut rebuilt = DeliveryStats::default();
        let mut at = 0;
        for step_len in [3, 1, 25, 7, 0, 19, 2] {
            let mut step = rebuilt.totals();
            assert!(step.recent.is_empty(), "a step carries no kept outcome");
            for _ in 0..step_len {
                at += 1;
                let attempt = outcome(at, at % 3 != 0);
                whole.record(&attempt);
                step.record(&attempt);
            }
            step.dead_letters += 1;
            whole.dead_letters += 1;
            assert!(step.recent.len() <= RECENT_OUTCOMES);
            rebuilt.take_step(step);
            assert_eq!(rebuilt, whole, "after a step of {step_len}");
        }
        assert_eq!(rebuilt.recent.len(), RECENT_OUTCOMES);
    }
}
