//! The log store's indexes, all in memory: what replay rebuilds from the segments and what every
//! commit changes, through the one function [`State::apply`] — so a write and its replay after
//! a restart cannot disagree.
//!
//! Event bodies, quarantine records and DLQ observations stay on disk; the indexes keep where
//! they lie. Jobs, dead letters, statistics, heads, units and pull positions are small and live
//! here whole. Each job, dead letter and lasting dedup mark remembers the segment of its last
//! record, so dropping a segment knows what to carry forward.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use super::attempts::{AttemptNumber, Attempts, NONE};
pub(super) use super::job_entry::JobEntry;
use super::job_map::{halves, whole, JobMap};
use super::record::{Change, Loc};
use super::seq_index::SeqIndex;
use crate::store::{DeadLetter, DeliveryStats, JobRecord, Lane, StoredEvent};

/// The indexes' hash maps ([`crate::fast_hash`]).
pub(super) type Map<K, V> = crate::fast_hash::FastMap<K, V>;
/// A hash set of the indexes.
pub(super) type Set<T> = crate::fast_hash::FastSet<T>;

/// An event in the inbox index.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventEntry {
    pub loc: Loc,
    /// The ce-id (a `Uuid`, not a `u128`: byte-aligned, so an index entry is 40 bytes, not 48).
    pub id: Uuid,
    pub received_at_ms: i64,
}

/// A quarantine record or DLQ observation: where it lies, the Kafka position it is kept once
/// for, and when it arrived.
#[derive(Debug, Clone)]
pub(super) struct Forensic {
    pub loc: Loc,
    pub position: Option<(String, i32, i64)>,
    pub at_ms: i64,
}

/// A lane's queue: `(lane, tenant, subscription)`.
pub(super) type QueueKey = (Lane, Arc<str>, u128);
/// A job's place in its queue: `(due, id)`, the id as two halves — a `u128` aligns to 16 and
/// would make the key 32 bytes instead of 24 (a million pending jobs, issue 17).
pub(super) type DueKey = (i64, u64, u64);
pub(super) use super::due_set::DueSet;

/// A queue: its number (what its jobs name it by) and its jobs by due time.
#[derive(Debug)]
pub(super) struct Queue {
    number: u32,
    pub due: DueSet,
}

impl Queue {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.due.len()
    }
}

pub(super) fn due_key(due_at_ms: i64, id: u128) -> DueKey {
    let (high, low) = halves(id);
    (due_at_ms, high, low)
}

/// The job id of a place in a queue.
pub(super) fn job_of(key: &DueKey) -> u128 {
    whole((key.1, key.2))
}

#[derive(Debug, Default)]
pub(super) struct State {
    /// `(topic, partition)` → `(generation, next offset or -1)`.
    pub units: Map<(String, i32), (u64, i64)>,
    /// A tenant's last `seq`.
    pub heads: Map<String, u64>,
    /// A tenant's events by `seq`.
    pub events: Map<String, SeqIndex>,
    /// A tenant's dedup marks that outlive their events (R-IN-6): the ce-ids of events
    /// expired within the dedup window. A kept event's mark is its place in `events`.
    pub lasting_ids: Map<String, Set<Uuid>>,
    /// Dedup marks that outlive their events: `(ends at, tenant, id)` → the event's `seq` and
    /// the segment of the mark's record.
    pub lasting_marks: BTreeMap<(i64, String, u128), (u64, u32)>,
    pub jobs: JobMap,
    /// The pending jobs' last attempts, numbered.
    attempts: Attempts,
    /// Queue names by number (a job names its queue by number); a number is freed with its
    /// queue's last job.
    queue_keys: Vec<QueueKey>,
    free_queue_numbers: Vec<u32>,
    /// Each queue's number and jobs by due time (the due index a lane pages from); a queue with
    /// none is absent.
    pub queues: BTreeMap<QueueKey, Queue>,
    /// `(tenant, subscription, job)` → the letter and the segment of its record.
    pub dead: BTreeMap<(String, u128, u128), (DeadLetter, u32)>,
    pub stats: Map<(String, Uuid), DeliveryStats>,
    pub pulls: Map<(String, Uuid), u64>,
    pub quarantine: BTreeMap<u64, Forensic>,
    pub quarantine_seen: Map<(String, i32, i64), u64>,
    pub next_quarantine: u64,
    pub dlq: BTreeMap<u64, Forensic>,
    pub dlq_seen: Map<(String, i32, i64), u64>,
    pub next_dlq: u64,
    /// Events still indexed, per segment: a segment with none may go.
    pub live_events: BTreeMap<u32, u64>,
    /// One shared name per tenant for the due index and queues.
    tenant_names: Map<String, Arc<str>>,
}

impl State {
    /// The shared name of `tenant`.
    pub fn tenant_name(&mut self, tenant: &str) -> Arc<str> {
        if let Some(name) = self.tenant_names.get(tenant) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(tenant);
        self.tenant_names.insert(tenant.to_owned(), name.clone());
        name
    }

    pub fn head(&self, tenant: &str) -> u64 {
        self.heads.get(tenant).copied().unwrap_or(0)
    }

    /// Whether `tenant` has an event with ce-id `id` (kept, or its mark still is).
    pub fn has_event(&self, tenant: &str, id: Uuid) -> bool {
        let kept = || self.events.get(tenant).is_some_and(|e| e.holds_id(id));
        let lasting = || (self.lasting_ids.get(tenant)).is_some_and(|ids| ids.contains(&id));
        kept() || lasting()
    }

    /// An event's arrival, stored at `loc`.
    pub fn apply_event(&mut self, loc: Loc, event: &StoredEvent) {
        let tenant = &event.event.tenant;
        let id = event.event.id;
        let entry = EventEntry {
            loc,
            id,
            received_at_ms: event.event.received_at_ms,
        };
        self.index_event(tenant, event.seq, entry);
    }

    /// Indexes an event without its body at hand (the write path knows the parts).
    pub fn index_event(&mut self, tenant: &str, seq: u64, entry: EventEntry) {
        match self.events.get_mut(tenant) {
            Some(events) => {
                events.insert(seq, entry);
            }
            None => {
                let mut events = SeqIndex::default();
                events.insert(seq, entry);
                self.events.insert(tenant.to_owned(), events);
            }
        }
        self.raise_head(tenant, seq);
        *self.live_events.entry(entry.loc.seg).or_default() += 1;
    }

    fn raise_head(&mut self, tenant: &str, seq: u64) {
        match self.heads.get_mut(tenant) {
            Some(head) => *head = (*head).max(seq),
            None => {
                self.heads.insert(tenant.to_owned(), seq);
            }
        }
    }

    /// Applies one change, stored at `loc`.
    pub fn apply(&mut self, loc: Loc, change: Change) {
        match change {
            Change::Unit {
                topic,
                partition,
                generation,
                next,
            } => {
                self.units.insert((topic, partition), (generation, next));
            }
            Change::Head { tenant, seq } => self.raise_head(&tenant, seq),
            Change::Job { job, leased } => self.put_job(job, leased, loc.seg),
            Change::JobGone { id } => self.remove_job(id),
            Change::Dead(letter) => {
                let key = (
                    letter.job.tenant.to_string(),
                    letter.job.subscription.as_u128(),
                    letter.job.id,
                );
                self.dead.insert(key, (letter, loc.seg));
            }
            Change::DeadGone {
                tenant,
                subscription,
                job,
            } => {
                self.dead.remove(&(tenant, subscription.as_u128(), job));
            }
            Change::Stats {
                tenant,
                subscription,
                stats,
            } => {
                self.stats.insert((tenant, subscription), stats);
            }
            Change::StatsStep {
                tenant,
                subscription,
                stats,
            } => {
                let kept = self.stats.entry((tenant, subscription)).or_default();
                kept.take_step(stats);
            }
            Change::Pull {
                tenant,
                subscription,
                position,
            } => {
                self.pulls.insert((tenant, subscription), position);
            }
            Change::Quarantine { number, record } => {
                let position = (record.offset >= 0)
                    .then(|| (record.topic.clone(), record.partition, record.offset));
                if let Some(p) = &position {
                    self.quarantine_seen.insert(p.clone(), number);
                }
                let at_ms = record.received_at_ms;
                self.quarantine.insert(
                    number,
                    Forensic {
                        loc,
                        position,
                        at_ms,
                    },
                );
                self.next_quarantine = self.next_quarantine.max(number + 1);
            }
            Change::Dlq {
                number,
                observation: o,
            } => {
                let position = (o.topic, o.partition, o.offset);
                self.dlq_seen.insert(position.clone(), number);
                self.dlq.insert(
                    number,
                    Forensic {
                        loc,
                        position: Some(position),
                        at_ms: o.observed_at_ms,
                    },
                );
                self.next_dlq = self.next_dlq.max(number + 1);
            }
            Change::Counters { quarantine, dlq } => {
                self.next_quarantine = self.next_quarantine.max(quarantine);
                self.next_dlq = self.next_dlq.max(dlq);
            }
            Change::EventsExpired { tenant, through } => self.expire_events(&tenant, through),
            Change::DedupMark {
                tenant,
                id,
                seq,
                ends_at_ms,
            } => {
                let marks = self.lasting_ids.entry(tenant.clone()).or_default();
                marks.insert(Uuid::from_u128(id));
                self.lasting_marks
                    .insert((ends_at_ms, tenant, id), (seq, loc.seg));
            }
            Change::DedupGone {
                tenant,
                id,
                ends_at_ms,
            } => {
                if let Some(marks) = self.lasting_ids.get_mut(&tenant) {
                    marks.remove(&Uuid::from_u128(id));
                    if marks.is_empty() {
                        self.lasting_ids.remove(&tenant);
                    }
                }
                self.lasting_marks.remove(&(ends_at_ms, tenant, id));
            }
            Change::QuarantineExpired { through } => {
                expire_forensics(&mut self.quarantine, &mut self.quarantine_seen, through);
                self.next_quarantine = self.next_quarantine.max(through + 1);
            }
            Change::DlqExpired { through } => {
                expire_forensics(&mut self.dlq, &mut self.dlq_seen, through);
                self.next_dlq = self.next_dlq.max(through + 1);
            }
        }
    }

    /// The queue a job's number names.
    pub fn queue_key(&self, job: &JobEntry) -> &QueueKey {
        &self.queue_keys[job.queue as usize]
    }

    /// Job `id` as stored, and whether it is leased.
    pub fn job(&self, id: u128) -> Option<(JobRecord, bool)> {
        let entry = self.jobs.get(id)?;
        Some((self.record(id, entry), entry.leased()))
    }

    /// The record of job `id`, whose entry is `entry`.
    pub fn record(&self, id: u128, entry: &JobEntry) -> JobRecord {
        entry.record(id, self.queue_key(entry), self.attempts.get(entry.last))
    }

    /// A number for a new queue: a freed one, or the next.
    fn new_queue_number(&mut self, key: &QueueKey) -> u32 {
        match self.free_queue_numbers.pop() {
            Some(n) => {
                self.queue_keys[n as usize] = key.clone();
                n
            }
            None => {
                self.queue_keys.push(key.clone());
                u32::try_from(self.queue_keys.len() - 1).expect("fewer than 2^32 queues")
            }
        }
    }

    fn put_job(&mut self, mut job: JobRecord, leased: bool, seg: u32) {
        let id = job.id;
        let attempt = job.last.take();
        if let Some(entry) = self.jobs.get_mut(id) {
            // A rewrite (lease, retry, recovery): same queue, so its number and slot are kept
            // and only its place in the queue moves.
            let before = due_key(entry.due_at_ms, id);
            let queue = entry.queue;
            let (last, moved) = self.attempts.keep(id, entry.last, attempt);
            *entry = JobEntry::new(&job, queue, leased, seg, last);
            let after = due_key(entry.due_at_ms, id);
            if before != after {
                if let Some(queue) = self.queues.get_mut(&self.queue_keys[queue as usize]) {
                    queue.due.remove(&before);
                    queue.due.insert(after);
                }
            }
            self.renumber_attempt(moved);
            return;
        }
        let tenant = self.tenant_name(&job.tenant);
        let key = (job.lane, tenant, job.subscription.as_u128());
        let number = match self.queues.get(&key) {
            Some(queue) => queue.number,
            None => {
                let number = self.new_queue_number(&key);
                let due = DueSet::default();
                self.queues.insert(key.clone(), Queue { number, due });
                number
            }
        };
        let (last, _) = self.attempts.keep(id, NONE, attempt);
        let entry = JobEntry::new(&job, number, leased, seg, last);
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.due.insert(due_key(entry.due_at_ms, id));
        }
        self.jobs.insert_new(id, entry);
    }

    /// Tells the job whose attempt moved (`Attempts::free`) its new number.
    fn renumber_attempt(&mut self, moved: Option<(u128, AttemptNumber)>) {
        if let Some((job, n)) = moved {
            if let Some(entry) = self.jobs.get_mut(job) {
                entry.last = n;
            }
        }
    }

    fn remove_job(&mut self, id: u128) {
        if let Some(gone) = self.jobs.remove(id) {
            let moved = self.attempts.free(gone.last);
            self.renumber_attempt(moved);
            self.unqueue(&gone, id);
        }
    }

    /// Takes `job` out of its queue; a queue left empty goes, and its number is freed.
    fn unqueue(&mut self, job: &JobEntry, id: u128) {
        let key = self.queue_key(job).clone();
        let Some(queue) = self.queues.get_mut(&key) else {
            return;
        };
        queue.due.remove(&due_key(job.due_at_ms, id));
        if queue.due.is_empty() {
            self.queues.remove(&key);
            self.free_queue_numbers.push(job.queue);
        }
    }

    fn expire_events(&mut self, tenant: &str, through: u64) {
        self.raise_head(tenant, through);
        let Some(events) = self.events.get_mut(tenant) else {
            return;
        };
        let old = events.expire_through(through);
        if events.is_empty() {
            self.events.remove(tenant);
        }
        for entry in &old {
            if let Some(n) = self.live_events.get_mut(&entry.loc.seg) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Releases every lease when the log opens: the process that took them has ended (a single
    /// node). Each job is due at `now_ms` and keeps its `starts`, so the lapse counts as a
    /// recovery (R-DI-8). Returns how many.
    pub fn release_leases(&mut self, now_ms: i64) -> usize {
        let leased: Vec<u128> = (self.jobs.iter())
            .filter(|(_, e)| e.leased())
            .map(|(id, _)| id)
            .collect();
        for id in &leased {
            let Some(entry) = self.jobs.get_mut(*id) else {
                continue;
            };
            let before = entry.due_at_ms;
            entry.due_at_ms = now_ms;
            entry.set_leased(false);
            if let Some(queue) = self.queues.get_mut(&self.queue_keys[entry.queue as usize]) {
                queue.due.remove(&due_key(before, *id));
                queue.due.insert(due_key(now_ms, *id));
            }
        }
        leased.len()
    }
}

/// Drops forensic rows numbered up to `through` with their positions.
fn expire_forensics(
    rows: &mut BTreeMap<u64, Forensic>,
    seen: &mut Map<(String, i32, i64), u64>,
    through: u64,
) {
    let young = rows.split_off(&through.saturating_add(1));
    for gone in std::mem::replace(rows, young).into_values() {
        if let Some(p) = gone.position {
            seen.remove(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::event;
    use crate::store::AttemptRecord;

    fn job(tenant: &str, lane: Lane, due_at_ms: i64) -> JobRecord {
        let mut job = JobRecord::created(&event(tenant, "loan.approved"), 1, Uuid::now_v7(), lane);
        job.due_at_ms = due_at_ms;
        job
    }

    fn at() -> Loc {
        Loc {
            seg: 0,
            offset: 0,
            len: 1,
        }
    }

    /// A job rewritten as its queue's only job keeps its queue and one place in it; a queue
    /// emptied frees its number, and the numbers are reused.
    #[test]
    fn r_di_1_a_rewritten_job_keeps_its_queue_when_queue_numbers_are_reused() {
        let mut state = State::default();
        let a = job("t-a", 1, 10);
        state.apply(
            at(),
            Change::Job {
                job: a.clone(),
                leased: false,
            },
        );
        let mut moved = a.clone();
        moved.due_at_ms = 20;
        state.apply(
            at(),
            Change::Job {
                job: moved,
                leased: true,
            },
        );
        let b = job("t-b", 2, 10);
        state.apply(
            at(),
            Change::Job {
                job: b.clone(),
                leased: false,
            },
        );
        let (kept, leased) = state.job(a.id).expect("kept");
        assert_eq!((&*kept.tenant, kept.lane, kept.due_at_ms), ("t-a", 1, 20));
        assert!(leased);
        assert_eq!(state.job(b.id).map(|(j, _)| j.tenant), Some("t-b".into()));
        assert_eq!(state.queues.len(), 2);
        assert!(
            state.queues.values().all(|q| q.len() == 1),
            "no stale place left"
        );
        state.apply(at(), Change::JobGone { id: a.id });
        state.apply(at(), Change::JobGone { id: b.id });
        assert!(
            state.queues.is_empty() && state.free_queue_numbers.len() == state.queue_keys.len()
        );
    }

    /// A job's last attempt survives another job's attempt leaving: the attempt moved into the
    /// freed slot is renumbered in its job, and a rewrite without an attempt drops its own.
    #[test]
    fn r_di_8_last_attempts_stay_with_their_jobs_as_others_leave() {
        let mut state = State::default();
        let attempt = |ms: i64| AttemptRecord {
            at_ms: ms,
            success: false,
            error_class: Some("http_status".into()),
            status_code: Some(503),
            detail: String::new(),
            duration_ms: 1,
        };
        let jobs: Vec<JobRecord> = (0..3)
            .map(|n| {
                let mut j = job("t-a", 1, 10);
                j.last = Some(attempt(n));
                j
            })
            .collect();
        for j in &jobs {
            let (job, leased) = (j.clone(), false);
            state.apply(at(), Change::Job { job, leased });
        }
        state.apply(at(), Change::JobGone { id: jobs[0].id });
        let last_of = |state: &State, id| state.job(id).and_then(|(j, _)| j.last.map(|a| a.at_ms));
        assert_eq!(last_of(&state, jobs[1].id), Some(1));
        assert_eq!(last_of(&state, jobs[2].id), Some(2), "moved, renumbered");
        let mut bare = jobs[1].clone();
        bare.last = None;
        state.apply(
            at(),
            Change::Job {
                job: bare,
                leased: true,
            },
        );
        assert_eq!(last_of(&state, jobs[1].id), None);
        assert_eq!(last_of(&state, jobs[2].id), Some(2));
        assert_eq!(state.attempts.len(), 1);
    }
}
