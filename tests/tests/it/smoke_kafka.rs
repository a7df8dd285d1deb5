//! Kafka: records with headers go in through a producer and come back through a consumer group
//! that commits its offsets.

use std::time::Duration;

use hub_tests::{report, require, unique, KAFKA};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset};

const RECORDS: usize = 20;

#[tokio::test]
async fn kafka_produce_with_headers_and_consume_in_group_with_commit() -> anyhow::Result<()> {
    require("kafka", KAFKA);
    let topic = unique("lerian.streaming.smoke");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()?;
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await?;
    for result in created {
        result.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("enable.idempotence", "true")
        .create()?;
    for i in 0..RECORDS {
        let id = uuid::Uuid::now_v7().to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "ce-id",
                value: Some(id.as_str()),
            })
            .insert(Header {
                key: "ce-tenantid",
                value: Some("t-smoke"),
            })
            .insert(Header {
                key: "ce-seqno",
                value: Some(i.to_string().as_str()),
            });
        let body = format!("{{\"n\":{i}}}");
        let record = FutureRecord::to(&topic)
            .key("t-smoke")
            .payload(&body)
            .headers(headers);
        producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)?;
    }

    let group = unique("hub-smoke-group");
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[&topic])?;
    let mut seen = Vec::new();
    while seen.len() < RECORDS {
        let msg = tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await??;
        let headers = msg.headers().expect("records carry headers");
        let mut tenant = None;
        let mut seqno = None;
        for h in headers.iter() {
            match h.key {
                "ce-tenantid" => tenant = h.value.map(<[u8]>::to_vec),
                "ce-seqno" => seqno = h.value.map(|v| String::from_utf8_lossy(v).into_owned()),
                _ => {}
            }
        }
        assert_eq!(tenant.as_deref(), Some(&b"t-smoke"[..]));
        seen.push(seqno.expect("ce-seqno header").parse::<usize>()?);
        consumer.commit_message(&msg, CommitMode::Sync)?;
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..RECORDS).collect::<Vec<_>>());

    let committed = consumer.committed(Duration::from_secs(10))?;
    let mut total = 0;
    for tp in committed.elements() {
        if let Offset::Offset(n) = tp.offset() {
            total += n;
        }
    }
    assert_eq!(
        total as usize, RECORDS,
        "committed offsets cover every record"
    );
    // The engine's tests own the lerian.streaming.* namespace on this broker: leave nothing.
    admin.delete_topics(&[&topic], &AdminOptions::new()).await?;
    report("kafka", &format!(
        "{KAFKA}: produced {RECORDS} records with ce-* headers to {topic}, consumed them in group {group}, committed offsets summing to {total}"
    ));
    Ok(())
}
