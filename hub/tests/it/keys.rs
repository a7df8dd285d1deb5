//! Key material that does not match (issue 15, R-SEC-1): an engine restarted with master keys
//! that lack the one a subscription's secret is sealed under says so at start, names the key on
//! the subscription's health, and each probe says which key is missing — rather than a bare
//! `secret_unavailable` per attempt.

use base64::Engine as _;
use serde_json::json;
use uuid::Uuid;

use crate::delivery::{engine_env, start_engine, Tenant};
use crate::receiver::Receiver;
use crate::support::*;

fn key_spec(id: &str) -> String {
    let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>());
    format!("{id}:{key}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sec_1_a_secret_under_a_master_key_not_held_is_reported_at_start_and_on_health() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let group = format!("keys-{}", Uuid::now_v7().simple());
    let k1 = key_spec("k1");
    let first = engine_env(
        Backend::Embedded,
        &[("STREAMING_HUB_MASTER_KEYS", k1.as_str())],
    );
    let engine = start_engine(dir.path(), &group, free_port(), Backend::Embedded, &first);
    engine.wait_ready().await;
    let tenant = format!("t-keys-{}", Uuid::now_v7().simple());
    let api = Tenant::new(&engine, dir.path(), &tenant);
    let (id, _) = api
        .active_webhook("sealed-k1", &receiver.url("/k"), json!({}))
        .await;
    engine.stop();

    // Restarted with another master key only: k1 is gone.
    let k2 = key_spec("k2");
    let second = engine_env(
        Backend::Embedded,
        &[("STREAMING_HUB_MASTER_KEYS", k2.as_str())],
    );
    let engine = start_engine(dir.path(), &group, free_port(), Backend::Embedded, &second);
    engine.wait_ready().await;
    let api = Tenant::new(&engine, dir.path(), &tenant);
    assert!(
        engine
            .log_text()
            .contains("sealed under a master key this process does not hold"),
        "said at start"
    );
    let (status, health) = api
        .call("GET", &format!("/v1/subscriptions/{id}/health"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(health["secret_key_missing"], "k1", "{health}");
    let (_, ping) = api
        .call("POST", &format!("/v1/subscriptions/{id}/ping"), None)
        .await;
    assert_eq!(ping["error_class"], "secret_unavailable", "{ping}");
    assert!(
        ping["detail"]
            .as_str()
            .is_some_and(|d| d.contains("\"k1\"")),
        "the probe names the key: {ping}"
    );
    engine.stop();
}
