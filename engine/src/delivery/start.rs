//! Starting delivery in an engine: the follower of the control plane's revision log (on tokio),
//! one wake-up channel, one hand-off channel and one lane per shard, and the routing ingest uses
//! to write jobs.

use std::sync::Arc;
use std::time::Duration;

use super::autodisable::Policy;
use super::backpressure::Backpressure;
use super::control_link::ControlLink;
use super::lane::{DeliveryCounters, DeliveryLane, LaneConfig, LEASE_AHEAD};
use super::ownership::{Numbering, Ownership};
use crate::config::{HubConfig, StoreKind};
use crate::ingest::jobs::{FreshLeases, HandOver, Handoff, JobRouting};
use crate::matching::follow::{follow, listen_for_changes, LocalSubscriptions, Subscriptions};
use crate::runtime::{Stop, TokioBridge};
use crate::store::Store;

/// A shard's lane and the routing its ingest stage writes jobs with.
#[derive(Debug)]
pub struct ShardLane {
    pub lane: DeliveryLane,
    pub routing: JobRouting,
}

/// Delivery of one engine, before its shards start.
#[derive(Debug)]
pub struct Delivery {
    /// `None` when delivery does not run on this store.
    pub routing: Option<JobRouting>,
    pub counters: Arc<DeliveryCounters>,
    wakes: Vec<async_channel::Receiver<()>>,
    handoffs: Vec<async_channel::Receiver<Handoff>>,
    shards: usize,
    control: Arc<ControlLink>,
    marks: super::marks::MarkWriter,
    /// The task writing what `marks` gathers; it ends once every lane's writer is gone.
    marks_written: tokio::task::JoinHandle<()>,
    lane: LaneConfig,
    stop: Stop,
    /// The gate lanes report their lag to and ingest reads.
    pub backpressure: Arc<Backpressure>,
    /// Which lanes each shard pages (the Kafka consumer publishes its assignment there).
    pub ownership: Arc<Ownership>,
}

impl Delivery {
    /// Starts following subscriptions and prepares one lane per shard.
    pub fn start(
        config: &HubConfig,
        control: &Arc<ControlLink>,
        shards: usize,
        store: &Arc<dyn Store>,
        tokio: &tokio::runtime::Runtime,
        stop: Stop,
    ) -> anyhow::Result<Self> {
        let counters = Arc::new(DeliveryCounters::default());
        let lane = LaneConfig {
            workers: config.delivery_workers.max(1),
            recovery_limit: config.recovery_limit.max(1),
            // Between 10 ms and `MAX_DELIVERY_POLL_MS` (`HubConfig::validate`).
            poll: Duration::from_millis(config.delivery_poll_ms),
            breaker: super::breaker::BreakerConfig {
                cool_down_ms: config.breaker_cool_down_ms.max(1),
                ..Default::default()
            },
            autodisable: autodisable_policy(config),
            webhooks_on_shard: config.webhooks_on_shards,
            // A CQL step takes tens of milliseconds (several round trips to a busy server), an
            // embedded one about one fsync: lease more rounds ahead so workers never wait on it.
            lease_ahead: match config.store {
                StoreKind::Cql => 4 * LEASE_AHEAD,
                StoreKind::Embedded => LEASE_AHEAD,
            },
            ..LaneConfig::default()
        };
        let backpressure = Arc::new(Backpressure::new(config.backpressure(), shards));
        crate::telemetry::METRICS.backpressure_bounds(&backpressure.bounds);
        let subs = Arc::new(Subscriptions::default());
        // The index is loaded before any shard ingests: an event ingested right after a restart
        // must match the subscriptions that existed before it, or its jobs would be lost.
        tokio
            .block_on(subs.catch_up(&*control.store))
            .map_err(|e| anyhow::anyhow!("loading subscriptions: {e}"))?;
        subs.report_missing_keys(&control.keyring);
        let pushed = Arc::new(tokio::sync::Notify::new());
        tokio.spawn(follow(
            subs.clone(),
            control.store.clone(),
            Duration::from_millis(config.follow_ms.max(10)),
            pushed.clone(),
            stop.clone(),
        ));
        if let Some(url) = &config.control_url {
            tokio.spawn(listen_for_changes(url.clone(), pushed, stop.clone()));
        }
        tokio.spawn(auto_probe(
            subs.clone(),
            control.prober.clone(),
            stop.clone(),
        ));
        let (marks, writing_marks) = super::marks::MarkWriter::new(control.store.clone());
        let marks_written = tokio.spawn(writing_marks);
        let (senders, wakes): (Vec<_>, Vec<_>) = (0..shards.max(1))
            .map(|_| async_channel::bounded(1))
            .unzip();
        let (handing, handoffs): (Vec<_>, Vec<_>) = (0..shards.max(1))
            .map(|_| async_channel::unbounded())
            .unzip();
        let fresh = Arc::new(FreshLeases::new(
            shards,
            lane.lease_ms,
            (lane.workers * lane.lease_ahead) as usize,
        ));
        // Engines on one CQL keyspace share delivery as the consumer group shares partitions;
        // without a group (one process, or HTTP ingest alone) a lane is a shard.
        let numbering = match (&config.store, &config.kafka_brokers) {
            (StoreKind::Cql, Some(_)) => Numbering::ByPartition,
            _ => Numbering::ByShard,
        };
        let ownership = Arc::new(Ownership::new(numbering, shards));
        Ok(Self {
            routing: Some(JobRouting {
                subs,
                ownership: ownership.clone(),
                wakes: senders,
                handoffs: handing,
                hand_over: match config.store {
                    StoreKind::Embedded => HandOver::Always,
                    StoreKind::Cql => HandOver::WhileHeld(store.clone()),
                },
                fresh,
            }),
            counters,
            wakes,
            handoffs,
            shards,
            control: control.clone(),
            marks,
            marks_written,
            lane,
            stop,
            backpressure,
            ownership,
        })
    }

    /// Writes the delivery timestamps still gathered (R-CP-2) once the lanes are gone, waiting
    /// at most `within`: a graceful stop keeps the last second's marks.
    pub fn write_last_marks(self, tokio: &tokio::runtime::Runtime, within: Duration) {
        let Self {
            marks,
            marks_written,
            ..
        } = self;
        drop(marks);
        let written = tokio.block_on(async { tokio::time::timeout(within, marks_written).await });
        if written.is_err() {
            tracing::info!("stop: delivery timestamps not written within the grace were dropped");
        }
    }

    /// Starts the survey of stray lanes when lanes are partitions (`ownership`).
    pub fn survey_strays(&self, store: &Arc<dyn Store>, tokio: &tokio::runtime::Runtime) {
        if self.routing.is_some() && self.ownership.numbering() == Numbering::ByPartition {
            tokio.spawn(super::strays::survey(
                self.ownership.clone(),
                store.clone(),
                self.stop.clone(),
            ));
        }
    }

    /// Starts the back-pressure watcher when a bound is on.
    pub fn watch_backpressure(&self, store: &Arc<dyn Store>, tokio: &tokio::runtime::Runtime) {
        if self.routing.is_some() && self.backpressure.bounds.any() {
            tokio.spawn(super::backpressure::watch(
                self.backpressure.clone(),
                store.clone(),
                self.stop.clone(),
            ));
        }
    }

    /// The auto-disable policy lanes apply (health reports it).
    #[must_use]
    pub fn autodisable(&self) -> Policy {
        self.lane.autodisable
    }

    /// One lane per shard (`None` for every shard when delivery is off).
    pub fn lanes(&self, store: &Arc<dyn Store>, bridge: &TokioBridge) -> Vec<Option<ShardLane>> {
        let Some(routing) = &self.routing else {
            return (0..self.shards.max(1)).map(|_| None).collect();
        };
        self.wakes
            .iter()
            .zip(&self.handoffs)
            .enumerate()
            .map(|(i, (wake, handoff))| {
                Some(ShardLane {
                    lane: DeliveryLane {
                        config: self.lane.clone(),
                        ownership: self.ownership.clone(),
                        store: store.clone(),
                        bridge: bridge.clone(),
                        subs: LocalSubscriptions::new(routing.subs.clone()),
                        control: self.control.clone(),
                        marks: self.marks.clone(),
                        counters: self.counters.clone(),
                        wake: wake.clone(),
                        handoff: handoff.clone(),
                        fresh: routing.fresh.clone(),
                        stop: self.stop.flag(),
                        backpressure: self.backpressure.clone(),
                        shard: i,
                    },
                    routing: routing.clone(),
                })
            })
            .collect()
    }
}

/// Probes pending webhooks automatically (R-CP-5): about a minute after creation, then at a
/// doubling interval capped at an hour, until one succeeds or the subscription is paused.
/// Probes due at once per round: a slow or silent destination (up to its timeout) must not hold
/// back the others' probes.
const PROBES_AT_ONCE: usize = 16;

async fn auto_probe(
    subs: Arc<Subscriptions>,
    prober: Arc<dyn hub_core::in_process::AutoProbe>,
    stop: Stop,
) {
    use futures::StreamExt;
    while !stop.is_set() {
        let now = crate::clock::now_ms();
        let probes: Vec<_> = subs
            .all()
            .into_iter()
            .map(|sub| {
                let prober = prober.clone();
                async move { prober.auto_probe(&sub, now).await }
            })
            .collect();
        futures::stream::iter(probes)
            .buffer_unordered(PROBES_AT_ONCE)
            .for_each(|_| async {})
            .await;
        stop.sleep(Duration::from_secs(5)).await;
    }
}

/// The auto-disable policy of `config` (R-DI-10): what lanes apply and health reports.
pub fn autodisable_policy(config: &HubConfig) -> Policy {
    Policy {
        enabled: config.autodisable_enabled,
        window_ms: config.autodisable_window_ms,
        min_spread_ms: config.autodisable_min_spread_ms,
    }
}
