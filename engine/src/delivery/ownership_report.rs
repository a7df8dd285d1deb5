//! This engine's ownership report (`hub_core::ownership`): its lanes (`ownership`) with the
//! store's hold and pending jobs of each and the Kafka lag of their partitions. Served at
//! `/admin/ownership`, rendered into `/metrics`, and published to the store every
//! `PUBLISH_EVERY`, where the control plane lists every engine's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hub_core::ownership::{EngineOwnership, LaneOwnership};

use super::ownership::{LaneOwned, Numbering, Owned, Ownership};
use crate::store::{LaneReport, Store, StoreError};

/// How often the report is published (the control plane's list is this stale at most, plus a
/// store read).
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// Who this engine is in its reports.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub ownership: Arc<Ownership>,
    pub store: Arc<dyn Store>,
    /// The static consumer-group member id, when set.
    pub instance: Option<String>,
}

/// This engine's lanes with the store's report of each, read within `limit`; with the
/// assignment's generation.
pub type LanesReported = (u64, Vec<(LaneOwned, LaneReport)>);

impl Reporter {
    /// This engine's lanes with the store's report of each (holder, pending), read within
    /// `limit`.
    pub async fn lanes(&self, limit: Duration) -> Result<LanesReported, StoreError> {
        let (generation, lanes) = self.ownership.snapshot();
        let asked = lanes.iter().map(|l| l.lane).collect();
        let reports = tokio::time::timeout(limit, self.store.lane_report(asked))
            .await
            .map_err(|_| StoreError::Unavailable("the store did not answer in time".into()))??;
        Ok((generation, lanes.into_iter().zip(reports).collect()))
    }

    /// The report as every transport shows it.
    pub async fn report(&self, limit: Duration) -> Result<EngineOwnership, StoreError> {
        let (generation, lanes) = self.lanes(limit).await?;
        Ok(EngineOwnership {
            engine: self.store.holder_id(),
            instance: self.instance.clone(),
            numbering: match self.ownership.numbering() {
                Numbering::ByPartition => "by_partition",
                Numbering::ByShard => "by_shard",
            }
            .to_owned(),
            assignment_generation: generation,
            reported_at_ms: crate::clock::now_ms(),
            lanes: lanes.into_iter().map(lane_view).collect(),
        })
    }

    /// Publishes the report every `PUBLISH_EVERY` until `stop`.
    pub async fn publish(self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Acquire) {
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
            tokio::time::sleep(PUBLISH_EVERY).await;
        }
    }
}

fn lane_view((owned, report): (LaneOwned, LaneReport)) -> LaneOwnership {
    let (how, topic, partition, adopted_at_ms) = match owned.owned {
        Owned::Assigned { topic, partition } => ("assigned", Some(topic), Some(partition), None),
        Owned::Stray { adopted_at_ms } => ("stray", None, None, Some(adopted_at_ms)),
        Owned::Shard => ("shard", None, None, None),
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
