//! `DeadLetters` and `Deliveries` over gRPC: `Control`'s operations on what the engine holds,
//! rendered as messages.

use tonic::{Request, Response, Status};

use super::pb::dead_letters_server::DeadLetters;
use super::pb::deliveries_server::Deliveries;
use super::pb::{
    Attempt, AutoDisable, DeadLetter, DeliveryHealth, DeliveryHealthRequest,
    ListDeadLettersRequest, ListDeadLettersResponse, ReplayDeadLettersRequest,
    ReplayDeadLettersResponse,
};
use super::{status, Grpc};
use hub_core::views::{AttemptView, DeadLetterView, HealthView};

fn attempt(a: AttemptView) -> Attempt {
    Attempt {
        at: a.at,
        outcome: a.outcome.to_owned(),
        duration_ms: a.duration_ms,
        error_class: a.error_class,
        status_code: a.status_code.map(u32::from),
        detail: a.detail,
    }
}

fn dead_letter(d: DeadLetterView) -> DeadLetter {
    DeadLetter {
        id: d.id,
        event_id: d.event_id,
        seq: d.seq,
        reason: d.reason,
        attempts: d.attempts,
        received_at: d.received_at,
        dead_at: d.dead_at,
        last_attempt: d.last_attempt.map(attempt),
    }
}

fn delivery_health(h: HealthView) -> DeliveryHealth {
    let auto = h.auto_disable;
    DeliveryHealth {
        status: h.status.to_owned(),
        window_start: h.window_start,
        snapshot_at: h.snapshot_at,
        recent_outcomes: h.recent_outcomes.into_iter().map(attempt).collect(),
        delivered: h.delivered,
        failed_attempts: h.failed_attempts,
        dead_letters: h.dead_letters,
        auto_disable: Some(AutoDisable {
            enabled: auto.enabled,
            window_hours: auto.window_hours,
            would_disable: auto.would_disable,
            streak_first_failure_at: auto.streak_first_failure_at,
            streak_last_failure_at: auto.streak_last_failure_at,
            disabled_reason: auto.disabled_reason,
        }),
        secret_key_missing: h.secret_key_missing,
    }
}

/// A `limit` field as the service's page size (too large stays too large: a 400).
pub(super) fn size(limit: Option<u32>) -> Option<usize> {
    limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX))
}

#[tonic::async_trait]
impl DeadLetters for Grpc {
    async fn list(
        &self,
        r: Request<ListDeadLettersRequest>,
    ) -> Result<Response<ListDeadLettersResponse>, Status> {
        let who = self.caller(r.metadata())?;
        let q = r.into_inner();
        let page = self
            .control
            .dead_letters(&who, &q.subscription_id, q.cursor.as_deref(), size(q.limit))
            .await
            .map_err(status)?;
        Ok(Response::new(ListDeadLettersResponse {
            items: page.items.into_iter().map(dead_letter).collect(),
            next_cursor: page.next_cursor,
        }))
    }

    async fn replay(
        &self,
        r: Request<ReplayDeadLettersRequest>,
    ) -> Result<Response<ReplayDeadLettersResponse>, Status> {
        let who = self.caller(r.metadata())?;
        let q = r.into_inner();
        let ids = (!q.ids.is_empty()).then_some(q.ids.as_slice());
        let replayed = self
            .control
            .replay_dead_letters(&who, &q.subscription_id, ids)
            .await
            .map_err(status)?;
        Ok(Response::new(ReplayDeadLettersResponse { replayed }))
    }
}

#[tonic::async_trait]
impl Deliveries for Grpc {
    async fn health(
        &self,
        r: Request<DeliveryHealthRequest>,
    ) -> Result<Response<DeliveryHealth>, Status> {
        let who = self.caller(r.metadata())?;
        let h = self
            .control
            .delivery_health(&who, &r.get_ref().subscription_id)
            .await
            .map_err(status)?;
        Ok(Response::new(delivery_health(h)))
    }
}
