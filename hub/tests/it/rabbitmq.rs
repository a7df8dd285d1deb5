//! The RabbitMQ sink end to end (SPEC §4, R-SK-1, R-SK-2, R-CP-6, R-DI-8): the
//! `streaming-hub` binary, real Kafka and the real RabbitMQ started by `scripts/services`.
//! Onboarding by credential, every event once with its `ce-*` headers, an outage retried until
//! the broker is back, an unroutable publish dead-lettered as permanent.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::delivery::{produce, Setup, Tenant};
use crate::support::*;

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

async fn channel() -> (Connection, Channel) {
    let conn = Connection::connect(AMQP, ConnectionProperties::default())
        .await
        .expect("rabbitmq on 127.0.0.1:5672 (scripts/services up)");
    let ch = conn.create_channel().await.expect("channel");
    (conn, ch)
}

async fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(
        queue,
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue");
}

/// A test's side of the broker: a connection, a channel and a fresh durable queue.
struct Broker {
    conn: Connection,
    ch: Channel,
    queue: String,
}

impl Broker {
    async fn with_queue() -> Broker {
        let (conn, ch) = channel().await;
        let queue = format!("hub-it-{}", Uuid::now_v7().simple());
        declare(&ch, &queue).await;
        Broker { conn, ch, queue }
    }

    /// The endpoint of the queue through the default exchange, on `port` (5672 or a relay).
    fn endpoint(&self, port: u16) -> String {
        format!("amqp://127.0.0.1:{port}/?routing_key={}", self.queue)
    }

    async fn close(self) {
        let _ = self
            .ch
            .queue_delete(&self.queue, QueueDeleteOptions::default())
            .await;
        let _ = self.conn.close(200, "done").await;
    }
}

/// The allow-list that lets the hub reach the local broker (R-SK-2: host and AMQP port).
const LOCAL_BROKER: &[(&str, &str)] = &[(
    "STREAMING_HUB_ALLOW_PRIVATE_HOSTS",
    "127.0.0.1,127.0.0.1:5672",
)];

/// A message as the test reads it: (headers, content type, delivery mode, body).
struct Got {
    headers: HashMap<String, String>,
    content_type: Option<String>,
    delivery_mode: Option<u8>,
    body: Vec<u8>,
}

/// Consumes from `queue` until `want` messages other than probes arrived or `limit` passed.
/// Takes messages until `want` distinct `ce-id`s have arrived or `limit` passes. Distinct, not
/// counted: delivery is at least once, and a publish whose confirm was lost with its connection
/// arrives twice; counting messages would stop one short of the last event.
async fn consume(ch: &Channel, queue: &str, want: usize, limit: Duration) -> Vec<Got> {
    let mut consumer = ch
        .basic_consume(
            queue,
            &format!("test-{}", Uuid::now_v7().simple()),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let mut got: Vec<Got> = Vec::new();
    let mut distinct = HashSet::new();
    let deadline = tokio::time::Instant::now() + limit;
    while distinct.len() < want {
        let next = tokio::time::timeout_at(deadline, consumer.next()).await;
        let Ok(Some(Ok(d))) = next else { break };
        d.ack(BasicAckOptions::default()).await.expect("ack");
        let headers = d
            .properties
            .headers()
            .as_ref()
            .map(|h| {
                h.inner()
                    .iter()
                    .filter_map(|(k, v)| match v {
                        AMQPValue::LongString(s) => Some((k.to_string(), s.to_string())),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let m = Got {
            headers,
            content_type: d.properties.content_type().as_ref().map(|c| c.to_string()),
            delivery_mode: *d.properties.delivery_mode(),
            body: d.data,
        };
        if m.headers.get("ce-type").map(String::as_str) != Some("destination.ping") {
            distinct.insert(m.headers.get("ce-id").cloned());
            got.push(m);
        }
    }
    got
}

/// Sends guest's credential for subscription `id`.
async fn put_guest(api: &Tenant, id: &str) -> (u16, Value) {
    api.call(
        "PUT",
        &format!("/v1/subscriptions/{id}/credential"),
        Some(json!({"username": "guest", "password": "guest"})),
    )
    .await
}

/// Posts one event of `tenant` to the engine's HTTP ingest.
async fn ingest_one(
    client: &reqwest::Client,
    producer: &crate::support::Producer,
    tenant: &str,
) -> String {
    let ev = Uuid::now_v7();
    let mut post = producer.post(client, "lender").body("{}");
    for (k, v) in crate::delivery::event_headers(tenant, ev) {
        post = post.header(k, v);
    }
    assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);
    ev.to_string()
}

/// Creates a RabbitMQ subscription (pending) and onboards it with guest's credential.
async fn onboarded(api: &Tenant, endpoint: &str, extra: Value) -> String {
    let mut body = json!({
        "name": format!("mq-{}", Uuid::now_v7().simple()),
        "sink_kind": "rabbitmq",
        "endpoint": endpoint,
        "origin": "lender",
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, created) = api.call("POST", "/v1/subscriptions", Some(body)).await;
    assert_eq!(status, 201, "create: {created}");
    assert_eq!(created["verification_state"], "pending_verification");
    assert!(
        created.get("secret").is_none(),
        "a queue kind has no signing secret"
    );
    let id = created["id"].as_str().expect("id").to_owned();
    let (status, put) = put_guest(api, &id).await;
    assert_eq!(status, 200, "credential: {put}");
    assert_eq!(put["verification_state"], "active");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sk_1_kafka_events_reach_a_rabbitmq_queue_once_with_ce_headers() {
    let _broker = exclusive_broker().await;
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir: _dir,
        receiver: _receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with("rabbit", Backend::Embedded, LOCAL_BROKER).await;
    let broker = Broker::with_queue().await;
    let (ch, queue) = (&broker.ch, broker.queue.clone());
    let id = onboarded(&api, &broker.endpoint(5672), json!({})).await;
    let (_, read) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    let text = read.to_string();
    assert!(
        !text.contains("password") && !text.contains("credential"),
        "no credential on a read: {text}"
    );
    let (status, ping) = api
        .call("POST", &format!("/v1/subscriptions/{id}/ping"), None)
        .await;
    assert_eq!(
        (status, ping["outcome"].as_str()),
        (200, Some("success")),
        "{ping}"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;

    let sent = produce(&tenant, 200).await;
    let got = consume(ch, &queue, sent.len(), Duration::from_secs(60)).await;
    let ids: Vec<&str> = got
        .iter()
        .filter_map(|m| m.headers.get("ce-id").map(String::as_str))
        .collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), sent.len(), "every event arrives");
    assert_eq!(ids.len(), sent.len(), "each once");
    for m in &got {
        let ce_id = &m.headers["ce-id"];
        assert_eq!(m.body, sent[ce_id], "the raw payload is the body");
        assert_eq!(
            m.headers["ce-type"], "loan_application.approved",
            "R-SK-1: the plain key"
        );
        assert_eq!(m.headers["ce-source"], "lender");
        assert_eq!(m.headers["ce-tenantid"], tenant);
        assert_eq!(m.headers["ce-specversion"], "1.0");
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert_eq!(m.delivery_mode, Some(2), "persistent");
    }
    broker.close().await;
    eprintln!(
        "rabbitmq: {} events from Kafka published to {queue} once each, with ce-* headers",
        sent.len()
    );
    engine.stop();
}

/// R-CP-6, R-CP-3, R-SK-2 and bad input: what onboarding refuses, and that a refusal stores
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_6_a_credential_is_stored_only_when_its_probe_succeeds() {
    // A "broker" that accepts the connection and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let allow = format!("127.0.0.1,127.0.0.1:5672,127.0.0.1:{silent_port}");
    let Setup {
        env: _env,
        dir: _dir,
        receiver,
        engine,
        tenant: _,
        api,
        ..
    } = Setup::start_with(
        "rabbit-onboard",
        Backend::Embedded,
        &[("STREAMING_HUB_ALLOW_PRIVATE_HOSTS", &allow)],
    )
    .await;
    let broker = Broker::with_queue().await;
    let create = |name: &str, endpoint: String, extra: Value| {
        let mut body = json!({"name": name, "sink_kind": "rabbitmq", "endpoint": endpoint});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        body
    };
    // Inline credentials and unusable endpoints are refused on create.
    let (status, body) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(create(
                "inline",
                broker.endpoint(5672),
                json!({"credential": {"username": "guest", "password": "guest"}}),
            )),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    for bad in [
        "amqp://127.0.0.1:5672/",
        "amqp://guest:guest@127.0.0.1:5672/?routing_key=q",
        "amqp://127.0.0.1:5672/?routing_key=q&colour=red",
        "https://127.0.0.1/?routing_key=q",
    ] {
        let (status, body) = api
            .call(
                "POST",
                "/v1/subscriptions",
                Some(create("bad", bad.into(), json!({}))),
            )
            .await;
        assert_eq!(status, 422, "{bad}: {body}");
    }
    // A private broker not on the allow-list (its port is not) is refused (R-SK-2).
    let (status, body) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(create(
                "private",
                "amqp://127.0.0.1:5673/?routing_key=q".into(),
                json!({}),
            )),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("destination_not_allowed")),
        "{body}"
    );
    let (status, created) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(create("mq", broker.endpoint(5672), json!({}))),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let (status, ping) = api
        .call("POST", &format!("/v1/subscriptions/{id}/ping"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        ping["error_class"], "secret_unavailable",
        "no credential yet: {ping}"
    );
    let before = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await
        .1;

    let path = format!("/v1/subscriptions/{id}/credential");
    let (status, body) = api
        .call(
            "PUT",
            &path,
            Some(json!({"username": "guest", "password": "not-the-password"})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "destination_probe_failed");
    assert_eq!(body["error_class"], "authentication_failed", "{body}");
    assert!(
        !body.to_string().contains("not-the-password"),
        "no secret in errors"
    );
    let (_, read) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert_eq!(
        read["verification_state"], "pending_verification",
        "nothing stored"
    );
    assert_eq!(read["updated_at"], before["updated_at"], "nothing written");
    for bad in [
        json!({"username": "guest"}),
        json!({"user": "guest", "password": "guest"}),
    ] {
        let (status, body) = api.call("PUT", &path, Some(bad)).await;
        assert_eq!(status, 422, "{body}");
    }
    // A missing exchange: the probe says so, nothing is stored.
    let (status, missing) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(create(
                "missing",
                format!(
                    "amqp://127.0.0.1:5672/?exchange=hub-none-{}",
                    Uuid::now_v7().simple()
                ),
                json!({}),
            )),
        )
        .await;
    assert_eq!(status, 201);
    let (status, body) = put_guest(&api, missing["id"].as_str().unwrap_or_default()).await;
    assert_eq!(
        (status, body["error_class"].as_str()),
        (422, Some("destination_missing")),
        "{body}"
    );

    // A broker that never answers: the probe times out, classified.
    let (_, mute) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(create(
                "mute",
                format!("amqp://127.0.0.1:{silent_port}/?routing_key=q"),
                json!({}),
            )),
        )
        .await;
    let (status, body) = put_guest(&api, mute["id"].as_str().unwrap_or_default()).await;
    assert_eq!(
        (status, body["error_class"].as_str()),
        (422, Some("timeout")),
        "{body}"
    );

    // A credential for a webhook is refused.
    let (hook, _) = api
        .active_webhook("hook", &receiver.url("/h"), json!({}))
        .await;
    let (status, body) = put_guest(&api, &hook).await;
    assert_eq!(status, 422, "{body}");

    let (status, put) = api
        .call(
            "PUT",
            &path,
            Some(json!({"username": "guest", "password": "guest"})),
        )
        .await;
    assert_eq!(
        (status, put["verification_state"].as_str()),
        (200, Some("active")),
        "{put}"
    );
    broker.close().await;
    engine.stop();
}

/// A loopback TCP relay to the real broker that the test can cut: while down, open
/// connections are dropped and new ones closed at once, as a stopped broker would.
struct Relay {
    port: u16,
    down: Arc<AtomicBool>,
}

impl Relay {
    async fn start(to: &'static str) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let down = Arc::new(AtomicBool::new(false));
        let flag = down.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if flag.load(Ordering::Acquire) {
                    let _ = inbound.shutdown().await;
                    continue;
                }
                let flag = flag.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    let cut = async {
                        while !flag.load(Ordering::Acquire) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! { _ = copy => {}, _ = cut => {} }
                });
            }
        });
        Relay { port, down }
    }
}

/// R-DI-8 / R-DI-6 for RabbitMQ: the broker becomes unreachable mid-run; attempts fail and are
/// retried on the curve; once it is back every event arrives, none dead-lettered. A publish the
/// cut caught between broker and confirm arrives twice (at least once), so arrivals are counted
/// by `ce-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_6_a_rabbitmq_outage_is_retried_and_delivered_when_the_broker_returns() {
    let relay = Relay::start("127.0.0.1:5672").await;
    let allow = format!("127.0.0.1,127.0.0.1:{}", relay.port);
    let Setup {
        env: _env,
        dir: _dir,
        receiver: _receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with(
        "rabbit-outage",
        Backend::Embedded,
        &[
            ("STREAMING_HUB_ALLOW_PRIVATE_HOSTS", &allow),
            // The breaker opens during the outage; its probe comes after 2 s, not 30.
            ("STREAMING_HUB_BREAKER_COOL_DOWN_MS", "2000"),
        ],
    )
    .await;
    let broker = Broker::with_queue().await;
    let (ch, queue) = (&broker.ch, broker.queue.clone());
    let id = onboarded(
        &api,
        &broker.endpoint(relay.port),
        json!({"retry_schedule": [0, 2, 2, 2, 2, 2, 2, 2]}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    relay.down.store(true, Ordering::Release);
    let client = reqwest::Client::new();
    let mut sent = HashSet::new();
    for _ in 0..20 {
        sent.insert(ingest_one(&client, &engine.producer(), &tenant).await);
    }
    let health = || async {
        api.call("GET", &format!("/v1/subscriptions/{id}/health"), None)
            .await
            .1
    };
    let mut saw_failures = false;
    for _ in 0..50 {
        if health().await["failed_attempts"].as_u64().unwrap_or(0) > 0 {
            saw_failures = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(saw_failures, "attempts fail while the broker is away");
    let read = || async {
        api.call("GET", &format!("/v1/subscriptions/{id}"), None)
            .await
            .1
    };
    let mut failing = Value::Null;
    for _ in 0..50 {
        failing = read().await;
        if failing.get("last_failure_at").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        failing.get("last_failure_at").is_some(),
        "R-CP-2: a failing destination shows last_failure_at: {failing}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.down.store(false, Ordering::Release);
    let got = consume(ch, &queue, sent.len(), Duration::from_secs(60)).await;
    let ids: HashSet<String> = got
        .iter()
        .filter_map(|m| m.headers.get("ce-id").cloned())
        .collect();
    assert_eq!(ids, sent, "every event arrives once the broker is back");
    eprintln!(
        "rabbitmq outage: {} events arrived as {} messages after the broker returned",
        ids.len(),
        got.len()
    );
    let h = health().await;
    assert_eq!(h["dead_letters"], 0, "nothing dead-lettered: {h}");
    let mut recovered = Value::Null;
    for _ in 0..50 {
        recovered = read().await;
        if recovered.get("last_failure_at").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        recovered.get("last_failure_at").is_none() && recovered.get("last_success_at").is_some(),
        "R-CP-2: a success clears last_failure_at and sets last_success_at: {recovered}"
    );
    broker.close().await;
    engine.stop();
}

/// R-DI-8: a publish no queue takes (the queue was deleted) is unroutable — a permanent
/// failure: dead-lettered at once with its class, and delivered by a replay once the queue is
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_8_an_unroutable_rabbitmq_publish_is_dead_lettered_and_replays() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver: _receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with("rabbit-unroutable", Backend::Embedded, LOCAL_BROKER).await;
    let broker = Broker::with_queue().await;
    let (ch, queue) = (&broker.ch, broker.queue.clone());
    let id = onboarded(&api, &broker.endpoint(5672), json!({})).await;
    ch.queue_delete(&queue, QueueDeleteOptions::default())
        .await
        .expect("delete queue");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        ingest_one(&client, &engine.producer(), &tenant).await;
    }
    let dead_path = format!("/v1/subscriptions/{id}/dead-letters");
    let mut dead = Value::Null;
    for _ in 0..100 {
        dead = api.call("GET", &dead_path, None).await.1;
        if dead["items"].as_array().is_some_and(|i| i.len() == 3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let items = dead["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 3, "dead letters: {dead}");
    for d in &items {
        assert_eq!(d["attempts"], 1, "no retry for a permanent failure: {d}");
        assert_eq!(d["last_attempt"]["error_class"], "unroutable");
        assert!(d["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("unroutable"));
    }
    declare(ch, &queue).await;
    let (status, replay) = api
        .call("POST", &format!("{dead_path}/replay"), Some(json!({})))
        .await;
    assert_eq!(
        (status, replay["replayed"].as_u64()),
        (200, Some(3)),
        "{replay}"
    );
    let got = consume(ch, &queue, 3, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 3, "replayed dead letters are delivered");
    broker.close().await;
    engine.stop();
}
