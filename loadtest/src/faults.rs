//! Fault runs (issue 19): a delivery backlog to webhooks during which a fault is injected:
//!
//! - `kill-9:N`: the engine is killed with SIGKILL N times and restarted on the same data
//!   directory. Kills are timed on progress, never on the clock: kill *i* waits until the
//!   destinations hold *i*/(N+1) of the expected deliveries **and** the running process has
//!   delivered something itself (a kill while a restarted engine still waits for its partitions
//!   would test nothing), then a random 0–300 ms more, so kills land inside store writes and
//!   delivery steps alike.
//! - `kafka-outage:S`, `cassandra-outage:S`: a third of the way in, the service is stopped for S
//!   seconds (`scripts/services down`) and started again; the engine is left alone and must
//!   resume by itself.
//! - `disk-full:S` (embedded store): the data directory is a size-limited tmpfs, filled but for
//!   a little headroom before the backlog is ingested, freed S seconds after the store ran out
//!   (`disk_full.rs`).
//!
//! Checked exactly: every (event, subscription) delivered (lost = 0), every record's offset
//! committed, the store's quarantine holding exactly the malformed records produced (a replay
//! must not quarantine twice), and per injection the duplicates it caused: none for an outage
//! (the engine forgets nothing it attempted), and for a kill within the bound: a kill
//! repeats the attempts made and not yet recorded — running, finished and waiting for the next
//! store step, or finished and inside the step being written. A lane leases at most
//! `workers × rounds` jobs at once and leases no more while a step is written, so at most that
//! many are in flight plus as many inside the step: `2 × shards × workers × rounds`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::deliver::{self, Destinations, Subscribed};
use crate::hub::{self, Hub, HubSpec, StoreChoice};
use crate::kafka::{self, CommittedReader, ProducedCounts};
use crate::run::RunArgs;
use crate::sinks::SinkChoice;
use crate::tally::Tally;
use crate::workload::Generator;

mod disk_full;
mod kill_engine;

/// The longest a run waits for any progress before it fails.
const STALL_LIMIT: Duration = Duration::from_secs(180);

/// A fault to inject during a delivery backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the engine this many times, restarting it each time.
    Kill9(u32),
    /// Stop a service of `scripts/services` (`kafka`, `cassandra`) for this many seconds, once.
    Outage(&'static str, u64),
    /// Fill the embedded store's disk for this many seconds, once.
    DiskFull(u64),
    /// SIGKILL one engine of `--engines N` (on CQL) and do not restart it (issue 18).
    KillEngine,
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, n) = s.split_once(':').ok_or_else(|| {
            format!(
                "{s:?}: expected kill-9:<times>, <service>-outage:<seconds>, disk-full:<seconds> \
                 or kill-engine:1"
            )
        })?;
        let n: u64 = n
            .parse()
            .map_err(|_| format!("{s:?}: {n:?} is not a number"))?;
        match kind {
            "kill-9" => Ok(Fault::Kill9(u32::try_from(n).map_err(|e| e.to_string())?)),
            "kafka-outage" => Ok(Fault::Outage("kafka", n)),
            "cassandra-outage" => Ok(Fault::Outage("cassandra", n)),
            "disk-full" => Ok(Fault::DiskFull(n)),
            "kill-engine" if n == 1 => Ok(Fault::KillEngine),
            "kill-engine" => Err(format!("{s:?}: one engine is killed: kill-engine:1")),
            other => Err(format!(
                "unknown fault {other:?} (kill-9, kafka-outage, cassandra-outage, disk-full, \
                 kill-engine)"
            )),
        }
    }
}

impl Fault {
    /// For report names: `kill-9`, `kafka-outage`, `cassandra-outage`.
    #[must_use]
    pub fn slug(self) -> String {
        match self {
            Fault::Kill9(_) => "kill-9".into(),
            Fault::Outage(service, _) => format!("{service}-outage"),
            Fault::DiskFull(_) => "disk-full".into(),
            Fault::KillEngine => "kill-engine".into(),
        }
    }

    fn label(self) -> String {
        match self {
            Fault::Kill9(n) => format!("kill -9 × {n}"),
            Fault::Outage(service, s) => format!("{service} stopped for {s} s"),
            Fault::DiskFull(s) => format!("disk full for {s} s"),
            Fault::KillEngine => "kill -9 of one engine of several, not restarted".into(),
        }
    }
}

/// One injection and what followed it.
#[derive(Debug, Clone, Serialize)]
pub struct Injection {
    pub n: u32,
    /// Seconds since the hub first started.
    pub at_s: f64,
    pub delivered_at: u64,
    /// Until the system moves again: after a kill, the restarted engine's first new delivery;
    /// after an outage, from the service's return to new deliveries and new commits.
    pub recovered_after_s: f64,
    /// Deliveries repeated because of this injection (seen before the next one).
    pub duplicates: u64,
    /// What else was seen (e.g. deliveries during an outage).
    pub note: String,
    /// When a kill happened (repeats are attributed to kills by time).
    #[serde(skip)]
    pub killed_at: Option<Instant>,
    /// A check of this injection's own that failed (e.g. the hub never said why it stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    pub fault: String,
    pub scenario: String,
    pub store: StoreChoice,
    pub command: String,
    pub commit: String,
    pub machine: crate::machine::Machine,
    pub started_at: String,
    pub produced: ProducedCounts,
    pub subscriptions: usize,
    pub expected_deliveries: u64,
    pub unique_delivered: u64,
    pub lost: u64,
    pub duplicates: u64,
    /// Most duplicates one kill may cause (attempts made and not yet recorded, all lanes).
    pub duplicate_bound_per_kill: u64,
    /// Repeats with no kill between their two arrivals (must be 0).
    pub unexplained_duplicates: u64,
    pub committed: u64,
    pub quarantined: u64,
    pub max_lag_records: u64,
    pub seconds: f64,
    pub injections: Vec<Injection>,
    pub passed: bool,
    /// The checks that failed, in words (empty when the run passed).
    pub failures: Vec<String>,
}

/// Most attempts made and not yet recorded at once under the engine's settings (`LaneConfig`):
/// each shard's lane starts none while `2 × workers × rounds` of them wait to be written
/// (`hub_engine::delivery::pacing::may_start`), however many jobs it holds leased.
fn unrecorded_at_once(store: StoreChoice, env: &[(String, String)]) -> u64 {
    let setting = |k: &str, default: u64| {
        env.iter()
            .find(|(key, _)| key == k)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(default)
    };
    let shards = setting("STREAMING_HUB_SHARDS", 2);
    let workers = setting("STREAMING_HUB_DELIVERY_WORKERS", 8);
    let rounds = match store {
        StoreChoice::Embedded => 8,
        StoreChoice::Cql => 32,
    };
    2 * shards * workers * rounds
}

/// `(requests − unique)` at the destinations: deliveries seen more than once.
fn repeated(tally: &Tally) -> u64 {
    tally
        .seen(|s| s.deliveries.saturating_sub(s.unique_events.len() as u64))
        .unwrap_or(0)
}

/// A request the receiver finished reading just after the kill was still sent before it.
const KILL_SLACK: Duration = Duration::from_millis(100);

/// Gives each kill the repeats it caused: a repeated delivery whose first arrival came before a
/// kill (and after the one before it) and which arrived again after that kill was attempted and
/// not recorded when that kill came. Returns the repeats no kill explains (must be 0): a repeat
/// without a crash between its two arrivals is a double delivery.
fn attribute(tally: &Tally, injections: &mut [Injection]) -> u64 {
    let kills: Vec<Instant> = injections.iter().filter_map(|i| i.killed_at).collect();
    let repeats = tally.seen(|s| s.repeats.clone()).unwrap_or_default();
    let mut unexplained = 0;
    for (first, again) in repeats {
        match kills.iter().position(|k| first <= *k + KILL_SLACK) {
            Some(k) if again > kills[k] => injections[k].duplicates += 1,
            _ => unexplained += 1,
        }
    }
    unexplained
}

/// Waits until `done` holds, failing when `progress` stands still for `STALL_LIMIT`.
async fn wait_until(
    mut done: impl FnMut() -> bool,
    progress: impl Fn() -> u64,
    what: &str,
) -> anyhow::Result<()> {
    let (mut last, mut since) = (progress(), Instant::now());
    while !done() {
        let now = progress();
        if now != last {
            (last, since) = (now, Instant::now());
        }
        anyhow::ensure!(
            since.elapsed() < STALL_LIMIT,
            "no progress for {STALL_LIMIT:?} while waiting for {what} (at {now})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Quarantine records the store holds for this run's source, read through `/admin/quarantine`
/// with an operator token. The CQL keyspace outlives a run, so other runs' records are filtered
/// out by source.
async fn quarantined(hub: &Hub, data_dir: &Path, source: &str) -> anyhow::Result<u64> {
    let token = deliver::operator_token(data_dir)?;
    let client = reqwest::Client::new();
    let (mut total, mut cursor) = (0u64, None::<u64>);
    loop {
        let mut url = format!("{}/admin/quarantine?limit=1000&source={source}", hub.url);
        if let Some(c) = cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: serde_json::Value = client
            .get(url)
            .bearer_auth(&token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        total += page["items"].as_array().map_or(0, |a| a.len() as u64);
        match page["next_cursor"].as_u64() {
            Some(c) => cursor = Some(c),
            None => return Ok(total),
        }
    }
}

/// Follows the hub's committed offsets on a thread of its own (the reads block): the latest
/// total and the largest lag behind what was produced.
struct Follower {
    committed: Arc<AtomicU64>,
    max_lag: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Follower {
    fn start(reader: CommittedReader, produced: u64) -> Self {
        let (committed, max_lag, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (committed, max_lag, stop) = (committed.clone(), max_lag.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let now = reader.committed();
                    committed.store(now, Ordering::Release);
                    max_lag.fetch_max(produced.saturating_sub(now), Ordering::Relaxed);
                    std::thread::park_timeout(Duration::from_millis(100));
                }
            })
        };
        Self {
            committed,
            max_lag,
            stop,
            thread,
        }
    }

    fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// (committed, max lag).
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Release);
        let _ = self.thread.join();
        (
            self.committed.load(Ordering::Acquire),
            self.max_lag.load(Ordering::Relaxed),
        )
    }
}

/// What an injection works with.
struct Ctx<'a> {
    spec: &'a HubSpec<'a>,
    tally: &'a Tally,
    subscribed: &'a Subscribed,
    follower: &'a Follower,
    expected: u64,
    produced: u64,
    t0: Instant,
}

impl Ctx<'_> {
    fn delivered(&self) -> u64 {
        self.subscribed.checked_deliveries(self.tally)
    }

    /// Waits until `share` of the deliveries and `extra` more are in and the running engine
    /// delivered some itself. Fails at once when every delivery came in before that moment: the
    /// run was too short for its injections.
    async fn wait_for_share(
        &self,
        share: (u64, u64),
        extra: u64,
        what: &str,
    ) -> anyhow::Result<()> {
        let threshold = self.expected * share.0 / share.1 + extra;
        let at_start = self.delivered();
        let reached = |now: u64| now >= threshold && now > at_start;
        wait_until(
            || {
                let now = self.delivered();
                reached(now) || now >= self.expected
            },
            || self.delivered(),
            &format!("{what} ({threshold} deliveries)"),
        )
        .await?;
        anyhow::ensure!(
            reached(self.delivered()),
            "every delivery was in before {what} ({threshold} deliveries): too few records for \
             the injections"
        );
        Ok(())
    }
}

/// `kills` SIGKILLs, at even shares of the deliveries plus up to a quarter of the gap between
/// two (in deliveries, not time: 300 ms once meant a tenth of a run and now outlasts one); each
/// restart waited for.
async fn kill_nine(
    ctx: &Ctx<'_>,
    mut hub: Hub,
    kills: u32,
    seed: u64,
) -> anyhow::Result<(Hub, Vec<Injection>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut done: Vec<Injection> = Vec::new();
    for n in 1..=kills {
        let gap = ctx.expected / u64::from(kills + 1);
        ctx.wait_for_share(
            (u64::from(n), u64::from(kills + 1)),
            rng.gen_range(0..=gap / 4),
            &format!("kill {n}'s moment"),
        )
        .await?;
        let delivered_at = ctx.delivered();
        let at_s = ctx.t0.elapsed().as_secs_f64();
        hub.kill_9()?;
        let killed = Instant::now();
        eprintln!(
            "[faults] kill {n} at {at_s:.1} s, {delivered_at} of {} delivered",
            ctx.expected
        );
        hub = Hub::start(ctx.spec)?;
        let before = ctx.delivered();
        wait_until(
            || ctx.delivered() > before || ctx.delivered() >= ctx.expected,
            || ctx.delivered(),
            "the restarted engine's first delivery",
        )
        .await?;
        done.push(Injection {
            n,
            at_s,
            delivered_at,
            recovered_after_s: killed.elapsed().as_secs_f64(),
            duplicates: 0,
            note: String::new(),
            killed_at: Some(killed),
            failed: None,
        });
    }
    Ok((hub, done))
}

/// `scripts/services <verb> <service>`.
fn services(verb: &str, service: &str) -> anyhow::Result<()> {
    let status = crate::sched::as_a_peer(&mut std::process::Command::new("scripts/services"))
        .args([verb, service])
        .status()?;
    anyhow::ensure!(status.success(), "scripts/services {verb} {service} failed");
    Ok(())
}

/// Whether the hub's `/ready` answers 503 naming `component` (it says why it is stuck).
async fn ready_says_down(hub_url: &str, component: &str) -> bool {
    let Ok(answer) = reqwest::get(format!("{hub_url}/ready")).await else {
        return false;
    };
    let status = answer.status().as_u16();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    status == 503
        && body["down"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == component))
}

/// One outage of `service` for `seconds`, a third of the way into the deliveries; the engine is
/// left alone and must resume by itself. While Cassandra is down `/ready` must say the store is
/// (read on every check); Kafka's state is noted (its check runs every 5 s in the consumer).
async fn outage(
    ctx: &Ctx<'_>,
    hub_url: &str,
    service: &str,
    seconds: u64,
) -> anyhow::Result<Vec<Injection>> {
    ctx.wait_for_share((1, 3), 0, "the outage's moment").await?;
    let (delivered_at, committed_at) = (ctx.delivered(), ctx.follower.committed());
    let at_s = ctx.t0.elapsed().as_secs_f64();
    eprintln!("[faults] stopping {service} at {at_s:.1} s for {seconds} s");
    services("down", service)?;
    let component = if service == "cassandra" {
        "store"
    } else {
        "kafka"
    };
    let down = Instant::now();
    let mut said_down = false;
    while down.elapsed() < Duration::from_secs(seconds) {
        said_down |= ready_says_down(hub_url, component).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let during = ctx.delivered() - delivered_at;
    services("up", service)?;
    let up = Instant::now();
    let (delivered_up, committed_up) = (ctx.delivered(), ctx.follower.committed());
    let moved = || {
        (ctx.delivered() > delivered_up || ctx.delivered() >= ctx.expected)
            && (ctx.follower.committed() > committed_up.max(committed_at)
                || ctx.follower.committed() >= ctx.produced)
    };
    wait_until(
        moved,
        || ctx.delivered() + ctx.follower.committed(),
        "recovery",
    )
    .await?;
    Ok(vec![Injection {
        n: 1,
        at_s,
        delivered_at,
        recovered_after_s: up.elapsed().as_secs_f64(),
        duplicates: 0,
        note: format!(
            "{during} delivered while {service} was down; /ready said {component} was down: {said_down}"
        ),
        killed_at: None,
        failed: (component == "store" && !said_down)
            .then(|| "/ready never answered 503 naming the store while Cassandra was down".into()),
    }])
}

/// Runs `args.scenario` (a delivery backlog to webhooks) with `fault` injected.
pub async fn run(args: RunArgs, fault: Fault) -> anyhow::Result<FaultReport> {
    let scenario = &args.scenario;
    let (Some(delivery), SinkChoice::Webhook) = (&scenario.delivery, args.sink) else {
        anyhow::bail!("a fault run needs a delivery scenario to webhooks (e.g. deliver-backlog)");
    };
    match fault {
        Fault::Outage("cassandra", _) => anyhow::ensure!(
            args.store == StoreChoice::Cql,
            "a cassandra outage needs --store cql"
        ),
        Fault::DiskFull(_) => anyhow::ensure!(
            args.store == StoreChoice::Embedded,
            "a full disk is the embedded store's fault: use --store embedded"
        ),
        Fault::KillEngine => anyhow::ensure!(
            args.store == StoreChoice::Cql && args.engines >= 2,
            "kill-engine kills one engine of several: --store cql --engines 2 or more"
        ),
        _ => {}
    }
    let run_id = format!("lt{}", &uuid::Uuid::now_v7().simple().to_string()[..16]);
    let topic = format!("lerian.streaming.{run_id}");
    let others = kafka::other_ingest_topics(&args.kafka, &topic)?;
    anyhow::ensure!(
        others.is_empty() || args.delete_other_topics,
        "other lerian.streaming.* topics are on the broker; pass --delete-other-topics"
    );
    kafka::delete_topics(&args.kafka, &others).await?;
    kafka::create_topic(&args.kafka, &topic, scenario.partitions).await?;
    let started_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let data_dir = tempfile::tempdir()?;
    let _tmpfs = match fault {
        Fault::DiskFull(_) => Some(disk_full::Tmpfs::mount(
            data_dir.path(),
            disk_full::tmpfs_mib(scenario.records),
        )?),
        _ => None,
    };
    let group = format!("{run_id}-hub");
    let spec = HubSpec {
        bin: &args.hub_bin,
        store: args.store,
        kafka: &args.kafka,
        cql: &args.cql,
        group: &group,
        data_dir: data_dir.path(),
        port: hub::free_port()?,
        env: &args.hub_env,
    };
    let destinations = Destinations::start(SinkChoice::Webhook).await?;
    let tally = destinations.tally().clone();
    let tenants: Vec<String> = (0..scenario.tenants)
        .map(|t| format!("{run_id}-t{t}"))
        .collect();

    // Subscriptions first, through a hub that then stops; then the backlog.
    let mut hub = Hub::start(&spec)?;
    hub.wait_ready(Duration::from_secs(60)).await?;
    let subscribed: Subscribed = deliver::subscribe(
        &hub.url,
        data_dir.path(),
        (&tenants, &run_id, &run_id),
        delivery,
        &destinations,
    )
    .await?;
    hub.stop()?;
    eprintln!("[faults] producing {} records to {topic}", scenario.records);
    let producer = kafka::producer(&args.kafka, args.producer_linger_ms)?;
    let mut generator = Generator::new(scenario, &run_id, &run_id, args.seed);
    let produced = kafka::produce(
        &producer,
        &topic,
        &mut generator,
        move |_, n| {
            if n >= scenario.records {
                kafka::Budget::Done
            } else {
                kafka::Budget::Send((scenario.records - n).min(10_000))
            }
        },
        |_| {},
    )
    .await?;

    let follower = Follower::start(
        CommittedReader::new(&args.kafka, &topic, &group, scenario.partitions)?,
        produced.total,
    );
    let ctx = Ctx {
        spec: &spec,
        tally: &tally,
        subscribed: &subscribed,
        follower: &follower,
        expected: produced.valid * subscribed.checked.len() as u64,
        produced: produced.total,
        t0: Instant::now(),
    };
    if let Fault::DiskFull(_) = fault {
        let held = disk_full::fill(data_dir.path())?;
        eprintln!(
            "[faults] the data directory's disk is full but 2 MiB ({} MiB of filler)",
            held >> 20
        );
    }
    let hub = Hub::start(&spec)?;
    // With several engines, `kill-engine` kills the one holding the most lanes at its moment.
    let mut more_engines: Vec<Hub> = Vec::new();
    for _ in 1..args.engines {
        more_engines.push(Hub::start(&HubSpec {
            port: hub::free_port()?,
            ..spec
        })?);
    }
    // An engine that failed to start is named here, not found later as a refused connection.
    for engine in &mut more_engines {
        engine.wait_ready(Duration::from_secs(60)).await?;
    }
    let (hub, mut injections) = match fault {
        Fault::KillEngine => {
            let token = deliver::operator_token(data_dir.path())?;
            let mut engines: Vec<Hub> = std::iter::once(hub).chain(more_engines).collect();
            let injections = kill_engine::kill_engine(&ctx, &mut engines, &token).await?;
            // `kill_engine` took one of two or more: a survivor is left.
            let hub = engines.remove(0);
            more_engines = engines;
            (hub, injections)
        }
        Fault::Kill9(kills) => kill_nine(&ctx, hub, kills, args.seed).await?,
        Fault::Outage(service, seconds) => {
            let injections = outage(&ctx, &hub.url, service, seconds).await?;
            (hub, injections)
        }
        Fault::DiskFull(seconds) => {
            let injections = disk_full::disk_full(&ctx, &hub.url, data_dir.path(), seconds).await?;
            (hub, injections)
        }
    };
    wait_until(
        || ctx.delivered() >= ctx.expected,
        || ctx.delivered(),
        "every delivery",
    )
    .await?;
    let committed = || follower.committed();
    wait_until(|| committed() >= produced.total, committed, "every offset").await?;
    // Late duplicates of the last injection arrive with the last deliveries: a moment more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unexplained = attribute(&tally, &mut injections);
    let seconds = ctx.t0.elapsed().as_secs_f64();
    let quarantined = quarantined(&hub, data_dir.path(), &run_id).await?;
    hub.stop()?;
    for other in more_engines {
        other.stop()?;
    }
    let unique_delivered = ctx.delivered();
    let expected = ctx.expected;
    let (committed, max_lag) = follower.finish();
    kafka::delete_topics(&args.kafka, &[topic]).await?;

    let duplicates = repeated(&tally);
    let bound = match fault {
        Fault::Kill9(_) | Fault::KillEngine => unrecorded_at_once(args.store, &args.hub_env),
        // The engine keeps running: nothing it attempted is forgotten.
        Fault::Outage(..) | Fault::DiskFull(_) => 0,
    };
    let failures = failed_checks(&Outcome {
        expected,
        unique_delivered,
        produced: produced.total,
        committed,
        malformed: produced.malformed,
        quarantined,
        unexplained,
        bound,
        injections: &injections,
    });
    Ok(FaultReport {
        fault: fault.label(),
        scenario: scenario.name.clone(),
        store: args.store,
        command: args.command,
        commit: crate::machine::commit(),
        machine: crate::machine::machine(),
        started_at,
        produced,
        subscriptions: subscribed.subscriptions,
        expected_deliveries: expected,
        unique_delivered,
        lost: expected.saturating_sub(unique_delivered),
        duplicates,
        duplicate_bound_per_kill: bound,
        unexplained_duplicates: unexplained,
        committed,
        quarantined,
        max_lag_records: max_lag,
        seconds,
        injections,
        passed: failures.is_empty(),
        failures,
    })
}

/// What a fault run ended with, for the checks.
struct Outcome<'a> {
    expected: u64,
    unique_delivered: u64,
    produced: u64,
    committed: u64,
    malformed: u64,
    quarantined: u64,
    unexplained: u64,
    bound: u64,
    injections: &'a [Injection],
}

/// Each check the run failed, said in words.
fn failed_checks(o: &Outcome) -> Vec<String> {
    let mut failed = Vec::new();
    if o.unique_delivered != o.expected {
        failed.push(format!(
            "delivered {} of {} expected",
            o.unique_delivered, o.expected
        ));
    }
    if o.committed < o.produced {
        failed.push(format!(
            "committed {} of {} offsets",
            o.committed, o.produced
        ));
    }
    if o.quarantined != o.malformed {
        failed.push(format!(
            "quarantined {} for {} malformed records",
            o.quarantined, o.malformed
        ));
    }
    if o.unexplained > 0 {
        failed.push(format!("{} repeats no injection explains", o.unexplained));
    }
    for (n, k) in o.injections.iter().enumerate() {
        if let Some(why) = &k.failed {
            failed.push(format!("injection {}: {why}", n + 1));
        }
        if k.duplicates > o.bound {
            failed.push(format!(
                "injection {} caused {} duplicates (bound {})",
                n + 1,
                k.duplicates,
                o.bound
            ));
        }
    }
    failed
}

impl FaultReport {
    /// `report.json` and `report.md` under `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(self)?)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        Ok(())
    }

    fn markdown(&self) -> String {
        use std::fmt::Write;
        let mut md = String::new();
        let verdict = if self.passed { "passed" } else { "FAILED" };
        let _ = writeln!(
            md,
            "# Fault run: {} during {} ({:?}) — {verdict}\n",
            self.fault, self.scenario, self.store
        );
        for failure in &self.failures {
            let _ = writeln!(md, "**Failed:** {failure}.  ");
        }
        let _ = writeln!(md, "Command: `{}`  ", self.command);
        let _ = writeln!(
            md,
            "Commit {}, {}; machine: {} ({} CPUs, {:.0} GiB, {}).\n",
            self.commit,
            self.started_at,
            self.machine.cpu_model,
            self.machine.cpus,
            self.machine.memory_gib,
            self.machine.kernel
        );
        let p = &self.produced;
        let _ = writeln!(
            md,
            "{} records produced ({} valid, {} duplicates, {} malformed, {} system events) as a \
             backlog, {} subscriptions; the fault was injected at moments chosen on delivery \
             progress (see `loadtest/src/faults.rs`).\n",
            p.total, p.valid, p.duplicates, p.malformed, p.system, self.subscriptions
        );
        let _ = writeln!(md, "| figure | value | must be |\n|---|---|---|");
        let rows = [
            (
                "deliveries expected",
                self.expected_deliveries.to_string(),
                String::new(),
            ),
            (
                "delivered (unique)",
                self.unique_delivered.to_string(),
                self.expected_deliveries.to_string(),
            ),
            ("lost", self.lost.to_string(), "0".into()),
            (
                "duplicates (all injections)",
                self.duplicates.to_string(),
                format!("≤ {} per injection", self.duplicate_bound_per_kill),
            ),
            (
                "duplicates no kill explains",
                self.unexplained_duplicates.to_string(),
                "0".into(),
            ),
            (
                "offsets committed",
                self.committed.to_string(),
                p.total.to_string(),
            ),
            (
                "quarantined in the store",
                self.quarantined.to_string(),
                p.malformed.to_string(),
            ),
            (
                "max lag (records not yet durable)",
                self.max_lag_records.to_string(),
                String::new(),
            ),
            ("wall time", format!("{:.1} s", self.seconds), String::new()),
        ];
        for (what, value, must) in rows {
            let _ = writeln!(md, "| {what} | {value} | {must} |");
        }
        if self.fault.starts_with("kill") {
            let _ = writeln!(
                md,
                "\nThe duplicate bound: a kill repeats only attempts made and not yet recorded — \
                 running, finished and waiting for the next store step, or inside the step being \
                 written. A lane leases at most workers × rounds-ahead jobs and no more while a \
                 step is written, so at most that many are in flight plus as many inside the \
                 step: 2 × shards × workers × rounds = {} here (leased jobs never attempted are \
                 recoveries, not duplicates).\n",
                self.duplicate_bound_per_kill
            );
        } else {
            let _ = writeln!(
                md,
                "\nThe duplicate bound is 0: the engine keeps running through the fault, so it \
                 forgets nothing it attempted; a step that could not be written is kept and \
                 written again, and no delivery may repeat.\n"
            );
        }
        let _ = writeln!(
            md,
            "| # | at (s) | delivered then | recovered after (s) | duplicates | note |\n|---|---|---|---|---|---|"
        );
        for i in &self.injections {
            let _ = writeln!(
                md,
                "| {} | {:.1} | {} | {:.2} | {} | {} |",
                i.n, i.at_s, i.delivered_at, i.recovered_after_s, i.duplicates, i.note
            );
        }
        md
    }
}
