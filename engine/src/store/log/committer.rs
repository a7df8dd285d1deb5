//! The log's one writer: a thread that takes every write waiting at that moment, builds one
//! frame of their changes, appends it with one `fdatasync`, and only then answers them.
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
#[derive(Debug)]
pub(super) struct Shared {
    pub log: Mutex<Log>,
    /// The last append's failure, until one lands (readiness reports it).
    pub failure: Mutex<Option<String>>,
    pub timings: PhaseTimings,
}

/// A group slower than this is logged with where its time went: a stall of the commit thread
/// stalls every shard's ingest and every settlement behind it.
const SLOW_GROUP: Duration = Duration::from_millis(100);

pub(super) fn start(shared: Arc<Shared>) -> Result<Committer, StoreError> {
    Committer::start("log-commit", move |group| {
        let started = Instant::now();
        let writes = group.len();
        if group.is_empty() {
            return sync_overdue(&shared);
        }
        let (replies, failure, spent, wake) = commit_group(&shared, group);
        shared.timings.record(0, started);
        let took = started.elapsed();
        if took >= SLOW_GROUP {
            tracing::info!(?took, writes, ?spent, "slow log group commit");
        }
        if let Ok(mut kept) = shared.failure.lock() {
            kept.clone_from(&failure);
        }
        for reply in replies {
            reply(failure.as_deref());
        }
        if failure.is_none() {
            let preparing = Instant::now();
            let lock = || shared.log.lock().unwrap_or_else(|e| e.into_inner());
            let preparation = {
                let log = lock();
                log.segments.preparation(log.segment_bytes)
            };
            if let Some(preparation) = preparation {
                let written = preparation.write();
                lock().segments.prepared(&preparation, written);
            }
            if preparing.elapsed() >= SLOW_GROUP {
                tracing::info!(took = ?preparing.elapsed(), "slow log segment preparation");
            }
        }
        wake
    })
}

/// Syncs what waited for a sync too long; when to come back if that failed.
fn sync_overdue(shared: &Shared) -> Option<Instant> {
    let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
    let since = log.segments.unsynced_since()?;
    if since.elapsed() < UNSYNCED_AT_MOST {
        return Some(since + UNSYNCED_AT_MOST);
    }
    match log.segments.sync() {
        Ok(()) => None,
        Err(e) => {
            tracing::warn!(error = %e, "could not sync the log's delivery steps; trying again");
            Some(Instant::now() + UNSYNCED_AT_MOST)
        }
    }
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
    spent.lock = lap(&mut phase);
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
        || log
            .segments
            .unsynced_since()
            .is_some_and(|t| t.elapsed() >= UNSYNCED_AT_MOST);
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
    let wake = log.segments.unsynced_since().map(|t| t + UNSYNCED_AT_MOST);
    (replies, failure, spent, wake)
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
