//! Test kit: start and kill the engine binary, produce a realistic mixed workload, and read back
//! Kafka's committed offsets.

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hub_engine::store::choice::open_embedded;
use hub_engine::store::cql::{CqlSettings, CqlStore};
use hub_engine::store::Retention;
use hub_engine::store::Store;

use rand::{Rng, SeedableRng};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use uuid::Uuid;

pub const KAFKA: &str = "127.0.0.1:9092";

/// The store an engine under test runs on.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    /// The embedded store in the test's data directory.
    Embedded,
    /// The CQL server started by `scripts/services up` (keyspace `hub_engine_it`; every test
    /// uses its own topic and tenants, so runs never collide).
    Cql,
}

pub const CQL: &str = "127.0.0.1:9042";
const CQL_KEYSPACE: &str = "hub_engine_it";

impl Backend {
    pub fn label(self) -> &'static str {
        match self {
            Backend::Embedded => "kafka+embedded",
            Backend::Cql => "kafka+cql",
        }
    }

    fn configure(self, cmd: &mut Command) {
        if let Backend::Cql = self {
            cmd.env("STREAMING_HUB_STORE", "cql")
                .env("STREAMING_HUB_CQL_NODES", CQL)
                .env("STREAMING_HUB_CQL_KEYSPACE", CQL_KEYSPACE);
        }
    }

    /// Opens the store the engine wrote (the embedded file only once the engine has exited).
    pub async fn open(self, data_dir: &std::path::Path) -> Arc<dyn Store> {
        match self {
            Backend::Embedded => {
                open_embedded(data_dir, None, Retention::default()).expect("open embedded store")
            }
            Backend::Cql => {
                let settings = CqlSettings {
                    nodes: vec![CQL.into()],
                    keyspace: CQL_KEYSPACE.into(),
                    ..CqlSettings::default()
                };
                Arc::new(CqlStore::connect(settings).await.expect("connect to CQL"))
            }
        }
    }
}

/// A running `streaming-hub` process.
pub struct Engine {
    pub child: Child,
    pub http: String,
    /// The engine's log (every engine started on one data directory appends to it).
    log: std::path::PathBuf,
    /// A producer's HTTP ingest token for every source (R-SEC-4), signed with the HS256 secret
    /// the test gave the engine or the one it generated in its data directory.
    ingest_token: IngestToken,
}

/// Posts to an engine's HTTP ingest with a producer's token.
#[derive(Debug, Clone)]
pub struct Producer {
    http: String,
    token: String,
}

impl Producer {
    /// `POST /ingest/{source}`, authenticated.
    pub fn post(&self, client: &reqwest::Client, source: &str) -> reqwest::RequestBuilder {
        client
            .post(format!("{}/ingest/{source}", self.http))
            .bearer_auth(&self.token)
    }
}

#[derive(Debug)]
enum IngestToken {
    Secret(String),
    GeneratedIn(std::path::PathBuf),
}

/// Lines of the engine's log a failed test shows.
const LOG_TAIL: usize = 60;

impl Engine {
    pub fn start(data_dir: &std::path::Path, group: &str, port: u16, backend: Backend) -> Engine {
        Self::start_with(data_dir, group, port, backend, &[])
    }

    /// Starts with extra `STREAMING_HUB_*` settings.
    pub fn start_with(
        data_dir: &std::path::Path,
        group: &str,
        port: u16,
        backend: Backend,
        env: &[(&str, &str)],
    ) -> Engine {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_streaming-hub"));
        backend.configure(&mut cmd);
        // The engine's log (warnings, and ingest's info: assignments, fenced or dropped units; `HUB_TEST_ENGINE_LOG` sets
        // another filter) goes to a file in its data directory, shown when the test fails; one
        // file per port, since engines of a scale-out test share the directory.
        let filter = std::env::var("HUB_TEST_ENGINE_LOG")
            .unwrap_or_else(|_| "warn,hub_engine::ingest=info".into());
        cmd.env("STREAMING_HUB_LOG", filter);
        let log = data_dir.join(format!("engine-{port}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("engine log file");
        cmd.stdout(file);
        cmd.env("STREAMING_HUB_DATA_DIR", data_dir)
            .env("STREAMING_HUB_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env("STREAMING_HUB_KAFKA_BROKERS", KAFKA)
            .env("STREAMING_HUB_KAFKA_GROUP", group)
            .env("STREAMING_HUB_KAFKA_METADATA_REFRESH_MS", "1000")
            .env("STREAMING_HUB_MAX_VALUE_BYTES", "65536")
            // Tests post events over HTTP too (R-SEC-4: off by default beside Kafka).
            .env("STREAMING_HUB_HTTP_INGEST", "true")
            // The broker's minimum: a killed engine's partitions move on after 6 s, not 45.
            .env("STREAMING_HUB_KAFKA_SESSION_TIMEOUT_MS", "6000")
            // The shared sources the delivery tests produce to (`lender`) and the hub's own
            // events: an engine does not follow other tests' topics as they are made and deleted
            // (each one a rebalance). Tests with a source of their own name it.
            .env("STREAMING_HUB_KAFKA_SOURCES", "lender,hub");
        // The test's own settings last: they may override the ones above.
        cmd.envs(env.iter().copied());
        let child = cmd.spawn().expect("engine binary starts");
        let ingest_token = match env
            .iter()
            .find(|(k, _)| *k == "STREAMING_HUB_JWT_HS256_SECRET")
        {
            Some((_, secret)) => IngestToken::Secret((*secret).to_owned()),
            None => IngestToken::GeneratedIn(data_dir.to_owned()),
        };
        Engine {
            child,
            http: format!("http://127.0.0.1:{port}"),
            log,
            ingest_token,
        }
    }

    /// `tenant`'s stored events as `/admin/events` lists them (an operator's `admin` token).
    pub async fn admin_events(&self, operator: &str, tenant: &str) -> serde_json::Value {
        reqwest::Client::new()
            .get(format!("{}/admin/events?tenant={tenant}", self.http))
            .bearer_auth(operator)
            .send()
            .await
            .expect("events")
            .json()
            .await
            .expect("json")
    }

    /// A producer of this engine's HTTP ingest, with a token for every source (R-SEC-4).
    pub fn producer(&self) -> Producer {
        let secret = match &self.ingest_token {
            IngestToken::Secret(s) => s.clone(),
            IngestToken::GeneratedIn(dir) => std::fs::read_to_string(dir.join("jwt-hs256.secret"))
                .expect("the engine's generated secret"),
        };
        Producer {
            http: self.http.clone(),
            token: ingest_token_signed(&secret, &["*"]),
        }
    }

    /// `POST /ingest/{source}` as a producer that may write every source.
    pub fn post_ingest(&self, client: &reqwest::Client, source: &str) -> reqwest::RequestBuilder {
        self.producer().post(client, source)
    }

    pub async fn wait_ready(&self) {
        wait_ready(&self.http, "the engine").await;
    }

    /// What the engine has logged so far (every engine started on its data directory).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill_9(mut self) {
        kill_9(&mut self.child);
    }

    /// SIGTERM, then wait for a graceful exit.
    pub fn stop(mut self) {
        stop_gracefully(&mut self.child);
    }

    pub async fn metrics(&self) -> HashMap<String, u64> {
        let text = reqwest::get(format!("{}/metrics", self.http))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("body");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                l.rsplit_once(' ')
                    .and_then(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
            })
            .collect()
    }
}

/// Waits up to 90 s for `{http}/ready` to answer 200. Generous on purpose: these tests assert
/// what is kept, not how fast a process starts, and on CI's two cores a CQL engine restarted
/// beside a busy Cassandra has needed over 30 s (its store read for readiness must answer within
/// 2 s, and every start prepares its statements again).
pub async fn wait_ready(http: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if reqwest::get(format!("{http}/ready"))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not become ready");
}

/// SIGKILL, then a wait for the process to be gone.
pub fn kill_9(child: &mut Child) {
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
}

/// SIGTERM, then a wait for an exit with status 0.
pub fn stop_gracefully(child: &mut Child) {
    let pid = child.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    let status = child.wait().expect("the process exits");
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
}

/// A test that fails mid-way must not leave its engine running (it would hold the test's output
/// pipes open and the harness would wait forever).
impl Drop for Engine {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        show_log_on_panic(&self.log, "the engine");
    }
}

/// While a test panics, prints the last lines of a child process's log (`what` names it).
pub fn show_log_on_panic(log: &std::path::Path, what: &str) {
    if !std::thread::panicking() {
        return;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    // `HUB_TEST_LOG_DIR` keeps whole logs of failed tests (the tail below is often too short).
    if let Ok(dir) = std::env::var("HUB_TEST_LOG_DIR") {
        let name = format!(
            "{}-{}",
            std::thread::current()
                .name()
                .unwrap_or("test")
                .replace("::", "-"),
            log.file_name().and_then(|n| n.to_str()).unwrap_or("log")
        );
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(std::path::Path::new(&dir).join(name), &text);
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
    eprintln!(
        "--- {what}'s log ({} lines, last {}):\n{}",
        lines.len(),
        tail.len(),
        tail.join("\n")
    );
}

/// Record headers as `(key, value)` pairs.
type HeaderList = Vec<(String, Vec<u8>)>;

/// What the workload produced, for exact checks.
#[derive(Debug, Default)]
pub struct Produced {
    /// Unique accepted events per tenant, in production order.
    pub unique: BTreeMap<String, Vec<Uuid>>,
    pub duplicates: u64,
    pub system: u64,
    /// (partition, offset) → expected quarantine reason.
    pub malformed: BTreeMap<(i32, i64), &'static str>,
    /// The tenant spread over every partition (its `seq` is arrival order, not production order).
    pub salted_tenant: String,
}

/// A valid UUID of version 4: well formed, but not the UUIDv7 the hub requires.
fn uuid_v4() -> Uuid {
    uuid::Builder::from_random_bytes(rand::random()).into_uuid()
}

/// Produces `count` records to `topic` (8 partitions) over 20 tenants of namespace `ns`: 5 %
/// re-sent duplicates, 2 % malformed (five kinds), 1 % system events.
pub async fn produce_workload(
    topic: &str,
    source: &str,
    ns: &str,
    count: usize,
    seed: u64,
) -> Produced {
    create_topic(topic, 8).await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tenants: Vec<String> = (0..20).map(|t| format!("{ns}-t{t}")).collect();
    let mut produced = Produced {
        salted_tenant: tenants[0].clone(),
        ..Produced::default()
    };
    let mut sent_valid: Vec<(String, HeaderList, Option<i32>)> = Vec::new();
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let roll = rng.gen_range(0..100);
        let tenant = tenants[rng.gen_range(0..tenants.len())].clone();
        let salted = tenant == produced.salted_tenant;
        let partition = salted.then(|| rng.gen_range(0..8));
        let (key, headers, value, expect): (String, HeaderList, Vec<u8>, Option<&'static str>) =
            if roll < 5 && !sent_valid.is_empty() {
                let (key, headers, p) = sent_valid[rng.gen_range(0..sent_valid.len())].clone();
                produced.duplicates += 1;
                pending.push(send(
                    &producer,
                    topic,
                    &key,
                    p,
                    &headers,
                    b"{\"dup\":true}".to_vec(),
                    None,
                ));
                continue;
            } else if roll < 7 {
                let kind = i % 6;
                let mut h = valid_headers(source, &tenant);
                let mut value = b"{}".to_vec();
                let reason = match kind {
                    0 => {
                        h.retain(|(k, _)| k != "ce-tenantid");
                        "missing_tenant"
                    }
                    1 => {
                        set(&mut h, "ce-id", uuid_v4().to_string().into_bytes());
                        "id_not_uuidv7"
                    }
                    2 => {
                        set(
                            &mut h,
                            "ce-type",
                            b"studio.lerian.other.loan.approved".to_vec(),
                        );
                        "type_source_mismatch"
                    }
                    3 => {
                        set(&mut h, "ce-tenantid", vec![0xff, 0xfe, 0x00]);
                        "non_utf8_header"
                    }
                    4 => {
                        set(
                            &mut h,
                            "ce-datacontenttype",
                            b"application/json\r\nx-injected: 1".to_vec(),
                        );
                        "control_character"
                    }
                    _ => {
                        value = vec![b'x'; 70_000];
                        "oversized_value"
                    }
                };
                (tenant, h, value, Some(reason))
            } else if roll < 8 {
                produced.system += 1;
                let mut h = valid_headers(source, &tenant);
                h.retain(|(k, _)| k != "ce-tenantid");
                h.push(("ce-systemevent".into(), b"true".to_vec()));
                ("system:heartbeat".into(), h, b"{}".to_vec(), None)
            } else {
                let h = valid_headers(source, &tenant);
                let id: Uuid = std::str::from_utf8(&h[1].1)
                    .expect("utf8")
                    .parse()
                    .expect("uuid");
                produced.unique.entry(tenant.clone()).or_default().push(id);
                sent_valid.push((tenant.clone(), h.clone(), partition));
                (tenant, h, format!("{{\"n\":{i}}}").into_bytes(), None)
            };
        pending.push(send(
            &producer, topic, &key, partition, &headers, value, expect,
        ));
        // Keep the in-flight set bounded.
        if pending.len() >= 2000 {
            drain(&mut pending, &mut produced).await;
        }
    }
    drain(&mut pending, &mut produced).await;
    produced
}

type Pending =
    std::pin::Pin<Box<dyn std::future::Future<Output = ((i32, i64), Option<&'static str>)> + Send>>;

fn send(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    partition: Option<i32>,
    headers: &[(String, Vec<u8>)],
    value: Vec<u8>,
    expect: Option<&'static str>,
) -> Pending {
    let mut owned = OwnedHeaders::new();
    for (k, v) in headers {
        owned = owned.insert(Header {
            key: k,
            value: Some(v.as_slice()),
        });
    }
    let (producer, topic, key) = (producer.clone(), topic.to_owned(), key.to_owned());
    Box::pin(async move {
        let mut record = FutureRecord::to(&topic)
            .key(&key)
            .payload(&value)
            .headers(owned);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        let delivery = producer
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .expect("delivered");
        ((delivery.partition, delivery.offset), expect)
    })
}

async fn drain(pending: &mut Vec<Pending>, produced: &mut Produced) {
    for ((partition, offset), expect) in futures::future::join_all(pending.drain(..)).await {
        if let Some(reason) = expect {
            produced.malformed.insert((partition, offset), reason);
        }
    }
}

fn set(h: &mut [(String, Vec<u8>)], key: &str, value: Vec<u8>) {
    for (k, v) in h.iter_mut() {
        if k == key {
            *v = value.clone();
        }
    }
}

/// Headers as the Lerian producer library writes them (SPEC appendix A); `ce-id` is second.
pub fn valid_headers(source: &str, tenant: &str) -> Vec<(String, Vec<u8>)> {
    [
        ("ce-specversion", "1.0".to_owned()),
        ("ce-id", Uuid::now_v7().to_string()),
        ("ce-source", source.to_owned()),
        (
            "ce-type",
            format!("studio.lerian.{source}.loan_application.approved"),
        ),
        ("ce-time", "2026-11-29T20:17:42.123456789Z".to_owned()),
        ("ce-schemaversion", "1.0.0".to_owned()),
        ("ce-resourcetype", "loan_application".to_owned()),
        ("ce-eventtype", "approved".to_owned()),
        ("ce-tenantid", tenant.to_owned()),
        ("ce-datacontenttype", "application/json".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_bytes()))
    .collect()
}

/// `group`'s committed offset and the high watermark of every partition of `topic`.
///
/// Retries transient broker answers: on a fresh broker the group coordinator (and its offsets
/// topic) comes up lazily and first answers `NotCoordinator`.
#[allow(clippy::disallowed_methods)] // a blocking test helper on its own thread, never a shard
pub fn offsets(topic: &str, group: &str) -> Vec<(i32, Option<i64>, i64)> {
    let mut last_error = None;
    for _ in 0..40 {
        match try_offsets(topic, group) {
            Ok(state) => return state,
            Err(e) => last_error = Some(e),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("offsets of {topic} for {group}: {last_error:?}");
}

fn try_offsets(
    topic: &str,
    group: &str,
) -> rdkafka::error::KafkaResult<Vec<(i32, Option<i64>, i64)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("group.id", group)
        .create()?;
    let partitions = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))?
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
    let mut out = Vec::with_capacity(partitions as usize);
    for p in 0..partitions {
        let c = committed
            .find_partition(topic, p)
            .and_then(|e| match e.offset() {
                Offset::Offset(n) => Some(n),
                _ => None,
            });
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        out.push((p, c, high));
    }
    Ok(out)
}

/// Waits until `group` has committed every partition of `topic` up to its high watermark.
pub async fn wait_caught_up(topic: &str, group: &str, limit: Duration) {
    if let Err(state) = caught_up_within(topic, group, limit).await {
        panic!("engine did not catch up in {limit:?}: {state:?}");
    }
}

/// Each partition: `(partition, committed next offset, high watermark)`.
pub type CommitState = Vec<(i32, Option<i64>, i64)>;

/// Whether `group` committed every partition of `topic` up to its high watermark within
/// `limit`; the last state read when it did not, for the caller to explain.
pub async fn caught_up_within(
    topic: &str,
    group: &str,
    limit: Duration,
) -> Result<(), CommitState> {
    let deadline = Instant::now() + limit;
    loop {
        let (t, g) = (topic.to_owned(), group.to_owned());
        let state = tokio::task::spawn_blocking(move || offsets(&t, &g))
            .await
            .expect("offsets");
        if state.iter().all(|(_, c, high)| *c == Some(*high)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(state);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Settings for a test that drives the hub's own consumer directly: a group of its own (`what`
/// and a fresh suffix), metadata and session short enough for a test.
pub fn member_settings(what: &str) -> hub_engine::ingest::kafka::KafkaSettings {
    hub_engine::ingest::kafka::KafkaSettings {
        brokers: KAFKA.into(),
        group_id: format!("{what}-{}", Uuid::now_v7().simple()),
        metadata_refresh_ms: 1_000,
        session_timeout_ms: 6_000,
        prefetch_kib: 64 << 10,
        prefetch_records: 100_000,
        fetch_wait_ms: 0,
        instance_id: None,
        security: Default::default(),
        sources: Default::default(),
    }
}

/// What a member holds, over `shards` shards whose lanes are numbered by partition.
pub fn member_assignment(shards: usize) -> Arc<hub_engine::ingest::assignment::Assignment> {
    use hub_engine::delivery::ownership::{Numbering, Ownership};
    Arc::new(hub_engine::ingest::assignment::Assignment::new(Arc::new(
        Ownership::new(Numbering::ByPartition, shards),
    )))
}

/// Creates `topic` (an existing one is left as it is).
pub async fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()
        .expect("admin");
    admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create topic");
}

pub async fn delete_topic(topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()
        .expect("admin");
    let _ = admin.delete_topics(&[topic], &AdminOptions::new()).await;
}

/// A free loopback port below the kernel's ephemeral range (`hub_core::loopback`).
pub fn free_port() -> u16 {
    hub_core::loopback::free_port().expect("a free loopback port below the ephemeral range")
}

/// The topics tests share: `lender`, which the delivery tests produce to, and the hub's own events.
const SHARED_TOPICS: [&str; 2] = ["lerian.streaming.lender", "lerian.streaming.hub"];

/// Tests that count what an engine ingests from the shared topics run one at a time, on shared
/// topics emptied first (a new consumer group reads them from the start). Topics of a test's own
/// source are left alone: only that test's engine subscribes to them. One at a time across test
/// processes too (a file lock beside the in-process one): two `cargo test` runs against one
/// broker would otherwise empty each other's topics and share consumer groups' rebalances.
/// Returns the guard to hold.
pub async fn exclusive_broker() -> BrokerGuard {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = LOCK.lock().await;
    let path = std::env::temp_dir().join("streaming-hub-tests-broker.lock");
    let file = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .expect("broker lock file");
        file.lock().expect("broker lock");
        file
    })
    .await
    .expect("broker lock");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .create()
        .expect("admin");
    // Absent topics answer "unknown topic", which is the state wanted.
    let _ = admin
        .delete_topics(&SHARED_TOPICS, &AdminOptions::new())
        .await;
    BrokerGuard {
        _process: guard,
        _file: file,
    }
}

/// The broker is this test's while it is held (the file's lock goes with the file).
pub struct BrokerGuard {
    _process: tokio::sync::MutexGuard<'static, ()>,
    _file: std::fs::File,
}

/// A bearer token for the standalone hub in `data_dir`, signed with the HS256 secret it generated.
pub fn token(data_dir: &std::path::Path, tenant: &str, permissions: &[&str]) -> String {
    partner_token(data_dir, tenant, permissions, None)
}

/// As `token`, a partner's when `partner` is given (R-CP-17: as the gateway relays it).
pub fn partner_token(
    data_dir: &std::path::Path,
    tenant: &str,
    permissions: &[&str],
    partner: Option<&str>,
) -> String {
    let secret =
        std::fs::read_to_string(data_dir.join("jwt-hs256.secret")).expect("generated secret");
    token_for(&secret, tenant, permissions, partner)
}

/// A bearer token signed with an HS256 `secret` (one a deployment's processes share).
pub fn token_signed(secret: &str, tenant: &str, permissions: &[&str]) -> String {
    token_for(secret, tenant, permissions, None)
}

/// A producer's token (the `ingest` permission) for `sources`, signed with `secret` (R-SEC-4).
pub fn ingest_token_signed(secret: &str, sources: &[&str]) -> String {
    let now = u64::try_from(hub_control::config::now_ms() / 1000).expect("now");
    hub_control::auth::mint_hs256_ingest(
        secret.trim().as_bytes(),
        &hub_control::auth::Mint {
            issuer: "access-manager",
            audience: "streaming-hub",
            subject: "producer",
            tenant: "platform",
            permissions: &["ingest"],
            ttl_s: 600,
            now_s: now,
        },
        sources,
    )
    .expect("token")
}

fn token_for(secret: &str, tenant: &str, permissions: &[&str], partner: Option<&str>) -> String {
    let now = u64::try_from(hub_control::config::now_ms() / 1000).expect("now");
    hub_control::auth::mint_hs256_for(
        secret.trim().as_bytes(),
        &hub_control::auth::Mint {
            issuer: "access-manager",
            audience: "streaming-hub",
            subject: "test",
            tenant,
            permissions,
            ttl_s: 600,
            now_s: now,
        },
        partner,
    )
    .expect("token")
}
