//! The embedded store as an append-only log (issue 17): one node, no external process, one
//! `fdatasync` per group of writes and no page rewrites.
//!
//! Every write becomes records appended to the newest segment file (`record`, `segments`);
//! the indexes that answer reads — dedup marks, `seq` heads, where each event lies, jobs by
//! lane and due time, dead letters, statistics — live in memory (`state`) and are rebuilt by
//! replaying the segments when the store opens. A commit thread writes (`committer`): it merges
//! the writes waiting at the moment into one frame, so a group lands whole or not at all, as one
//! redb transaction did; a write that finds the log free and quiet enough is appended by its
//! writer the same way, under the same lock (`committer::append_here`). Retention expires rows
//! as changes and drops whole segments once nothing in them is kept (`retention`).
//!
//! Invariant: the indexes are only ever changed by applying a record that is in (or going into)
//! the log, through `State::apply`; replay applies the same records the same way.

mod attempts;
mod committer;
mod delivery;
mod due_set;
mod job_entry;
mod job_map;
#[cfg(test)]
mod lease_tests;
mod record;
#[cfg(test)]
mod replay_tests;
mod retention;
mod segments;
mod seq_index;
mod state;
#[cfg(test)]
mod sync_tests;
#[cfg(test)]
mod tests;
mod writes;

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use hub_core::ownership::EngineOwnership;
use uuid::Uuid;

use self::committer::{Committer, Durability, Log, Op, Reply, Shared};
use self::record::{Loc, Record};
use self::segments::Segments;
use self::writes::Tx;
use super::timings::{PhaseTimings, PhaseTotal};
use super::{
    BatchOutcome, DeadLetter, DeliveryStats, DeliveryStep, DlqObservation, DuePage, DueQuery,
    EventLog, Expired, Fence, Forensics, ForensicsFilter, Ingest, IngestBatch, Jobs, LaneHolds,
    Page, QuarantineRecord, Retention, StepOutcome, StoreError, StoreOps, StoredEvent, UnitId,
};
use crate::store::unavailable;

pub use segments::SEGMENT_BYTES;

/// The log store. Cheap to clone; all clones share one log.
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
    committer: Arc<Committer>,
    retention: Retention,
    /// The engine's ownership report: one process writes and reads it, so it stays in memory.
    ownership: Arc<Mutex<Option<EngineOwnership>>>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogStore")
    }
}

impl LogStore {
    /// Opens (or creates) the log in directory `dir`, with segments of [`SEGMENT_BYTES`].
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, SEGMENT_BYTES)
    }

    /// Opens the log with segments rolled over at `segment_bytes`.
    pub fn open_with(dir: &Path, segment_bytes: u64) -> Result<Self, StoreError> {
        let started = std::time::Instant::now();
        let mut log = Log {
            state: state::State::default(),
            segments: Segments::open(dir)?,
            segment_bytes,
            spent: Vec::new(),
            frame_buffer: Vec::new(),
            appended_here_at: None,
            appended_at: None,
            committer_asleep: false,
            preparing: false,
        };
        log.reload()?;
        let released = log.state.release_leases(crate::clock::now_ms());
        tracing::info!(
            jobs = log.state.jobs.len(),
            released_leases = released,
            took_ms = started.elapsed().as_millis() as u64,
            "opened the log store"
        );
        let shared = Arc::new(Shared {
            log: Mutex::new(log),
            failure: Mutex::new(None),
            timings: PhaseTimings::new(&["group_commit"]),
            riders: Mutex::new(Vec::new()),
        });
        let committer = Arc::new(committer::start(shared.clone())?);
        Ok(Self {
            shared,
            committer,
            retention: Retention::default(),
            ownership: Arc::default(),
        })
    }

    /// The windows `expire` keeps rows for (default: `Retention::default()`).
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Runs `write` in the next group and answers once its frame is durable. A refusal of the
    /// write's own (`Fenced`) is its answer; a storage failure aborts the group.
    async fn write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.queue(false, Durability::Synced, write).await
    }

    /// `write`, in the next group (`riding`: see [`Self::ride`]), answered once its frame is as
    /// durable as `durability` says.
    async fn queue<T: Send + 'static>(
        &self,
        riding: bool,
        durability: Durability,
        write: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (op, answered) = op(durability, write);
        match riding {
            true if crate::runtime::on_shard() => return self.ride(op, answered).await,
            true => committer::ride_with_the_thread(&self.shared, &self.committer, op)?,
            false => self.committer.submit(op)?,
        }
        answer_of(answered).await
    }

    /// On a shard, a riding write waits for the next frame any writer appends
    /// (`committer::ride`: no thread is woken for it) and is answered with it; if none came
    /// within `RIDE_AT_MOST`, its own shard appends the riders. The wait is a task of the
    /// shard's that ends unfired when the answer comes first (this future's end closes
    /// `answered_first`), so a carried rider costs no wake-up of its own.
    async fn ride<T>(
        &self,
        op: Op,
        answered: tokio::sync::oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        committer::ride(&self.shared, op);
        let (answered_first, answer_came) = async_channel::bounded::<()>(1);
        let shared = Arc::downgrade(&self.shared);
        let committer = Arc::downgrade(&self.committer);
        crate::runtime::spawn_on_shard(async move {
            let waited = Box::pin(crate::runtime::shard_sleep(
                crate::store::committer_thread::RIDE_AT_MOST,
            ));
            let answered = Box::pin(answer_came.recv());
            if let futures::future::Either::Left(_) =
                futures::future::select(waited, answered).await
            {
                if let (Some(shared), Some(committer)) = (shared.upgrade(), committer.upgrade()) {
                    committer::flush_riders(&shared, &committer);
                }
            }
        });
        let answer = answer_of(answered).await;
        drop(answered_first);
        answer
    }

    /// `write`, appended on the caller's own thread when the log is free and the write fits
    /// (`committer::append_here`: a lane's lease step, an ingest batch on a quiet log), else
    /// in the next group, which starts at once; answered once as durable as `durability` says.
    async fn append_or_queue<T: Send + 'static>(
        &self,
        durability: Durability,
        write: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (op, answered) = op(durability, write);
        committer::append_or_submit(&self.shared, &self.committer, vec![op])?;
        answer_of(answered).await
    }

    /// Reads the indexes (never while a group is being made durable).
    fn read<T>(&self, read: impl FnOnce(&Log) -> T) -> T {
        let log = self.shared.log.lock().unwrap_or_else(|e| e.into_inner());
        read(&log)
    }
}

/// A write for the commit thread (or a lane's own append), and where its answer comes.
fn op<T: Send + 'static>(
    durability: Durability,
    write: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
) -> (Op, tokio::sync::oneshot::Receiver<Result<T, StoreError>>) {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let change: committer::Change = Box::new(move |tx| {
        let result = write(tx);
        let aborts = match &result {
            Err(e @ (StoreError::Unavailable(_) | StoreError::Corrupt(_))) => Some(e.to_string()),
            _ => None,
        };
        let reply: Reply = Box::new(move |failure| {
            let _ = answer.send(match failure {
                Some(why) => Err(StoreError::Unavailable(why.to_owned())),
                None => result,
            });
        });
        (reply, aborts)
    });
    (Op { change, durability }, answered)
}

async fn answer_of<T>(
    answered: tokio::sync::oneshot::Receiver<Result<T, StoreError>>,
) -> Result<T, StoreError> {
    answered
        .await
        .map_err(|_| StoreError::Unavailable("the log committer stopped".into()))?
}

/// Reads records at `locs` through their segments' handles, outside the lock.
fn read_records(
    handles: Vec<(Loc, Option<Arc<std::fs::File>>)>,
) -> Result<Vec<Record>, StoreError> {
    handles
        .into_iter()
        .map(|(loc, file)| {
            let file = file.ok_or_else(|| StoreError::Corrupt("a log segment is gone".into()))?;
            segments::read_record(&file, loc)
        })
        .collect()
}

/// A page of forensic rows from `cursor`, decoded and filtered like the redb store's.
fn forensic_page<T>(
    handles: Vec<(u64, Loc, Option<Arc<std::fs::File>>)>,
    limit: usize,
    pick: impl Fn(record::Change) -> Option<T>,
    keep: impl Fn(&T) -> bool,
) -> Result<Page<T>, StoreError> {
    let mut items = Vec::new();
    for (number, loc, file) in handles {
        if items.len() == limit {
            return Ok(Page {
                items,
                next_cursor: Some(number),
            });
        }
        let file = file.ok_or_else(|| StoreError::Corrupt("a log segment is gone".into()))?;
        let change = segments::read_record(&file, loc)?.into_change()?;
        if let Some(item) = pick(change).filter(|i| keep(i)) {
            items.push(item);
        }
    }
    Ok(Page {
        items,
        next_cursor: None,
    })
}

#[async_trait]
impl Ingest for LogStore {
    async fn claim_unit(&self, unit: &UnitId) -> Result<(Fence, Option<i64>), StoreError> {
        let unit = unit.clone();
        self.write(move |tx| Ok(writes::claim(tx, &unit))).await
    }

    async fn write_batch(
        &self,
        unit: &UnitId,
        fence: Fence,
        batch: Arc<IngestBatch>,
    ) -> Result<BatchOutcome, StoreError> {
        let unit = unit.clone();
        let write = move |tx: &mut Tx<'_>| writes::ingest(tx, &unit, fence, &batch);
        self.append_or_queue(Durability::Synced, write).await
    }

    async fn unit_offset(&self, unit: &UnitId) -> Result<Option<i64>, StoreError> {
        let key = (unit.topic.clone(), unit.partition);
        Ok(self.read(|log| log.state.units.get(&key).map(|u| u.1).filter(|n| *n >= 0)))
    }

    /// Every write is queued for the commit thread and answered on a oneshot channel.
    fn writes_anywhere(&self) -> bool {
        true
    }

    /// One process holds the log, and `open` releases every lease a crash left.
    fn leases_at_ingest(&self) -> bool {
        true
    }
}

#[async_trait]
impl EventLog for LogStore {
    async fn read_events(
        &self,
        tenant: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let handles = self.read(|log| {
            let Some(events) = log.state.events.get(tenant) else {
                return Vec::new();
            };
            events
                .from(after.saturating_add(1))
                .take(limit)
                .map(|(_, e)| (e.loc, log.segments.reader(e.loc)))
                .collect()
        });
        read_records(handles)?
            .into_iter()
            .map(Record::into_event)
            .collect()
    }

    async fn pull_position(&self, tenant: &str, subscription: Uuid) -> Result<u64, StoreError> {
        let key = (tenant.to_owned(), subscription);
        Ok(self.read(|log| log.state.pulls.get(&key).copied().unwrap_or(0)))
    }

    async fn advance_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        let tenant = tenant.to_owned();
        self.write(move |tx| Ok(writes::advance_pull(tx, &tenant, subscription, from, to)))
            .await
    }
}

#[async_trait]
impl Forensics for LogStore {
    async fn list_quarantine(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<QuarantineRecord>, StoreError> {
        let handles = self.read(|log| forensic_handles(log, &log.state.quarantine, cursor));
        let pick = |change| match change {
            record::Change::Quarantine { record, .. } => Some(record),
            _ => None,
        };
        forensic_page(handles, limit, pick, |r| filter.keeps_quarantined(r))
    }

    async fn record_dlq(&self, obs: Vec<DlqObservation>) -> Result<(), StoreError> {
        self.write(move |tx| {
            writes::record_dlq(tx, obs);
            Ok(())
        })
        .await
    }

    async fn list_dlq(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<DlqObservation>, StoreError> {
        let handles = self.read(|log| forensic_handles(log, &log.state.dlq, cursor));
        let pick = |change| match change {
            record::Change::Dlq { observation, .. } => Some(observation),
            _ => None,
        };
        forensic_page(handles, limit, pick, |o| filter.keeps_observation(o))
    }
}

#[async_trait]
impl Jobs for LogStore {
    async fn due_jobs(&self, query: DueQuery) -> Result<DuePage, StoreError> {
        Ok(self.read(|log| delivery::due_jobs(&log.state, &query)))
    }

    /// Read at once unless a writer holds the log (an append, perhaps with its sync): a shard
    /// never waits on the lock.
    fn due_jobs_at_once(&self, query: &DueQuery) -> Option<DuePage> {
        let log = self.shared.log_if_free()?;
        Some(delivery::due_jobs(&log.state, query))
    }

    /// A step of outcomes alone rides the next group (nobody waits on it to start work); a step
    /// with leases goes at once, appended by the lane itself when the log is free. Either is
    /// answered once written, before a sync (`Durability::Written`).
    async fn delivery_step(&self, step: DeliveryStep) -> Result<StepOutcome, StoreError> {
        let riding = step.start.is_empty();
        let write = move |tx: &mut Tx<'_>| delivery::step(tx, &step);
        let (out, unread) = match riding {
            // Outcomes alone share the next group's frame rather than paying a write.
            true => self.queue(true, Durability::Written, write).await?,
            false => self.append_or_queue(Durability::Written, write).await?,
        };
        delivery::read_started(out, unread)
    }

    async fn dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        cursor: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, Option<u128>), StoreError> {
        Ok(
            self.read(|log| {
                delivery::dead_letters(&log.state, tenant, subscription, cursor, limit)
            }),
        )
    }

    async fn replay_dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        jobs: Option<Vec<u128>>,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        let tenant = tenant.to_owned();
        self.write(move |tx| {
            Ok(delivery::replay(
                tx,
                &tenant,
                subscription,
                jobs.as_deref(),
                now_ms,
            ))
        })
        .await
    }

    async fn delivery_stats(
        &self,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<DeliveryStats, StoreError> {
        let key = (tenant.to_owned(), subscription);
        Ok(self.read(|log| log.state.stats.get(&key).cloned().unwrap_or_default()))
    }

    async fn pending_jobs(&self) -> Result<u64, StoreError> {
        Ok(self.read(|log| log.state.jobs.len() as u64))
    }
}

#[async_trait]
impl LaneHolds for LogStore {
    async fn publish_ownership(&self, report: &EngineOwnership) -> Result<(), StoreError> {
        if let Ok(mut kept) = self.ownership.lock() {
            *kept = Some(report.clone());
        }
        Ok(())
    }

    async fn ownership_reports(&self) -> Result<Vec<EngineOwnership>, StoreError> {
        let kept = self.ownership.lock().map_err(unavailable)?;
        Ok(kept.clone().into_iter().collect())
    }
}

#[async_trait]
impl StoreOps for LogStore {
    async fn expire(&self, now_ms: i64) -> Result<Expired, StoreError> {
        let retention = self.retention;
        self.write(move |tx| {
            let expired = retention::expire(tx, retention, now_ms);
            retention::drop_spent_segments(tx)?;
            Ok(expired)
        })
        .await
    }

    fn write_timings(&self) -> Vec<PhaseTotal> {
        self.shared.timings.snapshot()
    }

    fn write_failure(&self) -> Option<String> {
        self.shared.failure.lock().ok().and_then(|f| f.clone())
    }
}

/// The forensic rows from `cursor` on, with handles to read them by.
fn forensic_handles(
    log: &Log,
    rows: &std::collections::BTreeMap<u64, state::Forensic>,
    cursor: u64,
) -> Vec<(u64, Loc, Option<Arc<std::fs::File>>)> {
    rows.range(cursor..)
        .map(|(n, row)| (*n, row.loc, log.segments.reader(row.loc)))
        .collect()
}
