//! R-CP-2: a subscription's delivery timestamps, written by the engine from its lanes' outcomes.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::delivery::{event_headers, eventually, ids_on, End, Setup};

/// The lanes gather marks for 200 ms before one write; a graceful stop right after a delivery
/// keeps its `last_success_at`. (A stop usually takes longer than that window, so this passed
/// before the engine waited for the last write too; the wait covers a stop quicker than it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_2_a_graceful_stop_right_after_a_delivery_keeps_its_last_success_at() {
    let mut setup = Setup::start("marks-stop").await;
    let (id, _) = setup
        .api
        .active_webhook("m", &setup.receiver.url("/m"), json!({}))
        .await;
    let event = Uuid::now_v7();
    let mut post = setup
        .engine
        .post_ingest(&reqwest::Client::new(), "lender")
        .body("{}");
    for (k, v) in event_headers(&setup.tenant, event) {
        post = post.header(k, v);
    }
    assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);
    let receiver = &setup.receiver;
    assert!(
        eventually(Duration::from_secs(10), || ids_on(receiver, "/m")
            .contains(&event.to_string()))
        .await,
        "delivered"
    );
    setup.end_engine(End::Stop);
    setup.start_again().await;
    let api = setup.tenant_api(&setup.tenant);
    let (status, sub) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert!(
        sub["last_success_at"].is_string(),
        "the delivery's timestamp outlived the stop: {sub}"
    );
    setup.engine.stop();
}
