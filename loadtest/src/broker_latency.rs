//! The broker's own share of end-to-end latency, measured in the same run: a plain consumer of
//! the run's topic (a group of its own, every partition from its end when the paced phase
//! starts, the hub's fetch settings) takes each record as it comes and records producer send →
//! consumed. No hub can deliver an event before Kafka hands it to a consumer, so this is the
//! latency floor of a Kafka-fed run; and a second whose events waited here too is a stall of the
//! broker or the machine, not of the hub (issue 17: the slow seconds at 9,000/s).
//!
//! It costs a consumer's CPU on the same cores as the hub (a few percent of one core at 9,000
//! records/s), which the report says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use rdkafka::{Message, Offset};

use crate::machine::unix_ms;
use crate::tally::{sent_ms, Latencies};

/// What the plain consumer saw.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BrokerLatency {
    pub records: u64,
    /// Producer send → consumed: p50, p90, p99, p99.9, max (ms).
    pub latency_ms: [f64; 5],
    /// (unix second, worst latency in ms) of the records sent in each second.
    pub worst_by_sent_second: Vec<(i64, f64)>,
}

/// The watching consumer, running until [`BrokerWatch::finish`].
pub struct BrokerWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<Option<BrokerLatency>>>,
}

/// Starts watching `topic` from the end of each of its `partitions`.
pub fn watch(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<BrokerWatch> {
    let consumer = crate::kafka::assigned_at(
        brokers,
        topic,
        partitions,
        "loadtest-broker-latency",
        Offset::End,
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("broker-latency".into())
        .spawn(move || consume_until(&consumer, &stopping))?;
    Ok(BrokerWatch { stop, thread })
}

impl BrokerWatch {
    /// Stops the consumer and gives what it saw (none when it saw no record).
    pub fn finish(self) -> anyhow::Result<Option<BrokerLatency>> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the broker latency consumer panicked"))?
    }
}

fn consume_until(
    consumer: &BaseConsumer,
    stop: &AtomicBool,
) -> anyhow::Result<Option<BrokerLatency>> {
    let mut latencies = Latencies::new()?;
    while !stop.load(Ordering::Acquire) {
        let Some(polled) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let message = polled.map_err(|e| anyhow::anyhow!("broker latency consumer: {e}"))?;
        if let Some(sent) = message.payload().and_then(sent_ms) {
            latencies.record(sent, unix_ms());
        }
    }
    Ok(latencies.summary_ms().map(|latency_ms| BrokerLatency {
        records: latencies.len(),
        latency_ms,
        worst_by_sent_second: latencies.worst_by_sent_second(),
    }))
}
