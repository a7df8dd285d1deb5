//! What delivery takes of the control plane it serves with, as `hub-core` types only (the engine
//! never depends on the control plane's crate): the store it follows and writes delivery marks
//! and auto-disables to, the keys that open sealed secrets, the sinks probes share, where the
//! hub's events and live outcomes go, the partner directory, and automatic probing. The process
//! that runs both (the standalone hub) fills it from its `Control`.

use std::sync::Arc;

use hub_core::control_store::ControlStore;
use hub_core::in_process::{AutoProbe, HubEventsSlot};
use hub_core::outcomes::OutcomeFeed;
use hub_core::partners::PartnerDirectory;
use hub_core::secrets::Keyring;
use hub_core::sink::Sinks;

#[derive(Debug, Clone)]
pub struct ControlLink {
    pub store: Arc<dyn ControlStore>,
    pub keyring: Arc<Keyring>,
    /// Every push kind's client, shared with the control plane's probes.
    pub sinks: Sinks,
    /// `hub.destination.disabled` goes there once set.
    pub events: HubEventsSlot,
    /// Each settled attempt, for live readers (GraphQL's `deliveryOutcomes`).
    pub outcomes: OutcomeFeed,
    /// Access Manager's partner directory when the gateway relay is on (R-CP-17).
    pub partners: Option<Arc<PartnerDirectory>>,
    /// Probes pending webhooks (R-CP-5).
    pub prober: Arc<dyn AutoProbe>,
}
