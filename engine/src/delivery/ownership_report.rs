//! This engine's ownership report (`hub_core::ownership`): its lanes (`ownership`) with the
//! store's hold and pending jobs of each and the Kafka lag of their partitions. Served at
//! `/admin/ownership`, rendered into `/metrics`, and published to the store every
//! `PUBLISH_EVERY`, where the control plane lists every engine's.

use std::sync::Arc;
use std::time::Duration;

use hub_core::ownership::{EngineOwnership, LaneOwnership};

use super::ownership::{LaneOwned, Owned, Ownership};
use crate::runtime::Stop;
use crate::store::{LaneHolds, LaneReport, StoreError};

/// How often the report is published (the control plane's list is this stale at most, plus a
/// store read).
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// Who this engine is in its reports.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub ownership: Arc<Ownership>,
    pub store: Arc<dyn LaneHolds>,
    /// The static consumer-group member id, when set.
    pub instance: Option<String>,
}

impl Reporter {
    /// The report as every transport (and `/metrics`) shows it: this engine's lanes with the
    /// store's report of each (holder, pending), read within `limit`.
    pub async fn report(&self, limit: Duration) -> Result<EngineOwnership, StoreError> {
        let (generation, lanes) = self.ownership.snapshot();
        let asked = lanes.iter().map(|l| l.lane).collect();
        let reports = tokio::time::timeout(limit, self.store.lane_report(asked))
            .await
            .map_err(|_| StoreError::Unavailable("the store did not answer in time".into()))??;
        Ok(EngineOwnership {
            engine: self.store.holder_id(),
            instance: self.instance.clone(),
            numbering: self.ownership.numbering().name().to_owned(),
            assignment_generation: generation,
            reported_at_ms: crate::clock::now_ms(),
            lanes: lanes.into_iter().zip(reports).map(lane_view).collect(),
        })
    }

    /// Publishes the report every `PUBLISH_EVERY` until `stop`.
    pub async fn publish(self, stop: Stop) {
        while !stop.is_set() {
            match self.report(PUBLISH_EVERY).await {
                Ok(report) => {
                    if let Err(e) = self.store.publish_ownership(&report).await {
                        tracing::warn!(error = %e, "publishing the ownership report failed");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading lanes for the ownership report failed")
                }
            }
            stop.sleep(PUBLISH_EVERY).await;
        }
    }
}

fn lane_view((owned, report): (LaneOwned, LaneReport)) -> LaneOwnership {
    let how = owned.owned.how();
    let (topic, partition, adopted_at_ms) = match owned.owned {
        Owned::Assigned { topic, partition } => (Some(topic), Some(partition), None),
        Owned::Stray { adopted_at_ms } => (None, None, Some(adopted_at_ms)),
        Owned::Shard => (None, None, None),
    };
    let lag = topic
        .as_deref()
        .zip(partition)
        .and_then(|(t, p)| crate::telemetry::consumer_lag(t, p));
    LaneOwnership {
        lane: owned.lane,
        shard: u32::try_from(owned.shard).unwrap_or(u32::MAX),
        how: how.to_owned(),
        topic,
        partition,
        adopted_at_ms,
        lag,
        holder: report.holder,
        held_until_ms: report.held_until_ms,
        held_here: report.held_here,
        pending: report.pending,
    }
}
