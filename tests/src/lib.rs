//! Test kit for the hub's integration tests: where the real services listen, unique names so
//! tests never share state, and a clear failure when a service is not running.
//!
//! The services are started by `scripts/services up` (the README's test command does it).

use std::net::TcpStream;
use std::time::Duration;

/// Kafka bootstrap address (KRaft single node).
pub const KAFKA: &str = "127.0.0.1:9092";
/// CQL native protocol (Cassandra 5 standing in for ScyllaDB).
pub const CQL: &str = "127.0.0.1:9042";
/// The second CQL server: password authentication (`cassandra` / `cassandra`), TLS only, its
/// certificate signed by the services' test CA (`test_ca()`).
pub const CQL_SECURE: &str = "127.0.0.1:9142";

/// The CA `scripts/services` made for the TLS listeners.
pub fn test_ca() -> String {
    let run = std::env::var("STREAMING_HUB_RUN_DIR")
        .unwrap_or_else(|_| "/tmp/streaming-hub-services".into());
    format!("{run}/tls/ca.pem")
}
/// RabbitMQ AMQP URI with the loopback-only guest user.
pub const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// moto server (SQS, EventBridge, STS).
pub const AWS_ENDPOINT: &str = "http://127.0.0.1:5055";

/// Panics with the command to run when nothing listens on `addr`.
pub fn require(service: &str, addr: &str) {
    let parsed = addr.parse().expect("service address is a socket address");
    if TcpStream::connect_timeout(&parsed, Duration::from_secs(2)).is_err() {
        panic!("{service} is not listening on {addr}: run `scripts/services up {service}` first");
    }
}

/// A name no other test (or earlier run) uses: `<prefix>-<uuidv7 simple>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// One line per smoke test saying what it did against which service, so the test output shows
/// each test talking to its service.
pub fn report(service: &str, what: &str) {
    eprintln!("[{service}] {what}");
}

/// Static credentials and the moto endpoint, as the hub's AWS sinks will be configured in tests.
pub async fn aws_config() -> aws_config::SdkConfig {
    use aws_config::{BehaviorVersion, Region};
    let creds = aws_sdk_sts::config::Credentials::new("testing", "testing", None, None, "tests");
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(AWS_ENDPOINT)
        .region(Region::new("us-east-1"))
        .credentials_provider(creds)
        .load()
        .await
}
