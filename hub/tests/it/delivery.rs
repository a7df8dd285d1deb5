//! Delivery end to end (issue 6): the `streaming-hub` binary, real Kafka, the embedded store or
//! the CQL server, and webhook receivers on loopback. Events produced to Kafka reach a verified webhook signed so the
//! Standard Webhooks library accepts them; a scripted failing receiver drives retries into a dead
//! letter, which replays; pause cancels queued deliveries.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::receiver::{Act, Counter, Receiver};
use crate::support::*;

/// Settings every delivery test runs with: loopback receivers allowed, a short poll, and hub
/// events kept off Kafka (every engine under test consumes `lerian.streaming.*`: one test's
/// `destination.verified` would land in another's exact counts). The test of that publication
/// turns it on while it holds the broker.
pub(crate) const ENV: &[(&str, &str)] = &[
    ("STREAMING_HUB_ALLOW_PRIVATE_HOSTS", "127.0.0.1"),
    ("STREAMING_HUB_DELIVERY_POLL_MS", "50"),
    ("STREAMING_HUB_PUBLISH_HUB_EVENTS", "false"),
];

/// The settings of an engine delivering from `backend`: on CQL, in a keyspace of its own — each
/// test's engine has its own control plane (subscriptions), and an engine pages every delivery
/// lane of its keyspace, so engines of parallel tests must not share one.
pub(crate) fn engine_env(backend: Backend, extra: &[(&str, &str)]) -> EngineEnv {
    let mut vars: Vec<(String, String)> = ENV
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let keyspace = match backend {
        Backend::Cql => {
            let keyspace = format!("hub_dlv_{}", Uuid::now_v7().simple());
            vars.push(("STREAMING_HUB_CQL_KEYSPACE".into(), keyspace.clone()));
            Some(Keyspace(keyspace))
        }
        Backend::Embedded => None,
    };
    EngineEnv {
        vars,
        _keyspace: keyspace,
    }
}

/// An engine's settings, and on CQL its keyspace (dropped with these settings).
pub(crate) struct EngineEnv {
    pub vars: Vec<(String, String)>,
    _keyspace: Option<Keyspace>,
}

/// A test engine's own CQL keyspace, dropped when the test is done with it: each holds a few
/// dozen tables, and a CQL server's heap grows with its tables (a thousand tables of left-over
/// test keyspaces ran a 1 GiB Cassandra out of memory). A failing test keeps its keyspace, named
/// on stderr, for a look.
pub(crate) struct Keyspace(String);

impl Drop for Keyspace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept the failed test's keyspace {}", self.0);
            return;
        }
        // Drop runs inside the test's runtime: the statement gets a runtime of its own.
        let name = self.0.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let session = scylla::client::session_builder::SessionBuilder::new()
                    .known_node(CQL)
                    .build()
                    .await
                    .map_err(|e| e.to_string())?;
                session
                    .query_unpaged(format!("DROP KEYSPACE IF EXISTS {name}"), ())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<(), String>(())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop keyspace {}: {e}", self.0);
        }
    }
}

/// Starts an engine with settings from `engine_env` (the same ones again after a crash).
pub(crate) fn start_engine(
    dir: &std::path::Path,
    group: &str,
    port: u16,
    backend: Backend,
    env: &EngineEnv,
) -> Engine {
    let env: Vec<(&str, &str)> = env
        .vars
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Engine::start_with(dir, group, port, backend, &env)
}

/// The tenant's API, as a client of `/v1` would use it.
pub(crate) struct Tenant {
    http: String,
    token: String,
    client: reqwest::Client,
}

impl Tenant {
    pub(crate) fn new(engine: &Engine, dir: &std::path::Path, tenant: &str) -> Tenant {
        Self::with_permissions(
            engine,
            dir,
            tenant,
            &["subscriptions:get", "subscriptions:post"],
        )
    }

    pub(crate) fn with_permissions(
        engine: &Engine,
        dir: &std::path::Path,
        tenant: &str,
        permissions: &[&str],
    ) -> Tenant {
        Tenant {
            http: engine.http.clone(),
            token: token(dir, tenant, permissions),
            client: reqwest::Client::new(),
        }
    }

    /// A tenant of the `/v1` at `http`, holding `token`.
    pub(crate) fn at(http: &str, token: String) -> Tenant {
        Tenant {
            http: http.to_owned(),
            token,
            client: reqwest::Client::new(),
        }
    }

    /// The bearer token, for transports other than REST.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.http);
        let mut req = match method {
            "GET" => self.client.get(url),
            "PUT" => self.client.put(url),
            "PATCH" => self.client.patch(url),
            _ => self.client.post(url),
        }
        .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req
                .header("x-idempotency", Uuid::now_v7().to_string())
                .json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Creates a webhook subscription and pings it active; returns (id, secret).
    pub(crate) async fn active_webhook(
        &self,
        name: &str,
        endpoint: &str,
        extra: Value,
    ) -> (String, String) {
        // Producer events only, unless the test asks otherwise: the hub's own events
        // (`destination.verified` of the tenant's other subscriptions) would add to the counts.
        let mut body = json!({
            "name": name,
            "sink_kind": "webhook",
            "endpoint": endpoint,
            "origin": "lender",
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let (status, created) = self.call("POST", "/v1/subscriptions", Some(body)).await;
        assert_eq!(status, 201, "create: {created}");
        let id = created["id"].as_str().expect("id").to_owned();
        let secret = created["secret"].as_str().expect("secret once").to_owned();
        assert_eq!(created["verification_state"], "pending_verification");
        let (status, ping) = self
            .call("POST", &format!("/v1/subscriptions/{id}/ping"), None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(ping["outcome"], "success", "ping: {ping}");
        assert_eq!(ping["verification_state"], "active");
        (id, secret)
    }
}

pub(crate) fn event_headers(tenant: &str, id: Uuid) -> Vec<(&'static str, String)> {
    vec![
        ("ce-specversion", "1.0".into()),
        ("ce-id", id.to_string()),
        ("ce-source", "lender".into()),
        (
            "ce-type",
            "studio.lerian.lender.loan_application.approved".into(),
        ),
        ("ce-time", "2026-11-29T20:17:42Z".into()),
        ("ce-schemaversion", "1.4.0".into()),
        ("ce-resourcetype", "loan_application".into()),
        ("ce-eventtype", "approved".into()),
        ("ce-tenantid", tenant.into()),
        ("ce-datacontenttype", "application/json".into()),
    ]
}

/// The engine's metrics once no job is pending, or after 15 s: a destination sees a delivery
/// before the engine records its outcome (outcomes are grouped into one store step), so a test
/// that saw every delivery arrive waits for the settlements before it reads the counts.
pub(crate) async fn metrics_once_settled(engine: &Engine) -> HashMap<String, u64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let m = engine.metrics().await;
        if m.get("streaming_hub_delivery_pending_jobs") == Some(&0)
            || std::time::Instant::now() > deadline
        {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Produces `n` events of `tenant` to `lerian.streaming.lender`; returns id → payload.
pub(crate) async fn produce(tenant: &str, n: usize) -> HashMap<String, Vec<u8>> {
    produce_over(&[tenant.to_owned()], n).await
}

/// Produces `n` events spread over `tenants` (in flights of 1,000 sends); returns id → payload.
pub(crate) async fn produce_over(tenants: &[String], n: usize) -> HashMap<String, Vec<u8>> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut sent = HashMap::new();
    let mut flight = Vec::new();
    for i in 0..n {
        let id = Uuid::now_v7();
        let payload = format!(r#"{{"loan":{i},"amount":"{}.00"}}"#, 100 + i).into_bytes();
        let mut headers = OwnedHeaders::new();
        for (k, v) in event_headers(&tenants[i % tenants.len()], id) {
            headers = headers.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        let key = id.to_string();
        sent.insert(key.clone(), payload.clone());
        let producer = &producer;
        flight.push(async move {
            producer
                .send(
                    FutureRecord::to("lerian.streaming.lender")
                        .key(&key)
                        .payload(&payload)
                        .headers(headers),
                    Duration::from_secs(30),
                )
                .await
                .expect("produced");
        });
        if flight.len() == 1000 {
            futures::future::join_all(flight.drain(..)).await;
        }
    }
    futures::future::join_all(flight).await;
    sent
}

/// Posts one event of `tenant` to the engine's HTTP ingest, with `extra` headers; returns its id.
pub(crate) async fn ingest_one(engine: &Engine, tenant: &str, extra: &[(&str, &str)]) -> Uuid {
    let event = Uuid::now_v7();
    let mut post = engine
        .post_ingest(&reqwest::Client::new(), "lender")
        .body("{}");
    for (k, v) in event_headers(tenant, event) {
        post = post.header(k, v);
    }
    for (k, v) in extra {
        post = post.header(*k, *v);
    }
    assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);
    event
}

/// The delivery of `event` that `receiver` got within 10 s, if any.
pub(crate) async fn delivery_of(
    receiver: &Receiver,
    event: Uuid,
) -> Option<crate::receiver::Received> {
    let id = event.to_string();
    for _ in 0..100 {
        if let Some(r) = receiver
            .received()
            .into_iter()
            .find(|r| r.header("x-lerian-event-id") == id)
        {
            return Some(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Polls `check` every 100 ms until it holds or `limit` passes.
pub(crate) async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits while `count` keeps growing toward `target`: true once it gets there; false when it
/// made no progress for `stall` (work lost or stuck) or `cap` passed. A slow machine only makes
/// it wait longer; a lost job still fails it, after `stall`.
pub(crate) async fn progresses_to(
    target: usize,
    stall: Duration,
    cap: Duration,
    count: impl Fn() -> usize,
) -> bool {
    let deadline = Instant::now() + cap;
    let (mut last, mut moved_at) = (count(), Instant::now());
    loop {
        let now_count = count();
        if now_count >= target {
            return true;
        }
        if now_count != last {
            (last, moved_at) = (now_count, Instant::now());
        }
        if moved_at.elapsed() > stall || Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) fn ids_on(receiver: &Receiver, path: &str) -> HashSet<String> {
    receiver
        .received()
        .iter()
        .filter(|r| r.path == path && matches!(r.act, Act::Status(200..=299)))
        .filter(|r| r.header("x-lerian-event-type") != "destination.ping")
        .map(|r| r.header("x-lerian-event-id").to_owned())
        .collect()
}

/// R-DI-1, R-DI-5, R-DI-12: events produced to Kafka reach a verified webhook once each, with
/// the hub's headers and a signature the Standard Webhooks library verifies; a subscription to
/// another key gets none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_5_produced_events_reach_a_verified_webhook_signed() {
    produced_events_reach_a_verified_webhook_signed(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_5_produced_events_reach_a_verified_webhook_signed_cql() {
    produced_events_reach_a_verified_webhook_signed(Backend::Cql).await;
}

async fn produced_events_reach_a_verified_webhook_signed(backend: Backend) {
    let _broker = exclusive_broker().await;
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_on("deliver", backend).await;
    let (_, secret) = api
        .active_webhook("all", &receiver.url("/all"), json!({}))
        .await;
    api.active_webhook(
        "other key",
        &receiver.url("/other"),
        json!({"event_types": ["loan_application.rejected"]}),
    )
    .await;
    let pings = receiver.received();
    assert_eq!(pings.len(), 2);
    assert!(pings[0].verifies_with(&secret), "the ping is signed too");
    assert_eq!(pings[0].header("x-lerian-event-type"), "destination.ping");
    // The engine follows the revision log every 250 ms.
    tokio::time::sleep(Duration::from_millis(800)).await;

    let sent = produce(&tenant, 300).await;
    let want: HashSet<String> = sent.keys().cloned().collect();
    assert!(
        eventually(Duration::from_secs(60), || ids_on(&receiver, "/all")
            == want)
        .await,
        "every event reaches the webhook ({} of {})",
        ids_on(&receiver, "/all").len(),
        want.len()
    );
    let deliveries: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/all" && r.header("x-lerian-event-type") != "destination.ping")
        .collect();
    assert_eq!(
        deliveries.len(),
        want.len(),
        "each event once: nothing failed, so nothing is repeated"
    );
    let mut delivery_ids = HashSet::new();
    for r in &deliveries {
        assert!(
            r.verifies_with(&secret),
            "Standard Webhooks verifies {}",
            r.header("webhook-id")
        );
        let id = r.header("x-lerian-event-id");
        assert_eq!(r.header("webhook-id"), id);
        assert_eq!(r.body, sent[id], "the raw payload, untouched");
        assert_eq!(r.header("x-lerian-event-type"), "loan_application.approved");
        assert_eq!(r.header("x-lerian-event-source"), "lender");
        assert_eq!(r.header("x-lerian-tenant-id"), tenant);
        assert_eq!(r.header("x-lerian-schema-version"), "1.4.0");
        assert_eq!(r.header("content-type"), "application/json");
        let ts = r.header("x-lerian-timestamp");
        assert!(ts.parse::<i64>().is_ok());
        assert!(r
            .header("x-lerian-signature")
            .starts_with(&format!("t={ts},v1=")));
        assert!(delivery_ids.insert(r.header("x-lerian-delivery-id").to_owned()));
    }
    assert!(
        ids_on(&receiver, "/other").is_empty(),
        "no match, no job (R-MA-2)"
    );
    let m = metrics_once_settled(&engine).await;
    assert!(m["streaming_hub_delivery_outcomes_total{outcome=\"delivered\"}"] >= 300);
    assert_eq!(m["streaming_hub_delivery_pending_jobs"], 0);
    operator_metrics_are_exposed(&engine).await;
    engine.stop();
}

/// R-OP-3 (issue 16): the histograms and gauges an operator alerts on — attempt duration per
/// sink kind, producer→delivery latency, store write time per stage, open breakers, Kafka
/// consumer lag per partition (librdkafka reports it every five seconds).
async fn operator_metrics_are_exposed(engine: &Engine) {
    let m = engine.metrics().await;
    assert!(m["streaming_hub_delivery_attempt_seconds_count{sink=\"webhook\"}"] >= 300);
    for since in ["produced", "received"] {
        let key = format!(
            "streaming_hub_delivery_latency_seconds_count{{sink=\"webhook\",since=\"{since}\"}}"
        );
        assert!(m.get(&key).is_some_and(|n| *n >= 300), "{key}");
    }
    assert!(
        m.iter().any(
            |(k, n)| k.starts_with("streaming_hub_store_write_seconds_count{stage=") && *n > 0
        ),
        "store write stages"
    );
    assert_eq!(
        m["streaming_hub_delivery_breakers_open"], 0,
        "no breaker opened"
    );
    let mut lag_seen = false;
    for _ in 0..30 {
        let m = engine.metrics().await;
        lag_seen = m
            .keys()
            .any(|k| k.starts_with("streaming_hub_kafka_consumer_lag{topic=\"lerian.streaming."));
        if lag_seen {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(lag_seen, "consumer lag per partition");
}

/// A running engine on a fresh data directory with a receiver (scripted by default) and one
/// tenant's API.
pub(crate) struct Setup<R = Receiver> {
    pub receiver: R,
    pub engine: Engine,
    pub tenant: String,
    pub api: Tenant,
    /// What the engine runs with, to start it again.
    pub again: Restart,
    /// Its keyspace is dropped after the engine.
    pub env: EngineEnv,
    /// Last: the engine's log, which a failed test shows as the engine drops, is in it.
    pub dir: tempfile::TempDir,
}

impl Setup {
    pub(crate) async fn start(name: &str) -> Setup {
        Self::start_on(name, Backend::Embedded).await
    }

    pub(crate) async fn start_on(name: &str, backend: Backend) -> Setup {
        Self::start_with(name, backend, &[]).await
    }

    pub(crate) async fn start_with(name: &str, backend: Backend, extra: &[(&str, &str)]) -> Setup {
        Setup::around(Receiver::start().await, name, backend, extra).await
    }
}

impl Setup<Counter> {
    /// With a receiver that only counts and times what arrives, for tests under load.
    pub(crate) async fn counting(name: &str, backend: Backend, extra: &[(&str, &str)]) -> Self {
        Setup::around(Counter::start().await, name, backend, extra).await
    }
}

/// The consumer group, port and store an engine of a [`Setup`] runs with, to start it again.
pub(crate) struct Restart {
    pub group: String,
    pub port: u16,
    pub backend: Backend,
}

/// How a test ends its engine.
pub(crate) enum End {
    /// SIGKILL: no shutdown path runs.
    Kill9,
    /// SIGTERM, and a clean exit.
    Stop,
}

impl<R> Setup<R> {
    async fn around(receiver: R, name: &str, backend: Backend, extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let group = format!("{name}-{}", Uuid::now_v7().simple());
        let env = engine_env(backend, extra);
        let port = free_port();
        let engine = start_engine(dir.path(), &group, port, backend, &env);
        engine.wait_ready().await;
        let tenant = format!("t-{name}-{}", Uuid::now_v7().simple());
        let api = Tenant::new(&engine, dir.path(), &tenant);
        Setup {
            dir,
            receiver,
            engine,
            tenant,
            api,
            again: Restart {
                group,
                port,
                backend,
            },
            env,
        }
    }

    /// Ends the engine, to start it again with [`Setup::start_again`].
    pub(crate) fn end_engine(&mut self, end: End) {
        match end {
            End::Kill9 => kill_9(&mut self.engine.child),
            End::Stop => stop_gracefully(&mut self.engine.child),
        }
    }

    /// Starts the engine again, ended first, on the same directory, group, port and settings.
    pub(crate) async fn start_again(&mut self) {
        let Restart {
            group,
            port,
            backend,
        } = &self.again;
        let engine = start_engine(self.dir.path(), group, *port, *backend, &self.env);
        engine.wait_ready().await;
        self.engine = engine;
    }

    /// `tenant`'s API on this engine.
    pub(crate) fn tenant_api(&self, tenant: &str) -> Tenant {
        Tenant::new(&self.engine, self.dir.path(), tenant)
    }
}

/// R-DI-6, R-DI-8, R-DI-13, R-CP-12: a receiver that answers 500, then stalls past the timeout,
/// then resets the connection uses up a three-step curve; the job is dead-lettered with its last
/// outcome, health says Failing; replayed once the receiver recovers, it is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_8_a_failing_destination_dead_letters_then_replays() {
    failing_destination_dead_letters_then_replays(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_8_a_failing_destination_dead_letters_then_replays_cql() {
    failing_destination_dead_letters_then_replays(Backend::Cql).await;
}

async fn failing_destination_dead_letters_then_replays(backend: Backend) {
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_on("deadletter", backend).await;
    let (id, secret) = api
        .active_webhook(
            "flaky",
            &receiver.url("/flaky"),
            json!({"retry_schedule": [0, 1, 1], "timeout_ms": 1000}),
        )
        .await;
    receiver.script(
        &[
            Act::Status(500),
            Act::Stall(Duration::from_secs(3)),
            Act::Reset,
        ],
        Act::Status(503),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;

    let event = Uuid::now_v7();
    let mut post = engine
        .post_ingest(&reqwest::Client::new(), "lender")
        .body(r#"{"amount":"1.00"}"#);
    for (k, v) in event_headers(&tenant, event) {
        post = post.header(k, v);
    }
    assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);

    let dead_path = format!("/v1/subscriptions/{id}/dead-letters");
    let mut letters = Value::Null;
    for _ in 0..150 {
        let (status, body) = api.call("GET", &dead_path, None).await;
        assert_eq!(status, 200);
        if body["items"].as_array().is_some_and(|a| !a.is_empty()) {
            letters = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let items = letters["items"]
        .as_array()
        .expect("a dead letter within 15 s");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["event_id"], event.to_string());
    assert_eq!(items[0]["attempts"], 3);
    assert_eq!(items[0]["reason"], "attempts exhausted after 3");
    assert_eq!(items[0]["last_attempt"]["error_class"], "connection_reset");

    let attempts: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|r| r.header("x-lerian-event-id") == event.to_string())
        .collect();
    assert_eq!(attempts.len(), 3, "exactly the curve's three attempts");
    let acts: Vec<Act> = attempts.iter().map(|r| r.act).collect();
    assert_eq!(
        acts,
        vec![
            Act::Status(500),
            Act::Stall(Duration::from_secs(3)),
            Act::Reset
        ]
    );
    let delivery_ids: HashSet<&str> = attempts
        .iter()
        .map(|r| r.header("x-lerian-delivery-id"))
        .collect();
    assert_eq!(delivery_ids.len(), 3, "a new delivery id per attempt");
    assert!(attempts.iter().all(|r| r.verifies_with(&secret)));

    // The dead letter is written before the step's statistics, which the CQL store keeps in
    // memory and writes within a second: the health follows the dead letter shortly after.
    let failing = crate::two_process::eventually(Duration::from_secs(15), || async {
        let (_, health) = api
            .call("GET", &format!("/v1/subscriptions/{id}/health"), None)
            .await;
        (health["status"] == "Failing" && health["failed_attempts"] == 3).then_some(health)
    })
    .await;
    let health = failing.expect("the health turns Failing with the three failed attempts");
    assert_eq!(health["dead_letters"], 1);
    assert_eq!(health["failed_attempts"], 3);
    let classes: Vec<&str> = health["recent_outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .filter_map(|o| o["error_class"].as_str())
        .collect();
    assert_eq!(classes, vec!["http_status", "timeout", "connection_reset"]);

    // The same over gRPC (R-TR-2): the dead letter and the health REST shows.
    let grpc = crate::pull_grpc::DeliveriesGrpc::connect(&engine.http, api.token()).await;
    let (grpc_letters, grpc_health) = grpc.dead_letters_and_health(&id.to_string()).await;
    assert_eq!(grpc_letters.len(), 1);
    assert_eq!(grpc_letters[0].id, items[0]["id"].as_str().expect("id"));
    let last = grpc_letters[0].last_attempt.as_ref().expect("last attempt");
    assert_eq!(last.error_class.as_deref(), Some("connection_reset"));
    assert_eq!(
        (grpc_health.status.as_str(), grpc_health.dead_letters),
        ("Failing", 1)
    );

    // A limit outside what the document allows is refused, not clamped.
    for bad in ["0", "1001"] {
        let (status, _) = api
            .call("GET", &format!("{dead_path}?limit={bad}"), None)
            .await;
        assert_eq!(status, 400, "limit={bad}");
    }

    // Another tenant cannot see or replay them.
    let stranger = Tenant::new(&engine, dir.path(), "someone-else");
    assert_eq!(stranger.call("GET", &dead_path, None).await.0, 404);

    receiver.script(&[], Act::Status(204));
    // Replayed over REST on one store and over gRPC (by id) on the other: both transports.
    let replayed = match backend {
        Backend::Embedded => {
            let (status, replayed) = api.call("POST", &format!("{dead_path}/replay"), None).await;
            assert_eq!(status, 200);
            replayed["replayed"].as_u64()
        }
        Backend::Cql => Some(grpc.replay(&id.to_string(), &grpc_letters[0].id).await),
    };
    assert_eq!(replayed, Some(1));
    assert!(
        eventually(Duration::from_secs(15), || ids_on(&receiver, "/flaky")
            .contains(&event.to_string()))
        .await,
        "the replayed job is delivered"
    );
    let (_, body) = api.call("GET", &dead_path, None).await;
    assert_eq!(body["items"], json!([]));
    // The receiver sees the POST before the engine records its outcome (settles are grouped),
    // so the health turns Healthy shortly after the delivery, not with it.
    let health_path = format!("/v1/subscriptions/{id}/health");
    let healthy = crate::two_process::eventually(Duration::from_secs(15), || async {
        let (_, health) = api.call("GET", &health_path, None).await;
        (health["status"] == "Healthy").then_some(())
    })
    .await;
    let (_, health) = api.call("GET", &health_path, None).await;
    assert!(healthy.is_some(), "healthy after the replay: {health}");
    engine.stop();
}

/// R-CP-11: pause stops delivery at once and cancels what was queued; resume delivers only what
/// arrives after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_11_pause_cancels_queued_deliveries_and_resume_takes_new_events() {
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start("pause").await;
    // The first attempt stalls past its 1 s timeout, so the pause lands while it is in flight;
    // its retry then comes due while paused or after resume: cancelled either way.
    let (id, _) = api
        .active_webhook(
            "p",
            &receiver.url("/p"),
            json!({"retry_schedule": [0, 1], "timeout_ms": 1000}),
        )
        .await;
    receiver.script(&[Act::Stall(Duration::from_secs(3))], Act::Status(204));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let ingest = |event: Uuid| {
        let mut post = engine
            .post_ingest(&reqwest::Client::new(), "lender")
            .body("{}");
        for (k, v) in event_headers(&tenant, event) {
            post = post.header(k, v);
        }
        async move { post.send().await.expect("ingest").status().as_u16() }
    };
    let before = Uuid::now_v7();
    assert_eq!(ingest(before).await, 202);
    assert!(
        eventually(Duration::from_secs(10), || receiver.received().len() == 2).await,
        "the first attempt is in flight"
    );
    let (status, _) = api
        .call("POST", &format!("/v1/subscriptions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, _) = api
        .call("POST", &format!("/v1/subscriptions/{id}/resume"), None)
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = Uuid::now_v7();
    assert_eq!(ingest(after).await, 202);
    assert!(
        eventually(Duration::from_secs(10), || ids_on(&receiver, "/p")
            .contains(&after.to_string()))
        .await,
        "an event after resume is delivered"
    );
    // The queued retry came due while paused or after resume: cancelled, never sent.
    assert!(!ids_on(&receiver, "/p").contains(&before.to_string()));
    let m = engine.metrics().await;
    assert_eq!(
        m["streaming_hub_delivery_outcomes_total{outcome=\"cancelled\"}"],
        1
    );
    let m = metrics_once_settled(&engine).await;
    assert_eq!(m["streaming_hub_delivery_pending_jobs"], 0);
    engine.stop();
}

/// R-CP-5: a first successful probe emits `hub.destination.verified` (source `hub`) through the
/// pipeline, and a subscription of the same tenant with `origin: hub` receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_5_verification_emits_a_hub_event_delivered_like_any_event() {
    let _broker = exclusive_broker().await;
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with(
        "hubevents",
        Backend::Embedded,
        &[("STREAMING_HUB_PUBLISH_HUB_EVENTS", "true")],
    )
    .await;
    api.active_webhook(
        "ops",
        &receiver.url("/ops"),
        json!({"origin": "hub", "event_types": ["destination.verified"]}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (orders, _) = api
        .active_webhook("orders", &receiver.url("/orders"), json!({}))
        .await;
    let event = hub_event(&receiver, "destination.verified", &orders, 10).await;
    assert_eq!(event.header("x-lerian-event-source"), "hub");
    assert_eq!(event.header("x-lerian-tenant-id"), tenant);
    // Also published to Kafka as a CloudEvent; the engine reads that copy back as a duplicate.
    let id = event.header("x-lerian-event-id").to_owned();
    let published = hub_event_on_kafka(&id).await;
    assert_eq!(
        published.get("ce-tenantid").map(String::as_str),
        Some(tenant.as_str())
    );
    assert_eq!(
        published.get("ce-type").map(String::as_str),
        Some("studio.lerian.hub.destination.verified")
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let copies = receiver
        .received()
        .iter()
        .filter(|r| r.header("x-lerian-event-id") == id)
        .count();
    assert_eq!(copies, 1, "delivered once, the Kafka copy deduplicated");
    engine.stop();
}

/// The hub event `key` about subscription `sub` as `receiver` got it (waits up to `secs`).
async fn hub_event(
    receiver: &Receiver,
    key: &str,
    sub: &str,
    secs: u64,
) -> crate::receiver::Received {
    let find = || {
        receiver.received().into_iter().find(|r| {
            r.header("x-lerian-event-type") == key
                && serde_json::from_slice::<Value>(&r.body)
                    .is_ok_and(|b| b["subscription_id"] == sub)
        })
    };
    assert!(
        eventually(Duration::from_secs(secs), || find().is_some()).await,
        "hub.{key} about {sub} reaches the webhook"
    );
    find().expect("event")
}

/// The headers of the hub event `id` on `lerian.streaming.hub` (waits up to 20 s).
async fn hub_event_on_kafka(id: &str) -> HashMap<String, String> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::Headers;
    use rdkafka::Message;
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", KAFKA)
        .set(
            "group.id",
            format!("hub-events-{}", Uuid::now_v7().simple()),
        )
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .expect("consumer");
    consumer
        .subscribe(&["lerian.streaming.hub"])
        .expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await else {
            continue;
        };
        let headers: HashMap<String, String> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        let value = h.value.map(String::from_utf8_lossy).unwrap_or_default();
                        (h.key.to_owned(), value.into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if headers.get("ce-id").map(String::as_str) == Some(id) {
            return headers;
        }
    }
    panic!("hub event {id} not published to lerian.streaming.hub");
}

/// R-DI-10, R-CP-5: a destination failing long enough (both gates, shortened here) is
/// auto-disabled with its reason recorded, and `hub.destination.disabled` reaches the tenant's
/// `origin: hub` webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_10_a_long_broken_destination_is_auto_disabled_and_announced() {
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with(
        "autodisable",
        Backend::Embedded,
        &[
            ("STREAMING_HUB_AUTODISABLE_WINDOW_MS", "3000"),
            ("STREAMING_HUB_AUTODISABLE_MIN_SPREAD_MS", "1000"),
            // The open breaker holds attempts back, and only a failing attempt checks the gates:
            // at the default 30 s cool-down the verdict waited for the half-open probe.
            ("STREAMING_HUB_BREAKER_COOL_DOWN_MS", "1000"),
        ],
    )
    .await;
    let ops = Receiver::start().await;
    api.active_webhook(
        "ops",
        &ops.url("/ops"),
        json!({"origin": "hub", "event_types": ["destination.disabled"]}),
    )
    .await;
    let (broken, _) = api
        .active_webhook(
            "broken",
            &receiver.url("/broken"),
            json!({"retry_schedule": [1, 1, 1, 1, 1, 1, 1]}),
        )
        .await;
    receiver.script(&[], Act::Status(500));
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Failures spread over seconds: events keep coming while the first ones retry.
    for _ in 0..8 {
        let mut post = engine
            .post_ingest(&reqwest::Client::new(), "lender")
            .body("{}");
        for (k, v) in event_headers(&tenant, Uuid::now_v7()) {
            post = post.header(k, v);
        }
        assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let event = hub_event(&ops, "destination.disabled", &broken, 30).await;
    assert_eq!(event.header("x-lerian-event-source"), "hub");
    let body: Value = serde_json::from_slice(&event.body).expect("json");
    assert!(body["reason"]
        .as_str()
        .is_some_and(|r| r.contains("failing for")));
    let (status, sub) = api
        .call("GET", &format!("/v1/subscriptions/{broken}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(sub["enabled"], false, "{sub}");
    assert_eq!(
        sub["verification_state"], "active",
        "R-DI-10 never touches it"
    );
    assert!(sub["disabled_reason"].as_str().is_some(), "{sub}");
    assert!(sub["disabled_at"].as_str().is_some(), "{sub}");
    engine.stop();
}
