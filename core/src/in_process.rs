//! What a control plane asks of an engine running in the same process (the standalone hub),
//! as traits the engine implements: the control plane never needs the engine's crate, nor the
//! engine the control plane's.

use std::sync::{Arc, OnceLock};

use uuid::Uuid;

use crate::model::Subscription;

/// An engine's subscription index in the same process as the control plane.
#[async_trait::async_trait]
pub trait LocalIndex: Send + Sync + std::fmt::Debug {
    /// Returns once every change written so far is in the index (or catching up failed).
    async fn caught_up(&self);
}

/// The hub's own operational events (R-CP-5): CloudEvents with source `hub` for the
/// subscription's tenant, through the same pipeline as producers' events, so a tenant subscribes
/// to them like any other (`origin: hub`).
pub trait HubEvents: Send + Sync + std::fmt::Debug {
    /// Emits `key` (`destination.verified`, `destination.disabled`) about `sub`; fire and forget.
    fn emit(&self, tenant: &str, key: &str, subscription: Uuid, detail: serde_json::Value);
}

/// Where a control plane waits for the engine's index beside it (set once the engine started).
pub type LocalIndexSlot = Arc<OnceLock<Arc<dyn LocalIndex>>>;

/// Where a control plane reads what the engine beside it (or the engines' store) holds.
pub type ReaderSlot = Arc<OnceLock<Arc<dyn crate::reader::DeliveryReader>>>;

/// Where the hub's events go once the engine's pipeline exists: set once by the process that
/// wires engine and control plane, read by both (probes announce, lanes announce disables).
pub type HubEventsSlot = Arc<OnceLock<Arc<dyn HubEvents>>>;

/// The control plane's automatic probing of pending destinations (R-CP-5), which an engine runs
/// over the subscriptions it follows.
#[async_trait::async_trait]
pub trait AutoProbe: Send + Sync + std::fmt::Debug {
    /// Probes `sub` if its automatic probe is due at `now_ms`; returns whether it probed.
    async fn auto_probe(&self, sub: &Subscription, now_ms: i64) -> bool;
}
