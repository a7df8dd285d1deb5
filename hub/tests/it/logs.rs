//! Log format (issue 16): `STREAMING_HUB_LOG_FORMAT=json` makes every line a JSON object a
//! collector can read; an unknown format is refused at start.

use uuid::Uuid;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_json_logs_are_one_object_a_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let group = format!("logs-{}", Uuid::now_v7().simple());
    let engine = Engine::start_with(
        dir.path(),
        &group,
        free_port(),
        Backend::Embedded,
        &[
            ("STREAMING_HUB_LOG_FORMAT", "json"),
            ("STREAMING_HUB_LOG", "info"),
        ],
    );
    engine.wait_ready().await;
    let text = engine.log_text();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the engine logged at start");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    engine.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_an_unknown_log_format_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_streaming-hub"))
        .env("STREAMING_HUB_LOG_FORMAT", "xml")
        .env("STREAMING_HUB_DATA_DIR", dir.path())
        .env(
            "STREAMING_HUB_HTTP_ADDR",
            format!("127.0.0.1:{}", free_port()),
        )
        .output()
        .expect("runs");
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("json or text"));
}

/// Issue 16 (R-OP-3): a log line about a delivery names the tenant, the subscription and the
/// event — here a failed attempt (debug) and the dead letter it ends in (info), in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_delivery_log_lines_name_tenant_subscription_and_event() {
    use crate::delivery::{ingest_one, Setup};
    use crate::receiver::Act;
    let setup = Setup::start_with(
        "delivery-logs",
        Backend::Embedded,
        &[
            ("STREAMING_HUB_LOG_FORMAT", "json"),
            (
                "STREAMING_HUB_LOG",
                "warn,hub_engine::telemetry=debug,hub_engine::delivery=info",
            ),
        ],
    )
    .await;
    let (id, _) = setup
        .api
        .active_webhook(
            "broken",
            &setup.receiver.url("/broken"),
            serde_json::json!({"retry_schedule": [0], "timeout_ms": 1000}),
        )
        .await;
    setup.receiver.script(&[], Act::Status(500));
    let event = ingest_one(&setup.engine, &setup.tenant, &[])
        .await
        .to_string();
    let names_all = |line: &serde_json::Value| {
        let f = &line["fields"];
        f["tenant"] == setup.tenant.as_str()
            && f["subscription"] == id.as_str()
            && f["event"] == event.as_str()
    };
    let mut seen = (false, false);
    for _ in 0..100 {
        for line in setup.engine.log_text().lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match v["fields"]["message"].as_str() {
                Some("delivery attempt failed") if names_all(&v) => seen.0 = true,
                Some("dead-lettered") if names_all(&v) => seen.1 = true,
                _ => {}
            }
        }
        if seen == (true, true) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen,
        (true, true),
        "a failed attempt and its dead letter, each naming all three"
    );
    setup.engine.stop();
}
