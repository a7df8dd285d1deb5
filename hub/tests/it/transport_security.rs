//! Secured backends (issue 16). Kafka: the services' broker also listens on 127.0.0.1:9094 with
//! SASL PLAIN (user `hub`) over TLS signed by the test CA; an engine configured for it is ready
//! and ingests what producers wrote; with a wrong password it says Kafka is down, and never
//! prints the password. CQL: the services' second Cassandra (127.0.0.1:9142) takes only TLS
//! from authenticated users; an engine on it with its credentials and CA is ready.

use std::time::Duration;

use serde_json::Value;

use crate::delivery::{produce, Setup};
use crate::support::{token, Backend};
use crate::two_process::eventually;

const KAFKA_SASL_SSL: &str = "127.0.0.1:9094";

/// The test CA that signed the broker's certificate (made by `scripts/services`).
fn test_ca() -> String {
    let run = std::env::var("STREAMING_HUB_RUN_DIR")
        .unwrap_or_else(|_| "/tmp/streaming-hub-services".into());
    format!("{run}/tls/ca.pem")
}

fn sasl_ssl(password: &str) -> Vec<(&'static str, String)> {
    vec![
        ("STREAMING_HUB_KAFKA_BROKERS", KAFKA_SASL_SSL.into()),
        ("STREAMING_HUB_KAFKA_SECURITY_PROTOCOL", "sasl_ssl".into()),
        ("STREAMING_HUB_KAFKA_SASL_MECHANISM", "PLAIN".into()),
        ("STREAMING_HUB_KAFKA_SASL_USERNAME", "hub".into()),
        ("STREAMING_HUB_KAFKA_SASL_PASSWORD", password.into()),
        ("STREAMING_HUB_KAFKA_SSL_CA_FILE", test_ca()),
    ]
}

/// R-OP-3 (issue 16): the engine consumes over SASL_SSL with the CA it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_the_engine_consumes_over_sasl_and_tls() {
    // It produces to the shared `lender` topic, which a test holding the broker may reset.
    let _broker = crate::support::exclusive_broker().await;
    let env = sasl_ssl("hub-secret");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let setup = Setup::start_with("kafka-sasl-ssl", Backend::Embedded, &env).await;
    let sent = produce(&setup.tenant, 20).await;
    let admin = token(setup.dir.path(), "ops", &["admin"]);
    let mut stored = 0;
    for _ in 0..100 {
        let inbox = setup.engine.admin_events(&admin, &setup.tenant).await;
        stored = inbox["items"].as_array().map_or(0, Vec::len);
        if stored == sent.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stored, sent.len(), "every record consumed over SASL_SSL");
    setup.engine.stop();
}

/// Whether a component's last error is a check that failed, not "not checked yet".
fn failed_check(component: &Value) -> bool {
    component["last_error"]
        .as_str()
        .is_some_and(|e| !e.starts_with("not checked yet"))
}

/// R-OP-4 (issue 16): refused credentials keep the engine not ready, naming Kafka, and the
/// password appears nowhere in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_4_refused_kafka_credentials_keep_the_engine_not_ready() {
    let password = "not-the-password-7f3a";
    let env = sasl_ssl(password);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::support::Engine::start_with(
        dir.path(),
        &format!("kafka-bad-{}", uuid::Uuid::now_v7().simple()),
        crate::support::free_port(),
        Backend::Embedded,
        &env,
    );
    // Down because a check failed (a last error), not merely because none ran yet.
    let mut kafka = Value::Null;
    for _ in 0..150 {
        if let Ok(r) = reqwest::get(format!("{}/health", engine.http)).await {
            let health: Value = r.json().await.unwrap_or(Value::Null);
            let found = health["components"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["name"] == "kafka"))
                .cloned();
            if let Some(k) = found {
                kafka = k;
                if failed_check(&kafka) {
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(kafka["state"], "down", "{kafka}");
    assert!(failed_check(&kafka), "a failed check: {kafka}");
    let ready = reqwest::get(format!("{}/ready", engine.http))
        .await
        .expect("ready");
    assert_eq!(ready.status().as_u16(), 503);
    assert!(
        !engine.log_text().contains(password),
        "the password is never logged"
    );
    engine.stop();
}

/// Freezes a service's process (SIGSTOP) until dropped (SIGCONT): an outage without a restart.
struct Frozen(String);

impl Frozen {
    fn service(name: &str) -> Frozen {
        let run = std::env::var("STREAMING_HUB_RUN_DIR")
            .unwrap_or_else(|_| "/tmp/streaming-hub-services".into());
        let pid = std::fs::read_to_string(format!("{run}/{name}/pid")).expect("the service's pid");
        let pid = pid.trim().to_owned();
        let stopped = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .expect("kill -STOP");
        assert!(stopped.success());
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0])
            .status();
    }
}

/// The engine's `/ready` status and body.
async fn ready(http: &str) -> Option<(u16, Value)> {
    let r = reqwest::get(format!("{http}/ready")).await.ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().await.unwrap_or(Value::Null)))
}

/// R-OP-4 (issue 16): an engine on a CQL cluster that requires TLS and a password, given both,
/// opens its store and the control plane's there and is ready; when the store stops answering
/// (its process frozen) `/ready` says so within seconds, and is true again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_4_an_engine_on_cql_with_tls_and_a_password_is_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keyspace = format!("hub_secure_{}", uuid::Uuid::now_v7().simple());
    let ca = test_ca();
    let engine = crate::support::Engine::start_with(
        dir.path(),
        &format!("cql-secure-{}", uuid::Uuid::now_v7().simple()),
        crate::support::free_port(),
        Backend::Embedded,
        &[
            ("STREAMING_HUB_STORE", "cql"),
            ("STREAMING_HUB_CQL_NODES", "127.0.0.1:9142"),
            ("STREAMING_HUB_CQL_KEYSPACE", &keyspace),
            ("STREAMING_HUB_CQL_USERNAME", "cassandra"),
            ("STREAMING_HUB_CQL_PASSWORD", "cassandra"),
            ("STREAMING_HUB_CQL_TLS_CA_FILE", &ca),
        ],
    );
    // Ready only once the store answers a read: connected over TLS, authenticated.
    engine.wait_ready().await;

    let frozen = Frozen::service("cqlsecure");
    let down = eventually(Duration::from_secs(15), || async {
        let (status, body) = ready(&engine.http).await?;
        let store_down = body["down"].as_array()?.iter().any(|c| c == "store");
        (status == 503 && store_down).then_some(body)
    })
    .await;
    let metrics = engine.metrics().await;
    drop(frozen);
    assert!(
        down.is_some(),
        "/ready names the store while it does not answer"
    );
    assert_eq!(
        metrics.get("streaming_hub_component_up{component=\"store\"}"),
        Some(&0)
    );
    let back = eventually(Duration::from_secs(30), || async {
        let (status, _) = ready(&engine.http).await?;
        (status == 200).then_some(())
    })
    .await;
    assert!(back.is_some(), "ready again once the store answers");
    engine.stop();
}
