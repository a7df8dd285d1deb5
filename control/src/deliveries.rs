//! The operations on what the engine holds (R-CP-14 pull, R-DI-8 dead letters, R-CP-12 health),
//! transport-free like the rest of `Control`: the permission, the tenant, the sink kind and the
//! page sizes are checked here once, then the engine's `DeliveryReader` answers. REST, GraphQL and
//! gRPC all call these.

use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{SinkKind, Subscription};
use hub_core::ownership::OwnershipView;
use hub_core::views::{DeadLetterPage, EventPage, HealthView};

use crate::auth::Principal;
use crate::partners::Operation;
use crate::reader::{no_engine, DeliveryReader};
use crate::service::Control;

/// Page size when `limit` is absent, and the most a page holds: pull pages and dead letters.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1_000;

/// `limit`, defaulted and bounded; outside 1 to [`MAX_LIMIT`] is a 400.
pub fn page_size(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(l) if (1..=MAX_LIMIT).contains(&l) => Ok(l),
        Some(_) => Err(ApiError::bad_request(format!(
            "limit is from 1 to {MAX_LIMIT}"
        ))),
    }
}

impl Control {
    /// The engine's reader, or `served_by_the_engine`.
    fn delivery_reader(&self) -> Result<&dyn DeliveryReader, ApiError> {
        self.reader.get().map(AsRef::as_ref).ok_or_else(no_engine)
    }

    /// The caller's live subscription `id`, with `need` checked.
    async fn own(
        &self,
        who: &Principal,
        id: &str,
        op: Operation,
    ) -> Result<Subscription, ApiError> {
        self.admit(who, op)?;
        self.live(who, id).await
    }

    /// The caller's pull subscription `id`; a push one is `not_a_pull_subscription`.
    pub async fn pull_subscription(
        &self,
        who: &Principal,
        id: &str,
    ) -> Result<Subscription, ApiError> {
        let sub = self.own(who, id, Operation::Pull).await?;
        if sub.sink_kind != SinkKind::Pull {
            return Err(ApiError::new(
                ErrorCode::NotAPullSubscription,
                format!(
                    "a {} subscription is delivered by push, not read",
                    sub.sink_kind
                ),
            ));
        }
        Ok(sub)
    }

    /// The checks a stream of pull pages makes once before it starts: what `pull` checks.
    pub async fn check_pull(&self, who: &Principal, id: &str) -> Result<(), ApiError> {
        self.pull_subscription(who, id).await?;
        self.delivery_reader().map(drop)
    }

    /// `GET /v1/subscriptions/:id/events` (R-CP-14): events after `after` in `seq` order, or from
    /// the subscription's read position (moving it) without.
    pub async fn pull(
        &self,
        who: &Principal,
        id: &str,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<EventPage, ApiError> {
        let limit = page_size(limit)?;
        let sub = self.pull_subscription(who, id).await?;
        self.delivery_reader()?.events(&sub, after, limit).await
    }

    /// `GET /v1/subscriptions/:id/dead-letters` (R-DI-8).
    pub async fn dead_letters(
        &self,
        who: &Principal,
        id: &str,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<DeadLetterPage, ApiError> {
        let limit = page_size(limit)?;
        let sub = self.own(who, id, Operation::DeadLetters).await?;
        self.delivery_reader()?
            .dead_letters(&sub, cursor, limit)
            .await
    }

    /// `POST /v1/subscriptions/:id/dead-letters/replay`: the given dead letters (all when `None`)
    /// get a fresh attempt budget and are due at once. Answers how many.
    pub async fn replay_dead_letters(
        &self,
        who: &Principal,
        id: &str,
        ids: Option<&[String]>,
    ) -> Result<u64, ApiError> {
        let sub = self.own(who, id, Operation::Replay).await?;
        self.delivery_reader()?.replay(&sub, ids).await
    }

    /// `GET /v1/subscriptions/:id/health` (R-CP-12).
    pub async fn delivery_health(&self, who: &Principal, id: &str) -> Result<HealthView, ApiError> {
        let sub = self.own(who, id, Operation::Health).await?;
        self.delivery_reader()?.health(&sub).await
    }

    /// `GET /v1/admin/ownership` (issue 18, operators only): every engine's lanes — the Kafka
    /// partitions each was assigned, strays it adopted — with holds, pending jobs and lag.
    pub async fn ownership(&self, who: &Principal) -> Result<OwnershipView, ApiError> {
        who.require_operator()?;
        self.delivery_reader()?.ownership().await
    }
}
