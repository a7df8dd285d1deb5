//! The producer of hub events, polled only while it has something in flight.
//!
//! rdkafka's `FutureProducer` polls its client on a thread of its own every 100 ms for the life
//! of the process, and each of those polls spins for the last fraction of a millisecond of its
//! timeout (rdkafka 0.39 rounds what remains down to whole milliseconds, so the last call waits
//! for nothing and is repeated until the deadline): about 1 % of a core on an idle hub, measured
//! with `perf` (`clock_gettime` under `Deadline::elapsed`), for a producer that sends a handful of
//! events a day. This one is polled while a delivery report is due and otherwise looks at its
//! client once every [`IDLE_POLL`] (errors and statistics wait there for it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientConfig;
use tokio::sync::oneshot;

/// How often an idle publisher serves its client's events (errors, statistics).
pub const IDLE_POLL: Duration = Duration::from_secs(1);

/// How long one poll waits while a delivery report is due.
const BUSY_POLL: Duration = Duration::from_millis(100);

/// Hands each delivery report to the send that waits for it.
#[derive(Debug)]
pub struct Reports;

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<oneshot::Sender<KafkaResult<()>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, waiting: Self::DeliveryOpaque) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone());
        // The send gave up waiting (its caller went away): nobody to tell.
        let _ = waiting.send(outcome);
    }
}

/// A Kafka producer whose delivery reports are served by a thread that sleeps while none is due.
/// Cheap to clone; the thread stops once the last clone is dropped.
#[derive(Clone)]
pub struct Publisher {
    shared: Arc<Shared>,
}

struct Shared {
    producer: Arc<BaseProducer<Reports>>,
    poller: Arc<Poller>,
    thread: Thread,
}

/// What the polling thread and the handles share.
#[derive(Default)]
struct Poller {
    stop: AtomicBool,
    /// Rounds of the polling loop, for the test that it sleeps.
    rounds: AtomicU64,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("in_flight", &self.shared.producer.in_flight_count())
            .finish()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.poller.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// One record to publish: topic, key, payload, headers.
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub payload: &'a [u8],
    pub headers: rdkafka::message::OwnedHeaders,
}

impl Publisher {
    /// A producer configured by `config`, and its polling thread.
    pub fn new(config: &ClientConfig) -> anyhow::Result<Self> {
        let producer: Arc<BaseProducer<Reports>> = Arc::new(config.create_with_context(Reports)?);
        let poller = Arc::new(Poller::default());
        let thread = crate::runtime::spawn_beside_shards("hub-publish", {
            let producer = producer.clone();
            let poller = poller.clone();
            move || serve_reports(&producer, &poller)
        })?
        .thread()
        .clone();
        Ok(Self {
            shared: Arc::new(Shared {
                producer,
                poller,
                thread,
            }),
        })
    }

    /// Publishes `record` and waits for the broker's acknowledgement (or the producer's
    /// `message.timeout.ms`).
    pub async fn send(&self, record: Outgoing<'_>) -> KafkaResult<()> {
        let (acknowledged, acknowledgement) = oneshot::channel();
        let base = BaseRecord::with_opaque_to(record.topic, Box::new(acknowledged))
            .key(record.key)
            .payload(record.payload)
            .headers(record.headers);
        self.shared.producer.send(base).map_err(|(e, _)| e)?;
        self.shared.thread.unpark();
        acknowledgement.await.unwrap_or(Err(KafkaError::Canceled))
    }
}

/// Polls `producer` while anything is in flight, and every [`IDLE_POLL`] otherwise, until told
/// to stop.
fn serve_reports(producer: &BaseProducer<Reports>, poller: &Poller) {
    while !poller.stop.load(Ordering::Acquire) {
        poller.rounds.fetch_add(1, Ordering::Relaxed);
        if producer.in_flight_count() > 0 {
            producer.poll(BUSY_POLL);
        } else {
            producer.poll(Duration::ZERO);
            // A send between the count and here leaves an unpark, so this returns at once.
            std::thread::park_timeout(IDLE_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With nothing to send the thread sleeps between its looks at the client instead of
    /// polling in a loop (rdkafka's own thread polls ten times a second and spins in each).
    #[test]
    #[allow(clippy::disallowed_methods)] // a plain test thread, not a shard
    fn r_cp_5_an_idle_hub_event_publisher_sleeps() {
        let mut config = ClientConfig::new();
        // Nothing listens here; the client only tries to connect in the background.
        config.set("bootstrap.servers", "127.0.0.1:1");
        let publisher = Publisher::new(&config).expect("producer");
        std::thread::sleep(IDLE_POLL / 2);
        let rounds = publisher.shared.poller.rounds.load(Ordering::Relaxed);
        assert!(
            rounds <= 2,
            "{rounds} polling rounds in half an idle period"
        );
    }
}
