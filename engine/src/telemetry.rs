//! Metric names in one place (STYLE §9) and their Prometheus text rendering.

use std::fmt::Write;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::verdict::{QuarantineReason, VerdictSnapshot};

/// Records per outcome of ingest, each record counted once: `stored` (accepted and new),
/// `deduplicated` (accepted, already stored), `dropped_system`, `quarantined` (every reason).
pub const INGEST_VERDICTS: &str = "streaming_hub_ingest_verdicts_total";
/// Quarantined records per reason code.
pub const INGEST_QUARANTINED: &str = "streaming_hub_ingest_quarantined_total";

/// Renders the summed ingest counters in the Prometheus text format.
/// Store write time per phase, as counters a scrape can turn into rates and shares.
pub fn render_store_timings(phases: &[crate::store::timings::PhaseTotal]) -> String {
    let mut out = String::new();
    if phases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP {STORE_PHASE_NANOS} Wall time spent in each phase of the store's batch writes."
    );
    let _ = writeln!(out, "# TYPE {STORE_PHASE_NANOS} counter");
    for p in phases {
        let _ = writeln!(
            out,
            "{STORE_PHASE_NANOS}{{phase=\"{}\"}} {}",
            p.phase, p.nanos
        );
    }
    let _ = writeln!(
        out,
        "# HELP {STORE_PHASE_COUNT} Batch writes that went through each phase."
    );
    let _ = writeln!(out, "# TYPE {STORE_PHASE_COUNT} counter");
    for p in phases {
        let _ = writeln!(
            out,
            "{STORE_PHASE_COUNT}{{phase=\"{}\"}} {}",
            p.phase, p.count
        );
    }
    out
}

const STORE_PHASE_NANOS: &str = "streaming_hub_store_write_phase_nanoseconds_total";
const STORE_PHASE_COUNT: &str = "streaming_hub_store_write_phase_total";

pub fn render_ingest(s: &VerdictSnapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {INGEST_VERDICTS} Ingested records per verdict."
    );
    let _ = writeln!(out, "# TYPE {INGEST_VERDICTS} counter");
    for (verdict, n) in [
        ("stored", s.accepted.saturating_sub(s.deduplicated)),
        ("deduplicated", s.deduplicated),
        ("dropped_system", s.dropped_system),
        ("quarantined", s.quarantined.iter().sum()),
    ] {
        let _ = writeln!(out, "{INGEST_VERDICTS}{{verdict=\"{verdict}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP {INGEST_QUARANTINED} Quarantined records per reason."
    );
    let _ = writeln!(out, "# TYPE {INGEST_QUARANTINED} counter");
    for (code, n) in QuarantineReason::CODES.iter().zip(s.quarantined) {
        let _ = writeln!(out, "{INGEST_QUARANTINED}{{reason=\"{code}\"}} {n}");
    }
    out
}

/// Delivery outcomes per kind (`delivered`, `failed_attempt`, `dead_lettered`, `deferred`,
/// `cancelled`, `auto_disabled`).
pub const DELIVERY_OUTCOMES: &str = "streaming_hub_delivery_outcomes_total";
/// Jobs waiting in the store (due or not).
pub const DELIVERY_PENDING: &str = "streaming_hub_delivery_pending_jobs";

pub fn render_delivery(c: &crate::delivery::lane::DeliveryCounters) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {DELIVERY_OUTCOMES} Delivery outcomes per kind."
    );
    let _ = writeln!(out, "# TYPE {DELIVERY_OUTCOMES} counter");
    for (kind, n) in [
        ("delivered", &c.delivered),
        ("failed_attempt", &c.failed_attempts),
        ("dead_lettered", &c.dead_lettered),
        ("deferred", &c.deferred),
        ("cancelled", &c.cancelled),
        ("auto_disabled", &c.auto_disabled),
    ] {
        let _ = writeln!(
            out,
            "{DELIVERY_OUTCOMES}{{outcome=\"{kind}\"}} {}",
            n.load(Relaxed)
        );
    }
    out
}

/// Store calls that failed and are retried, per stage (`ingest_batch`, `delivery_page`,
/// `delivery_step`): nothing is lost while the store is away, but nothing moves either, and the
/// log's warnings are not a number an alert can watch.
pub const STORE_FAILURES: &str = "streaming_hub_store_failures_total";

/// The stages a store failure is counted under.
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

pub fn render_store_failures() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {STORE_FAILURES} Store calls that failed (and are retried) per stage."
    );
    let _ = writeln!(out, "# TYPE {STORE_FAILURES} counter");
    for stage in FailedStage::ALL {
        let n = STORE_FAILED[stage as usize].load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(out, "{STORE_FAILURES}{{stage=\"{}\"}} {n}", stage.label());
    }
    out
}

pub fn render_pending(pending: u64) -> String {
    format!(
        "# HELP {DELIVERY_PENDING} Jobs waiting in the store.\n# TYPE {DELIVERY_PENDING} gauge\n{DELIVERY_PENDING} {pending}\n"
    )
}

/// Whether each component of readiness answered (R-OP-4): 1 up, 0 down.
pub const COMPONENT_UP: &str = "streaming_hub_component_up";

pub fn render_components(components: &[crate::readiness::Component]) -> String {
    let mut out = format!(
        "# HELP {COMPONENT_UP} Whether a component of readiness is up (1) or down (0).\n# TYPE {COMPONENT_UP} gauge\n"
    );
    for c in components {
        out.push_str(&format!(
            "{COMPONENT_UP}{{component=\"{}\"}} {}\n",
            c.name,
            u8::from(c.is_up())
        ));
    }
    out
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
    /// `streaming_hub_store_write_seconds{stage}`: each store write phase's wall time.
    pub store_write_seconds: Family<StageLabel, Histogram, fn() -> Histogram>,
    /// `streaming_hub_delivery_breakers_open`: destinations whose circuit breaker is open or
    /// half-open (R-DI-9).
    pub breakers_open: Gauge,
    /// `streaming_hub_kafka_consumer_lag{topic,partition}`: records behind the partition's end,
    /// as librdkafka last reported (every 5 s).
    pub consumer_lag: Family<PartitionLabels, Gauge>,
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
        Self {
            registry,
            attempt_seconds,
            delivered_latency_seconds,
            failed_attempts,
            store_write_seconds,
            breakers_open,
            consumer_lag,
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
    pub sink: hub_core::model::SinkKind,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub outcome: &'a hub_core::sink::outcome::Outcome,
    pub received_at_ms: i64,
}

impl AttemptSettled<'_> {
    pub fn emit(&self, now_ms: i64) {
        let sink = self.sink.as_str();
        let outcome = self.outcome;
        METRICS
            .attempt_seconds
            .get_or_create(&SinkLabel { sink })
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
            METRICS
                .delivered_latency_seconds
                .get_or_create(&LatencyLabels {
                    sink,
                    since: "produced",
                })
                .observe(age(produced_ms));
        }
        METRICS
            .delivered_latency_seconds
            .get_or_create(&LatencyLabels {
                sink,
                since: "received",
            })
            .observe(age(self.received_at_ms));
    }
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
        let prefix = format!("{STORE_FAILURES}{{stage=\"{stage}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse().ok())
            .expect("the stage's line")
    }

    #[test]
    fn store_failures_are_counted_per_stage() {
        let before = render_store_failures();
        store_failed(FailedStage::DeliveryStep);
        store_failed(FailedStage::DeliveryStep);
        let after = render_store_failures();
        // Other tests of this process may count too: at least ours.
        assert!(
            count_of(&after, "delivery_step") >= count_of(&before, "delivery_step") + 2,
            "{after}"
        );
        for stage in ["ingest_batch", "delivery_page"] {
            count_of(&after, stage);
        }
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
        let text = [
            render_ingest(&VerdictSnapshot::default()),
            render_delivery(&crate::delivery::lane::DeliveryCounters::default()),
            render_store_failures(),
            render_pending(0),
            render_components(&[]),
            hub_core::listener::render_metrics("streaming_hub"),
            hub_core::listener::render_metrics("hub_control"),
            METRICS.render(),
        ]
        .concat();
        let mut exposed = families(&text);
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
