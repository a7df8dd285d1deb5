//! Trace context (R-TR-5): a `traceparent` / `tracestate` carried by an event is stored with it
//! and forwarded on its deliveries.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::delivery::{event_headers, eventually, Setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_5_trace_context_is_forwarded_on_webhook_deliveries() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
    } = Setup::start("trace").await;
    api.active_webhook("t", &receiver.url("/t"), json!({}))
        .await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let event = Uuid::now_v7();
    let mut post = reqwest::Client::new()
        .post(format!("{}/ingest/lender", engine.http))
        .header("traceparent", traceparent)
        .header("tracestate", "lerian=1")
        .body("{}");
    for (k, v) in event_headers(&tenant, event) {
        post = post.header(k, v);
    }
    assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);
    assert!(
        eventually(Duration::from_secs(10), || receiver.received().iter().any(
            |r| {
                r.header("x-lerian-event-id") == event.to_string()
                    && r.header("traceparent") == traceparent
                    && r.header("tracestate") == "lerian=1"
            }
        ))
        .await,
        "the delivery carries the event's trace context"
    );
    engine.stop();
}
