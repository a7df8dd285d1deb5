//! The dead-letter observer (R-IN-9) against real Kafka: a record a producer dead-lettered on
//! `lerian.streaming.<source>.dlq` is observed for operators (`GET /admin/dlq`, with its
//! `x-lerian-dlq-*` headers, filtered by source and error class) and never becomes an event or a
//! delivery.

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::Value;
use uuid::Uuid;

use crate::delivery::event_headers;
use crate::support::*;
use crate::two_process::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_9_dead_lettered_records_are_observed_never_delivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = format!("dlqsrc{}", &Uuid::now_v7().simple().to_string()[20..]);
    let topic = format!("lerian.streaming.{source}.dlq");
    let engine = Engine::start_with(
        dir.path(),
        &format!("dlq-{}", Uuid::now_v7().simple()),
        free_port(),
        Backend::Embedded,
        &[("STREAMING_HUB_KAFKA_SOURCES", &source)],
    );
    engine.wait_ready().await;

    let tenant = format!("t-dlq-{}", Uuid::now_v7().simple());
    let mut headers = OwnedHeaders::new();
    let mut attrs = event_headers(&tenant, Uuid::now_v7());
    attrs.push(("x-lerian-dlq-error-class", "timeout".into()));
    attrs.push(("x-lerian-dlq-attempts", "5".into()));
    for (k, v) in &attrs {
        headers = headers.insert(Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()
        .expect("producer");
    producer
        .send(
            FutureRecord::to(&topic)
                .key(&tenant)
                .payload(r#"{"amount":"1.00"}"#)
                .headers(headers),
            Duration::from_secs(30),
        )
        .await
        .expect("produced");

    let operator = token(dir.path(), "ops", &["admin"]);
    let client = reqwest::Client::new();
    let read = |query: String| {
        let request = client
            .get(format!("{}/admin/dlq?{query}", engine.http))
            .bearer_auth(&operator);
        async move {
            let body: Value = request.send().await.ok()?.json().await.ok()?;
            Some(body)
        }
    };
    // The observer's group joins and reads the new topic (metadata refreshes every second).
    let page = eventually(Duration::from_secs(60), || async {
        let page = read(format!("source={source}")).await?;
        page["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty())
            .then_some(page)
    })
    .await
    .expect("the dead-lettered record is observed");
    let item = &page["items"][0];
    assert_eq!(item["error_class"], "timeout", "{item}");
    assert_eq!(item["tenant"], tenant.as_str(), "{item}");
    let kept = item.to_string();
    assert!(
        kept.contains("x-lerian-dlq-attempts"),
        "the producer's headers are kept: {kept}"
    );

    let other_class = read(format!("source={source}&error_class=validation"))
        .await
        .expect("filtered");
    assert_eq!(other_class["items"].as_array().map(Vec::len), Some(0));

    // Never an event: the tenant's inbox is empty.
    let inbox = engine.admin_events(&operator, &tenant).await;
    assert_eq!(inbox["items"].as_array().map(Vec::len), Some(0), "{inbox}");
    delete_topic(&topic).await;
    engine.stop();
}
