//! The log's writer: a thread that takes every write waiting at that moment, builds one frame
//! of their changes, appends it with one `fdatasync`, and only then answers them. A write that
//! finds the log free and needs a write alone — a lane's lease step, or an ingest batch on a
//! quiet log — is appended by its writer itself ([`append_here`]), under the same lock and
//! through the same code.
//!
//! A write nobody waits on to start work — a lane's step of outcomes alone — rides: it waits in
//! [`Shared::riders`] for the next frame either path appends, and goes alone after
//! `RIDE_AT_MOST` ([`flush_riders`] from its shard, so it costs no thread a wake-up; off a shard
//! the commit thread's next group, [`ride_with_the_thread`]).
//!
//! The indexes are locked from the first change of a group until its frame is durable, so a
//! reader never sees what a crash could still take back (R-IN-8: no `seq` is read before it
//! lasts). A failed append (a full disk) leaves nothing behind: the segment is cut back and the
//! indexes are rebuilt from the segments, then every writer of the group hears the error and
//! retries.
//!
//! A group of delivery steps alone (`Durability::Written`: leases and outcomes) is appended
//! without the `fdatasync`: what it records survives the process (a kill -9 included), and what
//! the machine's crash could take back is only an attempt made again, which at-least-once
//! allows (R-DI-1 is about jobs, written with their events, always synced). It is synced by the
//! next group that syncs, by a segment roll, on close, or at most [`UNSYNCED_AT_MOST`] after
//! (issue 17: a sync is 90–120 µs of CPU on this machine kind, and a lane's steps took one of
//! their own whenever no ingest write was there to share it). A group that starts a segment or
//! lets one go always syncs, so nothing carried forward is lost with what it replaced.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::record::Frame;
use super::retention;
use super::segments::Segments;
use super::state::State;
use super::writes::Tx;
use crate::store::timings::PhaseTimings;
use crate::store::StoreError;

/// Longest a frame appended without a sync waits for one.
pub(super) const UNSYNCED_AT_MOST: Duration = Duration::from_millis(200);

/// Hears a write's fate once its group's frame landed, or why it did not.
pub(super) type Reply = Box<dyn FnOnce(Option<&str>) + Send>;
/// Makes a write's changes in the group and says how to answer it, and whether it failed in a
/// way that must abort the group (a read of the log failed under it).
pub(super) type Change = Box<dyn FnOnce(&mut Tx<'_>) -> (Reply, Option<String>) + Send>;

/// When a write is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durability {
    /// Once its frame is synced.
    Synced,
    /// Once its frame is in the file, before the sync (delivery steps: see the module).
    Written,
}

/// A write for the commit thread.
pub(super) struct Op {
    pub change: Change,
    pub durability: Durability,
}

/// The indexes and the files, locked together.
#[derive(Debug)]
pub(super) struct Log {
    pub state: State,
    pub segments: Segments,
    pub segment_bytes: u64,
    /// Segments spent by the last retention pass, to remove once its frame landed.
    pub spent: Vec<u32>,
    /// The last group's frame buffer, for the next group (`Frame::in_buffer`).
    pub frame_buffer: Vec<u8>,
    /// When a writer last appended its own frame ([`append_here`]): while writers do, the
    /// commit thread comes back every [`UNSYNCED_AT_MOST`] to sync what they left unsynced.
    pub appended_here_at: Option<Instant>,
    /// When the last frame was appended, by either path.
    pub appended_at: Option<Instant>,
    /// The commit thread sleeps with no time to come back: a writer that leaves it work (a
    /// frame unsynced, a segment to prepare) must wake it ([`append_here`]).
    pub committer_asleep: bool,
    /// The commit thread writes zeros ahead in the active segment, outside the lock.
    pub preparing: bool,
}

/// The most room a frame buffer keeps between groups: a backlog's groups stay within it, and a
/// rare huge one (a snapshot) does not pin its memory.
const FRAME_BUFFER_KEPT: usize = 16 << 20;

impl Log {
    /// Rebuilds the indexes from the segments.
    pub fn reload(&mut self) -> Result<(), StoreError> {
        let mut state = State::default();
        self.segments.replay(|loc, bytes| {
            match super::record::Record::decode(bytes)? {
                super::record::Record::Event(event) => state.apply_event(loc, &event),
                super::record::Record::Change(change) => state.apply(loc, change),
            }
            Ok(())
        })?;
        self.state = state;
        Ok(())
    }
}

pub(super) type Committer = crate::store::committer_thread::CommitterThread<Op>;

/// What the store shares with its committer.
pub(super) struct Shared {
    pub log: Mutex<Log>,
    /// The last append's failure, until one lands (readiness reports it).
    pub failure: Mutex<Option<String>>,
    pub timings: PhaseTimings,
    /// Writes that ride the next frame anyone appends ([`ride`]), in the order they came.
    pub riders: Mutex<Vec<Op>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("log", &self.log)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    /// Riders still waiting when the store goes (their shard stopped before their wait ended)
    /// are written before the files close.
    fn drop(&mut self) {
        let riders = take_riders(self);
        if !riders.is_empty() {
            let log = self.log.get_mut().unwrap_or_else(|e| e.into_inner());
            let (replies, failure, _) = commit_locked(log, riders, GroupSpent::default());
            for reply in replies {
                reply(failure.as_deref());
            }
        }
    }
}

impl Shared {
    /// The log, unless a writer holds it (an append, perhaps with its sync): what a shard may
    /// do without waiting on the lock.
    pub(super) fn log_if_free(&self) -> Option<std::sync::MutexGuard<'_, Log>> {
        match self.log.try_lock() {
            Ok(log) => Some(log),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// Queues `op` to ride the next frame appended by either path; its writer makes sure it goes
/// within `RIDE_AT_MOST` (on a shard, [`flush_riders`]; off one, [`ride_with_the_thread`]).
/// No thread is woken: at a low rate the next ingest batch a shard appends itself carries it,
/// where handing it to the commit thread cost that thread two wake-ups and a write of its own
/// (issue 17).
pub(super) fn ride(shared: &Shared, op: Op) {
    shared
        .riders
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(op);
}

/// [`ride`] off a shard, where no timer of the writer's can end the wait: the commit thread
/// takes the riders in its next group, which starts `RIDE_AT_MOST` later unless another write
/// starts it sooner (`CommitterThread::submit_riding`).
pub(super) fn ride_with_the_thread(
    shared: &Shared,
    committer: &Committer,
    op: Op,
) -> Result<(), StoreError> {
    ride(shared, op);
    committer.submit_riding(Op::nothing())
}

/// Appends the riders still waiting ([`append_or_submit`]).
pub(super) fn flush_riders(shared: &Shared, committer: &Committer) {
    let riders = take_riders(shared);
    if !riders.is_empty() && append_or_submit(shared, committer, riders).is_err() {
        // The store is closing: its last clone's drop writes what is left.
        tracing::debug!("the log's commit thread stopped before a rider went");
    }
}

/// Appends `ops` on the caller's thread when the log is free and they fit ([`append_here`]),
/// else hands them to the commit thread for its next group, which starts at once.
pub(super) fn append_or_submit(
    shared: &Shared,
    committer: &Committer,
    ops: Vec<Op>,
) -> Result<(), StoreError> {
    match append_here(shared, committer, ops) {
        Ok(()) => Ok(()),
        Err(ops) => ops.into_iter().try_for_each(|op| committer.submit(op)),
    }
}

/// The riders waiting, taken.
fn take_riders(shared: &Shared) -> Vec<Op> {
    std::mem::take(&mut *shared.riders.lock().unwrap_or_else(|e| e.into_inner()))
}

/// `group` after the riders waiting, which came before it.
fn with_riders(shared: &Shared, group: Vec<Op>) -> Vec<Op> {
    let mut riders = take_riders(shared);
    if riders.is_empty() {
        return group;
    }
    riders.extend(group);
    riders
}

/// A group slower than this is logged with where its time went: a stall of the commit thread
/// stalls every shard's ingest and every settlement behind it.
const SLOW_GROUP: Duration = Duration::from_millis(100);

pub(super) fn start(shared: Arc<Shared>) -> Result<Committer, StoreError> {
    Committer::start("log-commit", move |group| {
        let group = with_riders(&shared, group);
        let (wake, failed) = match group.is_empty() {
            true => (sync_overdue(&shared), false),
            false => commit_and_answer(&shared, group),
        };
        // Nothing to prepare ahead of a segment just cut back.
        if !failed {
            prepare_ahead(&shared);
        }
        wake
    })
}

/// Commits `group` and answers its writers; when to come back, and whether the append failed.
fn commit_and_answer(shared: &Shared, group: Vec<Op>) -> (Option<Instant>, bool) {
    let started = Instant::now();
    let writes = group.len();
    let (replies, failure, spent, wake) = commit_group(shared, group);
    shared.timings.record(0, started);
    let took = started.elapsed();
    if took >= SLOW_GROUP {
        tracing::info!(?took, writes, ?spent, "slow log group commit");
    }
    let failed = failure.is_some();
    answer(shared, replies, failure);
    (wake, failed)
}

/// Tells a group's writers its fate, keeping a failure for readiness until an append lands.
fn answer(shared: &Shared, replies: Vec<Reply>, failure: Option<String>) {
    if let Ok(mut kept) = shared.failure.lock() {
        kept.clone_from(&failure);
    }
    for reply in replies {
        reply(failure.as_deref());
    }
}

/// Prepares the active segment's next stretch, outside the log's lock; no writer appends its
/// own frame meanwhile (`Log::preparing`), so the stretch's zeros overwrite nothing and its sync
/// covers every frame written.
fn prepare_ahead(shared: &Shared) {
    let preparing = Instant::now();
    let lock = || shared.log.lock().unwrap_or_else(|e| e.into_inner());
    let preparation = {
        let mut log = lock();
        let preparation = log.segments.preparation(log.segment_bytes);
        log.preparing = preparation.is_some();
        preparation
    };
    if let Some(preparation) = preparation {
        let written = preparation.write();
        let mut log = lock();
        log.segments.prepared(&preparation, written);
        log.preparing = false;
    }
    if preparing.elapsed() >= SLOW_GROUP {
        tracing::info!(took = ?preparing.elapsed(), "slow log segment preparation");
    }
}

impl Op {
    /// A write of nothing: wakes the commit thread to see what waits for it (a sync, the
    /// segment's preparation).
    fn nothing() -> Self {
        Self {
            change: Box::new(|_| (Box::new(|_| {}), None)),
            durability: Durability::Written,
        }
    }
}

/// Appends `ops` (and the riders waiting) on the caller's thread when the log is free and its
/// frame needs a write alone (no roll, no snapshot, no sync due, no preparation under way), and
/// answers them there; gives `ops` back for the commit thread otherwise. Three kinds of write
/// fit (issue 17):
/// - a lane's lease step (`Durability::Written`): handing it to the sleeping commit thread and
///   the answer back were two wake-ups of sleeping threads per step (the `futex` wake alone ~9 %
///   of a shard's cycles under a backlog);
/// - an ingest batch (`Durability::Synced`) on a log quiet for [`QUIET_FOR`]: at a low rate each
///   batch is a group of its own anyway, and the hand-off cost two wake-ups beside its sync;
/// - riders whose wait ran out ([`flush_riders`]).
///
/// The commit thread still syncs what a lane left unsynced within [`UNSYNCED_AT_MOST`] and
/// prepares the segment ahead: it comes back on its own while writers append, and is woken
/// when it sleeps with no time to come back.
pub(super) fn append_here(
    shared: &Shared,
    committer: &Committer,
    ops: Vec<Op>,
) -> Result<(), Vec<Op>> {
    let Some(mut log) = shared.log_if_free() else {
        return Err(ops);
    };
    let synced = ops.iter().any(|op| op.durability == Durability::Synced);
    // A sync holds the writer's thread ~0.1 ms: only on a quiet log, where no other write
    // would have shared its group. A busy log keeps grouping on the commit thread.
    let fits = log.takes_a_write_alone() && (!synced || log.quiet());
    if !fits {
        return Err(ops);
    }
    let started = Instant::now();
    let group = with_riders(shared, ops);
    let (replies, failure, _) = commit_locked(&mut log, group, GroupSpent::default());
    log.appended_here_at = Some(Instant::now());
    // The thread syncs what was left unsynced and prepares the segment ahead.
    let for_thread = log.segments.unsynced_since().is_some()
        || log.segments.wants_preparation(log.segment_bytes);
    let wake_committer = for_thread && std::mem::take(&mut log.committer_asleep);
    drop(log);
    shared.timings.record(0, started);
    if wake_committer && committer.submit(Op::nothing()).is_err() {
        tracing::debug!("the log's commit thread stopped; the close syncs what is left");
    }
    answer(shared, replies, failure);
    Ok(())
}

/// How long no frame may have been appended for an ingest batch to be appended by its writer.
pub(super) const QUIET_FOR: Duration = Duration::from_millis(1);

impl Log {
    /// Whether no frame was appended for [`QUIET_FOR`].
    fn quiet(&self) -> bool {
        self.appended_at.is_none_or(|t| t.elapsed() >= QUIET_FOR)
    }

    /// Whether the next frame is a write alone: its segment started (so it carries no
    /// snapshot) and not full, nothing overdue for a sync, no preparation writing zeros ahead.
    fn takes_a_write_alone(&self) -> bool {
        let len = self.segments.active_len();
        len > 0 && len < self.segment_bytes && !self.sync_overdue() && !self.preparing
    }

    /// Whether a frame has waited for a sync [`UNSYNCED_AT_MOST`] or longer.
    fn sync_overdue(&self) -> bool {
        (self.segments.unsynced_since()).is_some_and(|t| t.elapsed() >= UNSYNCED_AT_MOST)
    }

    /// When the commit thread must come back with no writes: to sync what waits for one, or,
    /// while lanes append their own steps, to look again; otherwise it sleeps until woken, and
    /// says so (`committer_asleep`).
    fn next_wake(&mut self) -> Option<Instant> {
        let lanes_appending = self
            .appended_here_at
            .filter(|t| t.elapsed() < UNSYNCED_AT_MOST);
        let wake = (self.segments.unsynced_since())
            .or(lanes_appending)
            .map(|t| t + UNSYNCED_AT_MOST);
        self.committer_asleep = wake.is_none();
        wake
    }
}

/// Syncs what waited for a sync too long; when to come back.
fn sync_overdue(shared: &Shared) -> Option<Instant> {
    let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
    log.committer_asleep = false;
    if log.sync_overdue() {
        if let Err(e) = log.segments.sync() {
            tracing::warn!(error = %e, "could not sync the log's delivery steps; trying again");
            return Some(Instant::now() + UNSYNCED_AT_MOST);
        }
    }
    log.next_wake()
}

/// Where a group's time went, for the slow-group log.
#[derive(Debug, Default)]
struct GroupSpent {
    lock: Duration,
    roll: Option<Duration>,
    changes: Duration,
    bytes: usize,
    append: Duration,
}

/// Makes `group` one frame and appends it; the answers, the failure, where the time went, and
/// when to come back to sync what it left unsynced.
fn commit_group(
    shared: &Shared,
    group: Vec<Op>,
) -> (Vec<Reply>, Option<String>, GroupSpent, Option<Instant>) {
    let mut spent = GroupSpent::default();
    let mut phase = Instant::now();
    let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
    let log = &mut *log;
    log.committer_asleep = false;
    spent.lock = lap(&mut phase);
    let (replies, failure, spent) = commit_locked(log, group, spent);
    let wake = log.next_wake();
    (replies, failure, spent, wake)
}

/// [`commit_group`] with the log locked.
fn commit_locked(
    log: &mut Log,
    group: Vec<Op>,
    mut spent: GroupSpent,
) -> (Vec<Reply>, Option<String>, GroupSpent) {
    let mut phase = Instant::now();
    let mut replies = Vec::with_capacity(group.len());
    let mut failure = None;
    // A segment that cannot be rolled (no room for a file) takes the group itself; the next
    // group tries again.
    if log.segments.active_len() >= log.segment_bytes {
        if let Err(e) = log.segments.roll() {
            tracing::warn!(error = %e, "could not start a new log segment");
        }
        spent.roll = Some(lap(&mut phase));
    }
    // Every segment starts with the snapshot, even one whose first frame failed before.
    let fresh_segment = log.segments.active_len() == 0;
    let mut frame = Frame::in_buffer(
        std::mem::take(&mut log.frame_buffer),
        log.segments.active(),
        log.segments.active_len(),
    );
    let mut sync = fresh_segment
        || group.iter().any(|op| op.durability == Durability::Synced)
        || log.sync_overdue();
    {
        let mut tx = Tx {
            state: &mut log.state,
            frame: &mut frame,
            segments: &log.segments,
            spent: Vec::new(),
        };
        if fresh_segment {
            retention::snapshot(&mut tx);
        }
        for op in group {
            let (reply, failed) = (op.change)(&mut tx);
            replies.push(reply);
            failure = failure.or(failed);
        }
        log.spent = tx.spent;
    }
    // Segments let go once this frame landed: what it carried forward must last first.
    sync |= !log.spent.is_empty();
    spent.changes = lap(&mut phase);
    if failure.is_none() && !frame.is_empty() {
        let sealed = frame.seal();
        spent.bytes = sealed.len();
        failure = log
            .segments
            .append(sealed, sync)
            .err()
            .map(|e| e.to_string());
        spent.append = lap(&mut phase);
        log.appended_at = Some(Instant::now());
    } else if failure.is_none() && sync {
        failure = log.segments.sync().err().map(|e| e.to_string());
    }
    let buffer = frame.into_buffer();
    if buffer.capacity() <= FRAME_BUFFER_KEPT {
        log.frame_buffer = buffer;
    }
    match &failure {
        None => remove_spent(log),
        Some(why) => {
            tracing::warn!(error = %why, "log append failed; rebuilding the indexes from disk");
            log.spent.clear();
            if let Err(e) = log.reload() {
                tracing::error!(error = %e, "log indexes could not be rebuilt");
            }
        }
    }
    (replies, failure, spent)
}

/// The time since `phase`, which moves to now.
fn lap(phase: &mut Instant) -> Duration {
    let now = Instant::now();
    let took = now - *phase;
    *phase = now;
    took
}

fn remove_spent(log: &mut Log) {
    for seg in std::mem::take(&mut log.spent) {
        if log.segments.oldest() != seg {
            continue;
        }
        if let Err(e) = log.segments.drop_oldest() {
            tracing::warn!(segment = seg, error = %e, "could not remove a spent log segment");
            return;
        }
        log.state.live_events.remove(&seg);
    }
}
