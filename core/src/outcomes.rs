//! The live feed of delivery outcomes (R-CP-19's "live subscription of delivery outcomes"): each
//! attempt's outcome as the engine in this process settles it, for GraphQL's `deliveryOutcomes`.
//! A broadcast with no readers costs one lock per attempt and keeps nothing; a reader that falls
//! more than `CAPACITY` outcomes behind skips what it missed and is told how many. On CQL the
//! engines also relay the outcomes of subscriptions someone watches through the store, for a
//! control process elsewhere (`hub_engine::store::cql::relay`).

use tokio::sync::broadcast;
use uuid::Uuid;

/// Outcomes a slow reader may fall behind by before it skips.
const CAPACITY: usize = 1024;

/// What became of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Settlement {
    Delivered,
    /// Failed; another attempt is due.
    Retrying,
    /// Failed for good: the job is a dead letter now.
    DeadLettered,
}

impl Settlement {
    pub fn as_str(self) -> &'static str {
        match self {
            Settlement::Delivered => "delivered",
            Settlement::Retrying => "retrying",
            Settlement::DeadLettered => "dead_lettered",
        }
    }
}

/// One attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryOutcome {
    pub tenant: String,
    pub subscription: Uuid,
    pub event_id: Uuid,
    pub seq: u64,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub settlement: Settlement,
    /// When the attempt started (Unix ms).
    pub at_ms: i64,
    pub duration_ms: u64,
    pub error_class: Option<String>,
    pub status_code: Option<u16>,
}

/// An outcome relayed through the store, with its place in the subscription's relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// When the engine wrote it (Unix ms, the engine's clock).
    pub relayed_at_ms: i64,
    pub id: Uuid,
    pub outcome: DeliveryOutcome,
}

/// The feed: the engine publishes, readers subscribe.
#[derive(Debug, Clone)]
pub struct OutcomeFeed(broadcast::Sender<DeliveryOutcome>);

impl Default for OutcomeFeed {
    fn default() -> Self {
        Self(broadcast::channel(CAPACITY).0)
    }
}

impl OutcomeFeed {
    pub fn publish(&self, outcome: DeliveryOutcome) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send(outcome);
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<DeliveryOutcome> {
        self.0.subscribe()
    }
}
