//! The broker's own share of end-to-end latency, measured in the same run: a plain consumer of
//! the run's topic (a group of its own, every partition from its end when the paced phase
//! starts, the hub's fetch settings) takes each record as it comes and records producer send →
//! consumed. No hub can deliver an event before Kafka hands it to a consumer, so this is the
//! latency floor of a Kafka-fed run; and a second whose events waited here too is a stall of the
//! broker or the machine, not of the hub (issue 17: the slow seconds at 9,000/s).
//!
//! It costs a consumer's CPU on the same cores as the hub (a few percent of one core at 9,000
//! records/s), which the report says.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use rdkafka::consumer::BaseConsumer;
use rdkafka::{Message, Offset};

use crate::machine::unix_ms;
use crate::tally::sent_ms;

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
    let mut latency_us = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let mut worst: BTreeMap<i64, u64> = BTreeMap::new();
    while !stop.load(Ordering::Acquire) {
        let Some(polled) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let message = polled.map_err(|e| anyhow::anyhow!("broker latency consumer: {e}"))?;
        let Some(sent) = message.payload().and_then(sent_ms) else {
            continue;
        };
        // Clocks of one machine; a millisecond's resolution, floored at one microsecond.
        let waited_us = u64::try_from(unix_ms() - sent).unwrap_or(0).max(1) * 1000;
        latency_us.saturating_record(waited_us);
        let second = worst.entry(sent.div_euclid(1000)).or_default();
        *second = (*second).max(waited_us);
    }
    if latency_us.is_empty() {
        return Ok(None);
    }
    let q = |p: f64| latency_us.value_at_quantile(p) as f64 / 1000.0;
    Ok(Some(BrokerLatency {
        records: latency_us.len(),
        latency_ms: [
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            latency_us.max() as f64 / 1000.0,
        ],
        worst_by_sent_second: worst
            .into_iter()
            .map(|(s, us)| (s, us as f64 / 1000.0))
            .collect(),
    }))
}
