//! What the engine holds, over GraphQL: pull pages, dead letters (and replaying them), delivery
//! health — through the engine's `DeliveryReader`, so with the REST routes' views and codes.

use async_graphql::{Context, Object, SimpleObject};
use serde_json::Value;

use super::{error, parts, Out};
use hub_core::views::{AttemptView, DeadLetterView, HealthView, PulledEvent};

/// One event of a pull page (R-CP-14).
#[derive(SimpleObject, Debug)]
pub struct EventNode {
    pub seq: u64,
    pub id: String,
    pub key: String,
    pub origin: String,
    pub schema_version: String,
    pub time: String,
    pub subject: Option<String>,
    pub content_type: String,
    /// The payload: JSON as it is; anything else in `dataBase64`.
    pub data: Option<async_graphql::Json<Value>>,
    pub data_base64: Option<String>,
}

pub(super) fn event(e: PulledEvent) -> EventNode {
    let (field, data) = hub_core::sink::data_field(&e.content_type, &e.payload);
    let (data, data_base64) = match field {
        "data" => (Some(async_graphql::Json(data)), None),
        _ => (None, data.as_str().map(str::to_owned)),
    };
    EventNode {
        seq: e.seq,
        id: e.id,
        key: e.key,
        origin: e.origin,
        schema_version: e.schema_version,
        time: e.time,
        subject: e.subject,
        content_type: e.content_type,
        data,
        data_base64,
    }
}

#[derive(SimpleObject, Debug)]
pub struct EventPage {
    pub items: Vec<EventNode>,
    /// Pass as `after` for the next page.
    pub next_after: u64,
}

#[derive(SimpleObject, Debug)]
pub struct AttemptNode {
    pub at: String,
    pub outcome: String,
    pub duration_ms: u64,
    pub error_class: Option<String>,
    pub status_code: Option<u64>,
    pub detail: Option<String>,
}

fn attempt(a: AttemptView) -> AttemptNode {
    AttemptNode {
        at: a.at,
        outcome: a.outcome.to_owned(),
        duration_ms: a.duration_ms,
        error_class: a.error_class,
        status_code: a.status_code.map(u64::from),
        detail: a.detail,
    }
}

#[derive(SimpleObject, Debug)]
pub struct DeadLetterNode {
    pub id: String,
    pub event_id: String,
    pub seq: u64,
    pub reason: String,
    pub attempts: u64,
    pub received_at: String,
    pub dead_at: String,
    pub last_attempt: Option<AttemptNode>,
}

fn dead_letter(d: DeadLetterView) -> DeadLetterNode {
    DeadLetterNode {
        id: d.id,
        event_id: d.event_id,
        seq: d.seq,
        reason: d.reason,
        attempts: u64::from(d.attempts),
        received_at: d.received_at,
        dead_at: d.dead_at,
        last_attempt: d.last_attempt.map(attempt),
    }
}

#[derive(SimpleObject, Debug)]
pub struct DeadLetterPage {
    pub items: Vec<DeadLetterNode>,
    pub next_cursor: Option<String>,
}

#[derive(SimpleObject, Debug)]
pub struct DeliveryHealthNode {
    /// Healthy, Failing, Pending, Paused or Stopped.
    pub status: String,
    pub window_start: String,
    pub snapshot_at: String,
    pub recent_outcomes: Vec<AttemptNode>,
    pub delivered: u64,
    pub failed_attempts: u64,
    pub dead_letters: u64,
    pub auto_disable_enabled: bool,
    pub would_disable: bool,
    pub disabled_reason: Option<String>,
    /// The master key the secret is sealed under, when this process cannot open it.
    pub secret_key_missing: Option<String>,
}

fn health(h: HealthView) -> DeliveryHealthNode {
    DeliveryHealthNode {
        status: h.status.to_owned(),
        window_start: h.window_start,
        snapshot_at: h.snapshot_at,
        recent_outcomes: h.recent_outcomes.into_iter().map(attempt).collect(),
        delivered: h.delivered,
        failed_attempts: h.failed_attempts,
        dead_letters: h.dead_letters,
        auto_disable_enabled: h.auto_disable.enabled,
        would_disable: h.auto_disable.would_disable,
        disabled_reason: h.auto_disable.disabled_reason,
        secret_key_missing: h.secret_key_missing,
    }
}

fn size(limit: Option<u32>) -> Option<usize> {
    limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX))
}

#[derive(Debug, Default)]
pub struct DeliveryQueries;

#[Object]
impl DeliveryQueries {
    /// A pull subscription's events in `seq` order (R-CP-14). Without `after`, the read
    /// continues from the subscription's read position and moves it.
    async fn events(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> Out<EventPage> {
        let (control, who) = parts(ctx)?;
        let page = control
            .pull(who, &subscription_id, after, size(limit))
            .await
            .map_err(error)?;
        Ok(EventPage {
            items: page.items.into_iter().map(event).collect(),
            next_after: page.next_after,
        })
    }

    /// The subscription's dead letters (R-DI-8), oldest first.
    async fn dead_letters(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Out<DeadLetterPage> {
        let (control, who) = parts(ctx)?;
        let page = control
            .dead_letters(who, &subscription_id, cursor.as_deref(), size(limit))
            .await
            .map_err(error)?;
        Ok(DeadLetterPage {
            items: page.items.into_iter().map(dead_letter).collect(),
            next_cursor: page.next_cursor,
        })
    }

    /// The subscription's delivery health (R-CP-12).
    async fn delivery_health(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
    ) -> Out<DeliveryHealthNode> {
        let (control, who) = parts(ctx)?;
        let h = control
            .delivery_health(who, &subscription_id)
            .await
            .map_err(error)?;
        Ok(health(h))
    }
}

#[derive(Debug, Default)]
pub struct DeliveryMutations;

#[Object]
impl DeliveryMutations {
    /// Gives dead letters (`ids`; all when absent) a fresh attempt budget, due at once; answers
    /// how many.
    async fn replay_dead_letters(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
        ids: Option<Vec<String>>,
    ) -> Out<u64> {
        let (control, who) = parts(ctx)?;
        control
            .replay_dead_letters(who, &subscription_id, ids.as_deref())
            .await
            .map_err(error)
    }
}
