//! What the engine holds, over GraphQL: pull pages, dead letters (and replaying them), delivery
//! health — through the engine's `DeliveryReader`, so with the REST routes' views and codes.

use async_graphql::{Context, Object, SimpleObject};
use serde_json::Value;

use super::{error, parts, Out};
use crate::auth::Permission;
use crate::reader::{no_engine, DeliveryReader};
use hub_core::model::Subscription;

fn text(v: &Value, f: &str) -> Option<String> {
    v.get(f).and_then(Value::as_str).map(str::to_owned)
}

fn number(v: &Value, f: &str) -> u64 {
    v.get(f).and_then(Value::as_u64).unwrap_or_default()
}

fn list<T>(v: &Value, f: &str, each: fn(&Value) -> T) -> Vec<T> {
    v[f].as_array()
        .map(|a| a.iter().map(each).collect())
        .unwrap_or_default()
}

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

pub(super) fn event(v: &Value) -> EventNode {
    EventNode {
        seq: number(v, "seq"),
        id: text(v, "id").unwrap_or_default(),
        key: text(v, "key").unwrap_or_default(),
        origin: text(v, "origin").unwrap_or_default(),
        schema_version: text(v, "schema_version").unwrap_or_default(),
        time: text(v, "time").unwrap_or_default(),
        subject: text(v, "subject"),
        content_type: text(v, "content_type").unwrap_or_default(),
        data: v.get("data").cloned().map(async_graphql::Json),
        data_base64: text(v, "data_base64"),
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

fn attempt(v: &Value) -> AttemptNode {
    AttemptNode {
        at: text(v, "at").unwrap_or_default(),
        outcome: text(v, "outcome").unwrap_or_default(),
        duration_ms: number(v, "duration_ms"),
        error_class: text(v, "error_class"),
        status_code: v["status_code"].as_u64(),
        detail: text(v, "detail"),
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

fn dead_letter(v: &Value) -> DeadLetterNode {
    DeadLetterNode {
        id: text(v, "id").unwrap_or_default(),
        event_id: text(v, "event_id").unwrap_or_default(),
        seq: number(v, "seq"),
        reason: text(v, "reason").unwrap_or_default(),
        attempts: number(v, "attempts"),
        received_at: text(v, "received_at").unwrap_or_default(),
        dead_at: text(v, "dead_at").unwrap_or_default(),
        last_attempt: v.get("last_attempt").map(attempt),
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
}

fn health(v: &Value) -> DeliveryHealthNode {
    let auto = &v["auto_disable"];
    DeliveryHealthNode {
        status: text(v, "status").unwrap_or_default(),
        window_start: text(v, "window_start").unwrap_or_default(),
        snapshot_at: text(v, "snapshot_at").unwrap_or_default(),
        recent_outcomes: list(v, "recent_outcomes", attempt),
        delivered: number(v, "delivered"),
        failed_attempts: number(v, "failed_attempts"),
        dead_letters: number(v, "dead_letters"),
        auto_disable_enabled: auto["enabled"].as_bool().unwrap_or(false),
        would_disable: auto["would_disable"].as_bool().unwrap_or(false),
        disabled_reason: text(auto, "disabled_reason"),
    }
}

/// The engine's reader and the caller's subscription `id` (token, permission, tenant checked).
pub(super) async fn reader_and_sub<'c>(
    ctx: &'c Context<'_>,
    id: &str,
    need: Permission,
) -> Out<(&'c dyn DeliveryReader, Subscription)> {
    let (control, who) = parts(ctx)?;
    who.require(need).map_err(error)?;
    let sub = control.live(who, id).await.map_err(error)?;
    let reader = control.reader.get().ok_or_else(|| error(no_engine()))?;
    Ok((reader.as_ref(), sub))
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
        let (reader, sub) = reader_and_sub(ctx, &subscription_id, Permission::Get).await?;
        let page = reader
            .events(&sub, after, size(limit))
            .await
            .map_err(error)?;
        Ok(EventPage {
            items: list(&page, "items", event),
            next_after: number(&page, "next_after"),
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
        let (reader, sub) = reader_and_sub(ctx, &subscription_id, Permission::Get).await?;
        let page = reader
            .dead_letters(&sub, cursor.as_deref(), size(limit))
            .await
            .map_err(error)?;
        Ok(DeadLetterPage {
            items: list(&page, "items", dead_letter),
            next_cursor: text(&page, "next_cursor"),
        })
    }

    /// The subscription's delivery health (R-CP-12).
    async fn delivery_health(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
    ) -> Out<DeliveryHealthNode> {
        let (reader, sub) = reader_and_sub(ctx, &subscription_id, Permission::Get).await?;
        let v = reader.health(&sub).await.map_err(error)?;
        Ok(health(&v))
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
        let (reader, sub) = reader_and_sub(ctx, &subscription_id, Permission::Post).await?;
        reader.replay(&sub, ids.as_deref()).await.map_err(error)
    }
}
