//! The per-shard ingest stage: takes records of the partitions this shard owns, judges them, and
//! persists each partition's records as one durable unit before reporting its offset.
//!
//! Only this shard writes its partitions' units; the store's fence refuses a stale owner after a
//! rebalance moved a partition to another engine.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{select, Either};

use super::assignment::Assignment;
use super::jobs::{FreshReservation, JobRouting};
use super::kafka::Commit;
use super::partition_feed::ShardQueues;
use super::unit_advance::UnitAdvances;
use super::{distinct_keys, judge_into, KeyObserver, RecordIn};
use crate::matching::follow::LocalSubscriptions;
use crate::runtime::{shard_sleep, TokioBridge};
use crate::store::{BatchOutcome, Fence, IngestBatch, Store, StoreError, UnitId};
use crate::verdict::{topic_source, VerdictCounters, VerdictLimits};

/// A pass slower than this is logged: records wait in the shard's queue while one is written.
const SLOW_PASS: Duration = Duration::from_millis(250);

/// Logs a pass that kept the shard's next records waiting (where ingest latency goes).
fn log_slow_pass(took: Duration, records: usize, units: usize, queued: usize) {
    if took >= SLOW_PASS {
        tracing::info!(
            took_ms = took.as_millis() as u64,
            records,
            units,
            queued,
            "slow ingest pass: the shard's next records waited for it"
        );
    }
}

/// Matching on a shard: the routing jobs are written with, and the shard's own copy of the
/// subscriptions it matches against (STYLE §11: no lock shared across cores per batch).
#[derive(Debug, Clone)]
pub struct ShardRouting {
    pub jobs: JobRouting,
    subs: LocalSubscriptions,
}

impl ShardRouting {
    pub fn new(jobs: JobRouting) -> Self {
        Self {
            subs: LocalSubscriptions::new(jobs.subs.clone()),
            jobs,
        }
    }

    /// Matches `batch`'s events of `unit` and names the unit's lane.
    fn attach(&self, batch: &mut IngestBatch, unit: &UnitId) -> Option<FreshReservation> {
        let lane = self.jobs.lane_of(&unit.topic, unit.partition);
        self.subs
            .with_index(|index| self.jobs.attach_with(batch, lane, index))
    }
}

/// What a shard's ingest stage needs.
#[derive(Debug, Clone)]
pub struct ShardIngest {
    pub store: Arc<dyn Store>,
    pub bridge: TokioBridge,
    pub counters: Arc<VerdictCounters>,
    pub limits: VerdictLimits,
    /// Most records persisted in one pass (over all of this shard's partitions).
    pub max_batch: usize,
    pub commits: mpsc::Sender<Commit>,
    /// Told the events of every durable batch (the catalog), if any.
    pub observer: Option<Arc<dyn KeyObserver>>,
    /// Matching and the lanes: jobs are written with their events (R-DI-1).
    pub routing: Option<ShardRouting>,
    /// The partitions this member holds: a unit is claimed only while its partition is held.
    pub assignment: Arc<Assignment>,
}

impl ShardIngest {
    /// Runs until the record channel closes. Records come from the shard's own partitions'
    /// queues (`queues`, when the client's partitions are split to the shards), and from the
    /// channel for those the consumer thread routes.
    pub async fn run(
        self,
        records: async_channel::Receiver<RecordIn>,
        mut queues: Option<ShardQueues>,
    ) {
        let mut fences: HashMap<UnitId, Fence> = HashMap::new();
        let mut advances = UnitAdvances::new(self.store.unit_advance_every());
        let interval = self.store.pass_interval();
        let mut last_pass: Option<Instant> = None;
        loop {
            if let (Some(interval), Some(last)) = (interval, last_pass) {
                let wait = (last + interval).saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    shard_sleep(wait).await;
                }
            }
            let deadline = advances.next_due();
            let Some(pass) = self.next_pass(&records, queues.as_mut(), deadline).await else {
                break;
            };
            crate::runtime::note_work();
            let started = Instant::now();
            if !pass.is_empty() {
                last_pass = Some(started);
            }
            let count = pass.len();
            let work = planned(group_by_unit(pass), &advances, started);
            let unit_count = work.len();
            self.write_all(work, &mut fences, &mut advances).await;
            log_slow_pass(started.elapsed(), count, unit_count, records.len());
        }
        self.move_trailing_at_stop(&advances, &fences).await;
        if let Some(queues) = &mut queues {
            queues.close();
        }
    }

    /// A stop: moves what trails, one try each, so the partitions' next owner replays none of
    /// it. Not retried: a store down at the stop must not hold the stop up, and what stays
    /// trailing is only replayed (as no-ops).
    async fn move_trailing_at_stop(
        &self,
        advances: &UnitAdvances,
        fences: &HashMap<UnitId, Fence>,
    ) {
        let tries = moves_only(advances.due(Instant::now(), true)).map(|w| async move {
            let mut fence = fences.get(&w.unit).copied();
            if fence.is_none() {
                return; // not claimed by this shard: nothing of ours trails there
            }
            let batch = Arc::new(IngestBatch {
                next_offset: w.moves_to,
                ..IngestBatch::default()
            });
            if let Try::Written(outcome) = self.try_once(&w.unit, &mut fence, &batch).await {
                self.written(&w.unit, &batch, &outcome, None);
            }
        });
        futures::future::join_all(tries).await;
    }

    /// Writes each unit's batch of a pass, at once, and keeps what they leave: the fence of
    /// each unit still ours, and where each unit's offset stands.
    async fn write_all(
        &self,
        work: Vec<UnitWork>,
        fences: &mut HashMap<UnitId, Fence>,
        advances: &mut UnitAdvances,
    ) {
        let mut written = Vec::with_capacity(work.len());
        for w in work {
            let fence = fences.get(&w.unit).copied();
            written.push(async move {
                let (unit, fence) = self.persist(w.unit, fence, w.records, w.moves_to).await;
                (unit, fence, w.next, w.moves_to.is_some())
            });
        }
        let now = Instant::now();
        for (unit, fence, next, moved) in futures::future::join_all(written).await {
            match fence {
                Some(f) => {
                    fences.insert(unit.clone(), f);
                    advances.written(&unit, next, moved, now);
                }
                None => {
                    fences.remove(&unit);
                    advances.forget(&unit);
                }
            };
        }
    }

    /// The next pass, at most `max_batch` records: those the consumer thread routed here first,
    /// then the shard's own partitions'. Waits while there are none; none once the consumer
    /// thread closed the channel (a stop: what the partitions' queues still hold is replayed by
    /// their next owner). An empty pass at `deadline`, when a unit's trailing offset falls due.
    async fn next_pass(
        &self,
        records: &async_channel::Receiver<RecordIn>,
        mut queues: Option<&mut ShardQueues>,
        deadline: Option<Instant>,
    ) -> Option<Vec<RecordIn>> {
        let mut pass = Vec::new();
        loop {
            while pass.len() < self.max_batch {
                match records.try_recv() {
                    Ok(r) => pass.push(r),
                    Err(async_channel::TryRecvError::Empty) => break,
                    Err(async_channel::TryRecvError::Closed) => {
                        return (!pass.is_empty()).then_some(pass)
                    }
                }
            }
            if let Some(q) = queues.as_deref_mut() {
                q.take(&mut pass, self.max_batch);
            }
            if !pass.is_empty() {
                return Some(pass);
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Some(pass);
            }
            let routed = Box::pin(records.recv());
            let arrival = pin!(async {
                match queues.as_deref() {
                    Some(q) => match select(routed, Box::pin(q.wait())).await {
                        Either::Left((next, _)) => Some(next),
                        Either::Right(_) => None,
                    },
                    None => Some(routed.await),
                }
            });
            let next = match deadline {
                None => arrival.await,
                Some(d) => {
                    let due = pin!(shard_sleep(d.saturating_duration_since(Instant::now())));
                    match select(arrival, due).await {
                        Either::Left((next, _)) => next,
                        Either::Right(_) => return Some(pass),
                    }
                }
            };
            match next {
                Some(Ok(r)) => pass.push(r),
                Some(Err(_)) => return None,
                None => {}
            }
        }
    }

    /// Persists one unit's records, and moves its offset to `moves_to` if any, retrying until
    /// durable; returns the fence to keep (or none when another owner took the unit).
    async fn persist(
        &self,
        unit: UnitId,
        mut fence: Option<Fence>,
        recs: Vec<RecordIn>,
        moves_to: Option<i64>,
    ) -> (UnitId, Option<Fence>) {
        let now = crate::clock::now_ms();
        let source = topic_source(&unit.topic).unwrap_or("");
        let mut batch = IngestBatch {
            next_offset: moves_to,
            ..IngestBatch::default()
        };
        let records = recs.len();
        for r in recs {
            judge_into(&mut batch, r, source, &self.limits, &self.counters, now);
        }
        let reserved = self
            .routing
            .as_ref()
            .and_then(|r| r.attach(&mut batch, &unit));
        let batch = Arc::new(batch);
        let mut backoff = Duration::from_millis(50);
        // The same failure again (a full disk, a store down) is logged once per batch; the
        // store's readiness and the failure counter say that it lasts.
        let mut last_failure = String::new();
        loop {
            match self.try_once(&unit, &mut fence, &batch).await {
                Try::Revoked => {
                    // Queued before a revocation: the partition's new owner replays these
                    // records from the last commit. Claiming would fence that owner out, and
                    // writing under the old claim would race its replay.
                    // Said at info: rare (a rebalance), and records this member leaves behind
                    // are what an operator looks for when a partition's lag stands still.
                    tracing::info!(
                        topic = unit.topic,
                        partition = unit.partition,
                        records,
                        "partition revoked; leaving its queued records to the new owner"
                    );
                    return (unit, None);
                }
                Try::Written(outcome) => {
                    self.written(&unit, &batch, &outcome, reserved);
                    return (unit, fence);
                }
                Try::Fenced => {
                    fence = None;
                    if !self.assignment.holds(&unit.topic, unit.partition) {
                        tracing::info!(
                            topic = unit.topic,
                            partition = unit.partition,
                            "unit owned by a newer generation; dropping batch"
                        );
                        return (unit, None);
                    }
                    // Still ours: a member that lost the partition (a paused engine waking up)
                    // claimed it before it learned of the revocation. Claim it back and retry;
                    // that member stops claiming once its consumer sees the rebalance.
                    tracing::info!(
                        topic = unit.topic,
                        partition = unit.partition,
                        "unit claimed by a stale member while this one holds the partition; claiming it back"
                    );
                }
                Try::ClaimFailed(e) => {
                    if repeated(&mut last_failure, &e) {
                        tracing::debug!(error = %e, topic = unit.topic, partition = unit.partition, "claim failed again; retrying");
                    } else {
                        tracing::warn!(error = %e, topic = unit.topic, partition = unit.partition, "claim failed; retrying");
                    }
                }
                Try::WriteFailed(e) => {
                    crate::telemetry::store_failed(crate::telemetry::FailedStage::IngestBatch);
                    if repeated(&mut last_failure, &e) {
                        tracing::debug!(error = %e, topic = unit.topic, partition = unit.partition, "batch not durable again; retrying");
                    } else {
                        tracing::warn!(error = %e, topic = unit.topic, partition = unit.partition, "batch not durable; retrying");
                    }
                }
            }
            shard_sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// One try at a unit's batch — its claim when there is no fence, then the write — while
    /// this member holds the partition, under a `WriteGuard` so that a revocation waits for it.
    /// Sleeps between tries happen outside the guard.
    async fn try_once(
        &self,
        unit: &UnitId,
        fence: &mut Option<Fence>,
        batch: &Arc<IngestBatch>,
    ) -> Try {
        let Some(_writing) = self.assignment.begin_write(&unit.topic, unit.partition) else {
            return Try::Revoked;
        };
        let f = match *fence {
            Some(f) => f,
            None => match self
                .call(|s, u| async move { s.claim_unit(&u).await }, unit)
                .await
            {
                Ok((f, _)) => *fence.insert(f),
                Err(e) => return Try::ClaimFailed(e),
            },
        };
        let b = batch.clone();
        match self
            .call(
                move |s, u| async move { s.write_batch(&u, f, b).await },
                unit,
            )
            .await
        {
            Ok(outcome) => Try::Written(outcome),
            Err(StoreError::Fenced { .. }) => Try::Fenced,
            Err(e) => Try::WriteFailed(e),
        }
    }

    /// After a durable batch: counters, the catalog, the jobs' hand-over, the position to commit.
    fn written(
        &self,
        unit: &UnitId,
        batch: &IngestBatch,
        outcome: &BatchOutcome,
        reserved: Option<FreshReservation>,
    ) {
        self.counters
            .count_duplicates(outcome.duplicates.len() as u64);
        if let Some(o) = &self.observer {
            o.observe(&distinct_keys(&batch.events));
        }
        if let Some(r) = &self.routing {
            r.jobs.written(batch, outcome, reserved);
        }
        if let Some(next) = batch.next_offset {
            // The receiver lives as long as the consumer thread; if it is gone the engine is
            // stopping and the position is simply replayed next time.
            let _ = self.commits.send(Commit {
                topic: unit.topic.clone(),
                partition: unit.partition,
                next_offset: next,
            });
        }
    }

    /// Runs a store write on the shard when the store allows it (`Store::writes_anywhere`), else
    /// on the tokio side, and awaits it from the shard.
    async fn call<T, F, Fut>(&self, f: F, unit: &UnitId) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn Store>, UnitId) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let fut = f(self.store.clone(), unit.clone());
        if self.store.writes_anywhere() {
            return fut.await;
        }
        self.bridge
            .call(fut)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
    }
}

/// How one try at a unit's batch ended.
enum Try {
    /// This member no longer holds the partition.
    Revoked,
    Written(BatchOutcome),
    /// A newer generation owns the unit.
    Fenced,
    ClaimFailed(StoreError),
    WriteFailed(StoreError),
}

/// One unit's share of a pass: its records (none when only its offset moves), where they end,
/// and where its offset moves.
struct UnitWork {
    unit: UnitId,
    records: Vec<RecordIn>,
    next: Option<i64>,
    moves_to: Option<i64>,
}

/// A pass's writes at `now`: each unit's records, moving its offset if due, and an empty batch
/// for each other unit whose trailing offset is due.
fn planned(
    units: Vec<(UnitId, Vec<RecordIn>)>,
    advances: &UnitAdvances,
    now: Instant,
) -> Vec<UnitWork> {
    let mut work: Vec<UnitWork> = units
        .into_iter()
        .map(|(unit, records)| {
            let next = records.iter().map(|r| r.offset + 1).max();
            let moves_to = advances.move_for(&unit, next, now);
            UnitWork {
                unit,
                records,
                next,
                moves_to,
            }
        })
        .collect();
    let trailing: Vec<(UnitId, i64)> = advances
        .due(now, false)
        .into_iter()
        .filter(|(u, _)| !work.iter().any(|w| w.unit == *u))
        .collect();
    work.extend(moves_only(trailing));
    work
}

/// Empty batches that only move their unit's trailing offset.
fn moves_only(trailing: Vec<(UnitId, i64)>) -> impl Iterator<Item = UnitWork> {
    trailing.into_iter().map(|(unit, at)| UnitWork {
        unit,
        records: Vec::new(),
        next: Some(at),
        moves_to: Some(at),
    })
}

/// Splits a pass into per-unit record lists, keeping each unit's record order.
fn group_by_unit(pass: Vec<RecordIn>) -> Vec<(UnitId, Vec<RecordIn>)> {
    let mut units: Vec<(UnitId, Vec<RecordIn>)> = Vec::new();
    for r in pass {
        match units
            .iter_mut()
            .find(|(u, _)| u.partition == r.partition && *u.topic == *r.topic)
        {
            Some((_, recs)) => recs.push(r),
            None => units.push((UnitId::new(&*r.topic, r.partition), vec![r])),
        }
    }
    units
}

/// Whether `error` is the failure last seen (`last`), which it then becomes.
fn repeated(last: &mut String, error: &StoreError) -> bool {
    let now = error.to_string();
    let same = *last == now;
    *last = now;
    same
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(partition: i32, offset: i64) -> RecordIn {
        RecordIn {
            topic: Arc::from("lerian.streaming.t"),
            partition,
            offset,
            headers: Default::default(),
            value: Vec::new(),
        }
    }

    #[test]
    fn r_in_7_a_pass_moves_due_offsets_once_per_unit_and_trailing_ones_by_an_empty_batch() {
        let every = Duration::from_millis(200);
        let mut advances = UnitAdvances::new(Some(every));
        let t0 = Instant::now();
        let (u0, u1) = (
            UnitId::new("lerian.streaming.t", 0),
            UnitId::new("lerian.streaming.t", 1),
        );
        for u in [&u0, &u1] {
            advances.written(u, Some(1), true, t0);
            advances.written(u, Some(3), false, t0);
        }
        // Within the interval: records are written, no offset moves, nothing trailing is due.
        let soon = planned(
            group_by_unit(vec![record(0, 3), record(0, 4)]),
            &advances,
            t0,
        );
        assert_eq!(soon.len(), 1);
        assert_eq!((soon[0].next, soon[0].moves_to), (Some(5), None));
        // Once due: unit 0's records move it past them; unit 1, with no records, moves to what
        // trails by an empty batch — one write per unit, never two.
        let due = t0 + every;
        let work = planned(group_by_unit(vec![record(0, 5)]), &advances, due);
        let mut plan: Vec<(i32, usize, Option<i64>)> = work
            .iter()
            .map(|w| (w.unit.partition, w.records.len(), w.moves_to))
            .collect();
        plan.sort_unstable();
        assert_eq!(plan, vec![(0, 1, Some(6)), (1, 0, Some(3))]);
    }

    #[test]
    fn r_op_3_a_lasting_store_failure_is_warned_of_once_per_batch() {
        let mut last = String::new();
        let full = StoreError::Unavailable("No space left on device".into());
        assert!(!repeated(&mut last, &full), "the first failure is news");
        assert!(repeated(&mut last, &full), "the same one again is not");
        let gone = StoreError::Unavailable("the log committer stopped".into());
        assert!(!repeated(&mut last, &gone), "another failure is news again");
    }
}
