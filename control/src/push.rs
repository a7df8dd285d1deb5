//! Telling engines of subscription changes at once (R-TR-4): `GET /internal/changes?after=N`
//! answers `{"changes": M}` as soon as this process has written more than `N` changes, or after
//! [`HOLD`] with the count unchanged. An engine configured with `STREAMING_HUB_CONTROL_URL` keeps
//! one such request open and reads the revision log the moment it returns; its own poll of the
//! log stays the safety net (a change written through another control process, a lost
//! connection). The answer is a counter and nothing else: no tenant, no subscription.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::service::Control;

/// How long a request waits for a change before answering with the count unchanged.
pub const HOLD: Duration = Duration::from_secs(25);

#[derive(Debug, Deserialize)]
struct After {
    after: Option<u64>,
}

pub fn router(control: std::sync::Arc<Control>) -> Router {
    Router::new()
        .route("/internal/changes", get(changes))
        .with_state(control)
}

async fn changes(
    State(control): State<std::sync::Arc<Control>>,
    Query(q): Query<After>,
) -> Json<serde_json::Value> {
    let mut seen = control.changes.subscribe();
    let after = q.after.unwrap_or(0);
    let newer = async {
        loop {
            let now = *seen.borrow_and_update();
            // A counter below `after` is a restarted process: any answer makes the engine read.
            if now != after {
                return now;
            }
            if seen.changed().await.is_err() {
                return now;
            }
        }
    };
    let count = match tokio::time::timeout(HOLD, newer).await {
        Ok(n) => n,
        Err(_) => *control.changes.borrow(),
    };
    Json(json!({ "changes": count }))
}
