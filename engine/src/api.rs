//! The engine's HTTP surface: ingest, operator reads (`/admin/...`, behind an Access Manager token
//! with the operator `admin` permission), metrics and health.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use hub_core::auth::TokenVerifier;
use hub_core::error::ApiError;

use crate::ingest::http::{ingest, HttpIngest};
use crate::store::{
    DlqObservation, ForensicsFilter, QuarantineRecord, RawHeader, Store, StoredEvent,
};
use crate::verdict::{VerdictCounters, VerdictSnapshot};

/// Shared state of the HTTP surface.
#[derive(Debug)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    /// Every shard's counters plus HTTP ingest's, summed on scrape.
    pub counters: Vec<Arc<VerdictCounters>>,
    pub delivery: Arc<crate::delivery::lane::DeliveryCounters>,
    /// What `/ready`, `/health` and `hub_component_up` report (R-OP-4).
    pub readiness: crate::readiness::Readiness,
    /// The delivery lanes this engine pages (`/admin/ownership`).
    pub reporter: crate::delivery::ownership_report::Reporter,
}

impl ApiState {
    pub fn snapshot(&self) -> VerdictSnapshot {
        let mut total = VerdictSnapshot::default();
        for c in &self.counters {
            total.add(&c.snapshot());
        }
        total
    }
}

/// Builds the router; the largest request body is twice the value limit so an oversized value
/// still reaches the verdict (and is quarantined with a prefix) instead of being cut off.
pub fn router(api: Arc<ApiState>, http: Arc<HttpIngest>, operators: Arc<TokenVerifier>) -> Router {
    let body_limit = http.limits.max_value_bytes.saturating_mul(2).max(64 * 1024);
    let ingest_routes = Router::new()
        .route("/ingest/{source}", post(ingest))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .with_state(http);
    let admin_routes = Router::new()
        .route("/admin/quarantine", get(list_quarantine))
        .route("/admin/dlq", get(list_dlq))
        .route("/admin/events", get(list_events))
        .route("/admin/ownership", get(ownership))
        .route_layer(axum::middleware::from_fn_with_state(
            operators,
            require_admin,
        ))
        .with_state(api.clone());
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(api)
        .merge(admin_routes)
        .merge(ingest_routes)
}

/// `/admin` reads every tenant's records: only an operator token (`admin` permission) may.
async fn require_admin(
    State(operators): State<Arc<TokenVerifier>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let header = match request.headers().get("authorization").map(|v| v.to_str()) {
        Some(Err(_)) => {
            return ApiError::bad_request("the authorization header is not valid text")
                .into_response()
        }
        Some(Ok(v)) => Some(v),
        None => None,
    };
    match operators.verify(header) {
        Ok(p) if p.permissions.iter().any(|g| g == "admin") => next.run(request).await,
        Ok(_) => ApiError::forbidden("the operator admin permission is required").into_response(),
        Err(e) => e.into_response(),
    }
}

/// Every component, its state and last error; 200 whatever they say (the process answers).
async fn health(State(api): State<Arc<ApiState>>) -> Json<serde_json::Value> {
    let components = api.readiness.check().await;
    let up = components.iter().all(crate::readiness::Component::is_up);
    Json(json!({
        "status": if up { "ok" } else { "degraded" },
        "components": components,
    }))
}

/// 200 while every component is up; 503 naming the ones that are not.
async fn ready(State(api): State<Arc<ApiState>>) -> (StatusCode, Json<serde_json::Value>) {
    let down: Vec<&'static str> = api
        .readiness
        .check()
        .await
        .iter()
        .filter(|c| !c.is_up())
        .map(|c| c.name)
        .collect();
    if down.is_empty() {
        (StatusCode::OK, Json(json!({ "ready": true })))
    } else {
        let body = json!({ "ready": false, "down": down });
        (StatusCode::SERVICE_UNAVAILABLE, Json(body))
    }
}

async fn metrics(State(api): State<Arc<ApiState>>) -> String {
    // Bounded: a store that stopped answering must not stall the scrape that shows it down.
    let pending = tokio::time::timeout(Duration::from_secs(1), api.store.pending_jobs()).await;
    let (assignment_changes, lanes) = lanes_scraped(&api).await;
    crate::telemetry::Scrape {
        verdicts: api.snapshot(),
        phases: api.store.write_timings(),
        cql_requests: api.store.cql_requests(),
        outcomes: crate::telemetry::Scrape::outcomes_of(&api.delivery),
        pending: pending.ok().and_then(Result::ok),
        components: api
            .readiness
            .check()
            .await
            .iter()
            .map(|c| (c.name, c.is_up()))
            .collect(),
        lanes,
        assignment_changes,
    }
    .render()
}

/// The ownership view for `/metrics` when lanes are partitions (by shard they never change, and
/// 64 lanes' reads per scrape would be for nothing); none when the store does not answer in time.
async fn lanes_scraped(api: &ApiState) -> (Option<u64>, Vec<hub_core::ownership::LaneOwnership>) {
    let ownership = &api.reporter.ownership;
    if ownership.numbering() != crate::delivery::ownership::Numbering::ByPartition {
        return (None, Vec::new());
    }
    match api.reporter.report(Duration::from_secs(1)).await {
        Ok(report) => (Some(report.assignment_generation), report.lanes),
        Err(_) => (Some(ownership.snapshot().0), Vec::new()),
    }
}

/// The lanes this engine pages — the partitions the consumer group assigned it, strays it
/// adopted — with who holds each in the store, how many jobs wait there and the partition's
/// consumer lag (issue 18; `hub_core::ownership`).
async fn ownership(State(api): State<Arc<ApiState>>) -> Answer {
    let report = api
        .reporter
        .report(Duration::from_secs(2))
        .await
        .map_err(unavailable)?;
    Ok(Json(json!(report)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForensicsQuery {
    source: Option<String>,
    tenant: Option<String>,
    /// Quarantine reason code or DLQ error class.
    #[serde(alias = "reason", alias = "error_class")]
    class: Option<String>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    cursor: Option<u64>,
    limit: Option<usize>,
}

impl ForensicsQuery {
    fn split(self) -> (ForensicsFilter, u64, usize) {
        let filter = ForensicsFilter {
            source: self.source,
            tenant: self.tenant,
            class: self.class,
            since_ms: self.since_ms,
            until_ms: self.until_ms,
        };
        (
            filter,
            self.cursor.unwrap_or(0),
            self.limit.unwrap_or(100).clamp(1, 1000),
        )
    }
}

#[derive(Debug, Serialize)]
struct HeaderOut {
    key: String,
    value: Option<String>,
}

fn headers_out(h: &[RawHeader]) -> Vec<HeaderOut> {
    h.iter()
        .map(|h| HeaderOut {
            key: h.key.clone(),
            value: h
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned()),
        })
        .collect()
}

fn unavailable(e: impl std::fmt::Display) -> (StatusCode, Json<serde_json::Value>) {
    tracing::error!(error = %e, "store read failed");
    ApiError::unavailable("store unavailable").as_reply()
}

type Answer = Result<Json<serde_json::Value>, (StatusCode, Json<serde_json::Value>)>;

async fn list_quarantine(
    State(api): State<Arc<ApiState>>,
    Query(q): Query<ForensicsQuery>,
) -> Answer {
    let (filter, cursor, limit) = q.split();
    let page = api
        .store
        .list_quarantine(&filter, cursor, limit)
        .await
        .map_err(unavailable)?;
    let items: Vec<_> = page.items.iter().map(quarantine_json).collect();
    Ok(Json(
        json!({"items": items, "next_cursor": page.next_cursor}),
    ))
}

fn quarantine_json(r: &QuarantineRecord) -> serde_json::Value {
    json!({
        "topic": r.topic, "partition": r.partition, "offset": r.offset,
        "reason": r.reason, "detail": r.detail, "tenant": r.tenant,
        "headers": headers_out(&r.headers),
        "value_prefix": String::from_utf8_lossy(&r.value_prefix), "value_len": r.value_len,
        "received_at_ms": r.received_at_ms,
    })
}

async fn list_dlq(State(api): State<Arc<ApiState>>, Query(q): Query<ForensicsQuery>) -> Answer {
    let (filter, cursor, limit) = q.split();
    let page = api
        .store
        .list_dlq(&filter, cursor, limit)
        .await
        .map_err(unavailable)?;
    let items: Vec<_> = page.items.iter().map(dlq_json).collect();
    Ok(Json(
        json!({"items": items, "next_cursor": page.next_cursor}),
    ))
}

fn dlq_json(o: &DlqObservation) -> serde_json::Value {
    json!({
        "topic": o.topic, "partition": o.partition, "offset": o.offset, "source": o.source,
        "tenant": o.tenant, "error_class": o.error_class, "headers": headers_out(&o.headers),
        "value_prefix": String::from_utf8_lossy(&o.value_prefix), "value_len": o.value_len,
        "observed_at_ms": o.observed_at_ms,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    tenant: String,
    after: Option<u64>,
    limit: Option<usize>,
}

/// Operator read of a tenant's inbox in `seq` order (the tenant pull API is R-CP-14).
async fn list_events(State(api): State<Arc<ApiState>>, Query(q): Query<EventsQuery>) -> Answer {
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let events = api
        .store
        .read_events(&q.tenant, q.after.unwrap_or(0), limit)
        .await
        .map_err(unavailable)?;
    let next = events.last().map(|e| e.seq);
    let items: Vec<_> = events.iter().map(event_json).collect();
    Ok(Json(json!({"items": items, "next_after": next})))
}

fn event_json(e: &StoredEvent) -> serde_json::Value {
    let ev = &e.event;
    json!({
        "seq": e.seq, "id": ev.id, "tenant": ev.tenant, "source": ev.source, "type": ev.ce_type,
        "key": ev.key, "schema_version": ev.schema_version, "time": ev.time, "subject": ev.subject,
        "data": String::from_utf8_lossy(&ev.payload), "received_at_ms": ev.received_at_ms,
    })
}
