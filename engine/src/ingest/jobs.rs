//! Where ingest hands events to delivery: each durable batch carries, per event, the subscriptions
//! it matched (R-MA-1), so the store writes the jobs with the event (R-DI-1); after the write the
//! owning lane is nudged so a new job waits no poll interval.

use std::sync::Arc;

use crate::delivery::follow::Subscriptions;
use crate::delivery::matching::EventFacts;
use crate::ingest::router::shard_for;
use crate::store::{IngestBatch, Lane, Matches};

/// The match index and each lane's wake-up channel.
#[derive(Debug, Clone)]
pub struct JobRouting {
    pub subs: Arc<Subscriptions>,
    /// One per shard (lane `l` belongs to shard `l % wakes.len()`).
    pub wakes: Vec<async_channel::Sender<()>>,
}

impl JobRouting {
    /// The lane of a unit's jobs: the shard that owns the unit.
    pub fn lane_of(&self, topic: &str, partition: i32) -> Lane {
        shard_for(topic, partition, self.wakes.len().max(1)) as Lane
    }

    /// Matches every event of `batch` against the current index and names the lane.
    pub fn attach(&self, batch: &mut IngestBatch, lane: Lane) {
        let index = self.subs.index();
        batch.lane = lane;
        batch.matches = batch
            .events
            .iter()
            .map(|e| {
                Matches(index.jobs_for(&EventFacts {
                    tenant: &e.tenant,
                    key: &e.key,
                    source: &e.source,
                    major: e.schema_major,
                }))
            })
            .collect();
        if batch.matches.iter().all(|m| m.0.is_empty()) {
            batch.matches.clear();
        }
    }

    /// Tells the lane that jobs were written (a full channel already carries a nudge).
    pub fn wake(&self, lane: Lane) {
        if let Some(w) = self.wakes.get(lane as usize % self.wakes.len().max(1)) {
            let _ = w.try_send(());
        }
    }
}
