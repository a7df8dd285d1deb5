//! Kafka per shard (issue 17): each shard takes its own partitions' records from the client, in
//! offset order, and none of them passes through the consumer's own queue (which the consumer
//! thread would route: two paths for one partition could reorder its records).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hub_engine::ingest::kafka::{consumer, leave_group};
use hub_engine::ingest::partition_feed::PartitionFeed;
use hub_engine::ingest::router::shard_for;
use hub_engine::ingest::RecordIn;
use rdkafka::consumer::Consumer;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use uuid::Uuid;

use crate::support::*;

const PARTITIONS: i32 = 4;
const PER_PARTITION: i64 = 100;
const SHARDS: usize = 2;

async fn produce_to_each_partition(topic: &str) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()
        .expect("producer");
    for i in 0..PER_PARTITION {
        for p in 0..PARTITIONS {
            let payload = format!("{p}:{i}");
            producer
                .send(
                    FutureRecord::<(), _>::to(topic)
                        .partition(p)
                        .payload(&payload),
                    Duration::from_secs(10),
                )
                .await
                .expect("produced");
        }
    }
}

#[tokio::test]
async fn r_in_7_each_shard_takes_its_own_partitions_records_in_order_and_none_reach_the_consumer_queue(
) {
    each_shard_takes_its_own_partitions(member_settings("feed")).await;
}

/// The same while the broker may hold each fetch to gather records
/// (`STREAMING_HUB_KAFKA_FETCH_WAIT_MS`, issue 17): groups, not single records, and still every
/// record once and in order.
#[tokio::test]
async fn r_in_7_with_fetches_held_to_gather_records_each_shard_still_takes_every_record_in_order() {
    let mut settings = member_settings("feed-held");
    settings.fetch_wait_ms = 100;
    each_shard_takes_its_own_partitions(settings).await;
}

async fn each_shard_takes_its_own_partitions(settings: hub_engine::ingest::kafka::KafkaSettings) {
    let topic = format!("lerian.streaming.feed-{}", Uuid::now_v7().simple());
    create_topic(&topic, PARTITIONS).await;
    produce_to_each_partition(&topic).await;

    let assignment = member_assignment(SHARDS);
    let (feed, mut shards) = PartitionFeed::new(SHARDS);
    let member = consumer(&settings, "", Some(assignment.clone()), Some(feed)).expect("consumer");
    member.subscribe(&[&topic]).expect("subscribe");

    let mut taken: Vec<Vec<RecordIn>> = vec![Vec::new(); SHARDS];
    let expected = (i64::from(PARTITIONS) * PER_PARTITION) as usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while taken.iter().map(Vec::len).sum::<usize>() < expected {
        assert!(
            Instant::now() < deadline,
            "records never reached the shards"
        );
        // The consumer's own queue serves the group's work only.
        if let Some(Ok(m)) = member.poll(Duration::from_millis(50)) {
            use rdkafka::message::Message;
            panic!(
                "a record of partition {} reached the consumer's queue",
                m.partition()
            );
        }
        for (shard, queues) in shards.iter_mut().enumerate() {
            queues.take(&mut taken[shard], usize::MAX);
        }
    }
    assert!((0..PARTITIONS).all(|p| assignment.holds(&topic, p)));

    for (shard, records) in taken.iter().enumerate() {
        let mut offsets: HashMap<i32, Vec<i64>> = HashMap::new();
        for r in records {
            assert_eq!(
                shard_for(&r.topic, r.partition, SHARDS),
                shard,
                "partition {} went to a shard that does not own it",
                r.partition
            );
            assert_eq!(
                r.value,
                format!("{}:{}", r.partition, r.offset).into_bytes()
            );
            offsets.entry(r.partition).or_default().push(r.offset);
        }
        for (partition, got) in offsets {
            assert_eq!(
                got,
                (0..PER_PARTITION).collect::<Vec<_>>(),
                "partition {partition}: every record once, in offset order"
            );
        }
    }

    // The shards drop their queues as they stop; then the consumer can leave the group.
    for queues in &mut shards {
        queues.close();
    }
    assert_eq!(
        Arc::strong_count(&member),
        1,
        "no queue keeps the consumer alive past the shards' stop"
    );
    leave_group(member, Duration::from_secs(5), "test");
    delete_topic(&topic).await;
}
