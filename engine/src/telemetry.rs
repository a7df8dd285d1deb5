//! Every metric, named in one place (STYLE §9), through `prometheus-client`: the figures a
//! scrape reads from the engine's counters (`Scrape`, a collector) and the process-wide registry
//! of histograms and labelled families (`METRICS`).

use hub_core::model::SinkKind;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::verdict::{QuarantineReason, VerdictSnapshot};

/// Store calls that failed and are retried, per stage (`ingest_batch`, `delivery_page`,
/// `delivery_step`): nothing is lost while the store is away, but nothing moves either, and the
/// log's warnings are not a number an alert can watch.
#[derive(Debug, Clone, Copy)]
pub enum FailedStage {
    IngestBatch,
    DeliveryPage,
    DeliveryStep,
}

impl FailedStage {
    const ALL: [FailedStage; 3] = [Self::IngestBatch, Self::DeliveryPage, Self::DeliveryStep];

    fn label(self) -> &'static str {
        match self {
            Self::IngestBatch => "ingest_batch",
            Self::DeliveryPage => "delivery_page",
            Self::DeliveryStep => "delivery_step",
        }
    }
}

/// Process-wide: every shard and lane counts into it, and there is one store per process.
static STORE_FAILED: [std::sync::atomic::AtomicU64; 3] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 3];

/// Counts one failed store call of `stage`.
pub fn store_failed(stage: FailedStage) {
    STORE_FAILED[stage as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// What a scrape reads from the engine's own counters and states, exposed through the library
/// as constant metrics (a collector) under `streaming_hub_`:
///
/// - `ingest_verdicts_total{verdict}`: records per verdict, each counted once — `stored`
///   (accepted and new), `deduplicated` (accepted, already stored), `dropped_system`,
///   `quarantined` (every reason);
/// - `ingest_quarantined_total{reason}`: quarantined records per reason code;
/// - `store_write_phase_nanoseconds_total{phase}`, `store_write_phase_total{phase}`: wall time
///   and batch writes per phase of the store's writes;
/// - `delivery_outcomes_total{outcome}`: `delivered`, `failed_attempt`, `dead_lettered`,
///   `deferred`, `cancelled`, `auto_disabled`;
/// - `store_failures_total{stage}`: store calls that failed and are retried;
/// - `delivery_pending_jobs`: jobs waiting in the store (absent when the store did not answer);
/// - `component_up{component}`: readiness per component (R-OP-4), 1 up, 0 down;
/// - `http_connections_refused_total`: connections a full listener closed at once;
/// - with lanes numbered by partition (issue 18), per lane this engine pages:
///   `delivery_lane_held{lane,shard,how,topic,partition}` (1 while its hold is this engine's) and
///   `delivery_lane_pending_jobs{…}`, and `ownership_assignment_changes` (the consumer lag per
///   partition is `kafka_consumer_lag`).
#[derive(Debug, Default)]
pub struct Scrape {
    pub verdicts: VerdictSnapshot,
    pub phases: Vec<crate::store::timings::PhaseTotal>,
    /// A CQL store's requests by statement (empty for other stores).
    pub cql_requests: Vec<crate::store::CqlRequests>,
    pub outcomes: Vec<(&'static str, u64)>,
    pub pending: Option<u64>,
    pub components: Vec<(&'static str, bool)>,
    /// The lanes this engine pages, as its ownership report shows them (empty by shard).
    pub lanes: Vec<hub_core::ownership::LaneOwnership>,
    pub assignment_changes: Option<u64>,
}

impl Scrape {
    /// The delivery counters as outcome pairs.
    pub fn outcomes_of(c: &crate::delivery::lane::DeliveryCounters) -> Vec<(&'static str, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        vec![
            ("delivered", c.delivered.load(Relaxed)),
            ("failed_attempt", c.failed_attempts.load(Relaxed)),
            ("dead_lettered", c.dead_lettered.load(Relaxed)),
            ("deferred", c.deferred.load(Relaxed)),
            ("cancelled", c.cancelled.load(Relaxed)),
            ("auto_disabled", c.auto_disabled.load(Relaxed)),
        ]
    }

    /// Everything `/metrics` shows: these figures, then the process's registry (`METRICS`).
    pub fn render(self) -> String {
        let mut registry = Registry::with_prefix("streaming_hub");
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        // One `# EOF`, at the very end.
        let mut out = out.trim_end().trim_end_matches("# EOF").to_owned();
        out.push_str(&METRICS.render());
        out
    }
}

/// One unlabelled metric.
fn one(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    metric: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let kind = metric.metric_type();
    metric.encode(encoder.encode_descriptor(name, help, None, kind)?)
}

/// A counter per label value under one name.
fn counters(
    encoder: &mut DescriptorEncoder,
    (name, help, label): (&str, &str, &str),
    values: impl IntoIterator<Item = (&'static str, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in values {
        let labels = [(label, value)];
        ConstCounter::new(n).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let v = &self.verdicts;
        let verdicts = [
            ("stored", v.accepted.saturating_sub(v.deduplicated)),
            ("deduplicated", v.deduplicated),
            ("dropped_system", v.dropped_system),
            ("quarantined", v.quarantined.iter().sum()),
        ];
        let e = &mut encoder;
        counters(
            e,
            ("ingest_verdicts", "Ingested records per verdict", "verdict"),
            verdicts,
        )?;
        let reasons = QuarantineReason::CODES.iter().copied().zip(v.quarantined);
        counters(
            e,
            (
                "ingest_quarantined",
                "Quarantined records per reason",
                "reason",
            ),
            reasons,
        )?;
        if !self.phases.is_empty() {
            let nanos = self.phases.iter().map(|p| (p.phase, p.nanos));
            let help = "Wall time spent in each phase of the store's batch writes";
            counters(e, ("store_write_phase_nanoseconds", help, "phase"), nanos)?;
            let counts = self.phases.iter().map(|p| (p.phase, p.count));
            let help = "Batch writes that went through each phase";
            counters(e, ("store_write_phase", help, "phase"), counts)?;
        }
        self.encode_cql_requests(e)?;
        let outcomes = self.outcomes.iter().copied();
        counters(
            e,
            ("delivery_outcomes", "Delivery outcomes per kind", "outcome"),
            outcomes,
        )?;
        let failures = FailedStage::ALL.map(|s| {
            let n = STORE_FAILED[s as usize].load(std::sync::atomic::Ordering::Relaxed);
            (s.label(), n)
        });
        let help = "Store calls that failed (and are retried) per stage";
        counters(e, ("store_failures", help, "stage"), failures)?;
        if let Some(pending) = self.pending {
            let gauge = ConstGauge::new(i64::try_from(pending).unwrap_or(i64::MAX));
            one(
                e,
                ("delivery_pending_jobs", "Jobs waiting in the store"),
                gauge,
            )?;
        }
        let help = "Whether a component of readiness is up (1) or down (0)";
        let mut up = e.encode_descriptor("component_up", help, None, MetricType::Gauge)?;
        for (component, is_up) in &self.components {
            let labels = [("component", *component)];
            ConstGauge::new(i64::from(*is_up)).encode(up.encode_family(&labels)?)?;
        }
        let refused = ConstCounter::new(hub_core::listener::refused_connections());
        let help = "Connections closed at once because the listener was full";
        one(e, ("http_connections_refused", help), refused)?;
        self.encode_lanes(e)
    }
}

impl Scrape {
    /// A CQL store's requests and Paxos rounds by statement.
    fn encode_cql_requests(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.cql_requests.is_empty() {
            return Ok(());
        }
        let help = "CQL requests the store sent, per statement (verb and table)";
        let mut requests =
            e.encode_descriptor("store_cql_requests", help, None, MetricType::Counter)?;
        for r in &self.cql_requests {
            let labels = [("statement", r.statement.as_str())];
            ConstCounter::new(r.requests).encode(requests.encode_family(&labels)?)?;
        }
        let help = "CQL requests that were Paxos rounds (conditional writes, serial reads)";
        let mut paxos =
            e.encode_descriptor("store_cql_paxos_rounds", help, None, MetricType::Counter)?;
        for r in self.cql_requests.iter().filter(|r| r.paxos > 0) {
            let labels = [("statement", r.statement.as_str())];
            ConstCounter::new(r.paxos).encode(paxos.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// The operator view of `/admin/ownership` as gauges (issue 18).
    fn encode_lanes(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(changes) = self.assignment_changes {
            let help = "Changes of this engine's partition assignment seen since its start";
            one(
                e,
                ("ownership_assignment_changes", help),
                ConstCounter::new(changes),
            )?;
        }
        if self.lanes.is_empty() {
            return Ok(());
        }
        let labels: Vec<[(&str, String); 5]> = self
            .lanes
            .iter()
            .map(|l| {
                [
                    ("lane", l.lane.to_string()),
                    ("shard", l.shard.to_string()),
                    ("how", l.how.clone()),
                    ("topic", l.topic.clone().unwrap_or_default()),
                    (
                        "partition",
                        l.partition.map(|p| p.to_string()).unwrap_or_default(),
                    ),
                ]
            })
            .collect();
        let help = "Whether this engine holds the lane's hold in the store (1) or waits for it (0)";
        let mut held = e.encode_descriptor("delivery_lane_held", help, None, MetricType::Gauge)?;
        for (l, lane) in labels.iter().zip(&self.lanes) {
            ConstGauge::new(i64::from(lane.held_here)).encode(held.encode_family(l)?)?;
        }
        let help = "Jobs waiting in the lane";
        let mut pending =
            e.encode_descriptor("delivery_lane_pending_jobs", help, None, MetricType::Gauge)?;
        for (l, lane) in labels.iter().zip(&self.lanes) {
            if let Some(n) = lane.pending {
                ConstGauge::new(n).encode(pending.encode_family(l)?)?;
            }
        }
        Ok(())
    }
}

/// The figures kept by `prometheus-client` (histograms, per-label families), registered under
/// `streaming_hub_`: attempt duration per sink kind, producer→delivery latency, store write
/// time per stage, failed attempts by class, open breakers, Kafka consumer lag per partition.
/// One process-wide registry, written from the shards and read by a scrape.
pub struct Metrics {
    registry: Registry,
    /// `streaming_hub_delivery_attempt_seconds{sink}`: one attempt, send to classified answer.
    pub attempt_seconds: Family<SinkLabel, Histogram, fn() -> Histogram>,
    /// `streaming_hub_delivery_latency_seconds{sink,since}`: a delivered event's age when its
    /// destination took it — `since="produced"` from the producer's UUIDv7 time,
    /// `since="received"` from the hub's receipt.
    pub delivered_latency_seconds: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    /// `streaming_hub_delivery_failed_attempts_total{sink,class}`: failures by error class.
    pub failed_attempts: Family<FailureLabels, Counter>,
    /// Each sink kind's three histograms of a settled attempt, taken from their families the
    /// first time that kind settles one, so an attempt observes them without a family's lock
    /// and hash lookup each (issue 17: three per delivered event).
    settled_by_sink: [std::sync::OnceLock<SettledHistograms>; SinkKind::ALL.len()],
    /// `streaming_hub_store_write_seconds{stage}`: each store write phase's wall time.
    pub store_write_seconds: Family<StageLabel, Histogram, fn() -> Histogram>,
    /// `streaming_hub_delivery_breakers_open`: destinations whose circuit breaker is open or
    /// half-open (R-DI-9).
    pub breakers_open: Gauge,
    /// `streaming_hub_kafka_consumer_lag{topic,partition}`: records behind the partition's end,
    /// as librdkafka last reported (every 5 s).
    pub consumer_lag: Family<PartitionLabels, Gauge>,
    /// `streaming_hub_store_expired_total{kind}`: rows removed by retention (R-OP-5) — `event`,
    /// `dedup_mark`, `quarantined`, `dlq_observation`, `dead_letter` (on CQL the server's TTLs
    /// remove rows, and these stay 0).
    pub store_expired: Family<KindLabel, Counter>,
    /// `streaming_hub_ingest_backpressure`: 1 while ingest holds back because delivery is
    /// behind its bound (Kafka partitions paused, HTTP ingest answering 429), else 0.
    pub ingest_backpressure: Gauge,
    /// `streaming_hub_ingest_backpressure_pauses_total`: times ingest started holding back.
    pub ingest_backpressure_pauses: Counter,
    /// `streaming_hub_ingest_throttled_total`: HTTP ingest requests answered 429 while held back.
    pub ingest_throttled: Counter,
    /// `streaming_hub_delivery_lag_seconds`: how late the worst shard's freshest attempts of
    /// the last second started (see `delivery::backpressure`).
    pub delivery_lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// `streaming_hub_ingest_backpressure_bound{kind}`: the operator's bounds —
    /// `delivery_lag_seconds`, `pending_jobs`, `max_pause_seconds` (0: that bound is off).
    pub backpressure_bound: Family<KindLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// `streaming_hub_shard_wakes_total`: wakes the shard watcher sent a shard that might have
    /// been asleep with work (`runtime::nudge`): a rate well above a few a second per shard
    /// while idle says glommio's parking bug is being worked around often.
    pub shard_wakes: Counter,
    /// `streaming_hub_shard_interrupts_total`: of those, wakes by a signal, sent when a wake
    /// through the shard's channel stayed untaken (the shard parked again before taking it).
    pub shard_interrupts: Counter,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabel {
    pub sink: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub sink: &'static str,
    pub since: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub sink: &'static str,
    pub class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    pub stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: String,
}

/// 1 ms to ~33 s: an attempt or a store write.
fn short_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// 5 ms to ~11 min: an event's age at delivery, retries included.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("streaming_hub");
        let attempt_seconds = Family::new_with_constructor(short_buckets as fn() -> Histogram);
        let delivered_latency_seconds =
            Family::new_with_constructor(latency_buckets as fn() -> Histogram);
        let failed_attempts = Family::default();
        let store_write_seconds = Family::new_with_constructor(short_buckets as fn() -> Histogram);
        let breakers_open = Gauge::default();
        let consumer_lag = Family::default();
        let store_expired = Family::default();
        let ingest_backpressure = Gauge::default();
        let ingest_backpressure_pauses = Counter::default();
        let ingest_throttled = Counter::default();
        let delivery_lag_seconds = Gauge::default();
        let backpressure_bound = Family::default();
        let shard_wakes = Counter::default();
        registry.register(
            "shard_wakes",
            "Wakes sent from outside to a shard that might be asleep with work",
            shard_wakes.clone(),
        );
        let shard_interrupts = Counter::default();
        registry.register(
            "shard_interrupts",
            "Wakes by a signal, sent when a shard left a wake through its channel untaken",
            shard_interrupts.clone(),
        );
        registry.register(
            "ingest_backpressure",
            "1 while ingest holds back because delivery is behind its bound",
            ingest_backpressure.clone(),
        );
        registry.register(
            "ingest_backpressure_pauses",
            "Times ingest started holding back because delivery was behind",
            ingest_backpressure_pauses.clone(),
        );
        registry.register(
            "ingest_throttled",
            "HTTP ingest requests answered 429 while ingest held back",
            ingest_throttled.clone(),
        );
        registry.register(
            "delivery_lag_seconds",
            "How late the worst shard's freshest attempts of the last second started",
            delivery_lag_seconds.clone(),
        );
        registry.register(
            "ingest_backpressure_bound",
            "The bounds past which ingest holds back (0: off)",
            backpressure_bound.clone(),
        );
        registry.register(
            "delivery_attempt_seconds",
            "One delivery attempt's duration, per sink kind",
            attempt_seconds.clone(),
        );
        registry.register(
            "delivery_latency_seconds",
            "A delivered event's age when its destination took it, since produced or received",
            delivered_latency_seconds.clone(),
        );
        registry.register(
            "delivery_failed_attempts",
            "Failed delivery attempts per sink kind and error class",
            failed_attempts.clone(),
        );
        registry.register(
            "store_write_seconds",
            "Store write time per stage",
            store_write_seconds.clone(),
        );
        registry.register(
            "delivery_breakers_open",
            "Destinations whose circuit breaker is open or half-open",
            breakers_open.clone(),
        );
        registry.register(
            "kafka_consumer_lag",
            "Records behind each consumed partition's end",
            consumer_lag.clone(),
        );
        registry.register(
            "store_expired",
            "Rows removed by retention, per kind",
            store_expired.clone(),
        );
        Self {
            registry,
            attempt_seconds,
            delivered_latency_seconds,
            failed_attempts,
            settled_by_sink: Default::default(),
            store_write_seconds,
            breakers_open,
            consumer_lag,
            store_expired,
            ingest_backpressure,
            ingest_backpressure_pauses,
            ingest_throttled,
            delivery_lag_seconds,
            backpressure_bound,
            shard_wakes,
            shard_interrupts,
        }
    }

    /// Shows the operator's back-pressure bounds.
    pub fn backpressure_bounds(&self, bounds: &crate::delivery::backpressure::Bounds) {
        for (kind, value) in [
            ("delivery_lag_seconds", bounds.lag_ms as f64 / 1000.0),
            ("pending_jobs", bounds.pending_jobs as f64),
            ("max_pause_seconds", bounds.max_pause_ms as f64 / 1000.0),
        ] {
            self.backpressure_bound
                .get_or_create(&KindLabel { kind })
                .set(value);
        }
    }

    /// Counts what a retention pass removed.
    pub fn expired(&self, e: &crate::store::Expired) {
        for (kind, n) in [
            ("event", e.events),
            ("dedup_mark", e.dedup_marks),
            ("quarantined", e.quarantined),
            ("dlq_observation", e.dlq_observations),
            ("dead_letter", e.dead_letters),
        ] {
            self.store_expired
                .get_or_create(&KindLabel { kind })
                .inc_by(n);
        }
    }

    /// The registry in the Prometheus text format (ends with `# EOF`: render it last).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The process's metrics.
pub static METRICS: std::sync::LazyLock<Metrics> = std::sync::LazyLock::new(Metrics::new);

/// A settled delivery attempt (STYLE §9: one typed event gives the log line and the metrics).
/// The log line names tenant, subscription and event; the metrics record the attempt's
/// duration, and the failure's class or the delivered event's age (since the producer stamped
/// its UUIDv7 id, and since the hub received it).
#[derive(Debug)]
pub struct AttemptSettled<'a> {
    pub tenant: &'a str,
    pub subscription: uuid::Uuid,
    pub event_id: uuid::Uuid,
    pub sink: SinkKind,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub outcome: &'a hub_core::sink::outcome::Outcome,
    pub received_at_ms: i64,
}

/// The histograms a settled attempt of one sink kind observes.
#[derive(Debug)]
struct SettledHistograms {
    attempt_seconds: Histogram,
    since_produced: Histogram,
    since_received: Histogram,
}

impl Metrics {
    fn settled(&self, sink: SinkKind) -> &SettledHistograms {
        self.settled_by_sink[sink as usize].get_or_init(|| {
            let sink = sink.as_str();
            let since = |since| {
                (self.delivered_latency_seconds)
                    .get_or_create(&LatencyLabels { sink, since })
                    .clone()
            };
            SettledHistograms {
                attempt_seconds: self
                    .attempt_seconds
                    .get_or_create(&SinkLabel { sink })
                    .clone(),
                since_produced: since("produced"),
                since_received: since("received"),
            }
        })
    }
}

impl AttemptSettled<'_> {
    pub fn emit(&self, now_ms: i64) {
        let sink = self.sink.as_str();
        let outcome = self.outcome;
        let histograms = METRICS.settled(self.sink);
        histograms
            .attempt_seconds
            .observe(outcome.duration_ms as f64 / 1000.0);
        // Per attempt at debug: a broken destination fails thousands of times; the rates are on
        // `/metrics`, dead letters are logged at info.
        tracing::debug!(
            tenant = self.tenant,
            subscription = %self.subscription,
            event = %self.event_id,
            sink,
            attempt = self.attempt,
            took_ms = outcome.duration_ms,
            class = outcome.error_class.map(|c| c.as_str()),
            status = outcome.status_code,
            "{}",
            if outcome.success { "delivered" } else { "delivery attempt failed" }
        );
        if let Some(class) = outcome.error_class {
            METRICS
                .failed_attempts
                .get_or_create(&FailureLabels {
                    sink,
                    class: class.as_str(),
                })
                .inc();
            return;
        }
        let age = |since_ms: i64| (now_ms - since_ms).max(0) as f64 / 1000.0;
        if let Some(produced_ms) = self.event_id.get_timestamp().map(|t| {
            let (s, n) = t.to_unix();
            i64::try_from(s).unwrap_or(0) * 1000 + i64::from(n / 1_000_000)
        }) {
            histograms.since_produced.observe(age(produced_ms));
        }
        histograms.since_received.observe(age(self.received_at_ms));
    }
}

/// A partition's consumer lag as librdkafka last reported it (the ownership report).
pub fn consumer_lag(topic: &str, partition: i32) -> Option<i64> {
    let labels = PartitionLabels {
        topic: topic.to_owned(),
        partition: partition.to_string(),
    };
    METRICS.consumer_lag.get(&labels).map(|g| g.get())
}

/// librdkafka's statistics: each assigned partition's consumer lag (`-1`, unknown, is dropped).
pub fn kafka_statistics(stats: &rdkafka::Statistics) {
    for (topic, t) in &stats.topics {
        for (partition, p) in &t.partitions {
            if *partition < 0 {
                continue; // librdkafka's internal "unassigned" partition
            }
            let labels = PartitionLabels {
                topic: topic.clone(),
                partition: partition.to_string(),
            };
            if p.consumer_lag >= 0 {
                METRICS
                    .consumer_lag
                    .get_or_create(&labels)
                    .set(p.consumer_lag);
            } else {
                METRICS.consumer_lag.remove(&labels);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_of(text: &str, stage: &str) -> u64 {
        let prefix = format!("streaming_hub_store_failures_total{{stage=\"{stage}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse().ok())
            .expect("the stage's line")
    }

    #[test]
    fn store_failures_are_counted_per_stage() {
        let before = Scrape::default().render();
        store_failed(FailedStage::DeliveryStep);
        store_failed(FailedStage::DeliveryStep);
        let after = Scrape::default().render();
        // Other tests of this process may count too: at least ours.
        assert!(
            count_of(&after, "delivery_step") >= count_of(&before, "delivery_step") + 2,
            "{after}"
        );
        for stage in ["ingest_batch", "delivery_page"] {
            count_of(&after, stage);
        }
    }

    /// The scraped figures keep their names and labels, and the text has one `# EOF`, last.
    #[test]
    fn r_op_3_scraped_figures_render_with_their_names() {
        let text = Scrape {
            verdicts: VerdictSnapshot {
                accepted: 10,
                deduplicated: 3,
                ..VerdictSnapshot::default()
            },
            phases: vec![crate::store::timings::PhaseTotal {
                phase: "append",
                count: 2,
                nanos: 500,
            }],
            cql_requests: vec![crate::store::CqlRequests {
                statement: "update units if".into(),
                requests: 9,
                paxos: 9,
            }],
            outcomes: vec![("delivered", 7)],
            pending: Some(4),
            components: vec![("store", true), ("kafka", false)],
            lanes: vec![hub_core::ownership::LaneOwnership {
                lane: 65538,
                shard: 1,
                how: "assigned".into(),
                topic: Some("lerian.streaming.lender".into()),
                partition: Some(2),
                adopted_at_ms: None,
                lag: Some(0),
                holder: None,
                held_until_ms: None,
                held_here: true,
                pending: Some(5),
            }],
            assignment_changes: Some(3),
        }
        .render();
        for line in [
            "streaming_hub_ingest_verdicts_total{verdict=\"stored\"} 7",
            "streaming_hub_ingest_verdicts_total{verdict=\"deduplicated\"} 3",
            "streaming_hub_store_write_phase_nanoseconds_total{phase=\"append\"} 500",
            "streaming_hub_store_write_phase_total{phase=\"append\"} 2",
            "streaming_hub_store_cql_requests_total{statement=\"update units if\"} 9",
            "streaming_hub_store_cql_paxos_rounds_total{statement=\"update units if\"} 9",
            "streaming_hub_delivery_outcomes_total{outcome=\"delivered\"} 7",
            "streaming_hub_delivery_pending_jobs 4",
            "streaming_hub_component_up{component=\"store\"} 1",
            "streaming_hub_component_up{component=\"kafka\"} 0",
            "streaming_hub_ownership_assignment_changes_total 3",
            "streaming_hub_delivery_lane_held{lane=\"65538\",shard=\"1\",how=\"assigned\",topic=\"lerian.streaming.lender\",partition=\"2\"} 1",
            "streaming_hub_delivery_lane_pending_jobs{lane=\"65538\",shard=\"1\",how=\"assigned\",topic=\"lerian.streaming.lender\",partition=\"2\"} 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.trim_end().ends_with("# EOF"));
    }

    /// Every metric family named in Prometheus text: `# TYPE` lines and samples.
    fn families(text: &str) -> std::collections::HashSet<String> {
        text.lines()
            .filter_map(|l| match l.strip_prefix("# TYPE ") {
                Some(typed) => typed.split_whitespace().next(),
                None if l.starts_with('#') => None,
                None => l.split(['{', ' ']).next(),
            })
            .map(str::to_owned)
            .collect()
    }

    /// R-OP-3 (issue 16): the Grafana dashboard is built from what the processes expose — every
    /// metric it queries is a family the engine or the control process renders.
    #[test]
    fn r_op_3_the_dashboard_queries_only_exposed_metrics() {
        // Touch every labelled family so the library renders it.
        let delivered =
            hub_core::sink::outcome::Outcome::delivered(Some(204), std::time::Duration::ZERO);
        AttemptSettled {
            tenant: "t",
            subscription: uuid::Uuid::now_v7(),
            event_id: uuid::Uuid::now_v7(),
            sink: hub_core::model::SinkKind::Webhook,
            attempt: 1,
            outcome: &delivered,
            received_at_ms: 0,
        }
        .emit(1);
        METRICS
            .failed_attempts
            .get_or_create(&FailureLabels {
                sink: "webhook",
                class: "timeout",
            })
            .inc_by(0);
        METRICS
            .store_write_seconds
            .get_or_create(&StageLabel { stage: "append" })
            .observe(0.0);
        METRICS
            .consumer_lag
            .get_or_create(&PartitionLabels {
                topic: "t".into(),
                partition: "0".into(),
            })
            .set(0);
        let scrape = Scrape {
            phases: vec![crate::store::timings::PhaseTotal {
                phase: "append",
                count: 0,
                nanos: 0,
            }],
            outcomes: Scrape::outcomes_of(&crate::delivery::lane::DeliveryCounters::default()),
            pending: Some(0),
            components: vec![("store", true)],
            ..Scrape::default()
        };
        let text = scrape.render();
        let mut exposed = families(&text);
        // The control process's own (`hub_control::ops`).
        exposed.insert("hub_control_http_connections_refused_total".to_owned());
        exposed.extend([
            "hub_control_answers_total".to_owned(),
            "hub_control_component_up".to_owned(),
        ]);
        let dashboard = include_str!("../../deploy/grafana/streaming-hub.json");
        let doc: serde_json::Value = serde_json::from_str(dashboard).expect("dashboard JSON");
        let mut queried = 0;
        for panel in doc["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().expect("targets") {
                let expr = target["expr"].as_str().expect("expr");
                for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if !(word.starts_with("streaming_hub_") || word.starts_with("hub_control_")) {
                        continue;
                    }
                    let family = ["_bucket", "_count", "_sum"]
                        .iter()
                        .find_map(|s| word.strip_suffix(s))
                        .unwrap_or(word);
                    assert!(
                        exposed.contains(word) || exposed.contains(family),
                        "the dashboard queries {word}, which nothing exposes"
                    );
                    queried += 1;
                }
            }
        }
        assert!(queried >= 15, "the dashboard's queries were read");
    }
}
