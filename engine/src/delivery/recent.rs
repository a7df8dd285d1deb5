//! The jobs a lane leased lately, so a job handed over by ingest after the lane already paged,
//! leased (and perhaps settled) it from the store is not taken a second time. Bounded: the
//! oldest id leaves when a new one comes past the capacity.
//!
//! A hand-off normally reaches the lane long before a page could: it is sent the moment the
//! write is durable, on the same shard. The set covers the rare order where the lane's page
//! won that race.

use std::collections::{HashSet, VecDeque};

/// Ids leased lately, oldest first.
#[derive(Debug)]
pub struct RecentlyLeased {
    order: VecDeque<u128>,
    ids: HashSet<u128>,
    capacity: usize,
}

impl RecentlyLeased {
    pub fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::with_capacity(capacity),
            ids: HashSet::with_capacity(capacity),
            capacity: capacity.max(1),
        }
    }

    pub fn leased(&mut self, id: u128) {
        if !self.ids.insert(id) {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }

    pub fn contains(&self, id: u128) -> bool {
        self.ids.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_1_a_job_leased_lately_is_recognised_and_the_set_stays_bounded() {
        let mut recent = RecentlyLeased::new(3);
        for id in 1..=3 {
            recent.leased(id);
        }
        recent.leased(2); // a repeat takes no second place
        assert!((1..=3).all(|id| recent.contains(id)));
        recent.leased(4);
        assert!(!recent.contains(1), "the oldest leaves first");
        assert!((2..=4).all(|id| recent.contains(id)));
        assert_eq!(recent.order.len(), 3);
        assert_eq!(recent.ids.len(), 3);
    }
}
