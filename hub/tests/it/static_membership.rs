//! Static membership (issue 18, R-OP-1): an engine with `STREAMING_HUB_KAFKA_INSTANCE_ID` that
//! dies and comes back under the same id gets its partitions back at once — here with a 45 s
//! session timeout, new records are stored within seconds of the restart, not after the dead
//! member's session expires.

use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::delivery::produce;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_a_restarted_static_member_gets_its_partitions_back_without_waiting_the_session() {
    // It produces to the shared `lender` topic, which a test holding the broker may reset.
    let _broker = exclusive_broker().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let group = format!("static-{}", Uuid::now_v7().simple());
    let instance = format!("engine-{}", Uuid::now_v7().simple());
    let tenant = format!("t-static-{}", Uuid::now_v7().simple());
    let env = [
        ("STREAMING_HUB_KAFKA_INSTANCE_ID", instance.as_str()),
        ("STREAMING_HUB_KAFKA_SESSION_TIMEOUT_MS", "45000"),
    ];
    let port = free_port();
    let first = Engine::start_with(dir.path(), &group, port, Backend::Embedded, &env);
    first.wait_ready().await;
    let admin = token(dir.path(), "ops", &["admin"]);
    let stored = |engine: &Engine| {
        let (engine_http, admin, tenant) = (engine.http.clone(), admin.clone(), tenant.clone());
        async move {
            let inbox: serde_json::Value = reqwest::Client::new()
                .get(format!(
                    "{engine_http}/admin/events?tenant={tenant}&limit=1000"
                ))
                .bearer_auth(&admin)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            inbox["items"].as_array().map(Vec::len)
        }
    };
    produce(&tenant, 10).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while stored(&first).await != Some(10) {
        assert!(Instant::now() < deadline, "the first engine consumes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    first.kill_9();

    let second = Engine::start_with(dir.path(), &group, port, Backend::Embedded, &env);
    second.wait_ready().await;
    let restarted = Instant::now();
    produce(&tenant, 10).await;
    while stored(&second).await != Some(20) {
        assert!(
            restarted.elapsed() < Duration::from_secs(30),
            "the restarted member consumes well inside the 45 s session"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    second.stop();
}
