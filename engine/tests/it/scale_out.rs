//! Scale-out (issue 18, DESIGN invariant 2, R-OP-1): engines on one CQL keyspace share delivery
//! as the consumer group shares partitions — a job's lane is its event's partition, paged by the
//! engine the group assigned it — and when one dies the others take its partitions and jobs.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::{engine_env, produce_over, progresses_to, start_engine, Tenant};
use crate::receiver::Counter;
use crate::support::*;
use crate::two_process::eventually;

const PARTITIONS: i32 = 4;
const EVENTS: usize = 3_000;

/// The partitions of `lender` whose lanes `engine` pages, from `/admin/ownership`.
async fn assigned(engine: &Engine, admin: &str) -> Option<BTreeSet<i64>> {
    let view: Value = reqwest::Client::new()
        .get(format!("{}/admin/ownership", engine.http))
        .bearer_auth(admin)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
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

async fn delivered(engine: &Engine) -> u64 {
    engine
        .metrics()
        .await
        .get("streaming_hub_delivery_outcomes_total{outcome=\"delivered\"}")
        .copied()
        .unwrap_or(0)
}

/// Two engines of one group on one keyspace, `lender` made with `PARTITIONS` partitions, one
/// webhook per tenant: fields drop in order (engines before the keyspace).
struct Pair {
    /// `None` once killed or stopped.
    first: Option<Engine>,
    second: Engine,
    admin: String,
    receiver: Counter,
    tenants: Vec<String>,
    _env: crate::delivery::EngineEnv,
    _dir: tempfile::TempDir,
}

impl Pair {
    async fn start() -> Pair {
        let admin_client: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", KAFKA)
            .create()
            .expect("admin");
        admin_client
            .create_topics(
                &[NewTopic::new(
                    "lerian.streaming.lender",
                    PARTITIONS,
                    TopicReplication::Fixed(1),
                )],
                &AdminOptions::new(),
            )
            .await
            .expect("create topic");
        // One data directory: the engines share its keys and token secret, as a deployment
        // would.
        let dir = tempfile::tempdir().expect("tempdir");
        let receiver = Counter::start().await;
        let group = format!("scale-{}", Uuid::now_v7().simple());
        let env = engine_env(Backend::Cql, &[]);
        let first = start_engine(dir.path(), &group, free_port(), Backend::Cql, &env);
        first.wait_ready().await;
        let second = start_engine(dir.path(), &group, free_port(), Backend::Cql, &env);
        second.wait_ready().await;
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
            (a > 0 && b > 0 && self.receiver.counts().len() >= events / 3).then_some((a, b))
        })
        .await;
        assert!(
            both.is_some(),
            "both engines deliver their partitions' jobs"
        );
        sent.keys().cloned().collect()
    }

    /// Waits for every event of `want`; returns the duplicates.
    async fn all_delivered(&self, want: &HashSet<String>) -> u32 {
        let all_arrived = progresses_to(
            want.len(),
            Duration::from_secs(120),
            Duration::from_secs(900),
            || self.receiver.counts().len(),
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
        let owned = assigned(&self.second, &self.admin)
            .await
            .expect("ownership");
        assert_eq!(
            owned.len(),
            PARTITIONS as usize,
            "the survivor owns every partition"
        );
        counts.values().map(|n| n - 1).sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_two_engines_deliver_their_own_partitions_and_one_takes_over_when_the_other_dies() {
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start().await;
    let want = pair.deliver_a_third(EVENTS).await;
    pair.first.take().expect("first engine").kill_9();
    let duplicates = pair.all_delivered(&want).await;
    // Repeated only what the dead engine had leased and not settled: 32 rounds of 8 workers on
    // each of its 2 shards.
    assert!(duplicates <= 512, "{duplicates} duplicates");
    pair.second.stop();
}

/// Graceful scale-down: SIGTERM one engine; it attempts and settles what it leased, then gives
/// up its lanes, so the other repeats nothing and takes over without waiting for a lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_an_engine_stopped_gracefully_hands_its_partitions_over_without_repeats() {
    let _broker = exclusive_broker().await;
    let mut pair = Pair::start().await;
    let want = pair.deliver_a_third(2_000).await;
    let before = delivered(&pair.second).await;
    let stopping = std::time::Instant::now();
    pair.first.take().expect("first engine").stop();
    let stopped = stopping.elapsed();
    let handed = eventually(Duration::from_secs(120), || async {
        let owned = assigned(&pair.second, &pair.admin).await?;
        (owned.len() == PARTITIONS as usize).then_some(())
    })
    .await;
    assert!(
        handed.is_some(),
        "the other engine is assigned every partition"
    );
    let handover = stopping.elapsed();
    let duplicates = pair.all_delivered(&want).await;
    eprintln!(
        "graceful stop took {stopped:?}; every partition owned by the other engine after \
         {handover:?}; it delivered {} after the stop; {duplicates} duplicates",
        delivered(&pair.second).await - before
    );
    // At most the attempts in flight (2 shards × 8 workers); a clean stop settles them.
    assert!(duplicates <= 16, "{duplicates} duplicates");
    pair.second.stop();
}
