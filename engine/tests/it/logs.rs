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
