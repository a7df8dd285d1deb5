//! What an operator asks a control process (`hub-control serve`): `/health` (each component,
//! its state and last error), `/ready` (200 only while every component answers; 503 otherwise)
//! and `/metrics` (Prometheus text: component states, and answers by transport and status
//! class). The standalone hub has its own (`hub_engine::api`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::service::Control;

/// The tenant a readiness read asks about: no tenant has this name (tenant ids are producers'
/// `ce-tenantid`s), and CQL refuses an empty partition key.
pub const PROBE_TENANT: &str = "_readiness";

/// How long a component has to answer a readiness check.
const CHECK_WITHIN: Duration = Duration::from_secs(2);

/// One component's answer.
#[derive(Debug)]
struct Check {
    name: &'static str,
    error: Option<String>,
}

/// Answers counted by transport (`rest`, `graphql`, `grpc`) and HTTP status class.
#[derive(Debug, Default)]
pub struct Answers {
    counts: [[AtomicU64; 5]; 3],
}

const TRANSPORTS: [&str; 3] = ["rest", "graphql", "grpc"];
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

impl Answers {
    fn count(&self, path: &str, status: u16) {
        let transport = if path.starts_with("/graphql") {
            1
        } else if path.starts_with("/lerian.") || path.starts_with("/grpc.") {
            2
        } else {
            0
        };
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        self.counts[transport][class].fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
struct Ops {
    control: Arc<Control>,
    answers: Arc<Answers>,
}

/// Adds `/health`, `/ready` and `/metrics` to `app`, and counts every answer `app` gives.
pub fn with_ops(app: Router, control: Arc<Control>) -> Router {
    let answers = Arc::new(Answers::default());
    let counted = answers.clone();
    let app = app.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let answers = counted.clone();
            async move {
                let path = request.uri().path().to_owned();
                let response = next.run(request).await;
                answers.count(&path, response.status().as_u16());
                response
            }
        },
    ));
    let ops = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(Ops { control, answers });
    app.merge(ops)
}

/// Asks each component: the control store (a read), and the engine's store when this process
/// reads one.
async fn checks(control: &Control) -> Vec<Check> {
    let store = async {
        match tokio::time::timeout(
            CHECK_WITHIN,
            control.store.get(PROBE_TENANT, uuid::Uuid::nil()),
        )
        .await
        {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {CHECK_WITHIN:?}")),
        }
    };
    let engine = async {
        let reader = control.reader.get()?;
        match tokio::time::timeout(CHECK_WITHIN, reader.ready()).await {
            Ok(Ok(())) => Some(None),
            Ok(Err(e)) => Some(Some(e)),
            Err(_) => Some(Some(format!("no answer within {CHECK_WITHIN:?}"))),
        }
    };
    let (store, engine) = tokio::join!(store, engine);
    let mut all = vec![Check {
        name: "control_store",
        error: store,
    }];
    if let Some(error) = engine {
        all.push(Check {
            name: "engine_store",
            error,
        });
    }
    all
}

async fn health(State(ops): State<Ops>) -> Response {
    let all = checks(&ops.control).await;
    let up = all.iter().all(|c| c.error.is_none());
    let components: Vec<_> = all
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "state": if c.error.is_none() { "up" } else { "down" },
                "last_error": c.error,
            })
        })
        .collect();
    Json(json!({
        "status": if up { "ok" } else { "degraded" },
        "components": components,
    }))
    .into_response()
}

async fn ready(State(ops): State<Ops>) -> Response {
    let all = checks(&ops.control).await;
    let down: Vec<&str> = all
        .iter()
        .filter(|c| c.error.is_some())
        .map(|c| c.name)
        .collect();
    if down.is_empty() {
        (StatusCode::OK, Json(json!({ "ready": true }))).into_response()
    } else {
        let body = json!({ "ready": false, "down": down });
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

async fn metrics(State(ops): State<Ops>) -> Response {
    use std::fmt::Write as _;
    let mut text = String::new();
    text.push_str("# HELP hub_control_component_up Whether a component answered (1) or not (0).\n");
    text.push_str("# TYPE hub_control_component_up gauge\n");
    for c in checks(&ops.control).await {
        let up = u8::from(c.error.is_none());
        let _ = writeln!(
            text,
            "hub_control_component_up{{component=\"{}\"}} {up}",
            c.name
        );
    }
    text.push_str(
        "# HELP hub_control_answers_total Answers given, by transport and status class.\n",
    );
    text.push_str("# TYPE hub_control_answers_total counter\n");
    for (t, transport) in TRANSPORTS.iter().enumerate() {
        for (c, class) in CLASSES.iter().enumerate() {
            let n = ops.answers.counts[t][c].load(Ordering::Relaxed);
            let _ = writeln!(
                text,
                "hub_control_answers_total{{transport=\"{transport}\",class=\"{class}\"}} {n}"
            );
        }
    }
    text.push_str(&hub_core::listener::render_metrics("hub_control"));
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_4_answers_are_counted_by_transport_and_class() {
        let a = Answers::default();
        a.count("/v1/subscriptions", 201);
        a.count("/graphql", 200);
        a.count("/lerian.streaming.v1.Events/Pull", 200);
        a.count("/v1/nope", 404);
        assert_eq!(a.counts[0][1].load(Ordering::Relaxed), 1);
        assert_eq!(a.counts[0][3].load(Ordering::Relaxed), 1);
        assert_eq!(a.counts[1][1].load(Ordering::Relaxed), 1);
        assert_eq!(a.counts[2][1].load(Ordering::Relaxed), 1);
    }
}
