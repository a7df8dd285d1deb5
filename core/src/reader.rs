//! What the engine knows, for the control plane's transports: a subscription's pull pages, dead
//! letters and delivery health. The engine holds those; wherever a process can read the engine's
//! store (the standalone hub, or `hub-control serve` on CQL) it hands the control plane a reader
//! over it. A control process without one answers `served_by_the_engine`.

use crate::error::{ApiError, ErrorCode};
use crate::model::Subscription;
use crate::outcomes::Relayed;
use crate::ownership::OwnershipView;
use crate::views::{DeadLetterPage, EventPage, HealthView};

/// The engine's answers. The caller (`Control`, in `deliveries.rs`) has already checked the
/// token, the permission, the tenant, the sink kind of a pull and the page sizes.
#[async_trait::async_trait]
pub trait DeliveryReader: Send + Sync + std::fmt::Debug {
    /// R-CP-14: a pull page; without `after` it moves the subscription's read position.
    async fn events(
        &self,
        sub: &Subscription,
        after: Option<u64>,
        limit: usize,
    ) -> Result<EventPage, ApiError>;
    /// R-DI-8: a page of dead letters from `cursor` (one this reader returned).
    async fn dead_letters(
        &self,
        sub: &Subscription,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, ApiError>;
    /// Replays the given dead letters (all when `None`); answers how many.
    async fn replay(&self, sub: &Subscription, ids: Option<&[String]>) -> Result<u64, ApiError>;
    /// R-CP-12: status, recent outcomes, counts, auto-disable.
    async fn health(&self, sub: &Subscription) -> Result<HealthView, ApiError>;
    /// Whether the store answers (a process's `/ready`); the error says why not.
    async fn ready(&self) -> Result<(), String>;
    /// Asks engines in other processes to relay `sub`'s delivery outcomes through the store for
    /// the next 30 s (renew to keep them coming). A reader that cannot relay says
    /// `served_by_the_engine`.
    async fn watch_outcomes(&self, _sub: &Subscription) -> Result<(), ApiError> {
        Err(no_engine())
    }
    /// `sub`'s outcomes relayed at or after `since_ms` (the engines' clocks), in relay order.
    async fn relayed_outcomes(
        &self,
        _sub: &Subscription,
        _since_ms: i64,
    ) -> Result<Vec<Relayed>, ApiError> {
        Err(no_engine())
    }
    /// Every engine's last ownership report (issue 18): who delivers which partitions.
    async fn ownership(&self) -> Result<OwnershipView, ApiError> {
        Err(no_engine())
    }
}

/// The refusal of a process without an engine's store.
pub fn no_engine() -> ApiError {
    ApiError::new(
        ErrorCode::ServedByTheEngine,
        "this control process cannot read the engine's store: ask the standalone hub, or run \
         hub-control serve on the engines' CQL keyspace",
    )
}
