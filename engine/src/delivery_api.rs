//! The parts of `/v1` that read or change delivery state the engine's store keeps: dead letters
//! (R-DI-8: listed and replayed per subscription), health (R-CP-12) and pull reads (R-CP-14,
//! `pull_api`). Same token, same tenant
//! isolation and same error bodies as the control plane's routes: a subscription of another
//! tenant is a 404.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use hub_control::auth::{Permission, Principal, TokenVerifier};
use hub_control::store::ControlStore;
use hub_core::error::ApiError;
use hub_core::model::{rfc3339, Subscription, VerificationState};

use crate::delivery::autodisable::Policy;
use crate::store::{AttemptRecord, DeadLetter, DeliveryStats, Store};

/// What the delivery routes need.
#[derive(Debug, Clone)]
pub struct DeliveryApi {
    pub store: Arc<dyn Store>,
    pub control: Arc<dyn ControlStore>,
    pub verifier: Arc<TokenVerifier>,
    pub autodisable: Policy,
}

/// The REST routes of what the engine knows, and the `Events` gRPC service (pull by `seq`).
pub fn router(api: Arc<DeliveryApi>) -> Router {
    let events = crate::grpc::router(api.clone());
    Router::new()
        .route("/v1/subscriptions/{id}/dead-letters", get(list_dead))
        .route("/v1/subscriptions/{id}/dead-letters/replay", post(replay))
        .route("/v1/subscriptions/{id}/health", get(health))
        .route(
            "/v1/subscriptions/{id}/events",
            get(crate::pull_api::events),
        )
        .with_state(api)
        .merge(events)
}

impl DeliveryApi {
    /// The caller's subscription `id`, after the token and permission checks.
    pub(crate) async fn subscription(
        &self,
        headers: &HeaderMap,
        id: &str,
        need: Permission,
    ) -> Result<Subscription, ApiError> {
        let header = headers
            .get("authorization")
            .map(|v| v.to_str())
            .transpose()
            .map_err(|_| ApiError::bad_request("the authorization header is not valid text"))?;
        self.subscription_for(header, id, need).await
    }

    /// The subscription `id` of the token's tenant, after the token and permission checks.
    pub(crate) async fn subscription_for(
        &self,
        token: Option<&str>,
        id: &str,
        need: Permission,
    ) -> Result<Subscription, ApiError> {
        let who: Principal = self.verifier.verify(token)?;
        who.require(need)?;
        let id: Uuid = id.parse().map_err(|_| ApiError::not_found())?;
        match self.control.get(&who.tenant, id).await {
            Ok(Some(s)) if !s.deleted => Ok(s),
            Ok(_) => Err(ApiError::not_found()),
            Err(e) => Err(ApiError::unavailable(e.to_string())),
        }
    }
}

fn store_down(e: crate::store::StoreError) -> ApiError {
    tracing::error!(error = %e, "delivery state read failed");
    ApiError::unavailable("delivery state is unavailable; retry")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Paging {
    cursor: Option<String>,
    limit: Option<usize>,
}

fn job_ref(id: u128) -> String {
    format!("{id:032x}")
}

fn attempt_view(a: &AttemptRecord) -> Value {
    let mut v = json!({
        "at": rfc3339(a.at_ms),
        "outcome": if a.success { "success" } else { "failure" },
        "duration_ms": a.duration_ms,
    });
    if let Some(c) = &a.error_class {
        v["error_class"] = c.clone().into();
    }
    if let Some(s) = a.status_code {
        v["status_code"] = s.into();
    }
    if !a.detail.is_empty() {
        v["detail"] = a.detail.clone().into();
    }
    v
}

fn dead_view(d: &DeadLetter) -> Value {
    let mut v = json!({
        "id": job_ref(d.job.id),
        "event_id": d.job.event_id,
        "seq": d.job.event_seq,
        "reason": d.reason,
        "attempts": d.job.attempts,
        "received_at": rfc3339(d.job.received_at_ms),
        "dead_at": rfc3339(d.dead_at_ms),
    });
    if let Some(a) = &d.job.last {
        v["last_attempt"] = attempt_view(a);
    }
    v
}

/// `GET /v1/subscriptions/:id/dead-letters?cursor=&limit=`.
async fn list_dead(
    State(api): State<Arc<DeliveryApi>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<Paging>,
) -> Response {
    let listed = async {
        let sub = api.subscription(&headers, &id, Permission::Get).await?;
        api.dead_letters(&sub, q.cursor.as_deref(), q.limit).await
    };
    match listed.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Most dead letters a page holds, and the page size when `limit` is absent.
pub const DEAD_LETTERS_MAX: usize = 1_000;
pub const DEAD_LETTERS_DEFAULT: usize = 100;

impl DeliveryApi {
    /// A page of `sub`'s dead letters, `{"items": [...], "next_cursor": ...}`: every transport's.
    pub(crate) async fn dead_letters(
        &self,
        sub: &Subscription,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Value, ApiError> {
        let cursor = cursor
            .map(|c| u128::from_str_radix(c, 16))
            .transpose()
            .map_err(|_| ApiError::bad_request("cursor is not one this API returned"))?;
        let limit = match limit {
            None => DEAD_LETTERS_DEFAULT,
            Some(l) if (1..=DEAD_LETTERS_MAX).contains(&l) => l,
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "limit is from 1 to {DEAD_LETTERS_MAX}"
                )))
            }
        };
        let (items, next) = self
            .store
            .dead_letters(&sub.tenant, sub.id, cursor, limit)
            .await
            .map_err(store_down)?;
        Ok(json!({
            "items": items.iter().map(dead_view).collect::<Vec<_>>(),
            "next_cursor": next.map(job_ref),
        }))
    }

    /// Replays `ids` (hex dead-letter ids; every one of `sub`'s when `None`): fresh attempt
    /// budgets, due at once. Answers how many.
    pub(crate) async fn replay_dead(
        &self,
        sub: &Subscription,
        ids: Option<&[String]>,
    ) -> Result<u64, ApiError> {
        let ids = ids
            .map(|ids| {
                ids.iter()
                    .map(|i| u128::from_str_radix(i, 16))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
            .map_err(|_| ApiError::invalid("ids must be dead-letter ids"))?;
        let n = self
            .store
            .replay_dead_letters(&sub.tenant, sub.id, ids, crate::clock::now_ms())
            .await
            .map_err(store_down)?;
        Ok(n as u64)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    /// Dead letters to replay; all of the subscription's when absent.
    ids: Option<Vec<String>>,
}

/// `POST /v1/subscriptions/:id/dead-letters/replay` with an optional `{"ids": […]}`: the jobs get
/// a fresh attempt budget and are due at once.
async fn replay(
    State(api): State<Arc<DeliveryApi>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let replayed = async {
        let sub = api.subscription(&headers, &id, Permission::Post).await?;
        let body: ReplayBody = if body.is_empty() {
            ReplayBody::default()
        } else {
            serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("body: {e}")))?
        };
        api.replay_dead(&sub, body.ids.as_deref()).await
    };
    match replayed.await {
        Ok(n) => (StatusCode::OK, Json(json!({ "replayed": n }))).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The status word of R-CP-12.
pub fn status_of(sub: &Subscription, stats: &DeliveryStats) -> &'static str {
    if sub.paused {
        "Paused"
    } else if !sub.enabled {
        "Stopped"
    } else if sub.verification_state == VerificationState::PendingVerification {
        "Pending"
    } else if stats.recent.last().is_some_and(|a| !a.success) {
        "Failing"
    } else {
        "Healthy"
    }
}

/// `GET /v1/subscriptions/:id/health`.
async fn health(
    State(api): State<Arc<DeliveryApi>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let health = async {
        let sub = api.subscription(&headers, &id, Permission::Get).await?;
        api.health_view(&sub).await
    };
    match health.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

impl DeliveryApi {
    /// R-CP-12: status, recent outcomes, counts and the auto-disable state of `sub`.
    pub(crate) async fn health_view(&self, sub: &Subscription) -> Result<Value, ApiError> {
        let stats = self
            .store
            .delivery_stats(&sub.tenant, sub.id)
            .await
            .map_err(store_down)?;
        let now = crate::clock::now_ms();
        let window_start = stats.recent.first().map_or(now, |a| a.at_ms);
        let verdict = stats.streak.verdict(now, &self.autodisable);
        let mut auto = json!({
            "enabled": self.autodisable.enabled,
            "window_hours": self.autodisable.window_ms / 3_600_000,
            "would_disable": verdict.is_some(),
        });
        if let Some(t) = stats.streak.first_failure_ms {
            auto["streak_first_failure_at"] = rfc3339(t).into();
        }
        if let Some(t) = stats.streak.last_failure_ms {
            auto["streak_last_failure_at"] = rfc3339(t).into();
        }
        if let Some(r) = &sub.marks.disabled_reason {
            auto["disabled_reason"] = r.clone().into();
        }
        Ok(json!({
            "status": status_of(sub, &stats),
            "window_start": rfc3339(window_start),
            "snapshot_at": rfc3339(now),
            "recent_outcomes": stats.recent.iter().map(attempt_view).collect::<Vec<_>>(),
            "delivered": stats.delivered,
            "failed_attempts": stats.failed_attempts,
            "dead_letters": stats.dead_letters,
            "auto_disable": auto,
        }))
    }
}

/// The control plane's window on what this engine holds (GraphQL's pull, dead letters and
/// health in the standalone hub): the same functions the REST routes and gRPC services call.
#[async_trait::async_trait]
impl hub_control::reader::DeliveryReader for DeliveryApi {
    async fn events(
        &self,
        sub: &Subscription,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Value, ApiError> {
        self.pull_page(sub.clone(), after, limit).await
    }

    async fn dead_letters(
        &self,
        sub: &Subscription,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Value, ApiError> {
        DeliveryApi::dead_letters(self, sub, cursor, limit).await
    }

    async fn replay(&self, sub: &Subscription, ids: Option<&[String]>) -> Result<u64, ApiError> {
        self.replay_dead(sub, ids).await
    }

    async fn health(&self, sub: &Subscription) -> Result<Value, ApiError> {
        self.health_view(sub).await
    }
}
