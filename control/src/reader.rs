//! What the engine knows, for the control plane's transports (GraphQL): a subscription's pull
//! pages, dead letters and delivery health. The engine holds those; in the standalone hub it
//! hands the control plane a reader over its store. A control process without one answers
//! `served_by_the_engine`.

use serde_json::Value;

use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::Subscription;

/// The engine's answers, as its REST routes give them (same views, same codes). The caller has
/// already checked the token, the permission and the tenant.
#[async_trait::async_trait]
pub trait DeliveryReader: Send + Sync + std::fmt::Debug {
    /// R-CP-14: a pull page `{"items", "next_after"}`; without `after` it moves the read position.
    async fn events(
        &self,
        sub: &Subscription,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Value, ApiError>;
    /// R-DI-8: a page of dead letters `{"items", "next_cursor"}`.
    async fn dead_letters(
        &self,
        sub: &Subscription,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Value, ApiError>;
    /// Replays the given dead letters (all when `None`); answers how many.
    async fn replay(&self, sub: &Subscription, ids: Option<&[String]>) -> Result<u64, ApiError>;
    /// R-CP-12: status, recent outcomes, counts, auto-disable.
    async fn health(&self, sub: &Subscription) -> Result<Value, ApiError>;
}

/// The refusal of a process without an engine.
pub fn no_engine() -> ApiError {
    ApiError::new(
        ErrorCode::ServedByTheEngine,
        "this control process runs no engine: ask the standalone hub's address",
    )
}
