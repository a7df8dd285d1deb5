//! Fault runs (issue 19): a delivery backlog during which the engine is killed with SIGKILL
//! `kills` times and restarted on the same data directory. Kills are timed on progress, never on
//! the clock: kill *i* waits until the destinations hold *i*/(kills+1) of the expected deliveries
//! **and** the running process has delivered something itself (a kill while a restarted engine
//! still waits for its partitions would test nothing), then a random 0–300 ms more, so kills land
//! inside store writes and delivery steps alike.
//!
//! Checked exactly: every (event, subscription) delivered (lost = 0), every record's offset
//! committed, the store's quarantine holding exactly the malformed records produced (a replay
//! must not quarantine twice), and per kill the duplicates it caused within the bound: a kill
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

/// The longest a run waits for any progress before it fails.
const STALL_LIMIT: Duration = Duration::from_secs(180);

/// One kill and what followed it.
#[derive(Debug, Clone, Serialize)]
pub struct Kill {
    pub n: u32,
    /// Seconds since the hub first started.
    pub at_s: f64,
    pub delivered_at_kill: u64,
    /// From the kill to the first new delivery of the restarted engine.
    pub recovered_after_s: f64,
    /// Deliveries repeated because of this kill (seen before the next one).
    pub duplicates: u64,
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
    pub committed: u64,
    pub quarantined: u64,
    pub max_lag_records: u64,
    pub seconds: f64,
    pub kills: Vec<Kill>,
    pub passed: bool,
}

/// Most attempts made and not yet recorded at once under the engine's settings (`LaneConfig`):
/// a lane's leased jobs (`workers × rounds`) plus the finished ones inside the step being
/// written (as many again).
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

/// `(requests − unique)` at the checked destinations: deliveries seen more than once.
fn repeated(tally: &Tally) -> u64 {
    tally
        .seen(|s| s.deliveries.saturating_sub(s.unique_events.len() as u64))
        .unwrap_or(0)
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

/// Quarantine records the store holds, read through `/admin/quarantine` with an operator token.
async fn quarantined(hub: &Hub, data_dir: &Path) -> anyhow::Result<u64> {
    let token = deliver::operator_token(data_dir)?;
    let client = reqwest::Client::new();
    let (mut total, mut cursor) = (0u64, None::<u64>);
    loop {
        let mut url = format!("{}/admin/quarantine?limit=1000", hub.url);
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

/// Runs `args.scenario` (a delivery backlog to webhooks) with `kills` SIGKILLs of the engine.
pub async fn kill_nine(args: RunArgs, kills: u32) -> anyhow::Result<FaultReport> {
    let scenario = &args.scenario;
    let (Some(delivery), SinkChoice::Webhook) = (&scenario.delivery, args.sink) else {
        anyhow::bail!("a kill -9 run needs a delivery scenario to webhooks (e.g. deliver-backlog)");
    };
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
    let producer = kafka::producer(&args.kafka)?;
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
    let expected = produced.valid * subscribed.checked.len() as u64;
    let delivered = || subscribed.checked_deliveries(&tally);

    let follower = Follower::start(
        CommittedReader::new(&args.kafka, &topic, &group, scenario.partitions)?,
        produced.total,
    );

    let bound = unrecorded_at_once(args.store, &args.hub_env);
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let t0 = Instant::now();
    let mut hub = Hub::start(&spec)?;
    let mut done: Vec<Kill> = Vec::new();
    let mut repeated_at_kill = 0;
    for n in 1..=kills {
        let threshold = expected * u64::from(n) / u64::from(kills + 1);
        let at_start = delivered();
        wait_until(
            || {
                let now = delivered();
                now >= threshold && now > at_start
            },
            &delivered,
            &format!("kill {n}'s moment ({threshold} deliveries)"),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..300))).await;
        let delivered_at_kill = delivered();
        let at_s = t0.elapsed().as_secs_f64();
        hub.kill_9()?;
        let killed = Instant::now();
        if let Some(previous) = done.last_mut() {
            previous.duplicates = repeated(&tally) - repeated_at_kill;
        }
        repeated_at_kill = repeated(&tally);
        eprintln!("[faults] kill {n} at {at_s:.1} s, {delivered_at_kill} of {expected} delivered");
        hub = Hub::start(&spec)?;
        let before = delivered();
        wait_until(
            || delivered() > before || delivered() >= expected,
            &delivered,
            "the restarted engine's first delivery",
        )
        .await?;
        done.push(Kill {
            n,
            at_s,
            delivered_at_kill,
            recovered_after_s: killed.elapsed().as_secs_f64(),
            duplicates: 0,
        });
    }
    wait_until(|| delivered() >= expected, &delivered, "every delivery").await?;
    let committed = || follower.committed();
    wait_until(|| committed() >= produced.total, &committed, "every offset").await?;
    // Late duplicates of the last kill arrive with the last deliveries; give stragglers a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    if let Some(last) = done.last_mut() {
        last.duplicates = repeated(&tally) - repeated_at_kill;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let quarantined = quarantined(&hub, data_dir.path()).await?;
    hub.stop()?;
    let (committed, max_lag) = follower.finish();
    kafka::delete_topics(&args.kafka, &[topic]).await?;

    let unique_delivered = delivered();
    let duplicates = repeated(&tally);
    let passed = unique_delivered == expected
        && quarantined == produced.malformed
        && done.iter().all(|k| k.duplicates <= bound);
    Ok(FaultReport {
        fault: format!("kill -9 × {kills}"),
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
        committed,
        quarantined,
        max_lag_records: max_lag,
        seconds,
        kills: done,
        passed,
    })
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
            "{} records produced ({} valid, {} duplicates, {} malformed, {} system events), \
             {} subscriptions; the engine was killed with SIGKILL at moments chosen on delivery \
             progress and restarted on the same data directory each time.\n",
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
                "duplicates (all kills)",
                self.duplicates.to_string(),
                format!("≤ {} per kill", self.duplicate_bound_per_kill),
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
        let _ = writeln!(
            md,
            "\nThe duplicate bound: a kill repeats only attempts made and not yet recorded — \
             running, finished and waiting for the next store step, or inside the step being \
             written. A lane leases at most workers × rounds-ahead jobs and no more while a step \
             is written, so at most that many are in flight plus as many inside the step: \
             2 × shards × workers × rounds = {} here (leased jobs never attempted are recoveries, \
             not duplicates).\n",
            self.duplicate_bound_per_kill
        );
        let _ = writeln!(
            md,
            "| kill | at (s) | delivered at the kill | recovered after (s) | duplicates |\n|---|---|---|---|---|"
        );
        for k in &self.kills {
            let _ = writeln!(
                md,
                "| {} | {:.1} | {} | {:.2} | {} |",
                k.n, k.at_s, k.delivered_at_kill, k.recovered_after_s, k.duplicates
            );
        }
        md
    }
}
