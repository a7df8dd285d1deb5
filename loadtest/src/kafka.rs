//! Kafka for the load test: the run's topic, production (as fast as possible or paced), the raw
//! consume baseline, and the hub group's committed positions.

use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::workload::{Generator, Kind};

/// Most produce requests awaiting acknowledgement at once.
const IN_FLIGHT: usize = 20_000;

pub fn admin(brokers: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?)
}

/// Ingest topics on the broker other than `ours`: a fresh hub group would ingest them too.
pub fn other_ingest_topics(brokers: &str, ours: &str) -> anyhow::Result<Vec<String>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10))?;
    Ok(metadata
        .topics()
        .iter()
        .map(|t| t.name().to_owned())
        .filter(|n| n.starts_with("lerian.streaming.") && n != ours)
        .collect())
}

pub async fn delete_topics(brokers: &str, topics: &[String]) -> anyhow::Result<()> {
    if topics.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    admin(brokers)?
        .delete_topics(&names, &AdminOptions::new())
        .await?;
    Ok(())
}

pub async fn create_topic(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let results = admin(brokers)?
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await?;
    for r in results {
        r.map_err(|(t, e)| anyhow::anyhow!("creating {t}: {e}"))?;
    }
    Ok(())
}

/// The load's producer; it waits up to `linger_ms` to fill a batch.
pub fn producer(brokers: &str, linger_ms: u64) -> anyhow::Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", linger_ms.to_string())
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .set("enable.idempotence", "true")
        .create()?)
}

/// Counts of what was produced, by kind.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct ProducedCounts {
    pub total: u64,
    pub valid: u64,
    pub duplicates: u64,
    pub malformed: u64,
    pub system: u64,
    /// HTTP target only: answers 429 (the hub held ingest back); each such record was sent again
    /// after `Retry-After`, as a producer honouring back-pressure does.
    pub throttled: u64,
}

impl ProducedCounts {
    pub fn add(&mut self, kind: Kind) {
        self.total += 1;
        match kind {
            Kind::Valid => self.valid += 1,
            Kind::Duplicate => self.duplicates += 1,
            Kind::Malformed => self.malformed += 1,
            Kind::System => self.system += 1,
        }
    }
}

/// Produces records from `generator` while `budget(elapsed, produced)` allows, keeping at most
/// `IN_FLIGHT` unacknowledged; returns when every record is acknowledged.
pub async fn produce(
    producer: &FutureProducer,
    topic: &str,
    generator: &mut Generator,
    mut budget: impl FnMut(Duration, u64) -> Budget,
    mut on_ack: impl FnMut(u64),
) -> anyhow::Result<ProducedCounts> {
    let started = Instant::now();
    let mut counts = ProducedCounts::default();
    let mut acked = 0;
    let mut in_flight = FuturesUnordered::new();
    loop {
        match budget(started.elapsed(), counts.total) {
            Budget::Done => break,
            Budget::Wait(d) => {
                // Collect acknowledgements while waiting for the next slot.
                let _ = tokio::time::timeout(d, async {
                    while let Some(r) = in_flight.next().await {
                        ack(r)?;
                        acked += 1;
                        on_ack(acked);
                    }
                    Ok::<_, anyhow::Error>(())
                })
                .await;
                continue;
            }
            Budget::Send(n) => {
                for _ in 0..n {
                    let record = generator.next_record();
                    counts.add(record.kind);
                    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
                    for (k, v) in &record.headers {
                        headers = headers.insert(Header {
                            key: k,
                            value: Some(v.as_slice()),
                        });
                    }
                    let future = producer.send_result(
                        FutureRecord::to(topic)
                            .key(&record.key)
                            .payload(&record.value)
                            .headers(headers),
                    );
                    let future = future.map_err(|(e, _)| anyhow::anyhow!("enqueue: {e}"))?;
                    in_flight.push(future);
                    while in_flight.len() >= IN_FLIGHT {
                        if let Some(r) = in_flight.next().await {
                            ack(r)?;
                            acked += 1;
                            on_ack(acked);
                        }
                    }
                }
            }
        }
    }
    while let Some(r) = in_flight.next().await {
        ack(r)?;
        acked += 1;
        on_ack(acked);
    }
    Ok(counts)
}

type Delivery = Result<
    Result<
        rdkafka::producer::future_producer::Delivery,
        (rdkafka::error::KafkaError, rdkafka::message::OwnedMessage),
    >,
    futures::channel::oneshot::Canceled,
>;

fn ack(r: Delivery) -> anyhow::Result<()> {
    match r {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(anyhow::anyhow!("produce failed: {e}")),
        Err(_) => Err(anyhow::anyhow!("producer dropped a delivery")),
    }
}

/// What the producer may do now.
pub enum Budget {
    Send(u64),
    Wait(Duration),
    Done,
}

/// Sum of `group`'s committed offsets on `topic`, read by a consumer that never joins the group.
pub struct CommittedReader {
    consumer: BaseConsumer,
    tpl: TopicPartitionList,
}

impl CommittedReader {
    pub fn new(brokers: &str, topic: &str, group: &str, partitions: i32) -> anyhow::Result<Self> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        Ok(Self { consumer, tpl })
    }

    /// Records committed so far (0 while the group coordinator is not answering yet).
    pub fn committed(&self) -> u64 {
        match self
            .consumer
            .committed_offsets(self.tpl.clone(), Duration::from_secs(5))
        {
            Ok(list) => list
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => u64::try_from(o).ok(),
                    _ => None,
                })
                .sum(),
            Err(_) => 0,
        }
    }
}

/// A consumer of a group of its own (`group` and a fresh suffix), assigned every partition of
/// `topic` from its first record, with the hub's fetch settings and no commits.
pub fn from_the_start(
    brokers: &str,
    topic: &str,
    partitions: i32,
    group: &str,
) -> anyhow::Result<BaseConsumer> {
    assigned_at(brokers, topic, partitions, group, Offset::Beginning)
}

/// As [`from_the_start`], every partition from `offset`.
pub fn assigned_at(
    brokers: &str,
    topic: &str,
    partitions: i32,
    group: &str,
    offset: Offset,
) -> anyhow::Result<BaseConsumer> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set(
            "group.id",
            format!("{group}-{}", uuid::Uuid::now_v7().simple()),
        )
        .set("enable.auto.commit", "false")
        .set("queued.max.messages.kbytes", "65536")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, offset)?;
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

/// The physical limit: a plain rdkafka consumer reading the whole topic from the start with the
/// hub's fetch settings, doing nothing with the records. Returns (records, seconds from the first
/// record to the last).
pub fn raw_consume(
    brokers: &str,
    topic: &str,
    partitions: i32,
    expected: u64,
    limit: Duration,
) -> anyhow::Result<(u64, f64)> {
    let consumer = from_the_start(brokers, topic, partitions, "loadtest-raw")?;
    let deadline = Instant::now() + limit;
    let (mut count, mut bytes) = (0u64, 0usize);
    let mut first = None;
    let mut last = Instant::now();
    while count < expected && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                first.get_or_insert_with(Instant::now);
                bytes += m.payload().map_or(0, <[u8]>::len);
                count += 1;
                last = Instant::now();
            }
            Some(Err(e)) => anyhow::bail!("raw consume: {e}"),
            None => {}
        }
    }
    std::hint::black_box(bytes);
    let seconds = first.map_or(0.0, |f| (last - f).as_secs_f64());
    Ok((count, seconds))
}
