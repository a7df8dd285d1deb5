//! `GET /v1/subscriptions/:id/events?after=<seq>&limit=<n>` (R-CP-14): a pull subscription's
//! page of its tenant's matching events, `{"items": [...], "next_after": <seq>}`. Same token,
//! tenant isolation and error bodies as the other `/v1` routes (another tenant's id is a 404).
//! A read that succeeds marks the subscription's `last_success_at` (at most once a minute, as
//! deliveries do: `delivery::marks`; each mark is a control-store write every index follows).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use hub_control::auth::Permission;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{SinkKind, Subscription};

use crate::delivery::marks::MARK_EVERY_MS;
use crate::delivery::pull::{read_page, PullPage};
use crate::delivery_api::DeliveryApi;
use crate::store::StoredEvent;

/// Page size when `limit` is absent, and the most a page holds.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1_000;

/// The handler.
pub async fn events(
    State(api): State<Arc<DeliveryApi>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let sub = match api.subscription(&headers, &id, Permission::Get).await {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let page = async {
        let (after, limit) = paging(&q)?;
        api.pull_page(sub, after, Some(limit)).await
    };
    match page.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

impl DeliveryApi {
    /// A pull page of `sub` (R-CP-14), for every transport: `{"items", "next_after"}`; a read
    /// of an active subscription marks its `last_success_at`.
    pub(crate) async fn pull_page(
        &self,
        sub: Subscription,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Value, ApiError> {
        if sub.sink_kind != SinkKind::Pull {
            return Err(ApiError::new(
                ErrorCode::NotAPullSubscription,
                format!(
                    "a {} subscription is delivered by push, not read",
                    sub.sink_kind
                ),
            ));
        }
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l) if (1..=MAX_LIMIT).contains(&l) => l,
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "limit is from 1 to {MAX_LIMIT}"
                )))
            }
        };
        let page = read_page(&*self.store, &sub, after, limit)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "pull read failed");
                ApiError::unavailable("the event log is unavailable; retry")
            })?;
        if sub.enabled && !sub.paused {
            mark_success(self, sub).await;
        }
        Ok(page_view(&page))
    }
}

/// `after` (a seq) and `limit` (1 to [`MAX_LIMIT`]); anything else is a 400.
fn paging(q: &HashMap<String, String>) -> Result<(Option<u64>, usize), ApiError> {
    if let Some(k) = q.keys().find(|k| !matches!(k.as_str(), "after" | "limit")) {
        return Err(ApiError::bad_request(format!("unknown parameter {k:?}")));
    }
    let after = q
        .get("after")
        .map(|a| a.parse::<u64>())
        .transpose()
        .map_err(|_| ApiError::bad_request("after is a seq (a whole number)"))?;
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| ApiError::bad_request(format!("limit is from 1 to {MAX_LIMIT}")))?,
    };
    Ok((after, limit))
}

/// Records the read as the subscription's last success (R-CP-2); a lost race or a store
/// failure leaves it for the next read.
pub(crate) async fn mark_success(api: &DeliveryApi, sub: Subscription) {
    let now = crate::clock::now_ms();
    if sub
        .last_success_at_ms
        .is_some_and(|t| now - t < MARK_EVERY_MS)
    {
        return;
    }
    let next = crate::delivery::marks::marked(&sub, true, now);
    if let Err(e) = api.control.replace(&next, sub.revision).await {
        tracing::debug!(error = %e, "last_success_at not recorded");
    }
}

pub fn page_view(page: &PullPage) -> Value {
    json!({
        "items": page.items.iter().map(item_view).collect::<Vec<_>>(),
        "next_after": page.next_after,
    })
}

/// One event as R-CP-14 shows it: JSON payloads as `data`, anything else base64 in
/// `data_base64`.
pub fn item_view(stored: &StoredEvent) -> Value {
    let ev = &stored.event;
    let content_type = ev
        .data_content_type
        .clone()
        .unwrap_or_else(|| "application/json".into());
    let mut v = json!({
        "seq": stored.seq,
        "id": ev.id,
        "key": ev.key,
        "origin": ev.source,
        "schema_version": ev.schema_version,
        "time": ev.time,
        "content_type": content_type,
    });
    if let Some(s) = &ev.subject {
        v["subject"] = s.clone().into();
    }
    let (field, data) = hub_core::sink::data_field(&content_type, &ev.payload);
    v[field] = data;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::event;

    #[test]
    fn r_cp_14_items_carry_json_as_data_and_anything_else_as_base64() {
        let mut ev = event("t", "loan.approved");
        ev.subject = Some("loan-1".into());
        let json_item = item_view(&StoredEvent {
            seq: 7,
            event: ev.clone(),
        });
        assert_eq!(json_item["seq"], 7);
        assert_eq!(json_item["key"], "loan.approved");
        assert_eq!(json_item["origin"], "lender");
        assert_eq!(json_item["subject"], "loan-1");
        assert_eq!(json_item["data"]["amount"], 100);
        assert!(json_item.get("data_base64").is_none());

        ev.data_content_type = Some("application/octet-stream".into());
        ev.payload = vec![0, 159, 146, 150];
        let binary = item_view(&StoredEvent {
            seq: 8,
            event: ev.clone(),
        });
        assert_eq!(binary["data_base64"], "AJ+Slg==");
        assert!(binary.get("data").is_none());

        ev.data_content_type = Some("application/cloudevents+json; charset=utf-8".into());
        ev.payload = b"not json".to_vec();
        let broken = item_view(&StoredEvent { seq: 9, event: ev });
        assert!(
            broken.get("data_base64").is_some(),
            "unparsable JSON is kept as bytes"
        );
    }

    #[test]
    fn r_cp_14_paging_parameters_are_checked() {
        let q = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(paging(&q(&[])).ok(), Some((None, DEFAULT_LIMIT)));
        assert_eq!(
            paging(&q(&[("after", "12"), ("limit", "5")])).ok(),
            Some((Some(12), 5))
        );
        for bad in [
            q(&[("after", "-1")]),
            q(&[("limit", "0")]),
            q(&[("limit", "1001")]),
            q(&[("cursor", "x")]),
        ] {
            assert_eq!(paging(&bad).map_err(|e| e.status()), Err(400));
        }
    }
}
