//! What an operator asks a control process (`hub-control serve`): `/health` (each component,
//! its state and last error), `/ready` (200 only while every component answers; 503 otherwise)
//! and `/metrics` (through `prometheus-client`: component states, answers by transport and
//! status class, refused connections). The standalone hub has its own (`hub_engine::api`).

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

pub use hub_core::control_store::PROBE_TENANT;

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

/// Asks each component: the control store (a read, and whether its writes land), and the
/// engine's store when this process reads one.
async fn checks(control: &Control) -> Vec<Check> {
    let store = async {
        match tokio::time::timeout(
            CHECK_WITHIN,
            control.store.get(PROBE_TENANT, uuid::Uuid::nil()),
        )
        .await
        {
            // Reads can work on a full disk while no write lands.
            Ok(Ok(_)) => control.store.write_failure(),
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

/// What a control process's scrape shows, under `hub_control_`: `component_up{component}`
/// (each store answered a check: 1, or not: 0), `answers_total{transport,class}` and
/// `http_connections_refused_total` — constant metrics of `prometheus-client`, read per scrape.
#[derive(Debug)]
struct Scrape {
    components: Vec<(&'static str, bool)>,
    answers: Vec<([(&'static str, &'static str); 2], u64)>,
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;
        let help = "Whether a component answered (1) or not (0)";
        let mut up = encoder.encode_descriptor("component_up", help, None, MetricType::Gauge)?;
        for (component, is_up) in &self.components {
            let labels = [("component", *component)];
            ConstGauge::new(i64::from(*is_up)).encode(up.encode_family(&labels)?)?;
        }
        let help = "Answers given, by transport and status class";
        let mut answers = encoder.encode_descriptor("answers", help, None, MetricType::Counter)?;
        for (labels, n) in &self.answers {
            ConstCounter::new(*n).encode(answers.encode_family(labels)?)?;
        }
        let refused = ConstCounter::new(hub_core::listener::refused_connections());
        let help = "Connections closed at once because the listener was full";
        refused.encode(encoder.encode_descriptor(
            "http_connections_refused",
            help,
            None,
            MetricType::Counter,
        )?)
    }
}

async fn metrics(State(ops): State<Ops>) -> Response {
    let components = checks(&ops.control)
        .await
        .into_iter()
        .map(|c| (c.name, c.error.is_none()))
        .collect();
    let mut answers = Vec::new();
    for (t, transport) in TRANSPORTS.iter().enumerate() {
        for (c, class) in CLASSES.iter().enumerate() {
            let n = ops.answers.counts[t][c].load(Ordering::Relaxed);
            answers.push(([("transport", *transport), ("class", *class)], n));
        }
    }
    let text = Scrape {
        components,
        answers,
    }
    .render();
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

impl Scrape {
    fn render(self) -> String {
        let mut registry = prometheus_client::registry::Registry::with_prefix("hub_control");
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
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

    #[test]
    fn r_op_4_the_control_process_metrics_keep_their_names() {
        let text = Scrape {
            components: vec![("control_store", true), ("engine_store", false)],
            answers: vec![([("transport", "rest"), ("class", "2xx")], 3)],
        }
        .render();
        for line in [
            "hub_control_component_up{component=\"control_store\"} 1",
            "hub_control_component_up{component=\"engine_store\"} 0",
            "hub_control_answers_total{transport=\"rest\",class=\"2xx\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.contains("hub_control_http_connections_refused_total "));
    }
}
