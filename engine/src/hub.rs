//! Wires the standalone hub in data-flow order: store → HTTP ingest and operator API → Kafka
//! consumer → shards (verdict, durable unit, offset report) → offset commit; plus the DLQ
//! observer. This is the one place the stages and their bounded queues are connected.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Context;
use hub_core::auth::TokenVerifier;
use hub_core::catalog::Catalog;
use hub_core::in_process::{LocalIndexSlot, ReaderSlot};

use crate::api::{router, ApiState};
use crate::config::{HubConfig, StoreKind};
use crate::delivery::control_link::ControlLink;
use crate::delivery::start::{Delivery, ShardLane as DeliveryLane};
use crate::ingest::assignment::Assignment;
use crate::ingest::http::HttpIngest;
use crate::ingest::kafka::{consumer, run_ingest_consumer, ConsumerWork, KafkaSettings};
use crate::ingest::partition_feed::{PartitionFeed, ShardQueues};
use crate::ingest::shard::{ShardIngest, ShardRouting};
use crate::ingest::{dlq, KeyObserver, Observers, RecordIn, StoreKeyObserver};
use crate::readiness::{ComponentState, Readiness};
use crate::runtime::{build_tokio_runtime_beside_shards, spawn_shards, ShardConfig, TokioBridge};
use crate::store::choice::{embedded_format, open_embedded};
use crate::store::cql::{CqlSettings, CqlStore};
use crate::store::Store;
use crate::verdict::{VerdictCounters, VerdictLimits};

/// The CQL store's settings from the hub's configuration.
pub fn cql_settings(config: &HubConfig) -> CqlSettings {
    CqlSettings {
        nodes: config.cql_node_list(),
        access: config.cql_access.clone(),
        keyspace: config.cql_keyspace.clone(),
        replication: config.cql_replication.clone(),
        dedup_ttl_s: config.dedup_window_s,
        retention_ttl_s: config.retention_s,
        forensics_ttl_s: config.forensics_retention_s,
        unit_advance_every: Duration::from_millis(u64::from(config.cql_unit_advance_ms)),
        pass_interval: Duration::from_millis(u64::from(config.cql_ingest_linger_ms)),
        ..CqlSettings::default()
    }
}

/// The opened store, and on CQL the same store as itself (for what only CQL has: the relay).
type Opened = (Arc<dyn Store>, Option<Arc<CqlStore>>);

/// Opens the configured store: the embedded file under `data_dir`, or the CQL cluster.
fn open_store(config: &HubConfig, tokio: &tokio::runtime::Runtime) -> anyhow::Result<Opened> {
    match config.store {
        StoreKind::Embedded => {
            let (dir, chosen) = (&config.data_dir, config.embedded_format);
            let format = embedded_format(dir, chosen);
            let store = open_embedded(dir, chosen, config.retention())
                .with_context(|| format!("opening the embedded store in {}", dir.display()))?;
            tracing::info!(dir = %dir.display(), ?format, "embedded store open");
            Ok((store, None))
        }
        StoreKind::Cql => {
            let store = tokio
                .block_on(CqlStore::connect(cql_settings(config)))
                .with_context(|| format!("connecting to CQL at {}", config.cql_nodes))?;
            tracing::info!(nodes = %config.cql_nodes, keyspace = %config.cql_keyspace, "cql store open");
            let store = Arc::new(store);
            Ok((store.clone(), Some(store)))
        }
    }
}

/// The control plane a standalone hub serves in its own process, as the engine takes it: what
/// delivery needs of it, its routes (all of `/v1` over REST, GraphQL and gRPC) for the shared
/// listener, and the places where it reads the engine back. The process that runs both builds it
/// (the engine never depends on the control plane's crate).
#[derive(Debug)]
pub struct InProcessControl {
    pub link: ControlLink,
    pub routes: axum::Router,
    /// Access Manager's tokens, checked on the engine's own routes too (ingest, admin).
    pub verifier: Arc<TokenVerifier>,
    /// The catalog of event keys the control plane serves, fed by what ingest observes.
    pub catalog: Arc<Catalog>,
    /// Where the control plane reads what the engine holds (pull, dead letters, health).
    pub reader: ReaderSlot,
    /// Where the control plane waits for the engine's index to have its writes.
    pub local_index: LocalIndexSlot,
}

/// Runs the standalone hub on the configured store until SIGINT or SIGTERM, with the control
/// plane `make_control` builds on the hub's tokio runtime once the store is open.
pub fn run_standalone(
    config: HubConfig,
    make_control: impl FnOnce(&tokio::runtime::Runtime) -> anyhow::Result<InProcessControl>,
) -> anyhow::Result<()> {
    let tokio = build_tokio_runtime_beside_shards(2)?;
    let stopped = stop_signal(&tokio);
    let (store, cql) = open_store(&config, &tokio)?;
    let limits = VerdictLimits {
        max_value_bytes: config.max_value_bytes,
        max_header_bytes: config.max_header_bytes,
    };
    let shards = if config.shards == 0 {
        ShardConfig::default().shards
    } else {
        config.shards
    };
    let shard_counters: Vec<Arc<VerdictCounters>> = (0..shards).map(|_| Arc::default()).collect();
    let http_counters: Arc<VerdictCounters> = Arc::default();

    let mut all_counters = shard_counters.clone();
    all_counters.push(http_counters.clone());

    // The control plane in-process (R-OP-1 standalone): REST /v1 on the same listener, its
    // embedded control store and generated key material in the same data directory.
    let InProcessControl {
        link,
        routes: control,
        verifier: operators,
        catalog: in_process,
        reader: control_reader,
        local_index,
    } = make_control(&tokio)?;
    let link = Arc::new(link);
    let in_process: Arc<dyn KeyObserver> = in_process;
    let catalog: Arc<dyn KeyObserver> = match config.store {
        StoreKind::Embedded => in_process,
        // Also for control planes in other processes, which read keys from the store.
        StoreKind::Cql => Arc::new(Observers(vec![
            in_process,
            Arc::new(StoreKeyObserver {
                store: store.clone(),
                tokio: tokio.handle().clone(),
                seen: Arc::default(),
            }),
        ])),
    };
    let stop = crate::runtime::Stop::default();
    if let Some(cql) = cql {
        // Outcomes of subscriptions a control process elsewhere watches, through the store.
        tokio.spawn(crate::store::cql::relay::run_relay(
            cql,
            link.outcomes.clone(),
            stop.clone(),
        ));
    }
    tokio.spawn(crate::store::expiry::run(
        store.clone(),
        Duration::from_millis(config.retention_pass_ms),
        stop.clone(),
    ));
    let delivery = Delivery::start(&config, &link, shards, &store, &tokio, stop.clone())?;
    delivery.watch_backpressure(&store, &tokio);
    delivery.survey_strays(&store, &tokio);
    let reporter = crate::delivery::ownership_report::Reporter {
        ownership: delivery.ownership.clone(),
        store: store.clone(),
        instance: config.kafka_instance_id.clone(),
    };
    tokio.spawn(reporter.clone().publish(stop.clone()));
    let shards_done = Arc::new(AtomicBool::new(false));
    let shards_started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let kafka_state = config
        .kafka_brokers
        .as_ref()
        .map(|_| Arc::new(ComponentState::default()));
    let api = Arc::new(ApiState {
        store: store.clone(),
        counters: all_counters,
        delivery: delivery.counters.clone(),
        reporter: reporter.clone(),
        readiness: Readiness {
            store: store.clone(),
            store_state: ComponentState::default(),
            kafka: kafka_state.clone(),
            subscriptions: delivery.routing.as_ref().map(|r| r.subs.clone()),
            shards,
            shards_started: shards_started.clone(),
            shards_done: shards_done.clone(),
        },
    });
    let _ = control_reader.set(Arc::new(crate::reader::StoreReader {
        store: store.clone(),
        control: link.store.clone(),
        autodisable: delivery.autodisable(),
        keyring: link.keyring.clone(),
        relay: None,
    }));
    let http = Arc::new(HttpIngest {
        store: store.clone(),
        counters: http_counters,
        limits,
        observer: Some(catalog.clone()),
        routing: delivery.routing.clone(),
        producers: config.http_ingest_on().then(|| operators.clone()),
        backpressure: delivery.backpressure.clone(),
    });
    if let Some(routing) = &delivery.routing {
        let _ = local_index.set(Arc::new(crate::matching::follow::InProcess {
            subs: routing.subs.clone(),
            store: link.store.clone(),
        }));
    }
    let _ = link
        .events
        .set(Arc::new(crate::delivery::hub_events::PipelineEvents {
            store: store.clone(),
            routing: delivery.routing.clone(),
            tokio: tokio.handle().clone(),
            kafka: crate::delivery::hub_events::configured_producer(&config)?,
        }));
    let listener = tokio
        .block_on(tokio::net::TcpListener::bind(config.http_addr))
        .with_context(|| format!("binding {}", config.http_addr))?;
    tracing::info!(addr = %listener.local_addr()?, "http ingest and admin listening");
    let listener_limits = config.listener_limits();
    let listener_tls = {
        let _runtime = tokio.enter(); // the certificate watcher runs on it
        config.listener_tls()?
    };
    let server = {
        let stop = stop.clone();
        tokio.spawn(async move {
            let app = router(api, http, operators)
                .merge(control)
                .layer(axum::middleware::from_fn(hub_core::error::limit_headers))
                .layer(axum::middleware::map_response(hub_core::error::json_errors));
            let shutdown = async move { stop.said().await };
            hub_core::listener::serve(listener, app, listener_limits, listener_tls, shutdown).await
        })
    };

    let bridge = TokioBridge::new(tokio.handle().clone());
    let (record_senders, record_receivers): (Vec<_>, Vec<_>) = (0..shards)
        .map(|_| async_channel::bounded::<RecordIn>(config.shard_queue))
        .unzip();
    let (commit_tx, commit_rx) = mpsc::channel();
    let kafka_on = config.kafka_brokers.is_some();
    let (feed, shard_queues) = if kafka_on && config.kafka_partitions_on_shards {
        let (feed, queues) = PartitionFeed::new(shards);
        (Some(feed), Some(queues))
    } else {
        (None, None)
    };
    let assignment = Arc::new(Assignment::new(delivery.ownership.clone()));
    let mut threads = vec![start_shards(
        &config,
        ShardWork {
            store: store.clone(),
            bridge: bridge.clone(),
            counters: shard_counters,
            limits,
            commits: commit_tx,
            observer: catalog,
            records: kafka_on.then_some(record_receivers),
            queues: shard_queues,
            assignment: assignment.clone(),
            lanes: delivery.lanes(&store, &bridge),
        },
        shards,
        (shards_started, shards_done.clone()),
    )?];
    if let Some(brokers) = &config.kafka_brokers {
        let settings = KafkaSettings {
            brokers: brokers.clone(),
            group_id: config.kafka_group.clone(),
            metadata_refresh_ms: config.kafka_metadata_refresh_ms,
            prefetch_kib: config.kafka_prefetch_kib,
            prefetch_records: config.kafka_prefetch_records,
            session_timeout_ms: config.kafka_session_timeout_ms,
            fetch_wait_ms: config.kafka_fetch_wait_ms,
            instance_id: config.kafka_instance_id.clone(),
            security: config.kafka_security.clone(),
            sources: config.kafka_sources.clone(),
        };
        let work = ConsumerWork {
            shards: record_senders,
            commits: commit_rx,
            stop: stop.flag(),
            shards_done,
            health: kafka_state.unwrap_or_default(),
            // Ends well inside the stop's grace: the last offset commit (of what did become
            // durable) must still happen before the process gives up.
            drain: std::time::Duration::from_millis(config.stop_grace_ms.saturating_mul(3) / 4),
            // The rest but a margin: the process gives up at the grace's end.
            leave_within: std::time::Duration::from_millis(config.stop_grace_ms / 5),
            backpressure: delivery.backpressure.clone(),
            assignment,
        };
        threads.extend(start_kafka(settings, store.clone(), bridge, work, feed)?);
    } else {
        drop(record_senders);
    }

    tokio.block_on(stopped);
    tracing::info!("stopping: draining in-flight batches");
    stop.set();
    let grace = std::time::Duration::from_millis(config.stop_grace_ms);
    if !all_finished(&threads, grace) {
        // Same as a crash for what was in flight: offsets not committed are replayed and leased
        // jobs recovered on the next start; nothing is lost by leaving now.
        let waiting: Vec<&str> = (threads.iter())
            .filter(|t| !t.is_finished())
            .map(|t| t.thread().name().unwrap_or("unnamed"))
            .collect();
        tracing::error!(
            grace_ms = config.stop_grace_ms,
            ?waiting,
            "stop: in-flight work did not finish in time (is the store answering?); exiting anyway"
        );
        std::process::exit(1);
    }
    for t in threads {
        if t.join().is_err() {
            tracing::error!("an engine thread panicked");
        }
    }
    delivery.write_last_marks(&tokio, grace / 4);
    // Open connections end within the grace too: a gRPC stream that follows the log never ends
    // by itself, and its reader resumes from its cursor on the next start.
    match tokio.block_on(async { tokio::time::timeout(grace, server).await }) {
        Ok(Err(e)) => tracing::error!(error = %e, "the http server task failed"),
        Err(_) => tracing::info!("stop: connections still open after the grace were closed"),
        _ => {}
    }
    Ok(())
}

/// Whether every thread finished within `grace` (polled: a join cannot time out).
fn all_finished(threads: &[std::thread::JoinHandle<()>], grace: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + grace;
    loop {
        if threads.iter().all(std::thread::JoinHandle::is_finished) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(50));
    }
}

/// What the shards run: the ingest stage (when Kafka is configured) and the delivery lane.
struct ShardWork {
    store: Arc<dyn Store>,
    bridge: TokioBridge,
    counters: Vec<Arc<VerdictCounters>>,
    limits: VerdictLimits,
    commits: mpsc::Sender<crate::ingest::kafka::Commit>,
    observer: Arc<dyn KeyObserver>,
    records: Option<Vec<async_channel::Receiver<RecordIn>>>,
    /// Each shard's own partitions' queues, when the client's partitions are split to the shards.
    queues: Option<Vec<ShardQueues>>,
    /// The partitions this member holds: a shard claims only those.
    assignment: Arc<Assignment>,
    lanes: Vec<Option<DeliveryLane>>,
}

/// Starts the shards on their own thread; each runs its ingest stage and its delivery lane.
fn start_shards(
    config: &HubConfig,
    work: ShardWork,
    shards: usize,
    (shards_started, shards_done): (Arc<std::sync::atomic::AtomicUsize>, Arc<AtomicBool>),
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let max_batch = config.max_batch;
    let preempt = Duration::from_micros(config.shard_preempt_us);
    Ok(std::thread::Builder::new()
        .name("hub-shards".into())
        .spawn(move || {
            let ShardWork {
                store,
                bridge,
                counters,
                limits,
                commits,
                observer,
                records,
                queues,
                assignment,
                lanes,
            } = work;
            let (records, queues) = (
                PerShard::new(records, shards),
                PerShard::new(queues, shards),
            );
            let lanes = PerShard::of(lanes);
            let result = spawn_shards(
                &ShardConfig {
                    shards,
                    preempt,
                    ..ShardConfig::default()
                },
                move |id| {
                    let (rx, own_queues, lane) =
                        (records.take(id.0), queues.take(id.0), lanes.take(id.0));
                    let ingest = ShardIngest {
                        store: store.clone(),
                        bridge: bridge.clone(),
                        counters: counters[id.0].clone(),
                        limits,
                        max_batch,
                        commits: commits.clone(),
                        observer: Some(observer.clone()),
                        routing: lane.as_ref().map(|l| ShardRouting::new(l.routing.clone())),
                        assignment: assignment.clone(),
                    };
                    let started = shards_started.clone();
                    async move {
                        started.fetch_add(1, Ordering::AcqRel);
                        let ingest = async {
                            if let Some(rx) = rx {
                                ingest.run(rx, own_queues).await;
                            }
                        };
                        let deliver = async {
                            if let Some(lane) = lane {
                                lane.lane.run().await;
                            }
                        };
                        futures::join!(ingest, deliver);
                    }
                },
            );
            if let Err(e) = result {
                tracing::error!(error = %e, "shards failed");
            }
            shards_done.store(true, Ordering::Release);
        })?)
}

/// One item per shard, each taken once by the shard that starts with it (the shards' start
/// closure is cloned for each shard's thread).
struct PerShard<T>(Arc<std::sync::Mutex<Vec<Option<T>>>>);

impl<T> Clone for PerShard<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> PerShard<T> {
    /// `items`, one per shard in order, or nothing for every shard.
    fn new(items: Option<Vec<T>>, shards: usize) -> Self {
        let items = items.map_or_else(
            || (0..shards).map(|_| None).collect(),
            |items| items.into_iter().map(Some).collect(),
        );
        Self::of(items)
    }

    /// Each shard's item, or none.
    fn of(items: Vec<Option<T>>) -> Self {
        Self(Arc::new(std::sync::Mutex::new(items)))
    }

    fn take(&self, shard: usize) -> Option<T> {
        self.0
            .lock()
            .ok()
            .and_then(|mut items| items.get_mut(shard).and_then(Option::take))
    }
}

/// Starts the ingest consumer thread and the DLQ observer; returns their threads.
fn start_kafka(
    settings: KafkaSettings,
    store: Arc<dyn Store>,
    bridge: TokioBridge,
    work: ConsumerWork,
    feed: Option<PartitionFeed>,
) -> anyhow::Result<Vec<std::thread::JoinHandle<()>>> {
    use rdkafka::consumer::Consumer;
    let ingest_consumer = consumer(&settings, "", Some(work.assignment.clone()), feed)
        .context("creating the kafka consumer")?;
    ingest_consumer
        .subscribe(&[&settings.sources.ingest_pattern()])
        .context("subscribing to the sources' topics")?;
    let dlq_consumer =
        consumer(&settings, "-dlq-observer", None, None).context("creating the dlq consumer")?;
    dlq_consumer
        .subscribe(&[&settings.sources.dlq_pattern()])
        .context("subscribing to the sources' .dlq topics")?;
    let stop = work.stop.clone();
    // The observer stops at once, so it may take the ingest consumer's whole budget to leave.
    let dlq_leave_within = work.drain + work.leave_within;
    let consumer_thread = crate::runtime::spawn_beside_shards("hub-kafka", move || {
        if let Err(e) = run_ingest_consumer(ingest_consumer, work) {
            tracing::error!(error = %e, "kafka ingest consumer failed");
        }
    })?;
    let dlq_thread = {
        let handle = bridge.handle().clone();
        crate::runtime::spawn_beside_shards("hub-dlq", move || {
            dlq::run_dlq_consumer(dlq_consumer, store, handle, stop, dlq_leave_within);
        })?
    };
    Ok(vec![consumer_thread, dlq_thread])
}

/// SIGINT or SIGTERM. The handlers are installed when this is called, before the hub answers
/// `/ready`, so a stop during start-up is a graceful stop too (not the default kill).
pub fn stop_signal(tokio: &tokio::runtime::Runtime) -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let term = {
        let _enter = tokio.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok()
    };
    let ctrl_c = {
        let _enter = tokio.enter();
        // `ctrl_c` registers its handler on first poll: poll it once now.
        let mut f = Box::pin(tokio::signal::ctrl_c());
        let waker = futures::task::noop_waker();
        let _ = f.as_mut().poll(&mut std::task::Context::from_waker(&waker));
        f
    };
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_waits_for_threads_only_as_long_as_its_grace() {
        let quick = vec![std::thread::spawn(|| {})];
        assert!(all_finished(&quick, std::time::Duration::from_secs(5)));

        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let stuck = vec![std::thread::spawn(move || {
            let _ = blocked.recv(); // as a batch retrying against a store that never answers
        })];
        assert!(!all_finished(&stuck, std::time::Duration::from_millis(200)));
        let _ = release.send(());
        assert!(all_finished(&stuck, std::time::Duration::from_secs(5)));
    }
}
