//! The partitions the consumer group assigned this member, as the last rebalance left them, and
//! the batches being written for them.
//!
//! Written by the rebalance callbacks on the consumer thread (inside `poll`, before any record of
//! a newly assigned partition is handed out), read by the shards before each claim and write: a
//! shard claims a partition's unit and writes its batches only while this member holds the
//! partition. Without that, a shard still working through records queued before a revocation
//! would claim the unit again, with a newer generation than the partition's real owner, and fence
//! that owner out — or, holding its old claim, append events the new owner is replaying at the
//! same time, so both would find the other's unfinished dedup claim and each append it.
//!
//! A revocation therefore waits (bounded) for the writes under way of the revoked partitions:
//! the group assigns them elsewhere only once this member's revocation callback returns, so the
//! new owner replays from a position no write of this member is still racing.
//!
//! It also tells delivery (`Ownership`) at once, so lanes follow a rebalance without waiting for
//! the consumer thread's next sweep.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::delivery::ownership::Ownership;

/// A Kafka partition: topic and number.
pub type Partition = (String, i32);

#[derive(Debug, Default)]
struct State {
    partitions: HashSet<Partition>,
    /// Claims and batch writes under way per partition (`WriteGuard`s alive).
    writing: HashMap<Partition, usize>,
    /// Revocations waiting for writes to end: a write that ends signals only while one waits
    /// (issue 17: the signal is a system call whether or not anyone waits, one per ingest batch,
    /// a record's worth at a low rate).
    revoking: usize,
}

/// This member's partitions.
#[derive(Debug)]
pub struct Assignment {
    state: Mutex<State>,
    /// Signalled as each write ends.
    write_ended: Condvar,
    ownership: Arc<Ownership>,
}

/// A claim or batch write of a held partition under way; a revocation of the partition waits
/// for it to drop.
#[derive(Debug)]
pub struct WriteGuard {
    assignment: Arc<Assignment>,
    partition: Partition,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let mut state = self.assignment.lock();
        if let Some(n) = state.writing.get_mut(&self.partition) {
            *n -= 1;
            if *n == 0 {
                state.writing.remove(&self.partition);
            }
        }
        // Read under the lock, which a revocation holds from counting itself until it waits.
        let anyone_waits = state.revoking > 0;
        drop(state);
        if anyone_waits {
            self.assignment.write_ended.notify_all();
        }
    }
}

impl Assignment {
    #[must_use]
    pub fn new(ownership: Arc<Ownership>) -> Self {
        Self {
            state: Mutex::default(),
            write_ended: Condvar::new(),
            ownership,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The whole assignment after a rebalance (or a sweep).
    pub fn set(&self, partitions: Vec<Partition>) {
        self.ownership.set_assignment(&partitions);
        self.lock().partitions = partitions.into_iter().collect();
    }

    /// Partitions about to be assigned (an incremental assignment, before the client fetches
    /// them): held from now on, so a shard taking their records straight from the client
    /// (`partition_feed`) may write them at once. The next `set` confirms them.
    pub fn add(&self, partitions: &[Partition]) {
        let mut state = self.lock();
        state.partitions.extend(partitions.iter().cloned());
        let all: Vec<Partition> = state.partitions.iter().cloned().collect();
        drop(state);
        self.ownership.set_assignment(&all);
    }

    /// Whether the group assigned this member `(topic, partition)`.
    #[must_use]
    pub fn holds(&self, topic: &str, partition: i32) -> bool {
        self.lock()
            .partitions
            .iter()
            .any(|(t, p)| *p == partition && t == topic)
    }

    /// Starts a claim or a batch write of `(topic, partition)`: none when this member does not
    /// hold the partition (its queued records are the new owner's to replay).
    #[must_use]
    pub fn begin_write(self: &Arc<Self>, topic: &str, partition: i32) -> Option<WriteGuard> {
        let key = (topic.to_owned(), partition);
        let mut state = self.lock();
        if !state.partitions.contains(&key) {
            return None;
        }
        *state.writing.entry(key.clone()).or_default() += 1;
        Some(WriteGuard {
            assignment: self.clone(),
            partition: key,
        })
    }

    /// A revocation: `revoked` is no longer held — no write of it starts from now on — and this
    /// waits up to `limit` for the writes under way to end. Answers whether they all did (a store
    /// that stopped answering can hold one longer; the new owner then races it, as after a freeze).
    pub fn revoke(&self, revoked: &[Partition], limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut state = self.lock();
        for key in revoked {
            state.partitions.remove(key);
        }
        let remaining: Vec<Partition> = state.partitions.iter().cloned().collect();
        self.ownership.set_assignment(&remaining);
        state.revoking += 1;
        let ended = loop {
            if !revoked.iter().any(|k| state.writing.contains_key(k)) {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            state = self
                .write_ended
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        };
        state.revoking -= 1;
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::ownership::{partition_lane, Numbering};

    #[test]
    fn r_op_1_a_revoked_partition_is_no_longer_held_and_its_lane_goes() {
        let ownership = Arc::new(Ownership::new(Numbering::ByPartition, 2));
        let a = Assignment::new(ownership.clone());
        let topic = "lerian.streaming.lender";
        assert!(!a.holds(topic, 0), "nothing before the first rebalance");
        a.set(vec![(topic.to_owned(), 0), (topic.to_owned(), 1)]);
        assert!(a.holds(topic, 0) && a.holds(topic, 1));
        assert!(!a.holds("lerian.streaming.other", 0));
        a.set(vec![(topic.to_owned(), 1)]);
        assert!(!a.holds(topic, 0), "revoked");
        let gone = partition_lane(topic, 0);
        assert!(!ownership.lanes_of(0).contains(&gone) && !ownership.lanes_of(1).contains(&gone));
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a plain test thread stands in for a shard's write
    fn r_op_1_a_revocation_stops_new_writes_and_waits_for_those_under_way() {
        let a = Arc::new(Assignment::new(Arc::new(Ownership::new(
            Numbering::ByPartition,
            2,
        ))));
        let topic = "lerian.streaming.lender";
        a.set(vec![(topic.to_owned(), 0), (topic.to_owned(), 1)]);
        let under_way = a.begin_write(topic, 0).expect("held");
        let other = a.begin_write(topic, 1).expect("held");
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(under_way);
        });
        let started = Instant::now();
        assert!(a.revoke(&[(topic.to_owned(), 0)], Duration::from_secs(10)));
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "waited for the write under way"
        );
        ender.join().expect("thread");
        assert!(
            a.begin_write(topic, 0).is_none(),
            "no write after the revocation"
        );
        assert!(a.holds(topic, 1), "partition 1 stays");
        // A write that does not end in time: the revocation gives up waiting and says so.
        assert!(!a.revoke(&[(topic.to_owned(), 1)], Duration::from_millis(20)));
        drop(other);
        assert_eq!(
            a.lock().revoking,
            0,
            "a revocation that returned, waited out or not, is no longer waited for"
        );
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // plain test threads stand in for two shards' writes
    fn r_op_1_a_revocation_waits_for_every_write_of_its_partition_ending_in_any_order() {
        let a = Arc::new(Assignment::new(Arc::new(Ownership::new(
            Numbering::ByPartition,
            2,
        ))));
        let topic = "lerian.streaming.lender";
        a.set(vec![(topic.to_owned(), 0)]);
        let enders: Vec<_> = (0..2)
            .map(|i| {
                let write = a.begin_write(topic, 0).expect("held");
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(30 * (i + 1)));
                    drop(write);
                })
            })
            .collect();
        assert!(a.revoke(&[(topic.to_owned(), 0)], Duration::from_secs(10)));
        assert!(
            a.lock().writing.is_empty(),
            "both writes had ended when the revocation returned"
        );
        for e in enders {
            e.join().expect("thread");
        }
        assert_eq!(a.lock().revoking, 0);
    }
}
