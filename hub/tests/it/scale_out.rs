//! Scale-out (issue 18, DESIGN invariant 2, R-OP-1): engines on one CQL keyspace share delivery
//! as the consumer group shares partitions — a job's lane is its event's partition, paged by the
//! engine the group assigned it — and when one dies the others take its partitions and jobs.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::{engine_env, produce_over, progresses_to, Tenant};
use crate::receiver::Counter;
use crate::support::*;
use crate::two_process::{eventually, ControlProcess};

const PARTITIONS: i32 = 4;
const EVENTS: usize = 3_000;

/// `engine`'s `/admin/ownership` (null when it does not answer).
async fn ownership(engine: &Engine, admin: &str) -> Value {
    let answer = reqwest::Client::new()
        .get(format!("{}/admin/ownership", engine.http))
        .bearer_auth(admin)
        .send()
        .await;
    match answer {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// The partitions of `lender` whose lanes `engine` pages, from `/admin/ownership`.
async fn assigned(engine: &Engine, admin: &str) -> Option<BTreeSet<i64>> {
    let view = ownership(engine, admin).await;
    if view.is_null() {
        return None;
    }
    assert_eq!(view["numbering"], "by_partition", "{view}");
    Some(
        view["lanes"]
            .as_array()?
            .iter()
            .filter(|l| l["how"] == "assigned" && l["topic"] == "lerian.streaming.lender")
            .filter_map(|l| l["partition"].as_i64())
            .collect(),
    )
}

/// The lanes `engine` pages as `how` (`assigned`, `stray`) and holds now.
async fn lanes_held(engine: &Engine, admin: &str, how: &str) -> BTreeSet<u64> {
    ownership(engine, admin).await["lanes"]
        .as_array()
        .map(|lanes| {
            lanes
                .iter()
                .filter(|l| l["how"] == how && l["held_here"] == true)
                .filter_map(|l| l["lane"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `engine` holds the lane of every partition it is assigned (and is assigned some).
async fn holds_its_assigned_lanes(engine: &Engine, admin: &str) -> bool {
    let view = ownership(engine, admin).await;
    let assigned: Vec<&Value> = view["lanes"]
        .as_array()
        .map(|lanes| lanes.iter().filter(|l| l["how"] == "assigned").collect())
        .unwrap_or_default();
    !assigned.is_empty() && assigned.iter().all(|l| l["held_here"] == true)
}

async fn delivered(engine: &Engine) -> u64 {
    engine
        .metrics()
        .await
        .get("streaming_hub_delivery_outcomes_total{outcome=\"delivered\"}")
        .copied()
        .unwrap_or(0)
}

/// How to start one engine of the pair (again).
#[derive(Clone)]
struct EngineStart {
    dir: std::path::PathBuf,
    group: String,
    port: u16,
    vars: Vec<(String, String)>,
    /// Its static member id (`STREAMING_HUB_KAFKA_INSTANCE_ID`).
    instance: String,
}

impl EngineStart {
    async fn start(&self) -> Engine {
        let mut env: Vec<(&str, &str)> = self
            .vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.push(("STREAMING_HUB_KAFKA_INSTANCE_ID", self.instance.as_str()));
        let engine = Engine::start_with(&self.dir, &self.group, self.port, Backend::Cql, &env);
        engine.wait_ready().await;
        engine
    }
}

/// Sends `signal` (`STOP`, `CONT`) to `engine`.
fn signal(engine: &Engine, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), engine.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal}");
}

/// Two engines of one group on one keyspace, `lender` made with `PARTITIONS` partitions, one
/// webhook per tenant: fields drop in order (engines before the keyspace).
struct Pair {
    /// `None` once killed or stopped.
    first: Option<Engine>,
    /// How the first engine was started, to start it again (same static member id).
    first_start: EngineStart,
    second: Engine,
    admin: String,
    receiver: Counter,
    tenants: Vec<String>,
    _env: crate::delivery::EngineEnv,
    _dir: tempfile::TempDir,
}

impl Pair {
    /// `session_ms`: the Kafka session timeout; the engines are static members (`engine-1`,
    /// `engine-2` of this group).
    async fn start(session_ms: u32) -> Pair {
        create_topic("lerian.streaming.lender", PARTITIONS).await;
        // One data directory: the engines share its keys and token secret, as a deployment
        // would.
        let dir = tempfile::tempdir().expect("tempdir");
        let receiver = Counter::start().await;
        let group = format!("scale-{}", Uuid::now_v7().simple());
        let session = session_ms.to_string();
        let env = engine_env(
            Backend::Cql,
            &[
                ("STREAMING_HUB_KAFKA_SESSION_TIMEOUT_MS", session.as_str()),
                // Lane changes and strays in the log a failure prints.
                (
                    "STREAMING_HUB_LOG",
                    "warn,hub_engine::ingest::kafka=info,hub_engine::delivery=info",
                ),
            ],
        );
        let first_start = EngineStart {
            dir: dir.path().to_owned(),
            group: group.clone(),
            port: free_port(),
            vars: env.vars.clone(),
            instance: format!("{group}-engine-1"),
        };
        let first = first_start.start().await;
        let second = EngineStart {
            port: free_port(),
            instance: format!("{group}-engine-2"),
            ..first_start.clone()
        }
        .start()
        .await;
        let admin = token(dir.path(), "ops", &["admin"]);

        // The group splits the partitions; each engine pages the lanes of its own.
        let split = eventually(Duration::from_secs(60), || async {
            let (a, b) = (
                assigned(&first, &admin).await?,
                assigned(&second, &admin).await?,
            );
            (!a.is_empty() && !b.is_empty() && a.len() + b.len() == PARTITIONS as usize)
                .then_some((a, b))
        })
        .await
        .expect("both engines own partitions");
        assert!(
            split.0.is_disjoint(&split.1),
            "one owner per partition: {split:?}"
        );

        let ns = Uuid::now_v7().simple().to_string();
        let tenants: Vec<String> = (0..10).map(|t| format!("t-scale-{ns}-{t}")).collect();
        for t in &tenants {
            let api = Tenant::new(&first, dir.path(), t);
            api.active_webhook("a", &receiver.url("/a"), json!({}))
                .await;
        }
        // The second engine follows the control plane's revision log (every 250 ms).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Pair {
            first: Some(first),
            first_start,
            second,
            admin,
            receiver,
            tenants,
            _env: env,
            _dir: dir,
        }
    }

    /// Produces `events`, and waits until both engines delivered some and a third arrived.
    async fn deliver_a_third(&self, events: usize) -> HashSet<String> {
        let sent = produce_over(&self.tenants, events).await;
        let both = eventually(Duration::from_secs(300), || async {
            let first = self.first.as_ref()?;
            let (a, b) = (delivered(first).await, delivered(&self.second).await);
            (a > 0 && b > 0 && self.receiver.distinct() >= events / 3).then_some((a, b))
        })
        .await;
        assert!(
            both.is_some(),
            "both engines deliver their partitions' jobs"
        );
        sent.keys().cloned().collect()
    }

    /// Waits until the second engine is assigned every partition (the first stopped or froze).
    async fn second_owns_every_partition(&self, within: Duration) {
        let owned = eventually(within, || async {
            let owned = assigned(&self.second, &self.admin).await?;
            (owned.len() == PARTITIONS as usize).then_some(())
        })
        .await;
        assert!(
            owned.is_some(),
            "the other engine is assigned every partition"
        );
    }

    /// Waits for every event of `want`; returns the duplicates.
    async fn all_delivered(&self, want: &HashSet<String>) -> u32 {
        let all_arrived = progresses_to(
            want.len(),
            Duration::from_secs(120),
            Duration::from_secs(900),
            || self.receiver.distinct(),
        )
        .await;
        let counts = self.receiver.counts();
        let got: HashSet<String> = counts.keys().map(|(_, id)| id.clone()).collect();
        assert!(
            all_arrived && got == *want,
            "every event delivered: {} of {}",
            got.len(),
            want.len()
        );
        counts.values().map(|n| n - 1).sum()
    }

    /// Waits for the group to commit every partition to its end: a commit that failed in a
    /// rebalance once left a partition's last positions uncommitted for good.
    async fn commits_caught_up(&self) {
        wait_caught_up(
            "lerian.streaming.lender",
            &self.first_start.group,
            Duration::from_secs(60),
        )
        .await;
    }
}

/// Kill -9 one of two static members with a 45 s session: 10 s after its lane holds lapse the
/// survivor adopts them as strays (before the group moves the partitions), every event is
/// delivered; restarted under its id, the member gets its partitions back at once and asks for
/// its lanes, the survivor gives them up, and the member delivers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_a_killed_engines_jobs_are_delivered_by_the_other_and_it_takes_them_back_on_restart()
{
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start(45_000).await;
    let want = pair.deliver_a_third(EVENTS).await;
    let first = pair.first.take().expect("first engine");
    let its_lanes = lanes_held(&first, &pair.admin, "assigned").await;
    assert!(!its_lanes.is_empty(), "the first engine holds lanes");
    let killed = std::time::Instant::now();
    first.kill_9();
    // The dead member's partitions stay assigned to it for its 45 s session; its lanes must be
    // delivered again before that, by the survivor, as strays.
    let adopted = eventually(Duration::from_secs(44), || async {
        let strays = lanes_held(&pair.second, &pair.admin, "stray").await;
        its_lanes.is_subset(&strays).then_some(())
    })
    .await;
    assert!(
        adopted.is_some(),
        "the survivor delivers the dead member's lanes before its session ends"
    );
    eprintln!(
        "the dead engine's lanes delivered again {:?} after the kill",
        killed.elapsed()
    );
    let duplicates = pair.all_delivered(&want).await;
    eprintln!(
        "every event delivered {:?} after the kill; {duplicates} duplicates",
        killed.elapsed()
    );
    // Repeated only what the dead engine had leased and not settled: 32 rounds of 8 workers on
    // each of its 2 shards.
    assert!(duplicates <= 512, "{duplicates} duplicates");

    let first = pair.first_start.start().await;
    let restarted = std::time::Instant::now();
    let back = eventually(Duration::from_secs(30), || async {
        let owned = assigned(&first, &pair.admin).await?;
        (!owned.is_empty()).then_some(owned)
    })
    .await;
    assert!(
        back.is_some(),
        "the static member gets partitions back well inside its 45 s session"
    );
    // The survivor adopted those lanes as strays; it gives them up when the member asks.
    let held = eventually(Duration::from_secs(30), || async {
        holds_its_assigned_lanes(&first, &pair.admin)
            .await
            .then_some(())
    })
    .await;
    assert!(
        held.is_some(),
        "the restarted member holds its lanes again; its view: {}",
        ownership(&first, &pair.admin).await
    );
    eprintln!(
        "restarted engine holds its lanes {:?} after its start",
        restarted.elapsed()
    );
    let before = delivered(&first).await;
    let more = produce_over(&pair.tenants, 1_000).await;
    let delivers = eventually(Duration::from_secs(120), || async {
        (delivered(&first).await > before).then_some(())
    })
    .await;
    assert!(
        delivers.is_some(),
        "the restarted engine delivers its partitions' jobs again; its lanes: {}; the other's: {}",
        ownership(&first, &pair.admin).await,
        ownership(&pair.second, &pair.admin).await
    );
    eprintln!(
        "restarted engine delivering {:?} after its start",
        restarted.elapsed()
    );
    let want: HashSet<String> = want.into_iter().chain(more.into_keys()).collect();
    pair.all_delivered(&want).await;
    pair.commits_caught_up().await;
    pair.first = Some(first);
    for engine in [pair.first.take(), Some(pair.second)].into_iter().flatten() {
        engine.stop();
    }
}

/// Graceful scale-down: SIGTERM one engine; it attempts and settles what it leased, then gives
/// up its lanes, so the other repeats nothing and takes over without waiting for a lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_an_engine_stopped_gracefully_hands_its_partitions_over_without_repeats() {
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start(6_000).await;
    let want = pair.deliver_a_third(2_000).await;
    let before = delivered(&pair.second).await;
    let stopping = std::time::Instant::now();
    pair.first.take().expect("first engine").stop();
    let stopped = stopping.elapsed();
    pair.second_owns_every_partition(Duration::from_secs(120))
        .await;
    let handover = stopping.elapsed();
    let duplicates = pair.all_delivered(&want).await;
    eprintln!(
        "graceful stop took {stopped:?}; every partition owned by the other engine after \
         {handover:?}; it delivered {} after the stop; {duplicates} duplicates",
        delivered(&pair.second).await - before
    );
    // At most the attempts in flight (2 shards × 8 workers); a clean stop settles them.
    assert!(duplicates <= 16, "{duplicates} duplicates");
    pair.commits_caught_up().await;
    pair.second.stop();
}

/// An engine frozen (SIGSTOP) past its session and its lane holds: the other takes its
/// partitions and lanes; resumed (SIGCONT), the frozen engine starts nothing it had leased (the
/// hold is the fence), so only attempts started and not recorded at the freeze can repeat, and
/// it rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_a_frozen_engine_is_fenced_out_and_repeats_only_unrecorded_attempts() {
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start(6_000).await;
    let want = pair.deliver_a_third(EVENTS).await;
    let first = pair.first.take().expect("first engine");
    signal(&first, "STOP");
    pair.second_owns_every_partition(Duration::from_secs(60))
        .await;
    // Past the frozen engine's 10 s holds: the other holds and delivers its lanes.
    tokio::time::sleep(Duration::from_secs(12)).await;
    signal(&first, "CONT");
    let duplicates = pair.all_delivered(&want).await;
    let rejoined = eventually(Duration::from_secs(60), || async {
        let owned = assigned(&first, &pair.admin).await?;
        (!owned.is_empty()).then_some(())
    })
    .await;
    assert!(
        rejoined.is_some(),
        "the resumed engine rejoins and owns partitions again"
    );
    // At most the attempts started and not yet recorded at the freeze: those running and those
    // finished whose outcomes waited for a step — as at a crash, 32 rounds of 8 workers on each
    // of 2 shards. Leased jobs not yet started are not attempted after the resume (the fence).
    assert!(duplicates <= 512, "{duplicates} duplicates");
    pair.commits_caught_up().await;
    first.stop();
    pair.second.stop();
}

/// The operator view across engines: a `hub-control serve` on the keyspace lists both engines,
/// each with the partitions the group assigned it (between them every partition, once), the
/// shard, hold, pending jobs and lag of each — over REST, GraphQL and gRPC, to operators only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_the_control_process_lists_which_engine_delivers_each_partition() {
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start(6_000).await;
    // Records read: each partition's consumer lag is known (librdkafka reports none before).
    let want = pair.deliver_a_third(600).await;
    pair.all_delivered(&want).await;
    let port = free_port();
    // The engines' data directory: the control process verifies the same tokens.
    let control = ControlProcess::start(pair._dir.path(), port, &pair._env.vars);
    control.wait_ready().await;
    let tenant = token(pair._dir.path(), &pair.tenants[0], &["subscriptions:get"]);
    crate::ownership_view::lists_every_engine(
        &format!("http://127.0.0.1:{port}"),
        &pair.admin,
        &tenant,
        (2, "lerian.streaming.lender", i64::from(PARTITIONS)),
    )
    .await;
    control.stop();
    for engine in [pair.first.take(), Some(pair.second)].into_iter().flatten() {
        engine.stop();
    }
}

/// Every stored (seq, event id) of `tenant`, in order, read through `/admin/events` a page at a
/// time.
async fn seqs_of(engine: &Engine, admin: &str, tenant: &str) -> Vec<(u64, String)> {
    let client = reqwest::Client::new();
    let mut seqs: Vec<(u64, String)> = Vec::new();
    loop {
        let after = seqs.last().map_or(0, |(seq, _)| *seq);
        let page: Value = client
            .get(format!(
                "{}/admin/events?tenant={tenant}&after={after}&limit=1000",
                engine.http
            ))
            .bearer_auth(admin)
            .send()
            .await
            .expect("events")
            .json()
            .await
            .expect("json");
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            return seqs;
        }
        seqs.extend(
            items
                .iter()
                .filter_map(|e| Some((e["seq"].as_u64()?, e["id"].as_str()?.to_owned()))),
        );
    }
}

/// R-IN-8 with several writers: each tenant's events are keyed by event id, so they spread over
/// every partition and both engines ingest and deliver them; each tenant's `seq` is still 1, 2, 3
/// … with no gap and no repeat, and every event is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_8_a_tenant_spread_over_two_engines_keeps_a_gap_free_seq() {
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start(6_000).await;
    let want = pair.deliver_a_third(2_000).await;
    pair.all_delivered(&want).await;
    // Beside the produced events, each tenant's log holds the hub's own `destination.verified`.
    let mut stored: Vec<String> = Vec::new();
    for tenant in &pair.tenants {
        let (seqs, ids): (Vec<u64>, Vec<String>) = seqs_of(&pair.second, &pair.admin, tenant)
            .await
            .into_iter()
            .unzip();
        let gap_free: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, gap_free, "{tenant}: seq 1…n, no gap, no repeat");
        stored.extend(ids.into_iter().filter(|id| want.contains(id)));
    }
    let once: HashSet<&String> = stored.iter().collect();
    assert_eq!(
        (stored.len(), once.len()),
        (want.len(), want.len()),
        "every event stored, once"
    );
    // The operator view on `/metrics` too: between them the engines hold every partition's lane.
    let mut held = 0;
    for engine in [pair.first.as_ref().expect("first engine"), &pair.second] {
        held += engine
            .metrics()
            .await
            .iter()
            .filter(|(k, v)| {
                k.starts_with("streaming_hub_delivery_lane_held{")
                    && k.contains("how=\"assigned\"")
                    && **v == 1
            })
            .count();
    }
    assert_eq!(held, PARTITIONS as usize, "each partition's lane held once");
    for engine in [pair.first.take(), Some(pair.second)].into_iter().flatten() {
        engine.stop();
    }
}

/// A stop must end within its grace even when leaving the group does not: here the close's
/// revoke callback waits for a write still under way (a store that stopped answering), which on
/// its own would hold the close for the whole revoke wait (10 s).
#[tokio::test]
async fn r_op_1_a_consumer_leaving_its_group_gives_up_waiting_after_its_bound() {
    use hub_engine::ingest::kafka::{consumer, leave_group};
    use rdkafka::consumer::Consumer;

    let topic = format!("lerian.streaming.leave-{}", Uuid::now_v7().simple());
    create_topic(&topic, 1).await;
    let assignment = member_assignment(1);
    let member = consumer(
        &member_settings("leave"),
        "",
        Some(assignment.clone()),
        None,
    )
    .expect("consumer");
    member.subscribe(&[&topic]).expect("subscribe");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !assignment.holds(&topic, 0) {
        assert!(std::time::Instant::now() < deadline, "never assigned");
        let _ = member.poll(Duration::from_millis(100));
    }
    let write = assignment
        .begin_write(&topic, 0)
        .expect("a write of the held partition");

    let started = std::time::Instant::now();
    leave_group(member, Duration::from_secs(1), "test");
    let took = started.elapsed();
    drop(write);
    delete_topic(&topic).await;
    assert!(
        took < Duration::from_secs(5),
        "left after {took:?}: the bound is 1 s, the revoke wait 10 s"
    );
}
