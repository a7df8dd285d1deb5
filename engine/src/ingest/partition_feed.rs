//! Each shard takes its own partitions' records from librdkafka (issue 17, "Kafka per shard"), so
//! no thread of ours copies every record and hands it on: a record goes from librdkafka's broker
//! thread straight to the shard that owns its partition.
//!
//! At every assignment, before librdkafka starts fetching the new partitions, the consumer
//! thread's rebalance callback splits each one's queue out of the consumer's (`PartitionFeed::
//! take`) and sends it to its shard. librdkafka marks a queue split by the application, so a
//! later assignment does not forward it back: none of its records ever sits in the consumer's
//! queue, and a partition's records reach its shard in offset order through one queue. A split
//! queue wakes its shard when it goes from empty to non-empty (librdkafka's queue callback, on
//! its broker thread); the shard polls its queues without blocking (`ShardQueues`).
//!
//! The consumer thread keeps the group's work: rebalances, offset commits, pausing for
//! back-pressure, statistics, and any record a split could not take (it routes those as before).
//! A full shard simply stops polling: librdkafka stops fetching once its prefetch bound is
//! reached, so memory stays bounded without pausing.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::select;
use rdkafka::consumer::base_consumer::PartitionQueue;

use super::assignment::Partition;
use super::kafka::{record_of_topic, HubConsumer, HubContext};
use super::router::shard_for;
use super::RecordIn;

/// What the consumer thread tells a shard about its partitions.
enum FeedChange {
    /// A partition newly assigned, with its own queue.
    Take(Partition, PartitionQueue<HubContext>),
    /// A partition revoked: its remaining records are the next owner's to replay.
    Release(Partition),
}

/// The consumer thread's end: splits assigned partitions and sends each to its shard.
pub struct PartitionFeed {
    /// Set once the consumer exists (the feed lives in the consumer's own context).
    consumer: OnceLock<Weak<HubConsumer>>,
    shards: Vec<ToShard>,
}

struct ToShard {
    changes: async_channel::Sender<FeedChange>,
    wake: async_channel::Sender<()>,
}

impl fmt::Debug for PartitionFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionFeed")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl PartitionFeed {
    /// A feed for `shards` shards, and each shard's end.
    #[must_use]
    pub fn new(shards: usize) -> (Self, Vec<ShardQueues>) {
        let (ends, queues) = (0..shards)
            .map(|_| {
                let (changes_tx, changes) = async_channel::unbounded();
                // One pending wake is enough: the shard polls every queue it has when it wakes.
                let (wake_tx, wake) = async_channel::bounded(1);
                let end = ToShard {
                    changes: changes_tx,
                    wake: wake_tx,
                };
                let queues = ShardQueues {
                    changes,
                    wake,
                    queues: Vec::new(),
                    next: 0,
                };
                (end, queues)
            })
            .unzip();
        let feed = Self {
            consumer: OnceLock::new(),
            shards: ends,
        };
        (feed, queues)
    }

    /// Gives the feed its consumer (weakly: the feed lives inside it). Before the first poll.
    pub fn attach(&self, consumer: &Arc<HubConsumer>) {
        let _ = self.consumer.set(Arc::downgrade(consumer));
    }

    /// Splits each partition about to be assigned and sends its queue to its shard. A partition
    /// that cannot be split stays on the consumer's queue, which the consumer thread routes.
    pub fn take(&self, partitions: &[Partition]) {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else {
            return;
        };
        for (topic, partition) in partitions {
            let Some(mut queue) = consumer.split_partition_queue(topic, *partition) else {
                tracing::warn!(
                    topic,
                    partition,
                    "could not split the partition's queue; the consumer thread routes its records"
                );
                continue;
            };
            let end = &self.shards[shard_for(topic, *partition, self.shards.len())];
            let wake = end.wake.clone();
            queue.set_nonempty_callback(move || {
                // Full means a wake is already pending.
                let _ = wake.try_send(());
            });
            // Refused only once the shard has stopped; the queue is then simply dropped.
            let _ = end
                .changes
                .try_send(FeedChange::Take((topic.clone(), *partition), queue));
            let _ = end.wake.try_send(());
        }
    }

    /// Tells each revoked partition's shard to stop taking its records.
    pub fn release(&self, partitions: &[Partition]) {
        for (topic, partition) in partitions {
            let end = &self.shards[shard_for(topic, *partition, self.shards.len())];
            let _ = end
                .changes
                .try_send(FeedChange::Release((topic.clone(), *partition)));
            let _ = end.wake.try_send(());
        }
    }
}

/// A shard's end: the queues of the partitions it owns.
pub struct ShardQueues {
    changes: async_channel::Receiver<FeedChange>,
    wake: async_channel::Receiver<()>,
    /// Each partition, its topic's name shared by its records, and its queue.
    queues: Vec<(Partition, Arc<str>, PartitionQueue<HubContext>)>,
    /// The queue the next take starts with, so that one partition's backlog does not make the
    /// shard's other partitions wait pass after pass.
    next: usize,
}

impl fmt::Debug for ShardQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardQueues")
            .field("partitions", &self.queues.len())
            .finish_non_exhaustive()
    }
}

/// The longest a shard sleeps with no wake (a safety net: every record arriving wakes it).
const IDLE_WAIT: Duration = Duration::from_secs(1);

impl ShardQueues {
    /// Moves records from the shard's queues into `pass` until it holds `max` or every queue is
    /// empty, taking the queues in turn from a different one each time.
    pub fn take(&mut self, pass: &mut Vec<RecordIn>, max: usize) {
        self.follow_changes();
        let n = self.queues.len();
        for i in 0..n {
            let (partition, topic, queue) = &self.queues[(self.next + i) % n];
            while pass.len() < max {
                match queue.poll(Duration::ZERO) {
                    Some(Ok(m)) => pass.push(record_of_topic(&m, topic.clone())),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, topic = partition.0, partition = partition.1, "kafka partition error");
                        break;
                    }
                    None => break,
                }
            }
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
    }

    /// Waits until a queue may have records or a partition came or went (each change comes with
    /// a wake), or `IDLE_WAIT` passed.
    pub async fn wait(&self) {
        let _ = select(
            Box::pin(self.wake.recv()),
            Box::pin(crate::runtime::shard_sleep(IDLE_WAIT)),
        )
        .await;
    }

    /// Applies the partitions taken and released since the last look, in order.
    fn follow_changes(&mut self) {
        while let Ok(change) = self.changes.try_recv() {
            match change {
                FeedChange::Take(partition, queue) => {
                    self.queues.retain(|(p, ..)| *p != partition);
                    let topic = Arc::from(partition.0.as_str());
                    self.queues.push((partition, topic, queue));
                }
                FeedChange::Release(partition) => self.queues.retain(|(p, ..)| *p != partition),
            }
        }
    }

    /// At the shard's stop: drops every queue, and those still on their way, so the consumer
    /// (which each queue keeps alive) can close and leave the group.
    pub fn close(&mut self) {
        self.changes.close();
        while self.changes.try_recv().is_ok() {}
        self.queues.clear();
    }
}
