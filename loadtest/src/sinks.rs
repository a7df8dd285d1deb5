//! The non-webhook sinks of a delivery run (`--sink rabbitmq|sqs|pull`): their subscriptions,
//! the consumers that read what the hub delivered into the run's `Tally`, and the physical limit
//! of each, measured in the same run with the same client against the same service:
//!
//! - RabbitMQ: lapin publishing with publisher confirms (one confirm awaited per message, as the
//!   hub's sink does), 16 publishers (the hub's workers: 8 per shard, 2 shards), 5 s;
//! - SQS: `SendMessage` loops against the same moto server, 16 senders, 5 s;
//! - pull: the store's raw scan rate — `Store::read_events` pages of 1,000 over every tenant of
//!   the run, straight from the hub's store once the hub has stopped.
//!
//! One queue (or pull subscription) per tenant and destination, each with its own consumer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::{json, Value};

use crate::tally::{sent_ms, Tally};

pub const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub const MOTO: &str = "http://127.0.0.1:5055";
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
/// Concurrent clients of a raw-rate measurement: the hub's default workers on two shards.
const RAW_CLIENTS: usize = 16;
const RAW_SECONDS: u64 = 5;

/// Which sink a delivery run subscribes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkChoice {
    Webhook,
    Rabbitmq,
    Sqs,
    Pull,
    /// Pull over gRPC: one `Events.Subscribe` stream per subscription.
    PullGrpc,
}

impl SinkChoice {
    /// Hub settings the sink needs: the local broker on the allow-list, AWS calls to moto.
    pub fn hub_env(self) -> Vec<(String, String)> {
        match self {
            SinkChoice::Rabbitmq => vec![(
                "STREAMING_HUB_ALLOW_PRIVATE_HOSTS".into(),
                "127.0.0.1,127.0.0.1:5672".into(),
            )],
            SinkChoice::Sqs => vec![("STREAMING_HUB_AWS_ENDPOINT_URL".into(), MOTO.into())],
            SinkChoice::Webhook | SinkChoice::Pull | SinkChoice::PullGrpc => Vec::new(),
        }
    }

    /// The services `scripts/loadtest` starts for it.
    pub fn label(self) -> &'static str {
        match self {
            SinkChoice::Webhook => "webhook",
            SinkChoice::Rabbitmq => "rabbitmq",
            SinkChoice::Sqs => "sqs",
            SinkChoice::Pull => "pull",
            SinkChoice::PullGrpc => "pull-grpc",
        }
    }
}

/// The consumers of one run.
pub struct Consumers {
    pub sink: SinkChoice,
    pub tally: Tally,
    stop: Arc<AtomicBool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    queues: Mutex<Vec<String>>,
    /// Pull subscriptions read: (events URL, token).
    pulls: Mutex<Vec<(String, String)>>,
}

fn sqs() -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new(REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "loadtest", "loadtest", None, None, "loadtest",
        ))
        .endpoint_url(MOTO)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

impl Consumers {
    pub fn new(sink: SinkChoice) -> anyhow::Result<Self> {
        Ok(Self {
            sink,
            tally: Tally::new()?,
            stop: Arc::default(),
            tasks: Mutex::default(),
            queues: Mutex::default(),
            pulls: Mutex::default(),
        })
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.push(tokio::spawn(task));
        }
    }

    /// The body of a subscription of this sink for destination `path` (creating its queue), and
    /// the credential to put, if any.
    pub async fn destination(
        &self,
        run_id: &str,
        path: &str,
    ) -> anyhow::Result<(Value, Option<Value>)> {
        let queue = format!("{run_id}-{path}");
        Ok(match self.sink {
            SinkChoice::Rabbitmq => {
                let conn = Connection::connect(AMQP, ConnectionProperties::default()).await?;
                let ch = conn.create_channel().await?;
                ch.queue_declare(
                    &queue,
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await?;
                let _ = conn.close(200, "declared").await;
                self.remember(&queue);
                (
                    json!({"sink_kind": "rabbitmq",
                        "endpoint": format!("amqp://127.0.0.1:5672/?routing_key={queue}")}),
                    Some(json!({"username": "guest", "password": "guest"})),
                )
            }
            SinkChoice::Sqs => {
                sqs().create_queue().queue_name(&queue).send().await?;
                self.remember(&queue);
                (
                    json!({"sink_kind": "sqs",
                        "endpoint": format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{queue}")}),
                    Some(json!({"access_key_id": "loadtest", "secret_access_key": "loadtest"})),
                )
            }
            SinkChoice::Pull | SinkChoice::PullGrpc => (json!({"sink_kind": "pull"}), None),
            SinkChoice::Webhook => anyhow::bail!("webhooks go to the receivers"),
        })
    }

    fn remember(&self, queue: &str) {
        if let Ok(mut q) = self.queues.lock() {
            q.push(queue.to_owned());
        }
    }

    /// Starts reading what the hub delivers to destination `path` of subscription `id`.
    pub async fn consume(
        &self,
        run_id: &str,
        path: &str,
        tenant: &str,
        (hub_url, token, id): (&str, &str, &str),
    ) -> anyhow::Result<()> {
        let queue = format!("{run_id}-{path}");
        let (tally, stop, path) = (self.tally.clone(), self.stop.clone(), path.to_owned());
        match self.sink {
            SinkChoice::Rabbitmq => {
                let conn = Connection::connect(AMQP, ConnectionProperties::default()).await?;
                let ch = conn.create_channel().await?;
                ch.basic_qos(1000, BasicQosOptions::default()).await?;
                let mut consumer = ch
                    .basic_consume(
                        &queue,
                        "loadtest",
                        BasicConsumeOptions {
                            no_ack: true,
                            ..Default::default()
                        },
                        FieldTable::default(),
                    )
                    .await?;
                self.spawn(async move {
                    let _conn = conn;
                    while let Some(Ok(d)) = consumer.next().await {
                        let h = |n: &str| match d.properties.headers().as_ref()?.inner().get(n)? {
                            AMQPValue::LongString(s) => Some(s.to_string()),
                            _ => None,
                        };
                        if h("ce-type").as_deref() == Some("destination.ping") {
                            continue;
                        }
                        let (id, tenant) = (
                            h("ce-id").unwrap_or_default(),
                            h("ce-tenantid").unwrap_or_default(),
                        );
                        tally.record(&path, &id, &tenant, sent_ms(&d.data));
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                });
            }
            SinkChoice::Sqs => {
                let url = format!("{MOTO}/{ACCOUNT}/{queue}");
                self.spawn(async move {
                    let client = sqs();
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(out) = client
                            .receive_message()
                            .queue_url(&url)
                            .max_number_of_messages(10)
                            .message_attribute_names("All")
                            .wait_time_seconds(1)
                            .send()
                            .await
                        else {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        };
                        let mut done = Vec::new();
                        for m in out.messages() {
                            let attr = |n: &str| {
                                m.message_attributes()
                                    .and_then(|a| a.get(n))
                                    .and_then(|v| v.string_value())
                                    .unwrap_or_default()
                                    .to_owned()
                            };
                            if attr("ce-type") != "destination.ping" {
                                let body = m.body().unwrap_or_default().as_bytes();
                                tally.record(
                                    &path,
                                    &attr("ce-id"),
                                    &attr("ce-tenantid"),
                                    sent_ms(body),
                                );
                            }
                            if let (Some(handle), Some(mid)) = (m.receipt_handle(), m.message_id())
                            {
                                done.push(
                                    aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                                        .id(mid)
                                        .receipt_handle(handle)
                                        .build(),
                                );
                            }
                        }
                        let entries: Vec<_> = done.into_iter().filter_map(Result::ok).collect();
                        if !entries.is_empty() {
                            let _ = client
                                .delete_message_batch()
                                .queue_url(&url)
                                .set_entries(Some(entries))
                                .send()
                                .await;
                        }
                    }
                });
            }
            SinkChoice::Pull => {
                let events = format!("{hub_url}/v1/subscriptions/{id}/events");
                if let Ok(mut p) = self.pulls.lock() {
                    p.push((events.clone(), token.to_owned()));
                }
                let url = format!("{events}?limit=1000");
                let (token, tenant) = (token.to_owned(), tenant.to_owned());
                self.spawn(async move {
                    let client = reqwest::Client::new();
                    while !stop.load(Ordering::Relaxed) {
                        let page: Option<Value> =
                            match client.get(&url).bearer_auth(&token).send().await {
                                Ok(r) if r.status().is_success() => r.json().await.ok(),
                                // The hub is restarting (a backlog run subscribes through a first hub).
                                _ => None,
                            };
                        let items = page
                            .as_ref()
                            .and_then(|p| p["items"].as_array())
                            .cloned()
                            .unwrap_or_default();
                        for item in &items {
                            let sent = item["data"]["sent_ms"].as_i64();
                            tally.record(
                                &path,
                                item["id"].as_str().unwrap_or_default(),
                                &tenant,
                                sent,
                            );
                        }
                        if items.is_empty() {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                });
            }
            SinkChoice::PullGrpc => {
                let events = format!("{hub_url}/v1/subscriptions/{id}/events");
                if let Ok(mut p) = self.pulls.lock() {
                    p.push((events, token.to_owned()));
                }
                let (hub_url, token, tenant, id) = (
                    hub_url.to_owned(),
                    token.to_owned(),
                    tenant.to_owned(),
                    id.to_owned(),
                );
                self.spawn(async move {
                    let mut after = 0;
                    // Reconnects from its cursor: a backlog run subscribes through a first hub.
                    while !stop.load(Ordering::Relaxed) {
                        after = stream_events(&hub_url, &token, &id, after, |e| {
                            let data: Value = serde_json::from_slice(&e.data).unwrap_or_default();
                            tally.record(&path, &e.id, &tenant, data["sent_ms"].as_i64());
                        })
                        .await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
            }
            SinkChoice::Webhook => {}
        }
        Ok(())
    }

    /// Stops every consumer and removes the run's queues.
    pub async fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let tasks: Vec<_> = self
            .tasks
            .lock()
            .map(|mut t| t.drain(..).collect())
            .unwrap_or_default();
        for t in tasks {
            t.abort();
        }
        let queues: Vec<String> = self.queues.lock().map(|q| q.clone()).unwrap_or_default();
        match self.sink {
            SinkChoice::Rabbitmq => {
                if let Ok(conn) = Connection::connect(AMQP, ConnectionProperties::default()).await {
                    if let Ok(ch) = conn.create_channel().await {
                        for q in &queues {
                            let _ = ch.queue_delete(q, QueueDeleteOptions::default()).await;
                        }
                    }
                    let _ = conn.close(200, "done").await;
                }
            }
            SinkChoice::Sqs => {
                let client = sqs();
                for q in &queues {
                    let _ = client
                        .delete_queue()
                        .queue_url(format!("{MOTO}/{ACCOUNT}/{q}"))
                        .send()
                        .await;
                }
            }
            _ => {}
        }
    }
}

impl Consumers {
    /// One reader re-reading the first pull subscription's whole log with `after` and
    /// `limit=1000` once the run is delivered: events per second (`None` for other sinks).
    pub async fn reread_rate(&self) -> anyhow::Result<Option<f64>> {
        let Some((events, token)) = self.pulls.lock().ok().and_then(|p| p.first().cloned()) else {
            return Ok(None);
        };
        let client = reqwest::Client::new();
        let started = Instant::now();
        let (mut after, mut read) = (0u64, 0u64);
        loop {
            let page: Value = client
                .get(format!("{events}?after={after}&limit=1000"))
                .bearer_auth(&token)
                .send()
                .await?
                .json()
                .await?;
            let n = page["items"].as_array().map_or(0, Vec::len) as u64;
            let next = page["next_after"].as_u64().unwrap_or(after);
            read += n;
            if n == 0 || next == after {
                break;
            }
            after = next;
        }
        Ok(Some(
            read as f64 / started.elapsed().as_secs_f64().max(1e-9),
        ))
    }
}

/// Runs `clients` loops of `one` for [`RAW_SECONDS`]; successful calls per second.
async fn raw_loop<F, Fut>(clients: usize, one: F) -> f64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(RAW_SECONDS);
    let loops: Vec<_> = (0..clients)
        .map(|_| {
            let (one, done) = (one.clone(), done.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    if one().await {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for l in loops {
        let _ = l.await;
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// The raw publish-with-confirms rate of lapin against the same broker.
pub async fn raw_rabbitmq_rate(body_bytes: usize) -> anyhow::Result<f64> {
    let conn = Connection::connect(AMQP, ConnectionProperties::default()).await?;
    let queue = format!("loadtest-raw-{}", uuid::Uuid::now_v7().simple());
    let setup = conn.create_channel().await?;
    setup
        .queue_declare(
            &queue,
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let body = Arc::new(vec![b'x'; body_bytes]);
    let mut channels = Vec::new();
    for _ in 0..RAW_CLIENTS {
        let ch = conn.create_channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
        channels.push(ch);
    }
    let next = Arc::new(AtomicU64::new(0));
    let channels = Arc::new(channels);
    let rate = raw_loop(RAW_CLIENTS, {
        let (queue, body) = (queue.clone(), body.clone());
        move || {
            let (channels, queue, body, next) =
                (channels.clone(), queue.clone(), body.clone(), next.clone());
            async move {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize % channels.len();
                let published = channels[i]
                    .basic_publish(
                        "",
                        &queue,
                        BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        &body,
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await;
                match published {
                    Ok(confirm) => confirm.await.is_ok(),
                    Err(_) => false,
                }
            }
        }
    })
    .await;
    let _ = setup
        .queue_delete(&queue, QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "done").await;
    Ok(rate)
}

/// The raw `SendMessage` rate of the AWS SDK against the same moto server.
pub async fn raw_sqs_rate(body_bytes: usize) -> anyhow::Result<f64> {
    let client = sqs();
    let queue = format!("loadtest-raw-{}", uuid::Uuid::now_v7().simple());
    client.create_queue().queue_name(&queue).send().await?;
    let url = format!("{MOTO}/{ACCOUNT}/{queue}");
    let body = "x".repeat(body_bytes);
    let rate = raw_loop(RAW_CLIENTS, {
        let (client, url) = (client.clone(), url.clone());
        move || {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            async move {
                client
                    .send_message()
                    .queue_url(url)
                    .message_body(body)
                    .send()
                    .await
                    .is_ok()
            }
        }
    })
    .await;
    let _ = client.delete_queue().queue_url(url).send().await;
    Ok(rate)
}

/// The store's raw scan rate: every event of `tenants`, in pages of 1,000, events per second.
pub async fn raw_scan_rate(
    store: Arc<dyn hub_engine::store::Store>,
    tenants: &[String],
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut read = 0u64;
    for tenant in tenants {
        let mut after = 0;
        loop {
            let page = store
                .read_events(tenant, after, 1000)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            read += page.len() as u64;
        }
    }
    Ok(read as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

/// Reads `Events.Subscribe` from `after` until the stream ends or fails; answers the last cursor.
async fn stream_events(
    hub_url: &str,
    token: &str,
    id: &str,
    after: u64,
    mut each: impl FnMut(&hub_control::grpc::pb::Event),
) -> u64 {
    use hub_control::grpc::pb::{events_client::EventsClient, SubscribeRequest};
    let Ok(mut client) = EventsClient::connect(hub_url.to_owned()).await else {
        return after;
    };
    let mut request = tonic::Request::new(SubscribeRequest {
        subscription_id: id.to_owned(),
        after,
    });
    if let Ok(v) = format!("Bearer {token}").parse() {
        request.metadata_mut().insert("authorization", v);
    }
    let Ok(answer) = client.subscribe(request).await else {
        return after;
    };
    let mut stream = answer.into_inner();
    let mut cursor = after;
    while let Ok(Some(e)) = stream.message().await {
        each(&e);
        cursor = e.cursor;
    }
    cursor
}
