//! Group commit: every `write_batch` waiting at the same moment — several partitions of a shard,
//! several shards, concurrent HTTP requests — goes into one redb transaction and one fsync.
//!
//! redb has one writer at a time, so separate transactions would queue anyway; merging them
//! pays the commit (page writes and fsync) once per group instead of once per batch. Each batch
//! keeps its own fence check and its own outcome: a fenced batch writes nothing and gets
//! `Fenced`, the others in the group still land. A storage error fails the whole group (nothing
//! of it is committed) and every caller retries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use redb::{Database, ReadableTable, Table, WriteTransaction};

use hub_core::redb_handle::DbHandle;
use tokio::sync::oneshot;

use super::delivery::{apply_step, JobTables};
use super::tables::*;
use super::unavailable;
use crate::store::codec::encode;
use crate::store::timings::PhaseTimings;
use crate::store::{
    BatchOutcome, DeliveryStep, Fence, IngestBatch, JobRecord, StepOutcome, StoreError,
    StoredEventRef, UnitId,
};

/// One piece of work for the committer: an ingest batch or a delivery step, each with its reply.
pub(super) enum Work {
    Ingest {
        unit: UnitId,
        fence: Fence,
        batch: Arc<IngestBatch>,
        reply: oneshot::Sender<Result<BatchOutcome, StoreError>>,
    },
    Step {
        step: DeliveryStep,
        reply: oneshot::Sender<Result<StepOutcome, StoreError>>,
    },
}

type Answer = Result<Answered, StoreError>;

/// What the transaction produced for one piece of work.
enum Answered {
    Ingest(BatchOutcome),
    Step(StepOutcome),
}

impl Work {
    fn answer(self, answer: Answer) {
        // A caller that gave up (dropped its future) needs no answer.
        match (self, answer) {
            (Work::Ingest { reply, .. }, Ok(Answered::Ingest(o))) => {
                let _ = reply.send(Ok(o));
            }
            (Work::Step { reply, .. }, Ok(Answered::Step(o))) => {
                let _ = reply.send(Ok(o));
            }
            (Work::Ingest { reply, .. }, Err(e)) => {
                let _ = reply.send(Err(e));
            }
            (Work::Step { reply, .. }, Err(e)) => {
                let _ = reply.send(Err(e));
            }
            (Work::Ingest { reply, .. }, Ok(_)) => {
                let _ = reply.send(Err(StoreError::Unavailable("mismatched answer".into())));
            }
            (Work::Step { reply, .. }, Ok(_)) => {
                let _ = reply.send(Err(StoreError::Unavailable("mismatched answer".into())));
            }
        }
    }
}

pub(super) type Committer = crate::store::committer_thread::CommitterThread<Work>;

/// Starts the committer thread.
pub(super) fn start(
    db: Arc<DbHandle>,
    timings: Arc<PhaseTimings>,
) -> Result<Committer, StoreError> {
    Committer::start("embedded-commit", move |group| {
        let started = Instant::now();
        // A failure reopens the store before the answers go out, so a caller retrying at once
        // finds it open again (`hub_core::redb_handle`).
        let outcomes = db.run(|open| commit_group(open, &group));
        timings.record(0, started);
        match outcomes {
            Ok(outcomes) => {
                db.note_landed();
                for (work, outcome) in group.into_iter().zip(outcomes) {
                    work.answer(outcome);
                }
            }
            Err(e) => {
                db.note_failed(&e);
                for work in group {
                    work.answer(Err(StoreError::Unavailable(e.to_string())));
                }
            }
        }
        None
    })
}

/// The tables a batch touches, opened once per transaction.
struct Tables<'txn> {
    units: Table<'txn, (&'static str, i32), (u64, i64)>,
    dedup: Table<'txn, (&'static str, u128), u64>,
    seqs: Table<'txn, &'static str, u64>,
    events: Table<'txn, (&'static str, u64), &'static [u8]>,
    quarantine: Table<'txn, u64, &'static [u8]>,
    seen: Table<'txn, (&'static str, i32, i64), u64>,
    counters: Table<'txn, &'static str, u64>,
    jobs: JobTables<'txn>,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Self {
            units: txn.open_table(UNITS)?,
            dedup: txn.open_table(DEDUP)?,
            seqs: txn.open_table(TENANT_SEQ)?,
            events: txn.open_table(EVENTS)?,
            quarantine: txn.open_table(QUARANTINE)?,
            seen: txn.open_table(QUARANTINE_SEEN)?,
            counters: txn.open_table(COUNTERS)?,
            jobs: JobTables::open(txn)?,
        })
    }
}

fn commit_group(db: &Database, group: &[Work]) -> Result<Vec<Answer>, StoreError> {
    let txn = db.begin_write().map_err(unavailable)?;
    let outcomes = {
        let mut t = Tables::open(&txn).map_err(unavailable)?;
        let mut heads: HashMap<String, u64> = HashMap::new();
        let mut outcomes = Vec::with_capacity(group.len());
        for work in group {
            outcomes.push(match work {
                Work::Ingest {
                    unit, fence, batch, ..
                } => apply(&mut t, &mut heads, unit, *fence, batch)?.map(Answered::Ingest),
                // A step reads events of this group's batches too: seqs are written per batch,
                // the tenant heads only at the end, and a step never needs a head.
                Work::Step { step, .. } => {
                    Ok(Answered::Step(apply_step(&mut t.jobs, &t.events, step)?))
                }
            });
        }
        for (tenant, head) in &heads {
            t.seqs.insert(tenant.as_str(), head).map_err(unavailable)?;
        }
        outcomes
    };
    // Default durability is immediate: commit returns after fsync.
    txn.commit().map_err(unavailable)?;
    Ok(outcomes)
}

/// One batch inside the group's transaction. The outer error is a storage failure (abort the
/// group); the inner one is this batch's own refusal (fenced).
fn apply(
    t: &mut Tables<'_>,
    heads: &mut HashMap<String, u64>,
    unit: &UnitId,
    fence: Fence,
    batch: &IngestBatch,
) -> Result<Result<BatchOutcome, StoreError>, StoreError> {
    let (current, _) = t
        .units
        .get((unit.topic.as_str(), unit.partition))
        .map_err(unavailable)?
        .map_or((0, -1), |g| g.value());
    if let Err(fenced) = fence.check(unit, current) {
        return Ok(Err(fenced));
    }
    let mut outcome = BatchOutcome::default();
    for (i, event) in batch.events.iter().enumerate() {
        let tenant = event.tenant.as_str();
        let id = event.id.as_u128();
        let head = match heads.get(tenant) {
            Some(h) => *h,
            None => t
                .seqs
                .get(tenant)
                .map_err(unavailable)?
                .map_or(0, |g| g.value()),
        };
        let seq = head + 1;
        // `insert` returns the previous value, so one B-tree walk both checks and marks. A
        // duplicate's mark is put back as it was (first write wins) and takes no seq.
        let previous = t
            .dedup
            .insert((tenant, id), seq)
            .map_err(unavailable)?
            .map(|g| g.value());
        if let Some(first) = previous {
            t.dedup.insert((tenant, id), first).map_err(unavailable)?;
            outcome.duplicates.push((event.tenant.clone(), event.id));
            continue;
        }
        heads.insert(event.tenant.clone(), seq);
        let row = encode(&StoredEventRef { seq, event });
        t.events
            .insert((tenant, seq), row.as_slice())
            .map_err(unavailable)?;
        // R-DI-1: the event's jobs land in the same transaction as the event.
        for sub in batch.matches.get(i).map_or(&[][..], |m| m.0.as_slice()) {
            t.jobs
                .create(&JobRecord::created(event, seq, *sub, batch.lane))?;
        }
        outcome.stored.push((event.tenant.clone(), event.id, seq));
    }
    let mut next_q = t
        .counters
        .get(QUARANTINE_NEXT)
        .map_err(unavailable)?
        .map_or(0, |g| g.value());
    for record in &batch.quarantined {
        // A Kafka record replayed after a crash is quarantined once; HTTP records (offset -1)
        // have no position to recognise them by.
        let key = (record.topic.as_str(), record.partition, record.offset);
        if record.offset >= 0 {
            if t.seen.get(key).map_err(unavailable)?.is_some() {
                continue;
            }
            t.seen.insert(key, next_q).map_err(unavailable)?;
        }
        t.quarantine
            .insert(next_q, encode(record).as_slice())
            .map_err(unavailable)?;
        next_q += 1;
        outcome.quarantined += 1;
    }
    t.counters
        .insert(QUARANTINE_NEXT, next_q)
        .map_err(unavailable)?;
    if let (Some(next), false) = (batch.next_offset, fence == Fence::UNFENCED) {
        t.units
            .insert((unit.topic.as_str(), unit.partition), (current, next))
            .map_err(unavailable)?;
    }
    Ok(Ok(outcome))
}
