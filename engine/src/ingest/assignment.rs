//! The partitions the consumer group assigned this member, as the last rebalance left them.
//!
//! Written by the rebalance callback on the consumer thread (inside `poll`, before any record of
//! a newly assigned partition is handed out), read by the shards before they claim a unit: a
//! shard claims a partition's unit only while this member holds the partition. Without that, a
//! shard still working through records queued before a revocation would claim the unit again,
//! with a newer generation than the partition's real owner, and fence that owner out — which
//! then drops its batch and never commits past it.
//!
//! It also tells delivery (`Ownership`) at once, so lanes follow a rebalance without waiting for
//! the consumer thread's next sweep.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use crate::delivery::ownership::Ownership;

/// This member's partitions.
#[derive(Debug)]
pub struct Assignment {
    partitions: RwLock<HashSet<(String, i32)>>,
    ownership: Arc<Ownership>,
}

impl Assignment {
    #[must_use]
    pub fn new(ownership: Arc<Ownership>) -> Self {
        Self {
            partitions: RwLock::default(),
            ownership,
        }
    }

    /// The whole assignment after a rebalance (or a sweep).
    pub fn set(&self, partitions: Vec<(String, i32)>) {
        self.ownership.set_assignment(&partitions);
        *self
            .partitions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = partitions.into_iter().collect();
    }

    /// Whether the group assigned this member `(topic, partition)`.
    #[must_use]
    pub fn holds(&self, topic: &str, partition: i32) -> bool {
        self.partitions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|(t, p)| *p == partition && t == topic)
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
}
