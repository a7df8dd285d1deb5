//! The delivery side of a run: one subscription per tenant and destination, created through the
//! hub's `/v1` with a token signed by the hub's generated secret. Webhooks point at their own
//! receiver path (so each has its own signing secret to verify) and are pinged active; the other
//! sinks (`sinks.rs`) get a queue or a pull reader of their own, and queues their credential.

use std::time::Duration;

use serde_json::{json, Value};

use crate::receiver::{Behaviour, Receivers};
use crate::scenario::DeliverySpec;
use crate::sinks::{Consumers, SinkChoice};
use crate::tally::Tally;

/// Where a run's deliveries go and are counted.
pub enum Destinations {
    Webhook(Receivers),
    Other(Consumers),
}

impl Destinations {
    pub async fn start(sink: SinkChoice) -> anyhow::Result<Self> {
        Ok(match sink {
            SinkChoice::Webhook => {
                Destinations::Webhook(Receivers::start(Default::default()).await?)
            }
            other => Destinations::Other(Consumers::new(other)?),
        })
    }

    pub fn tally(&self) -> &Tally {
        match self {
            Destinations::Webhook(r) => r.tally(),
            Destinations::Other(c) => &c.tally,
        }
    }
}

/// What was subscribed.
#[derive(Debug, Clone)]
pub struct Subscribed {
    pub subscriptions: usize,
    /// Destinations every tenant has and that answer 2xx: every event reaches each once.
    pub checked: Vec<String>,
}

impl Subscribed {
    /// Unique deliveries seen at the checked destinations.
    pub fn checked_deliveries(&self, tally: &Tally) -> u64 {
        let names = &self.checked;
        tally
            .seen(|s| {
                s.unique_events
                    .keys()
                    .filter(|(path, _)| {
                        names.iter().any(|n| {
                            path.strip_prefix(n.as_str())
                                .is_some_and(|rest| rest.starts_with('-'))
                        })
                    })
                    .count() as u64
            })
            .unwrap_or(0)
    }
}

/// A producer's token for HTTP ingest of every source (R-SEC-4).
pub fn producer_token(data_dir: &std::path::Path) -> anyhow::Result<String> {
    mint(
        data_dir,
        ("loadtest-producer", "platform"),
        &["ingest"],
        &["*"],
    )
}

/// An operator's token (`admin`): the `/admin` reads of every tenant's records.
pub fn operator_token(data_dir: &std::path::Path) -> anyhow::Result<String> {
    mint(data_dir, ("loadtest-operator", "platform"), &["admin"], &[])
}

fn token(data_dir: &std::path::Path, tenant: &str) -> anyhow::Result<String> {
    let permissions = ["subscriptions:get", "subscriptions:post"];
    mint(data_dir, ("loadtest", tenant), &permissions, &[])
}

/// A token signed with the hub's generated HS256 secret; `sources` for an ingest token.
fn mint(
    data_dir: &std::path::Path,
    (subject, tenant): (&str, &str),
    permissions: &[&str],
    sources: &[&str],
) -> anyhow::Result<String> {
    let secret = std::fs::read_to_string(data_dir.join("jwt-hs256.secret"))?;
    let now = u64::try_from(crate::machine::unix_ms() / 1000)?;
    let mint = hub_control::auth::Mint {
        issuer: "access-manager",
        audience: "streaming-hub",
        subject,
        tenant,
        permissions,
        ttl_s: 3600,
        now_s: now,
    };
    hub_control::auth::mint_hs256_ingest(secret.trim().as_bytes(), &mint, sources)
        .map_err(|e| anyhow::anyhow!("minting a token: {e}"))
}

/// Creates and activates every subscription of the run.
pub async fn subscribe(
    hub_url: &str,
    data_dir: &std::path::Path,
    (tenants, source, run_id): (&[String], &str, &str),
    spec: &DeliverySpec,
    destinations: &Destinations,
) -> anyhow::Result<Subscribed> {
    let client = reqwest::Client::new();
    let mut subscriptions = 0;
    for (t, tenant) in tenants.iter().enumerate() {
        let token = token(data_dir, tenant)?;
        for d in spec
            .destinations
            .iter()
            .filter(|d| d.tenants.is_none_or(|n| t < n))
        {
            let path = if d.shared {
                format!("{}-all", d.name)
            } else {
                format!("{}-{t}", d.name)
            };
            let call = Call {
                client: &client,
                hub_url,
                token: &token,
            };
            match destinations {
                Destinations::Webhook(receivers) => {
                    webhook(&call, (tenant, &path), source, d, receivers).await?;
                }
                Destinations::Other(consumers) => {
                    let (mut body, credential) = consumers.destination(run_id, &path).await?;
                    body["name"] = path.clone().into();
                    body["origin"] = source.into();
                    let id = call.create(body).await?;
                    if let Some(c) = credential {
                        let put: Value = client
                            .put(format!("{hub_url}/v1/subscriptions/{id}/credential"))
                            .bearer_auth(&token)
                            .json(&c)
                            .send()
                            .await?
                            .json()
                            .await?;
                        anyhow::ensure!(
                            put["verification_state"] == "active",
                            "onboarding {path} failed: {put}"
                        );
                    }
                    consumers
                        .consume(run_id, &path, tenant, (hub_url, &token, &id))
                        .await?;
                }
            }
            subscriptions += 1;
        }
    }
    // The engine follows the control plane's revision log every 250 ms.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let checked: Vec<String> = spec
        .destinations
        .iter()
        .filter(|d| d.failure_rate < 1.0 && d.tenants.is_none())
        .map(|d| d.name.clone())
        .collect();
    Ok(Subscribed {
        subscriptions,
        checked,
    })
}

/// One tenant's calls to `/v1`.
struct Call<'a> {
    client: &'a reqwest::Client,
    hub_url: &'a str,
    token: &'a str,
}

impl Call<'_> {
    /// Creates a subscription; returns its answer.
    async fn create_answer(&self, body: Value) -> anyhow::Result<Value> {
        Ok(self
            .client
            .post(format!("{}/v1/subscriptions", self.hub_url))
            .bearer_auth(self.token)
            .header("x-idempotency", uuid::Uuid::now_v7().to_string())
            .json(&body)
            .send()
            .await?
            .json()
            .await?)
    }

    async fn create(&self, body: Value) -> anyhow::Result<String> {
        let created = self.create_answer(body).await?;
        created["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("creating a subscription failed: {created}"))
    }
}

/// `tenant`'s webhook to a receiver path, with the path's behaviour, pinged active.
async fn webhook(
    call: &Call<'_>,
    (tenant, path): (&str, &str),
    source: &str,
    d: &crate::scenario::Destination,
    receivers: &Receivers,
) -> anyhow::Result<()> {
    let created = call
        .create_answer(json!({
            "name": path,
            "sink_kind": "webhook",
            "endpoint": receivers.url(path),
            // The run's producer only: the hub's own events (destination.verified of the
            // tenant's other subscriptions) are not part of the count.
            "origin": source,
        }))
        .await?;
    let (Some(id), Some(secret)) = (created["id"].as_str(), created["secret"].as_str()) else {
        anyhow::bail!("creating a subscription failed: {created}");
    };
    receivers.set(
        path,
        Behaviour {
            latency: Duration::from_millis(d.latency_ms),
            failure_rate: d.failure_rate,
            status: d.status,
            secrets: std::collections::HashMap::from([(tenant.to_owned(), secret.to_owned())]),
        },
    );
    let ping: Value = call
        .client
        .post(format!("{}/v1/subscriptions/{id}/ping", call.hub_url))
        .bearer_auth(call.token)
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(
        ping["outcome"] == "success",
        "ping of {path} failed: {ping}"
    );
    Ok(())
}
