//! Readiness (R-OP-4): an engine whose Kafka brokers do not answer is not ready — `/ready` 503
//! naming `kafka`, `/health` with its last error, `streaming_hub_component_up` 0 — and becomes
//! ready within seconds of the brokers answering. The outage is made with a TCP forwarder in
//! front of the real broker's bootstrap address: closed, then opened (librdkafka bootstraps
//! through it, then talks to the advertised listener directly).

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::support::*;
use crate::two_process::eventually;

/// Forwards every connection on `listener` to the broker.
async fn forward_to_kafka(listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(KAFKA).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

async fn get(http: &str, path: &str) -> Option<(u16, Value)> {
    let r = reqwest::get(format!("{http}{path}")).await.ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().await.unwrap_or(Value::Null)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_4_ready_is_false_while_kafka_is_down_and_true_once_it_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bootstrap = free_port();
    let brokers = format!("127.0.0.1:{bootstrap}");
    let group = format!("readiness-{}", Uuid::now_v7().simple());
    let engine = Engine::start_with(
        dir.path(),
        &group,
        free_port(),
        Backend::Embedded,
        &[("STREAMING_HUB_KAFKA_BROKERS", brokers.as_str())],
    );
    // The listener answers before Kafka does: health says which component is down.
    let health = eventually(Duration::from_secs(30), || async {
        let (_, h) = get(&engine.http, "/health").await?;
        let kafka = h["components"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "kafka")?
            .clone();
        (kafka["state"] == "down" && kafka["last_error"].is_string()).then_some(h)
    })
    .await
    .expect("health reports kafka down with its last error");
    assert_eq!(health["status"], "degraded", "{health}");
    let (status, ready) = get(&engine.http, "/ready").await.expect("ready answers");
    assert_eq!(status, 503, "{ready}");
    assert!(
        ready["down"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "kafka")),
        "{ready}"
    );
    let metrics = engine.metrics().await;
    assert_eq!(
        metrics.get("streaming_hub_component_up{component=\"kafka\"}"),
        Some(&0)
    );
    assert_eq!(
        metrics.get("streaming_hub_component_up{component=\"store\"}"),
        Some(&1)
    );

    // The brokers come back: ready within seconds.
    let listener = tokio::net::TcpListener::bind(&brokers).await.expect("bind");
    tokio::spawn(forward_to_kafka(listener));
    eventually(Duration::from_secs(30), || async {
        let (status, _) = get(&engine.http, "/ready").await?;
        (status == 200).then_some(())
    })
    .await
    .expect("ready once Kafka answers");
    let (_, health) = get(&engine.http, "/health").await.expect("health");
    assert_eq!(health["status"], "ok", "{health}");
    engine.stop();
}
