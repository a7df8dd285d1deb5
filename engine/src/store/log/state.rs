//! The log store's indexes, all in memory: what replay rebuilds from the segments and what every
//! commit changes, through the one function [`State::apply`] — so a write and its replay after
//! a restart cannot disagree.
//!
//! Event bodies, quarantine records and DLQ observations stay on disk; the indexes keep where
//! they lie. Jobs, dead letters, statistics, heads, units and pull positions are small and live
//! here whole. Each job, dead letter and lasting dedup mark remembers the segment of its last
//! record, so dropping a segment knows what to carry forward.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;

pub(super) use super::job_entry::JobEntry;
use super::record::{Change, Loc};
use crate::store::{DeadLetter, DeliveryStats, JobRecord, Lane, StoredEvent};

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
/// A queue's jobs by due time: `(due, job)`.
pub(super) type DueSet = BTreeSet<(i64, u128)>;

#[derive(Debug, Default)]
pub(super) struct State {
    /// `(topic, partition)` → `(generation, next offset or -1)`.
    pub units: HashMap<(String, i32), (u64, i64)>,
    /// A tenant's last `seq`.
    pub heads: HashMap<String, u64>,
    /// A tenant's events by `seq`.
    pub events: HashMap<String, BTreeMap<u64, EventEntry>>,
    /// A tenant's dedup marks: the ce-ids it has (R-IN-6).
    pub dedup: HashMap<String, HashSet<Uuid>>,
    /// Dedup marks that outlive their events: `(ends at, tenant, id)` → segment of the record.
    /// Dedup marks that outlive their events: `(ends at, tenant, id)` → the event's `seq` and
    /// the segment of the mark's record.
    pub lasting_marks: BTreeMap<(i64, String, u128), (u64, u32)>,
    /// Boxed: a map of a million grows by doubling, and empty slots then cost a pointer each.
    pub jobs: HashMap<u128, Box<JobEntry>>,
    /// Each queue's jobs by due time (the due index a lane pages from); a queue with none is
    /// absent.
    pub queues: BTreeMap<QueueKey, DueSet>,
    /// `(tenant, subscription, job)` → the letter and the segment of its record.
    pub dead: BTreeMap<(String, u128, u128), (DeadLetter, u32)>,
    pub stats: HashMap<(String, Uuid), DeliveryStats>,
    pub pulls: HashMap<(String, Uuid), u64>,
    pub quarantine: BTreeMap<u64, Forensic>,
    pub quarantine_seen: HashMap<(String, i32, i64), u64>,
    pub next_quarantine: u64,
    pub dlq: BTreeMap<u64, Forensic>,
    pub dlq_seen: HashMap<(String, i32, i64), u64>,
    pub next_dlq: u64,
    /// Events still indexed, per segment: a segment with none may go.
    pub live_events: BTreeMap<u32, u64>,
    /// One shared name per tenant for the due index and queues.
    tenant_names: HashMap<String, Arc<str>>,
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
        self.dedup
            .get(tenant)
            .is_some_and(|marks| marks.contains(&id))
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
                self.events
                    .insert(tenant.to_owned(), BTreeMap::from([(seq, entry)]));
            }
        }
        match self.dedup.get_mut(tenant) {
            Some(marks) => {
                marks.insert(entry.id);
            }
            None => {
                self.dedup
                    .insert(tenant.to_owned(), HashSet::from([entry.id]));
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
                    letter.job.tenant.clone(),
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
                let marks = self.dedup.entry(tenant.clone()).or_default();
                marks.insert(Uuid::from_u128(id));
                self.lasting_marks
                    .insert((ends_at_ms, tenant, id), (seq, loc.seg));
            }
            Change::DedupGone {
                tenant,
                id,
                ends_at_ms,
            } => {
                if let Some(marks) = self.dedup.get_mut(&tenant) {
                    marks.remove(&Uuid::from_u128(id));
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

    fn queue_of(job: &JobEntry) -> QueueKey {
        (job.lane, job.tenant.clone(), job.subscription.as_u128())
    }

    fn put_job(&mut self, job: JobRecord, leased: bool, seg: u32) {
        let id = job.id;
        let tenant = self.tenant_name(&job.tenant);
        let entry = Box::new(JobEntry::new(job, tenant, leased, seg));
        let due = (entry.due_at_ms, id);
        let queue = self.queues.entry(Self::queue_of(&entry)).or_default();
        if let Some(before) = self.jobs.insert(id, entry) {
            queue.remove(&(before.due_at_ms, id));
        }
        queue.insert(due);
    }

    fn remove_job(&mut self, id: u128) {
        let Some(gone) = self.jobs.remove(&id) else {
            return;
        };
        let key = Self::queue_of(&gone);
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.remove(&(gone.due_at_ms, id));
            if queue.is_empty() {
                self.queues.remove(&key);
            }
        }
    }

    fn expire_events(&mut self, tenant: &str, through: u64) {
        self.raise_head(tenant, through);
        let Some(events) = self.events.get_mut(tenant) else {
            return;
        };
        let young = events.split_off(&through.saturating_add(1));
        let old = std::mem::replace(events, young);
        let mut marks = self.dedup.get_mut(tenant);
        for entry in old.values() {
            if let Some(n) = self.live_events.get_mut(&entry.loc.seg) {
                *n = n.saturating_sub(1);
            }
            if let Some(m) = marks.as_deref_mut() {
                m.remove(&entry.id);
            }
        }
    }

    /// Releases every lease when the log opens: the process that took them has ended (a single
    /// node). Each job is due at `now_ms` and keeps its `starts`, so the lapse counts as a
    /// recovery (R-DI-8). Returns how many.
    pub fn release_leases(&mut self, now_ms: i64) -> usize {
        let leased: Vec<u128> = (self.jobs.iter())
            .filter(|(_, e)| e.leased)
            .map(|(id, _)| *id)
            .collect();
        for id in &leased {
            let Some(entry) = self.jobs.get_mut(id) else {
                continue;
            };
            let before = entry.due_at_ms;
            entry.due_at_ms = now_ms;
            entry.leased = false;
            if let Some(queue) = self.queues.get_mut(&Self::queue_of(entry)) {
                queue.remove(&(before, *id));
                queue.insert((now_ms, *id));
            }
        }
        leased.len()
    }
}

/// Drops forensic rows numbered up to `through` with their positions.
fn expire_forensics(
    rows: &mut BTreeMap<u64, Forensic>,
    seen: &mut HashMap<(String, i32, i64), u64>,
    through: u64,
) {
    let young = rows.split_off(&through.saturating_add(1));
    for gone in std::mem::replace(rows, young).into_values() {
        if let Some(p) = gone.position {
            seen.remove(&p);
        }
    }
}
