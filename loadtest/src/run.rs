//! One run: topic → (backlog: produce, then start the hub) or (steady: start the hub, then produce
//! at the scenario's rate) → follow durable progress → baselines → checks → report.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::deliver::{self, Destinations, Subscribed};
use crate::http_target;
use crate::hub::{self, Hub, HubSpec, Hubs, StoreChoice};
use crate::kafka::{self, Budget, CommittedReader, ProducedCounts};
use crate::profile::{ProfileFigures, Profiling};
use crate::receiver::Receivers;
use crate::report::{Baseline, Check, DeliveryFigures, HubFigures, PhaseShare, Report, Sample};
use crate::scenario::{Mode, Scenario};
use crate::sinks::SinkChoice;
use crate::tally::Tally;
use crate::workload::Generator;

/// How often progress is sampled.
pub const SAMPLE_MS: u64 = 100;
/// The longest a run waits for the hub to make everything durable.
const DRAIN_LIMIT: Duration = Duration::from_secs(600);

/// Where a run sends its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// `lerian.streaming.<run>` on Kafka; durable progress from the hub's committed offsets.
    Kafka,
    /// `POST /ingest/<run>` on the hub; an answer is durable progress.
    Http,
}

pub struct RunArgs {
    pub scenario: Scenario,
    pub store: StoreChoice,
    pub kafka: String,
    pub cql: String,
    pub hub_bin: PathBuf,
    pub seed: u64,
    /// The load producer's `linger.ms`.
    pub producer_linger_ms: u64,
    pub delete_other_topics: bool,
    /// Where the load goes: Kafka (default) or the hub's HTTP ingest.
    pub target: Target,
    /// Extra `STREAMING_HUB_*` settings for the hub.
    pub hub_env: Vec<(String, String)>,
    /// The sink of a delivery scenario's subscriptions.
    pub sink: SinkChoice,
    /// Engines of one group on one keyspace (CQL only); 1 by default.
    pub engines: usize,
    /// What to take of the hub over the measured phase (`--profile`, `--count-wakes`).
    pub profile: Option<crate::profile::Wanted>,
    pub command: String,
}

/// Starts profiling the first hub when the run asked for it.
fn profile_from(args: &RunArgs, hub: &Hubs) -> anyhow::Result<Option<Profiling>> {
    args.profile
        .as_ref()
        .map(|wanted| Profiling::start(hub.first().pid(), wanted))
        .transpose()
}

/// Follows the hub's durable progress on its own thread (the committed-offset reads block).
struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    durable: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(
        durable_now: Box<dyn Fn() -> u64 + Send>,
        produced: Arc<AtomicU64>,
        delivered: Arc<AtomicU64>,
        pids: Vec<u32>,
        t0: Instant,
    ) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let durable = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, durable, stop) = (samples.clone(), durable.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut next = Instant::now();
                let mut last_print = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    let done = durable_now();
                    durable.store(done, Ordering::Release);
                    let made = produced.load(Ordering::Acquire);
                    let rss: u64 = pids
                        .iter()
                        .map(|pid| hub::rss_kib(*pid).map_or(0, |(rss, _)| rss))
                        .sum();
                    let sample = Sample {
                        t_s: t0.elapsed().as_secs_f64(),
                        produced: made,
                        durable: done,
                        rss_kib: rss,
                        delivered: delivered.load(Ordering::Relaxed),
                    };
                    if let Ok(mut s) = samples.lock() {
                        s.push(sample);
                    }
                    if last_print.elapsed() >= Duration::from_secs(1) {
                        last_print = Instant::now();
                        eprintln!(
                            "[loadtest] t={:>6.1}s produced={made:>9} durable={done:>9} lag={:>8} delivered={:>9} rss={:.0}MiB",
                            sample.t_s,
                            made.saturating_sub(done),
                            sample.delivered,
                            rss as f64 / 1024.0
                        );
                    }
                    next += Duration::from_millis(SAMPLE_MS);
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::park_timeout(wait);
                    }
                }
            })
        };
        Self {
            samples,
            durable,
            stop,
            thread: Some(thread),
        }
    }

    fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

async fn wait_durable(sampler: &Sampler, total: u64, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while sampler.durable() < total {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the hub made {} of {total} records durable within {limit:?}",
            sampler.durable()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Unique deliveries a run expects: every valid event at every destination that answers 2xx.
fn expected(counts: &ProducedCounts, subscribed: Option<&Subscribed>) -> u64 {
    subscribed.map_or(0, |s| counts.valid * s.checked.len() as u64)
}

/// Waits until the checked destinations have every event.
async fn wait_delivered(
    tally: Option<&Tally>,
    subscribed: Option<&Subscribed>,
    expected: u64,
) -> anyhow::Result<()> {
    let (Some(t), Some(sub)) = (tally, subscribed) else {
        return Ok(());
    };
    let deadline = Instant::now() + DRAIN_LIMIT;
    while sub.checked_deliveries(t) < expected {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the destinations got {} of {expected} deliveries within {DRAIN_LIMIT:?}",
            sub.checked_deliveries(t)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn delivery_figures(
    t: &Tally,
    sub: &Subscribed,
    produced: &ProducedCounts,
    samples: &[Sample],
    counters: &BTreeMap<String, u64>,
    (limit, limit_rate): (String, f64),
) -> DeliveryFigures {
    let expected = expected(produced, Some(sub));
    let first = samples.iter().find(|s| s.delivered > 0);
    let done = samples
        .iter()
        .find(|s| s.delivered >= expected)
        .or_else(|| samples.last());
    let (rate, seconds) = match (first, done) {
        (Some(a), Some(b)) if b.t_s > a.t_s => (
            (b.delivered - a.delivered) as f64 / (b.t_s - a.t_s),
            b.t_s - a.t_s,
        ),
        _ => (0.0, 0.0),
    };
    let (requests, bad_signatures) = t
        .seen(|s| (s.deliveries, s.bad_signatures))
        .unwrap_or_default();
    let unique = sub.checked_deliveries(t);
    DeliveryFigures {
        subscriptions: sub.subscriptions,
        expected,
        unique_delivered: unique,
        requests,
        bad_signatures,
        rate,
        seconds,
        latency_ms: t.latency_ms(),
        limit,
        raw_post_rate: limit_rate,
        reread_rate: None,
        broker_latency: None,
        pending_jobs_end: counters
            .get("streaming_hub_delivery_pending_jobs")
            .copied()
            .unwrap_or(0),
        latency_curve: t.latency_curve(),
        per_tenant: t.tenant_latency(),
        worst_by_sent_second: t.worst_by_sent_second(),
    }
}

/// The physical limit of the run's sink, measured after the hub stopped: (what, per second).
async fn sink_limit(
    destinations: &Destinations,
    body_bytes: usize,
    store: (StoreChoice, &str, &std::path::Path),
    tenants: &[String],
) -> anyhow::Result<(String, f64)> {
    let consumers = match destinations {
        Destinations::Webhook(r) => {
            return Ok((
                "raw loopback POST to the same receiver (32 keep-alive clients)".into(),
                raw_post_baseline(r, body_bytes).await?,
            ))
        }
        Destinations::Other(c) => c,
    };
    consumers.stop().await;
    Ok(match consumers.sink {
        SinkChoice::Rabbitmq => (
            "raw lapin publish with confirms to the same broker (16 publishers)".into(),
            crate::sinks::raw_rabbitmq_rate(body_bytes).await?,
        ),
        SinkChoice::Sqs => (
            "raw SDK SendMessage to the same moto server (16 senders)".into(),
            crate::sinks::raw_sqs_rate(body_bytes).await?,
        ),
        SinkChoice::Pull | SinkChoice::PullGrpc | SinkChoice::Webhook => {
            let opened: Arc<dyn hub_engine::store::Store> = match store.0 {
                StoreChoice::Embedded => hub_engine::store::choice::open_embedded(
                    store.2,
                    None,
                    hub_engine::store::Retention::default(),
                )
                .map_err(|e| anyhow::anyhow!("{e}"))?,
                StoreChoice::Cql => Arc::new(
                    hub_engine::store::cql::CqlStore::connect(
                        hub_engine::store::cql::CqlSettings {
                            nodes: vec![store.1.to_owned()],
                            keyspace: hub::CQL_KEYSPACE.into(),
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
                ),
            };
            (
                "raw store scan of the same events (read_events, pages of 1,000)".into(),
                crate::sinks::raw_scan_rate(opened, tenants).await?,
            )
        }
    })
}

/// The physical limit of a POST path on this machine: 32 keep-alive clients POSTing a body of the
/// scenario's size to the receiver for 5 s.
async fn raw_post_baseline(r: &Receivers, body_bytes: usize) -> anyhow::Result<f64> {
    crate::receiver::raw_post_rate(&r.url("baseline"), 32, Duration::from_secs(5), body_bytes).await
}

/// The largest backlog the floor probe reads again and POSTs (pending-million's million is not).
const FLOOR_MAX_RECORDS: u64 = 250_000;

/// The largest backlog the floor probe reads again without POSTing (an ingest run): a million
/// records make durable in about a second, and a rate measured over a 200 k backlog is one
/// of a fifth of a second.
const FLOOR_MAX_INGEST_RECORDS: u64 = 1_000_000;

/// Sends records to the run's target as `budget` allows (`on_ack` after each durable answer or
/// Kafka acknowledgement).
async fn send(
    target: Target,
    (producer, topic): (&rdkafka::producer::FutureProducer, &str),
    (client, ingest_url): (&reqwest::Client, &str),
    generator: &mut Generator,
    budget: impl FnMut(Duration, u64) -> kafka::Budget,
    on_ack: impl FnMut(u64),
) -> anyhow::Result<ProducedCounts> {
    match target {
        Target::Kafka => kafka::produce(producer, topic, generator, budget, on_ack).await,
        Target::Http => http_target::produce(client, ingest_url, generator, budget, on_ack).await,
    }
}

/// Produce as fast as Kafka takes it.
fn flat_out(records: u64) -> impl FnMut(Duration, u64) -> Budget {
    move |_, n| {
        if n >= records {
            Budget::Done
        } else {
            Budget::Send((records - n).min(10_000))
        }
    }
}

/// Produce at the scenario's rate (bursts included) until its duration or record count.
fn paced(scenario: &Scenario) -> impl FnMut(Duration, u64) -> Budget + '_ {
    let mut allowed = 0.0f64;
    let mut last = Duration::ZERO;
    let end = Duration::from_secs(scenario.duration_s);
    move |elapsed, n| {
        if elapsed >= end || n >= scenario.records {
            return Budget::Done;
        }
        allowed += scenario.rate_at(elapsed.as_secs_f64()) as f64 * (elapsed - last).as_secs_f64();
        last = elapsed;
        let due = allowed as u64;
        if due > n {
            Budget::Send((due - n).min(5_000))
        } else {
            Budget::Wait(Duration::from_millis(2))
        }
    }
}

fn figures(samples: &[Sample], total: u64) -> (f64, f64, f64, u64) {
    let first = samples.iter().find(|s| s.durable > 0);
    let done = samples.iter().find(|s| s.durable >= total);
    let startup = first.map_or(0.0, |s| s.t_s);
    let (rate, seconds) = match (first, done) {
        (Some(a), Some(b)) if b.t_s > a.t_s => (
            (b.durable - a.durable) as f64 / (b.t_s - a.t_s),
            b.t_s - a.t_s,
        ),
        _ => (0.0, 0.0),
    };
    let max_lag = samples
        .iter()
        .map(|s| s.produced.saturating_sub(s.durable))
        .max()
        .unwrap_or(0);
    (rate, seconds, startup, max_lag)
}

fn phases(counters: &BTreeMap<String, u64>) -> Vec<PhaseShare> {
    const NANOS: &str = "streaming_hub_store_write_phase_nanoseconds_total{phase=\"";
    const COUNT: &str = "streaming_hub_store_write_phase_total{phase=\"";
    counters
        .iter()
        .filter_map(|(k, nanos)| {
            let phase = k.strip_prefix(NANOS)?.strip_suffix("\"}")?;
            let batches = counters
                .get(&format!("{COUNT}{phase}\"}}"))
                .copied()
                .unwrap_or(0);
            let seconds = *nanos as f64 / 1e9;
            Some(PhaseShare {
                phase: phase.to_owned(),
                batches,
                seconds,
                mean_ms: if batches > 0 {
                    seconds * 1e3 / batches as f64
                } else {
                    0.0
                },
            })
        })
        .collect()
}

fn check(what: &str, expected: u64, actual: u64) -> Check {
    Check {
        what: what.to_owned(),
        expected,
        actual,
        ok: expected == actual,
    }
}

/// A verdict count: exact with one engine, at least the expected with several (a record read
/// again after a rebalance is judged again).
fn repeatable(engines: usize, what: &str, expected: u64, actual: u64) -> Check {
    if engines > 1 {
        Check {
            ok: actual >= expected,
            ..check(
                &format!("{what} (at least: repeats after a rebalance count too)"),
                expected,
                actual,
            )
        }
    } else {
        check(what, expected, actual)
    }
}

fn checks(
    produced: &ProducedCounts,
    counters: &BTreeMap<String, u64>,
    durable: u64,
    engines: usize,
) -> Vec<Check> {
    let get = |k: &str| counters.get(k).copied().unwrap_or(0);
    let quarantined: u64 = counters
        .iter()
        .filter(|(k, _)| k.starts_with("streaming_hub_ingest_quarantined_total"))
        .map(|(_, v)| v)
        .sum();
    vec![
        check(
            "records durable (committed offsets)",
            produced.total,
            durable,
        ),
        // Several engines: a record read again by a partition's new owner finishes the dedup
        // claim its origin left and counts as stored there too; the store still holds the event
        // once, under one seq (the test `r_in_8_a_tenant_spread_over_two_engines_…`).
        repeatable(
            engines,
            "stored (each valid event once)",
            produced.valid,
            get("streaming_hub_ingest_verdicts_total{verdict=\"stored\"}"),
        ),
        // Several engines: a partition that moves while its engine had records uncommitted is
        // read again by its new owner, and each verdict counter counts the repeat there (the
        // event is stored once: the check above).
        repeatable(
            engines,
            "deduplicated",
            produced.duplicates,
            get("streaming_hub_ingest_verdicts_total{verdict=\"deduplicated\"}"),
        ),
        repeatable(engines, "quarantined", produced.malformed, quarantined),
        repeatable(
            engines,
            "system events dropped",
            produced.system,
            get("streaming_hub_ingest_verdicts_total{verdict=\"dropped_system\"}"),
        ),
    ]
}

pub async fn run(args: RunArgs) -> anyhow::Result<Report> {
    let scenario = &args.scenario;
    let run_id = format!("lt{}", &uuid::Uuid::now_v7().simple().to_string()[..16]);
    let topic = format!("lerian.streaming.{run_id}");
    let others = kafka::other_ingest_topics(&args.kafka, &topic)?;
    if !others.is_empty() {
        anyhow::ensure!(
            args.delete_other_topics,
            "{} other lerian.streaming.* topics are on the broker (e.g. {}); a fresh hub group would \
             ingest them too and skew the figures. Delete them, or pass --delete-other-topics.",
            others.len(),
            others[0]
        );
        kafka::delete_topics(&args.kafka, &others).await?;
    }
    kafka::create_topic(&args.kafka, &topic, scenario.partitions).await?;
    let started_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let producer = kafka::producer(&args.kafka, args.producer_linger_ms)?;
    let mut generator = Generator::new(scenario, &run_id, &run_id, args.seed);
    let acked = Arc::new(AtomicU64::new(0));
    let data_dir = tempfile::tempdir()?;
    let group = format!("{run_id}-hub");
    let port = hub::free_port()?;
    let spec = HubSpec {
        bin: &args.hub_bin,
        store: args.store,
        kafka: &args.kafka,
        cql: &args.cql,
        group: &group,
        data_dir: data_dir.path(),
        port,
        env: &args.hub_env,
    };

    let destinations = match &scenario.delivery {
        Some(_) => Some(Destinations::start(args.sink).await?),
        None => None,
    };
    let tally = destinations.as_ref().map(Destinations::tally);
    let delivered = tally.map_or_else(Arc::default, Tally::delivered_counter);
    let tenants: Vec<String> = (0..scenario.tenants)
        .map(|t| format!("{run_id}-t{t}"))
        .collect();
    let run_source: &str = &run_id;
    let subscribe = |hub: &Hub| {
        let url = hub.url.clone();
        let (tenants, destinations, run_id) = (&tenants, &destinations, &run_id);
        let dir = data_dir.path().to_owned();
        async move {
            match (&scenario.delivery, destinations) {
                (Some(spec), Some(d)) => {
                    eprintln!("[loadtest] subscribing {} tenants", tenants.len());
                    Ok::<_, anyhow::Error>(Some(
                        deliver::subscribe(&url, &dir, (tenants, run_source, run_id), spec, d)
                            .await?,
                    ))
                }
                _ => Ok(None),
            }
        }
    };
    let mut subscribed = None;
    let mut broker = None;

    anyhow::ensure!(
        args.target == Target::Kafka || scenario.mode == Mode::Steady,
        "--target http needs a steady scenario (a backlog waits in Kafka before the hub starts)"
    );
    let http_acked = Arc::new(AtomicU64::new(0));
    // The profile covers the measured phase: the drain of a backlog, the paced sending of a
    // steady run.
    let profiled: Option<ProfileFigures>;
    let (produced, produce_seconds, hub, samples, drain_after, paced_cpu) = match scenario.mode {
        Mode::Backlog => {
            if scenario.delivery.is_some() {
                // Subscriptions first (through a hub that then stops), so the backlog's events
                // find them when the measured hub starts.
                let mut hub = Hub::start(&spec)?;
                hub.wait_ready(Duration::from_secs(60)).await?;
                subscribed = subscribe(&hub).await?;
                hub.stop()?;
            }
            eprintln!(
                "[loadtest] producing {} records to {topic}",
                scenario.records
            );
            let t = Instant::now();
            let counts = kafka::produce(
                &producer,
                &topic,
                &mut generator,
                flat_out(scenario.records),
                |_| {},
            )
            .await?;
            let produce_seconds = t.elapsed().as_secs_f64();
            acked.store(counts.total, Ordering::Release);
            let t0 = Instant::now();
            let mut hub = Hubs::start(&spec, args.engines)?;
            hub.wait_ready(Duration::from_secs(60)).await?;
            let profiling = profile_from(&args, &hub)?;
            let reader = CommittedReader::new(&args.kafka, &topic, &group, scenario.partitions)?;
            let sampler = Sampler::start(
                Box::new(move || reader.committed()),
                acked.clone(),
                delivered.clone(),
                hub.pids(),
                t0,
            );
            wait_durable(&sampler, counts.total, DRAIN_LIMIT).await?;
            wait_delivered(
                tally,
                subscribed.as_ref(),
                expected(&counts, subscribed.as_ref()),
            )
            .await?;
            profiled = profiling.map(Profiling::finish).transpose()?;
            tokio::time::sleep(Duration::from_millis(2 * SAMPLE_MS)).await;
            (counts, produce_seconds, hub, sampler.finish(), None, None)
        }
        Mode::Steady => {
            let t0 = Instant::now();
            let mut hub = Hubs::start(&spec, args.engines)?;
            hub.wait_ready(Duration::from_secs(60)).await?;
            let durable_now: Box<dyn Fn() -> u64 + Send> = match args.target {
                Target::Kafka => {
                    let reader =
                        CommittedReader::new(&args.kafka, &topic, &group, scenario.partitions)?;
                    Box::new(move || reader.committed())
                }
                Target::Http => {
                    let answered = http_acked.clone();
                    Box::new(move || answered.load(Ordering::Acquire))
                }
            };
            let sampler = Sampler::start(
                durable_now,
                acked.clone(),
                delivered.clone(),
                hub.pids(),
                t0,
            );
            subscribed = subscribe(hub.first()).await?;
            let ingest_url = format!("{}/ingest/{run_id}", hub.first().url);
            // HTTP ingest takes a producer's token (R-SEC-4), sent with every POST.
            let mut auth = reqwest::header::HeaderMap::new();
            auth.insert(
                reqwest::header::AUTHORIZATION,
                format!(
                    "Bearer {}",
                    crate::deliver::producer_token(data_dir.path())?
                )
                .parse()?,
            );
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .default_headers(auth)
                .build()?;
            // Warm-up: a few records, until the hub has joined the group and made them durable.
            let warm = u64::try_from(scenario.partitions).unwrap_or(1) * 10;
            let answered = http_acked.clone();
            let mut counts = send(
                args.target,
                (&producer, &topic),
                (&client, &ingest_url),
                &mut generator,
                flat_out(warm),
                |n| answered.store(n, Ordering::Release),
            )
            .await?;
            acked.store(counts.total, Ordering::Release);
            wait_durable(&sampler, counts.total, Duration::from_secs(120)).await?;
            let watch = match args.target {
                Target::Kafka => Some(crate::broker_latency::watch(
                    &args.kafka,
                    &topic,
                    scenario.partitions,
                )?),
                Target::Http => None,
            };
            eprintln!(
                "[loadtest] hub joined; producing at {}/s for {} s",
                scenario.rate, scenario.duration_s
            );
            let t = Instant::now();
            let profiling = profile_from(&args, &hub)?;
            let cpu_at_pace = hub_cpu(&hub.pids());
            let base = counts.total;
            let ack_counter = acked.clone();
            let answered = http_acked.clone();
            let more = send(
                args.target,
                (&producer, &topic),
                (&client, &ingest_url),
                &mut generator,
                paced(scenario),
                |n| {
                    ack_counter.store(base + n, Ordering::Release);
                    answered.store(base + n, Ordering::Release);
                },
            )
            .await?;
            let produce_seconds = t.elapsed().as_secs_f64();
            profiled = profiling.map(Profiling::finish).transpose()?;
            let paced_cpu = cpu_at_pace
                .zip(hub_cpu(&hub.pids()))
                .map(|(before, after)| crate::report::PacedCpu {
                    seconds: after - before,
                    events: more.valid,
                });
            counts.total += more.total;
            counts.valid += more.valid;
            counts.duplicates += more.duplicates;
            counts.malformed += more.malformed;
            counts.system += more.system;
            counts.throttled += more.throttled;
            acked.store(counts.total, Ordering::Release);
            let end = Instant::now();
            wait_durable(&sampler, counts.total, DRAIN_LIMIT).await?;
            let drain = end.elapsed().as_secs_f64();
            wait_delivered(
                tally,
                subscribed.as_ref(),
                expected(&counts, subscribed.as_ref()),
            )
            .await?;
            if let Some(watch) = watch {
                broker = watch.finish()?;
            }
            tokio::time::sleep(Duration::from_millis(2 * SAMPLE_MS)).await;
            (
                counts,
                produce_seconds,
                hub,
                sampler.finish(),
                Some(drain),
                paced_cpu,
            )
        }
    };

    let (counters, each) = hub.metrics().await?;
    let engines = hub.figures(&each);
    let (rss_end, rss_peak) = hub.pids().iter().fold((0, 0), |(end, peak), pid| {
        let (e, p) = hub::rss_kib(*pid).unwrap_or((0, 0));
        (end + e, peak + p)
    });
    let cpu_seconds = engines.iter().map(|e| e.cpu_seconds).sum::<Option<f64>>();
    let reread_rate = match &destinations {
        Some(Destinations::Other(c)) => c.reread_rate().await?,
        _ => None,
    };
    hub.stop()?;
    let delivery = match (&destinations, &subscribed) {
        (Some(d), Some(sub)) => {
            eprintln!("[loadtest] the sink's raw rate, same client, same service");
            let limit = sink_limit(
                d,
                scenario.payload_bytes,
                (args.store, &args.cql, data_dir.path()),
                &tenants,
            )
            .await?;
            Some(DeliveryFigures {
                reread_rate,
                broker_latency: broker.take(),
                ..delivery_figures(d.tally(), sub, &produced, &samples, &counters, limit)
            })
        }
        _ => None,
    };
    // The least a record costs at this rate (`floor.rs`), for the hub's CPU per event and its
    // rate to be read against: webhook and ingest runs fed from Kafka, a backlog of at most
    // `FLOOR_MAX_RECORDS` (`FLOOR_MAX_INGEST_RECORDS` for ingest; the probe reads it all again).
    let floor_max = match &destinations {
        Some(_) => FLOOR_MAX_RECORDS,
        None => FLOOR_MAX_INGEST_RECORDS,
    };
    let floor = match (&destinations, scenario.mode, args.target) {
        (Some(Destinations::Webhook(_)) | None, Mode::Backlog, Target::Kafka)
            if produced.total <= floor_max =>
        {
            let post = destinations.is_some();
            eprintln!(
                "[loadtest] the floor: one process consuming, syncing per group{} the backlog",
                if post { " and POSTing" } else { "" }
            );
            Some(
                crate::floor::measure_backlog(
                    &args.kafka,
                    &topic,
                    scenario.partitions,
                    produced.total,
                    post,
                )
                .await?,
            )
        }
        (Some(Destinations::Webhook(_)), Mode::Steady, Target::Kafka) => {
            eprintln!(
                "[loadtest] the floor: one process consuming, syncing and POSTing each record at {}/s for {} s",
                scenario.rate,
                crate::floor::SECONDS
            );
            let rate = scenario.rate;
            Some(
                crate::floor::measure_paced(
                    &args.kafka,
                    scenario.partitions,
                    rate,
                    &producer,
                    &mut generator,
                )
                .await?,
            )
        }
        _ => None,
    };
    eprintln!("[loadtest] raw consume baseline on {topic}");
    let (kafka_addr, topic_name, partitions, total) = (
        args.kafka.clone(),
        topic.clone(),
        scenario.partitions,
        produced.total,
    );
    let (raw_records, raw_seconds) = match args.target {
        Target::Kafka => {
            tokio::task::spawn_blocking(move || {
                kafka::raw_consume(
                    &kafka_addr,
                    &topic_name,
                    partitions,
                    total,
                    Duration::from_secs(300),
                )
            })
            .await??
        }
        // Nothing was produced to Kafka; the HTTP run's limit is the raw POST rate below.
        Target::Http => (0, 0.0),
    };
    let raw_post_rate = match args.target {
        Target::Kafka => None,
        Target::Http => {
            let r = Receivers::start(Default::default()).await?;
            Some(raw_post_baseline(&r, scenario.payload_bytes).await?)
        }
    };
    let durable = samples.last().map_or(0, |s| s.durable);
    let (durable_rate, durable_seconds, startup, max_lag) = figures(&samples, produced.total);
    let report = Report {
        scenario: scenario.clone(),
        store: args.store,
        command: args.command,
        producer_linger_ms: args.producer_linger_ms,
        commit: crate::machine::commit(),
        machine: crate::machine::machine(),
        load_stood_aside: crate::sched::standing_aside(),
        started_at,
        topic: topic.clone(),
        produced,
        produce_seconds,
        produce_rate: produced.total as f64 / produce_seconds.max(1e-9),
        baseline: Baseline {
            raw_consume_records: raw_records,
            raw_consume_seconds: raw_seconds,
            raw_consume_rate: raw_records as f64 / raw_seconds.max(1e-9),
            raw_post_rate,
            floor,
        },
        target: args.target,
        sink: scenario.delivery.as_ref().map(|_| args.sink),
        hub: HubFigures {
            durable_rate,
            durable_seconds,
            startup_seconds: startup,
            max_lag_records: max_lag,
            drain_after_production_seconds: drain_after,
            rss_kib_end: rss_end,
            rss_kib_peak: rss_peak,
            cpu_seconds,
            paced_cpu,
            engines,
            store_phases: phases(&counters),
            cql_requests: crate::cql_requests::shares(&counters),
            counters,
            profile: profiled,
        },
        delivery,
        checks: Vec::new(),
        timeline: samples,
    };
    let mut checks = checks(
        &report.produced,
        &report.hub.counters,
        durable,
        args.engines,
    );
    if let Some(d) = &report.delivery {
        checks.push(Check {
            what: "unique deliveries at 2xx destinations".into(),
            expected: d.expected,
            actual: d.unique_delivered,
            ok: d.expected == d.unique_delivered,
        });
        checks.push(Check {
            what: "deliveries with a bad signature".into(),
            expected: 0,
            actual: d.bad_signatures,
            ok: d.bad_signatures == 0,
        });
    }
    kafka::delete_topics(&args.kafka, &[topic]).await?;
    Ok(Report { checks, ..report })
}

/// The CPU the hub processes `pids` used so far (user + system), in seconds.
fn hub_cpu(pids: &[u32]) -> Option<f64> {
    pids.iter().map(|pid| hub::cpu_seconds(*pid)).sum()
}
