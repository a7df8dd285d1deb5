//! The Kafka side of ingest: one consumer-group member per engine, polled on its own thread
//! (never on a shard), with the regex subscription of R-IN-1 so a new producer's topic is picked
//! up without a restart.
//!
//! The poll thread routes each record to the shard that owns its partition over a bounded
//! channel. When a shard's channel is full, the partition is paused (librdkafka stops fetching it
//! and resumes from the last record handed over), so memory stays bounded: back-pressure pauses
//! fetching instead of growing queues. While delivery is behind its bound (`delivery::backpressure`)
//! every assigned partition is paused. Shards send offsets back once their batch is durable; only
//! then are they committed (R-IN-7).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::assignment::{Assignment, Partition};
use super::partition_feed::PartitionFeed;
use super::router::shard_for;
use super::{RecordHeaders, RecordIn};
use crate::delivery::backpressure::Backpressure;

/// How soon librdkafka fetches again for a partition whose queue had reached its bound
/// (`fetch.queue.backoff.ms`; its default is 1,000).
const FETCH_QUEUE_BACKOFF_MS: u32 = 10;

/// The bytes a held fetch gathers before the broker answers it sooner than the wait
/// (`fetch.min.bytes`): ~64 records of 1 KiB, so at a low rate the wait decides, and at a rate
/// that brings that many within the wait, or over a backlog, the bytes do. Well under what one
/// partition's fetch may bring (`max.partition.fetch.bytes`, 1 MiB), so a backlog never waits.
pub const FETCH_GATHER_BYTES: u32 = 64 * 1024;

/// Lets the broker hold a fetch for up to `wait_ms` to gather [`FETCH_GATHER_BYTES`]: at a low
/// rate records then reach the shards in groups, which share the wake-ups of the consumer and
/// the shard and one ingest write and sync (issue 17). With 0 librdkafka's defaults stay: the
/// broker answers as soon as it holds one record (`fetch.min.bytes` 1).
fn gather_fetches(config: &mut ClientConfig, wait_ms: u32) {
    if wait_ms > 0 {
        config
            .set("fetch.wait.max.ms", wait_ms.to_string())
            .set("fetch.min.bytes", FETCH_GATHER_BYTES.to_string());
    }
}

/// Kafka connection settings shared by the ingest and DLQ consumers.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    pub brokers: String,
    pub group_id: String,
    /// How often librdkafka refreshes metadata, so new matching topics join the subscription.
    pub metadata_refresh_ms: u32,
    pub session_timeout_ms: u32,
    /// librdkafka's prefetch bound in KiB (`queued.max.messages.kbytes`, `fetch.max.bytes`):
    /// per partition when each shard takes its own partitions, for the whole consumer when the
    /// consumer thread routes.
    pub prefetch_kib: u32,
    /// The same bound in records (`queued.min.messages`: librdkafka fetches for a partition while
    /// its queue holds fewer records than this and fewer bytes than `prefetch_kib`).
    pub prefetch_records: u32,
    /// How long the broker may hold a fetch to gather more records (0: it answers with the
    /// first record; `HubConfig::kafka_fetch_wait_ms`).
    pub fetch_wait_ms: u32,
    /// Static membership (`group.instance.id`): a restarted engine with the same id gets its
    /// partitions back at once instead of after the session timeout.
    pub instance_id: Option<String>,
    /// Security protocol, SASL and CA.
    pub security: super::kafka_security::KafkaSecurity,
    /// The sources whose topics (and `.dlq` topics) this engine consumes.
    pub sources: super::kafka_topics::SourceSelection,
}

/// A durable position a shard reports back: everything before `next_offset` is stored.
#[derive(Debug, Clone)]
pub struct Commit {
    pub topic: String,
    pub partition: i32,
    pub next_offset: i64,
}

/// The hub's consumers, with librdkafka's client errors logged by what they mean for the hub.
pub type HubConsumer = BaseConsumer<HubContext>;

/// Logs librdkafka's client errors. A pattern subscription that matches no topic yet (a new
/// cluster, before any producer wrote) is reported by librdkafka as an error; for the hub it is
/// the normal state of an empty cluster, so it is logged at info, not error.
///
/// The ingest consumer's context also keeps `Assignment` current on every rebalance.
#[derive(Debug, Default)]
pub struct HubContext {
    assignment: Option<Arc<Assignment>>,
    /// Hands each assigned partition's own queue to its shard (`partition_feed`).
    feed: Option<PartitionFeed>,
    /// Set when an offset commit failed (reported later, for an asynchronous one): the
    /// committer sends every durable position again.
    commit_failed: AtomicBool,
    /// Partitions whose committed position stands still while records wait (the ingest
    /// consumer's; said in the log).
    stalls: Option<super::kafka_stall::StallWatch>,
}

impl rdkafka::client::ClientContext for HubContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if no_topic_yet(&error) {
            tracing::info!(reason, "no topic matches the subscription yet");
        } else {
            tracing::error!(error = %error, reason, "kafka client error");
        }
    }

    /// Every `statistics.interval.ms`: the consumer lag per partition, for `/metrics`, and
    /// partitions that stopped making progress.
    fn stats(&self, statistics: rdkafka::Statistics) {
        crate::telemetry::kafka_statistics(&statistics);
        if let Some(stalls) = &self.stalls {
            stalls.observe(&statistics, crate::clock::now_ms());
        }
    }
}

/// Logs each change of the consumer's partitions at info: when an engine makes no progress, an
/// operator first asks which partitions it holds.
impl rdkafka::consumer::ConsumerContext for HubContext {
    /// A commit that fails during a rebalance (`REBALANCE_IN_PROGRESS`) is not retried by the
    /// client; if it carried a partition's last position, nothing later would commit it. A
    /// reported failure is resent at once; the committer's timed resend covers the ones
    /// librdkafka does not report here.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &TopicPartitionList,
    ) {
        // A commit can fail for some partitions only: their errors are in the list.
        let partly = offsets.elements().iter().find_map(|e| e.error().err());
        if let Some(e) = result.err().or(partly) {
            // Expected around a rebalance (a revoked partition's position is refused too).
            tracing::info!(error = %e, "offset commit failed; the positions are sent again");
            self.commit_failed.store(true, Ordering::Release);
        }
    }

    /// Before partitions come: they count as held, and each one's queue goes to its shard,
    /// before librdkafka fetches a record of them (`partition_feed`).
    ///
    /// Before partitions go: the shards stop taking and writing them, and this waits (up to
    /// `REVOKE_WAIT`) for the writes under way, so the group hands them to the next owner only
    /// once no batch of this member still races its replay (`ingest::assignment`).
    fn pre_rebalance(
        &self,
        _consumer: &BaseConsumer<Self>,
        rebalance: &rdkafka::consumer::Rebalance<'_>,
    ) {
        let Some(assignment) = &self.assignment else {
            return;
        };
        let revoked: Vec<Partition> = match rebalance {
            rdkafka::consumer::Rebalance::Assign(list) => {
                if let Some(feed) = &self.feed {
                    let assigned: Vec<Partition> = partitions_of(list).collect();
                    assignment.add(&assigned);
                    feed.take(&assigned);
                }
                return;
            }
            rdkafka::consumer::Rebalance::Revoke(list) => partitions_of(list).collect(),
            rdkafka::consumer::Rebalance::Error(_) => return,
        };
        if let Some(feed) = &self.feed {
            feed.release(&revoked);
        }
        let started = Instant::now();
        if !assignment.revoke(&revoked, REVOKE_WAIT) {
            tracing::warn!(
                waited = ?started.elapsed(),
                "writes of revoked partitions still under way; their next owner may race them"
            );
        }
    }

    fn post_rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        rebalance: &rdkafka::consumer::Rebalance<'_>,
    ) {
        use rdkafka::consumer::Rebalance;
        if let Some(assignment) = &self.assignment {
            publish_assignment(consumer, assignment);
        }
        let named = |list: &TopicPartitionList| {
            list.elements()
                .iter()
                .map(|e| format!("{}[{}]", e.topic(), e.partition()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        match rebalance {
            Rebalance::Assign(list) => {
                tracing::info!(partitions = named(list), "partitions assigned")
            }
            Rebalance::Revoke(list) => {
                tracing::info!(partitions = named(list), "partitions revoked")
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance failed"),
        }
    }
}

/// A subscription's pattern matches no topic (yet): not a fault.
pub fn no_topic_yet(error: &rdkafka::error::KafkaError) -> bool {
    error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition)
}

/// Builds a consumer with the hub's settings: manual commits, earliest reset, cooperative
/// rebalancing so a new member does not stop every partition. `assignment`, if given, follows
/// every rebalance; `feed`, if given, hands each assigned partition to its shard. Shared
/// (`Arc`): the feed splits partition queues from it, and each queue keeps it alive.
pub fn consumer(
    settings: &KafkaSettings,
    group_suffix: &str,
    assignment: Option<Arc<Assignment>>,
    feed: Option<PartitionFeed>,
) -> rdkafka::error::KafkaResult<Arc<HubConsumer>> {
    let mut config = ClientConfig::new();
    settings.security.apply(&mut config);
    // librdkafka refuses a fetch bound under its largest message (`message.max.bytes`, ~1 MB).
    let prefetch_kib = settings.prefetch_kib.max(1024);
    if let Some(id) = &settings.instance_id {
        config.set("group.instance.id", format!("{id}{group_suffix}"));
    }
    config
        .set("bootstrap.servers", &settings.brokers)
        .set("group.id", format!("{}{group_suffix}", settings.group_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set(
            "topic.metadata.refresh.interval.ms",
            settings.metadata_refresh_ms.to_string(),
        )
        // The bound on records held for the shards: each partition's queue (the consumer's
        // one queue when the consumer thread routes), and one fetch's reply (50 MiB by default,
        // more than the queue).
        .set("queued.max.messages.kbytes", prefetch_kib.to_string())
        .set(
            "queued.min.messages",
            settings.prefetch_records.max(1).to_string(),
        )
        // A partition whose queue reached its bound is fetched again this soon after it
        // drains, not after librdkafka's default second: with a bound of a few MiB per
        // partition that second, not the hub, set the ingest rate (issue 17: 84 k against
        // 194 k records/s at 4 MiB in the same hour).
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string())
        .set(
            "fetch.max.bytes",
            (u64::from(prefetch_kib) * 1024).to_string(),
        )
        // Consumer lag per partition for `/metrics` (`HubContext::stats`).
        .set("statistics.interval.ms", "5000")
        .set(
            "session.timeout.ms",
            settings.session_timeout_ms.to_string(),
        );
    gather_fetches(&mut config, settings.fetch_wait_ms);
    let consumer: Arc<HubConsumer> = Arc::new(config.create_with_context(HubContext {
        // The ingest consumer's (the one that keeps an assignment), not the DLQ observer's.
        stalls: assignment.as_ref().map(|_| Default::default()),
        assignment,
        feed,
        commit_failed: AtomicBool::new(false),
    })?);
    // Before the first poll, where the first assignment is served.
    if let Some(feed) = &consumer.context().feed {
        feed.attach(&consumer);
    }
    Ok(consumer)
}

/// Copies a message out of librdkafka's buffers.
pub fn record_from<M: Message>(m: &M) -> RecordIn {
    record_of_topic(m, Arc::from(m.topic()))
}

/// Copies a record of `topic` (shared by the partition's records) out of the Kafka client.
pub fn record_of_topic<M: Message>(m: &M, topic: Arc<str>) -> RecordIn {
    let headers = m.headers().map_or_else(RecordHeaders::default, |hs| {
        let mut headers = RecordHeaders::with_capacity(hs.count(), HEADER_BYTES_GUESS);
        for h in hs.iter() {
            headers.push(h.key.as_bytes(), h.value);
        }
        headers
    });
    RecordIn {
        topic,
        partition: m.partition(),
        offset: m.offset(),
        headers,
        value: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
    }
}

/// Room for a CloudEvent's headers (ten or so, most values short): one allocation in most
/// records, a doubling in the rest.
const HEADER_BYTES_GUESS: usize = 512;

/// What the ingest consumer thread works with.
#[derive(Debug)]
pub struct ConsumerWork {
    /// One bounded queue per shard.
    pub shards: Vec<async_channel::Sender<RecordIn>>,
    /// Positions the shards report durable.
    pub commits: mpsc::Receiver<Commit>,
    pub stop: Arc<AtomicBool>,
    /// Set once every shard has finished its queued records after a stop.
    pub shards_done: Arc<AtomicBool>,
    /// The brokers' part of readiness (R-OP-4).
    pub health: Arc<crate::readiness::ComponentState>,
    /// How long a stop waits for the shards before the last commit.
    pub drain: Duration,
    /// How long it then waits for the consumer to leave the group (`leave_group`).
    pub leave_within: Duration,
    /// Closed while delivery is behind its bound: every assigned partition is paused.
    pub backpressure: Arc<Backpressure>,
    /// The partitions this member holds: set on every rebalance (and swept once a second).
    pub assignment: Arc<Assignment>,
}

/// The poll loop of the ingest consumer (subscribed by the caller). Runs until `stop` is set,
/// then waits up to `drain` for the shards to finish their queued records and commits what they
/// reported durable.
pub fn run_ingest_consumer(consumer: Arc<HubConsumer>, work: ConsumerWork) -> anyhow::Result<()> {
    let mut router = Router {
        consumer: &consumer,
        shards: work.shards,
        waiting: HashMap::new(),
        held_back: false,
    };
    let mut committer = Committer::new(&consumer, work.commits);
    let mut last_sweep = Instant::now();
    let mut last_check: Option<Instant> = None;
    while !work.stop.load(Ordering::Acquire) {
        if last_check.is_none_or(|t| t.elapsed() >= BROKER_CHECK_EVERY) {
            check_broker(&consumer, &work.health);
            last_check = Some(Instant::now());
        }
        committer.commit();
        let hold = work.backpressure.is_closed();
        if hold != router.held_back {
            router.hold_back(hold);
        }
        router.retry_waiting();
        let timeout = if router.waiting.is_empty() { 100 } else { 5 };
        match consumer.poll(Duration::from_millis(timeout)) {
            Some(Ok(m)) => router.route(record_from(&m)),
            Some(Err(e)) if no_topic_yet(&e) => tracing::debug!(error = %e, "no topic yet"),
            Some(Err(e)) => tracing::warn!(error = %e, "kafka consumer error"),
            None => {}
        }
        if last_sweep.elapsed() > Duration::from_secs(1) {
            // One read of the assignment for the sweep's three users.
            if let Some(owned) = assigned_partitions(&consumer) {
                router.forget_unassigned(&owned);
                committer.forget_unassigned(&owned);
                work.assignment.set(owned.into_iter().collect());
            }
            if router.held_back {
                // Partitions assigned while held back start paused too.
                router.hold_back(true);
            }
            last_sweep = Instant::now();
        }
    }
    // Graceful stop: closing the shard channels lets each shard finish its queued records; their
    // positions are committed as they become durable, the last ones with everything else.
    drop(router);
    let deadline = Instant::now() + work.drain;
    while !work.shards_done.load(Ordering::Acquire) && Instant::now() < deadline {
        committer.commit();
        std::thread::park_timeout(Duration::from_millis(50));
    }
    if !work.shards_done.load(Ordering::Acquire) {
        tracing::warn!(
            waited = ?work.drain,
            "stop: shards still writing after the drain; the partitions' next owner replays \
             what was not committed"
        );
    }
    committer.commit_everything();
    drop(committer);
    leave_group(consumer, work.leave_within, "ingest");
    Ok(())
}

/// Closes a consumer (its group learns at once that the partitions are free), waiting at most
/// `within`. librdkafka's close waits for the group coordinator and for outstanding offset
/// commits, and runs the revoke callback, which waits for writes still under way
/// (`REVOKE_WAIT`); with a stalled coordinator or store it can outlast the stop's grace (seen on
/// CI: a session timed out just before a stop, and the close never returned). So the close runs
/// on a thread of its own, and one still pending after `within` is left to the process's exit:
/// nothing is lost, the partitions' next owner replays from the last commit and dedup absorbs
/// the repeats.
pub fn leave_group<C: Send + 'static>(consumer: C, within: Duration, which: &'static str) {
    let started = Instant::now();
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let closing = std::thread::Builder::new()
        .name("hub-kafka-close".into())
        .spawn(move || {
            // The consumer's last handle's drop closes it: leaves the group, serving the close's
            // callbacks. (The shards' partition queues hold it too; they drop them as they stop.)
            drop(consumer);
            let _ = closed_tx.send(());
        });
    if let Err(e) = closing {
        tracing::warn!(error = %e, consumer = which, "no thread to close the kafka consumer");
        return;
    }
    match closed_rx.recv_timeout(within) {
        Ok(()) => {
            tracing::debug!(took = ?started.elapsed(), consumer = which, "kafka consumer left its group")
        }
        Err(_) => tracing::warn!(
            waited = ?within,
            consumer = which,
            "kafka consumer has not left its group yet; its close is left to the process's exit"
        ),
    }
}

/// Records which partitions this member owns now: shards claim only those, and delivery lanes
/// follow them (`Assignment`).
fn publish_assignment(consumer: &HubConsumer, assignment: &Assignment) {
    if let Some(partitions) = assigned_partitions(consumer) {
        assignment.set(partitions.into_iter().collect());
    }
}

/// The partitions the group assigned this member, as the client knows them now.
fn assigned_partitions(consumer: &HubConsumer) -> Option<HashSet<Partition>> {
    Some(partitions_of(&consumer.assignment().ok()?).collect())
}

/// The partitions a list names (its offsets left out).
fn partitions_of(list: &TopicPartitionList) -> impl Iterator<Item = Partition> + '_ {
    list.elements()
        .into_iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
}

/// How long a revocation waits for the revoked partitions' writes under way (a batch on a
/// loaded CQL store takes well under a second; a store that stopped answering is not waited for).
const REVOKE_WAIT: Duration = Duration::from_secs(10);

/// How often the consumer thread asks the brokers for metadata (readiness, R-OP-4).
const BROKER_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Whether the brokers answer a metadata request within a second (a down broker costs the poll
/// loop that second every `BROKER_CHECK_EVERY`, while nothing can be fetched anyway).
fn check_broker(consumer: &HubConsumer, health: &crate::readiness::ComponentState) {
    let now = crate::clock::now_ms();
    match consumer.fetch_metadata(None, Duration::from_secs(1)) {
        Ok(m) if !m.brokers().is_empty() => health.ok(now),
        Ok(_) => health.failed("the cluster named no broker", now),
        Err(e) => health.failed(&e.to_string(), now),
    }
}

/// How often reported positions are committed. Shards report after every durable batch, which
/// under a light load is hundreds of times a second; committing each one would load the group
/// coordinator for nothing (a commit that lags the store by this much only means a slightly
/// longer replay after a crash, which dedup absorbs).
const COMMIT_EVERY: Duration = Duration::from_millis(100);

/// How often every durable position of the assigned partitions is committed again, moved or
/// not. An asynchronous commit refused during a rebalance (`ILLEGAL_GENERATION` while the member
/// rejoins) is neither retried by librdkafka nor always reported to `commit_callback`; without
/// this resend a partition whose last positions were refused would stay uncommitted until its
/// next record. One small request per period per member.
const RESEND_ALL_EVERY: Duration = Duration::from_secs(5);

/// Positions shards reported durable, committed to Kafka in batches.
///
/// Every durable position is kept (not only the ones not yet sent) while the partition is
/// assigned here: after a failed commit, every `RESEND_ALL_EVERY` and at the stop all of them
/// are sent again, so a partition's last position is never left uncommitted for want of a
/// later record.
struct Committer<'c> {
    consumer: &'c HubConsumer,
    reports: mpsc::Receiver<Commit>,
    /// The highest reported next offset per partition.
    durable: HashMap<Partition, i64>,
    /// Partitions whose position moved since the last commit.
    moved: HashSet<Partition>,
    last: Instant,
    last_resend_all: Instant,
}

impl<'c> Committer<'c> {
    fn new(consumer: &'c HubConsumer, reports: mpsc::Receiver<Commit>) -> Self {
        Self {
            consumer,
            reports,
            durable: HashMap::new(),
            moved: HashSet::new(),
            last: Instant::now(),
            last_resend_all: Instant::now(),
        }
    }

    fn collect(&mut self) {
        while let Ok(c) = self.reports.try_recv() {
            let key = (c.topic, c.partition);
            let e = self.durable.entry(key.clone()).or_insert(c.next_offset);
            if c.next_offset >= *e {
                *e = c.next_offset;
                self.moved.insert(key);
            }
        }
    }

    /// Commits what moved if `COMMIT_EVERY` has passed; everything still assigned after a
    /// failed commit and every `RESEND_ALL_EVERY`.
    fn commit(&mut self) {
        self.commit_with(false);
    }

    /// The last commit of a stop: everything still assigned, at once. Asynchronous, since a
    /// synchronous commit has no time limit; the close that follows waits for it
    /// (`leave_group`).
    fn commit_everything(&mut self) {
        self.commit_with(true);
    }

    fn commit_with(&mut self, everything: bool) {
        self.collect();
        if !everything && self.last.elapsed() < COMMIT_EVERY {
            return;
        }
        let failed = self
            .consumer
            .context()
            .commit_failed
            .swap(false, Ordering::AcqRel);
        // The last commit of a stop sends everything: a failure of the one before it may not
        // have been reported yet.
        let due = self.last_resend_all.elapsed() >= RESEND_ALL_EVERY;
        if failed || due || everything {
            self.last_resend_all = Instant::now();
            // Only what is still assigned: an old position of a partition another member now
            // holds could move the group's position back.
            if let Some(owned) = assigned_partitions(self.consumer) {
                self.forget_unassigned(&owned);
            }
            self.moved.extend(self.durable.keys().cloned());
        }
        if self.moved.is_empty() {
            return;
        }
        self.last = Instant::now();
        let mut tpl = TopicPartitionList::new();
        for key in self.moved.drain() {
            let Some(next) = self.durable.get(&key) else {
                continue;
            };
            let (topic, partition) = &key;
            if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*next)) {
                tracing::warn!(error = %e, topic, partition, "bad commit position");
            }
        }
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            // Not fatal: sent again below; a partition that moved to another member is replayed
            // by it from the last commit and dedup absorbs the replay.
            tracing::info!(error = %e, "offset commit failed; the positions are sent again");
            self.consumer
                .context()
                .commit_failed
                .store(true, Ordering::Release);
        }
    }

    /// Drops positions of partitions this member no longer holds: their new owner commits them
    /// (sending an old one again could move the group's position back).
    fn forget_unassigned(&mut self, owned: &HashSet<Partition>) {
        self.durable.retain(|key, _| owned.contains(key));
        self.moved.retain(|key| owned.contains(key));
    }
}

/// Hands records to their owning shard, pausing partitions whose shard is full.
struct Router<'c> {
    consumer: &'c HubConsumer,
    shards: Vec<async_channel::Sender<RecordIn>>,
    /// Records of partitions whose shard is full, in offset order, waiting for room.
    waiting: HashMap<Partition, Waiting>,
    /// Every assigned partition is paused: delivery is behind (back-pressure).
    held_back: bool,
}

/// Records held back for a full shard. The partition is paused only once `PAUSE_AFTER` records
/// wait: pausing makes librdkafka drop what it prefetched and fetch it again on resume, so
/// pausing on every momentarily full queue would starve the shards it means to protect.
struct Waiting {
    records: VecDeque<RecordIn>,
    paused: bool,
}

/// Records held per partition before its fetching is paused (bounds memory: at most this many
/// per partition, plus what librdkafka has prefetched).
const PAUSE_AFTER: usize = 4096;

impl Router<'_> {
    fn route(&mut self, record: RecordIn) {
        let key = (record.topic.to_string(), record.partition);
        if let Some(queue) = self.waiting.get_mut(&key) {
            queue.records.push_back(record);
            if !queue.paused && queue.records.len() >= PAUSE_AFTER {
                queue.paused = true;
                self.pause(&key, true);
            }
            return;
        }
        let shard = shard_for(&record.topic, record.partition, self.shards.len());
        if let Err(async_channel::TrySendError::Full(record)) = self.shards[shard].try_send(record)
        {
            self.waiting.insert(
                key,
                Waiting {
                    records: VecDeque::from([record]),
                    paused: false,
                },
            );
        }
    }

    fn retry_waiting(&mut self) {
        let mut drained = Vec::new();
        for (key, queue) in &mut self.waiting {
            let shard = shard_for(&key.0, key.1, self.shards.len());
            while let Some(record) = queue.records.pop_front() {
                if let Err(async_channel::TrySendError::Full(record)) =
                    self.shards[shard].try_send(record)
                {
                    queue.records.push_front(record);
                    break;
                }
            }
            if queue.records.is_empty() {
                drained.push((key.clone(), queue.paused));
            }
        }
        for (key, paused) in drained {
            self.waiting.remove(&key);
            // Held back, the partition stays paused until the gate opens.
            if paused && !self.held_back {
                self.pause(&key, false);
            }
        }
    }

    /// Drops waiting records of partitions this member no longer owns: their new owner
    /// replays them from the last commit.
    fn forget_unassigned(&mut self, owned: &HashSet<Partition>) {
        self.waiting.retain(|key, _| owned.contains(key));
    }

    /// Pauses every assigned partition, or resumes those not paused for a full shard.
    fn hold_back(&mut self, hold: bool) {
        self.held_back = hold;
        let Ok(assigned) = self.consumer.assignment() else {
            return;
        };
        let mut tpl = TopicPartitionList::new();
        for e in assigned.elements() {
            let key = (e.topic().to_owned(), e.partition());
            if hold || !self.waiting.get(&key).is_some_and(|w| w.paused) {
                tpl.add_partition(e.topic(), e.partition());
            }
        }
        if tpl.count() == 0 {
            return;
        }
        let result = if hold {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, hold, "pausing for back-pressure failed");
        }
    }

    fn pause(&self, key: &Partition, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&key.0, key.1);
        let result = if pause {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, topic = key.0, partition = key.1, pause, "pause/resume failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_3_a_fetch_wait_lets_the_broker_hold_a_fetch_and_none_keeps_its_defaults() {
        let mut held = ClientConfig::new();
        gather_fetches(&mut held, 10);
        assert_eq!(held.get("fetch.wait.max.ms"), Some("10"));
        assert_eq!(held.get("fetch.min.bytes"), Some("65536"));

        let mut at_once = ClientConfig::new();
        gather_fetches(&mut at_once, 0);
        assert_eq!(
            at_once.get("fetch.wait.max.ms"),
            None,
            "librdkafka's default"
        );
        assert_eq!(
            at_once.get("fetch.min.bytes"),
            None,
            "one byte: the first record"
        );
    }
}
