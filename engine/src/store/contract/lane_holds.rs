//! Holds on delivery lanes between engines sharing a store (`delivery::ownership`), and the
//! engines' ownership reports. A store one process holds (the embedded one) keeps the defaults:
//! that process holds every lane, always.

use async_trait::async_trait;
use hub_core::ownership::EngineOwnership;

use crate::store::{Lane, LaneReport, LaneSurvey, LaneSurveyFound, StoreError};

#[async_trait]
pub trait LaneHolds: Send + Sync + std::fmt::Debug {
    /// Gives up this process's hold on `lanes` at a clean stop, so another engine (or the next
    /// start) pages them at once. Stores without holds (single node) have nothing to do.
    async fn release_lanes(&self, lanes: Vec<Lane>) -> Result<(), StoreError> {
        let _ = lanes;
        Ok(())
    }

    /// Whether this process may start an attempt of a job of `lane` now: it still holds the
    /// lane (an engine frozen past its hold starts nothing it leased before). Stores one process
    /// holds always may.
    fn holds_lane(&self, lane: Lane, now_ms: i64) -> bool {
        let _ = (lane, now_ms);
        true
    }

    /// Renews this process's holds on `lanes` without paging them (a lane with no room for more
    /// jobs still keeps its lanes). Stores without holds have nothing to do.
    async fn keep_lanes(&self, lanes: Vec<Lane>) -> Result<(), StoreError> {
        let _ = lanes;
        Ok(())
    }

    /// Surveys lanes for engines sharing a store (`delivery::ownership`): asks for the
    /// `assigned` lanes another process holds, finds lanes with queues that nobody has held for
    /// `grace_ms`, and which of this process's `strays` to give up. Stores one process holds
    /// (the embedded one) find nothing.
    async fn survey_lanes(&self, survey: LaneSurvey) -> Result<LaneSurveyFound, StoreError> {
        let _ = survey;
        Ok(LaneSurveyFound::default())
    }

    /// Who holds each of `lanes` and how many jobs wait there, for the operator view. Stores one
    /// process holds: that process, always; no count per lane.
    async fn lane_report(&self, lanes: Vec<Lane>) -> Result<Vec<LaneReport>, StoreError> {
        Ok(lanes
            .into_iter()
            .map(|lane| LaneReport {
                lane,
                holder: Some(self.holder_id()),
                held_here: true,
                ..LaneReport::default()
            })
            .collect())
    }

    /// This process's id where it holds lanes (the operator view's `engine`).
    fn holder_id(&self) -> String {
        "standalone".to_owned()
    }

    /// Keeps this engine's ownership report for the control plane (`hub_core::ownership`), until
    /// a newer one (on CQL at most 30 s: the table's TTL).
    async fn publish_ownership(&self, report: &EngineOwnership) -> Result<(), StoreError>;

    /// Every engine's last ownership report still kept, by engine id.
    async fn ownership_reports(&self) -> Result<Vec<EngineOwnership>, StoreError>;
}
