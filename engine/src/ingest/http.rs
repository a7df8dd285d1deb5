//! HTTP ingest (R-IN-10): `POST /ingest/<source>` in the CloudEvents HTTP binary binding, through
//! the same verdict, dedup and sequencing as Kafka records. Answers: 202 accepted, 200 duplicate,
//! 202 dropped, 400 with the quarantine reason; 429 `ingest_throttled` with `Retry-After` while
//! delivery is behind its bound (`delivery::backpressure`), nothing judged or stored.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use hub_core::auth::TokenVerifier;
use hub_core::error::{ApiError, ErrorCode};

use super::jobs::JobRouting;
use super::{distinct_keys, judge_into, Judged, KeyObserver, RecordIn};
use crate::delivery::backpressure::Backpressure;
use crate::store::{Fence, Ingest, IngestBatch, UnitId};
use crate::verdict::{VerdictCounters, VerdictLimits};

/// What the ingest route needs.
#[derive(Debug, Clone)]
pub struct HttpIngest {
    pub store: Arc<dyn Ingest>,
    pub counters: Arc<VerdictCounters>,
    pub limits: VerdictLimits,
    /// Told the events of every durable batch (the catalog), if any.
    pub observer: Option<Arc<dyn KeyObserver>>,
    /// Matching and the lanes: jobs are written with their events (R-DI-1).
    pub routing: Option<JobRouting>,
    /// Who may write (R-SEC-4): Access Manager-shaped tokens with the `ingest` permission and a
    /// `sources` claim; `None` when HTTP ingest is off.
    pub producers: Option<Arc<TokenVerifier>>,
    /// Closed while delivery is behind its bound: producers are told to come back later.
    pub backpressure: Arc<Backpressure>,
}

/// The source only the hub writes: its own events (`destination.verified`, …), which tenants
/// trust as the hub's. A producer posting as `hub` is refused before anything is judged or
/// stored. (On Kafka, `lerian.streaming.hub` is protected by the broker's ACLs: only the hub's
/// principal may write it — an operator setting, see README "Operating".)
pub const RESERVED_SOURCE: &str = "hub";

/// R-SEC-4, before anything is judged: HTTP ingest is on, and the bearer token may write
/// `source` (401 without a valid token, 403 without the `ingest` permission for it).
fn admit_producer(
    producers: Option<&TokenVerifier>,
    headers: &HeaderMap,
    source: &str,
) -> Result<(), ApiError> {
    let Some(verifier) = producers else {
        return Err(ApiError::new(
            ErrorCode::HttpIngestOff,
            "HTTP ingest is off on this hub (the default with Kafka; STREAMING_HUB_HTTP_INGEST=true turns it on)",
        ));
    };
    let authorization = match headers.get("authorization").map(|v| v.to_str()) {
        Some(Err(_)) => return Err(ApiError::unauthorized("a bearer token is required")),
        Some(Ok(v)) => Some(v),
        None => None,
    };
    verifier.verify(authorization)?.may_ingest(source)
}

/// `POST /ingest/{source}`.
pub async fn ingest(
    State(state): State<Arc<HttpIngest>>,
    Path(source): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = admit_producer(state.producers.as_deref(), &headers, &source) {
        return e.into_response();
    }
    if source.eq_ignore_ascii_case(RESERVED_SOURCE) {
        return ApiError::new(
            ErrorCode::SourceReserved,
            "the source \"hub\" is the hub's own; producers cannot write it",
        )
        .into_response();
    }
    if state.backpressure.is_closed() {
        return throttled(state.backpressure.retry_after_s());
    }
    judge_and_store(&state, &source, &headers, body)
        .await
        .into_response()
}

/// 429 while ingest holds back: the producer retries after `retry_after_s` seconds.
fn throttled(retry_after_s: u64) -> Response {
    crate::telemetry::METRICS.ingest_throttled.inc();
    let e = ApiError::new(
        ErrorCode::IngestThrottled,
        "delivery is behind; nothing was stored: send the event again after Retry-After seconds",
    );
    let mut response = e.into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(retry_after_s),
    );
    response
}

/// The verdict, the store write and the answer of an admitted request.
async fn judge_and_store(
    state: &HttpIngest,
    source: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<serde_json::Value>) {
    let unit = UnitId::new(format!("http:{source}"), 0);
    let record = RecordIn {
        topic: Arc::from(unit.topic.as_str()),
        partition: 0,
        offset: -1,
        // The bearer token is the producer's secret: never part of the record (a quarantined
        // record keeps its headers).
        headers: headers
            .iter()
            .filter(|(k, _)| *k != axum::http::header::AUTHORIZATION)
            .map(|(k, v)| (k.as_str(), Some(v.as_bytes())))
            .collect(),
        value: body.to_vec(),
    };
    let mut batch = IngestBatch::default();
    let judged = judge_into(
        &mut batch,
        record,
        source,
        &state.limits,
        &state.counters,
        crate::clock::now_ms(),
    );
    let reserved = state
        .routing
        .as_ref()
        .and_then(|r| r.attach(&mut batch, r.lane_of(&unit.topic, unit.partition)));
    let batch = Arc::new(batch);
    let outcome = match state
        .store
        .write_batch(&unit, Fence::UNFENCED, batch.clone())
        .await
    {
        Ok(o) => {
            if let Some(observer) = &state.observer {
                observer.observe(&distinct_keys(&batch.events));
            }
            if let Some(r) = &state.routing {
                r.written(&batch, &o, reserved);
            }
            o
        }
        Err(e) => {
            tracing::error!(error = %e, "http ingest: store write failed");
            let e = ApiError::unavailable("the event was not stored; retry");
            return e.as_reply();
        }
    };
    match judged {
        Judged::Accepted { tenant, id } => {
            if let Some((_, _, seq)) = outcome.stored.first() {
                (
                    StatusCode::ACCEPTED,
                    Json(json!({"verdict": "accepted", "tenant": tenant, "id": id, "seq": seq})),
                )
            } else {
                state.counters.count_duplicates(1);
                (
                    StatusCode::OK,
                    Json(json!({"verdict": "duplicate", "tenant": tenant, "id": id})),
                )
            }
        }
        Judged::Dropped => (
            StatusCode::ACCEPTED,
            Json(json!({"verdict": "dropped", "reason": "system_event"})),
        ),
        Judged::Quarantined { reason, detail } => {
            let mut e = ApiError::new(ErrorCode::Quarantined, detail);
            e.extra = Some(json!({ "reason": reason }));
            e.as_reply()
        }
    }
}
