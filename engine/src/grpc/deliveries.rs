//! `DeadLetters` and `Deliveries` over gRPC: the REST routes' functions, rendered as messages.

use std::sync::Arc;

use serde_json::Value;
use tonic::{Request, Response, Status};

use hub_control::auth::Permission;
use hub_control::grpc::pb::dead_letters_server::{DeadLetters, DeadLettersServer};
use hub_control::grpc::pb::deliveries_server::{Deliveries, DeliveriesServer};
use hub_control::grpc::pb::{
    Attempt, AutoDisable, DeadLetter, DeliveryHealth, DeliveryHealthRequest,
    ListDeadLettersRequest, ListDeadLettersResponse, ReplayDeadLettersRequest,
    ReplayDeadLettersResponse,
};
use hub_control::grpc::status;

use super::subscription;
use crate::delivery_api::DeliveryApi;

#[derive(Debug, Clone)]
pub(super) struct Service {
    api: Arc<DeliveryApi>,
}

pub(super) fn dead_letters(api: Arc<DeliveryApi>) -> DeadLettersServer<Service> {
    DeadLettersServer::new(Service { api })
}

pub(super) fn health(api: Arc<DeliveryApi>) -> DeliveriesServer<Service> {
    DeliveriesServer::new(Service { api })
}

fn text(v: &Value, f: &str) -> Option<String> {
    v.get(f).and_then(Value::as_str).map(str::to_owned)
}

fn number(v: &Value, f: &str) -> u64 {
    v.get(f).and_then(Value::as_u64).unwrap_or_default()
}

fn attempt(v: &Value) -> Attempt {
    Attempt {
        at: text(v, "at").unwrap_or_default(),
        outcome: text(v, "outcome").unwrap_or_default(),
        duration_ms: number(v, "duration_ms"),
        error_class: text(v, "error_class"),
        status_code: v["status_code"]
            .as_u64()
            .and_then(|c| u32::try_from(c).ok()),
        detail: text(v, "detail"),
    }
}

fn dead_letter(v: &Value) -> DeadLetter {
    DeadLetter {
        id: text(v, "id").unwrap_or_default(),
        event_id: text(v, "event_id").unwrap_or_default(),
        seq: number(v, "seq"),
        reason: text(v, "reason").unwrap_or_default(),
        attempts: u32::try_from(number(v, "attempts")).unwrap_or(u32::MAX),
        received_at: text(v, "received_at").unwrap_or_default(),
        dead_at: text(v, "dead_at").unwrap_or_default(),
        last_attempt: v.get("last_attempt").map(attempt),
    }
}

fn delivery_health(v: &Value) -> DeliveryHealth {
    let auto = &v["auto_disable"];
    DeliveryHealth {
        status: text(v, "status").unwrap_or_default(),
        window_start: text(v, "window_start").unwrap_or_default(),
        snapshot_at: text(v, "snapshot_at").unwrap_or_default(),
        recent_outcomes: v["recent_outcomes"]
            .as_array()
            .map(|a| a.iter().map(attempt).collect())
            .unwrap_or_default(),
        delivered: number(v, "delivered"),
        failed_attempts: number(v, "failed_attempts"),
        dead_letters: number(v, "dead_letters"),
        auto_disable: Some(AutoDisable {
            enabled: auto["enabled"].as_bool().unwrap_or(false),
            window_hours: number(auto, "window_hours"),
            would_disable: auto["would_disable"].as_bool().unwrap_or(false),
            streak_first_failure_at: text(auto, "streak_first_failure_at"),
            streak_last_failure_at: text(auto, "streak_last_failure_at"),
            disabled_reason: text(auto, "disabled_reason"),
        }),
    }
}

#[tonic::async_trait]
impl DeadLetters for Service {
    async fn list(
        &self,
        r: Request<ListDeadLettersRequest>,
    ) -> Result<Response<ListDeadLettersResponse>, Status> {
        let q = r.get_ref();
        let sub = subscription(&self.api, &r, &q.subscription_id, Permission::Get).await?;
        let limit = q.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let page = self
            .api
            .dead_letters(&sub, q.cursor.as_deref(), limit)
            .await
            .map_err(status)?;
        Ok(Response::new(ListDeadLettersResponse {
            items: page["items"]
                .as_array()
                .map(|a| a.iter().map(dead_letter).collect())
                .unwrap_or_default(),
            next_cursor: text(&page, "next_cursor"),
        }))
    }

    async fn replay(
        &self,
        r: Request<ReplayDeadLettersRequest>,
    ) -> Result<Response<ReplayDeadLettersResponse>, Status> {
        let q = r.get_ref();
        let sub = subscription(&self.api, &r, &q.subscription_id, Permission::Post).await?;
        let ids = (!q.ids.is_empty()).then_some(q.ids.as_slice());
        let replayed = self.api.replay_dead(&sub, ids).await.map_err(status)?;
        Ok(Response::new(ReplayDeadLettersResponse { replayed }))
    }
}

#[tonic::async_trait]
impl Deliveries for Service {
    async fn health(
        &self,
        r: Request<DeliveryHealthRequest>,
    ) -> Result<Response<DeliveryHealth>, Status> {
        let sub =
            subscription(&self.api, &r, &r.get_ref().subscription_id, Permission::Get).await?;
        let v = self.api.health_view(&sub).await.map_err(status)?;
        Ok(Response::new(delivery_health(&v)))
    }
}
