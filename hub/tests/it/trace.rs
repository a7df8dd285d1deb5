//! Trace context (R-TR-5): a `traceparent` / `tracestate` carried by an event is stored with it
//! and forwarded on its deliveries.

use serde_json::json;

use crate::delivery::{delivery_of, ingest_one, Setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_5_trace_context_is_forwarded_on_webhook_deliveries() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start("trace").await;
    api.active_webhook("t", &receiver.url("/t"), json!({}))
        .await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let event = ingest_one(
        &engine,
        &tenant,
        &[("traceparent", traceparent), ("tracestate", "lerian=1")],
    )
    .await;
    let got = delivery_of(&receiver, event).await.expect("delivered");
    assert_eq!(
        got.header("traceparent"),
        traceparent,
        "the delivery carries the trace context"
    );
    assert_eq!(got.header("tracestate"), "lerian=1");
    engine.stop();
}
