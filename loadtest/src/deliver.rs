//! The delivery side of a run: one webhook subscription per tenant and destination, created
//! through the hub's `/v1` with a token signed by the hub's generated secret, each pointed at its
//! own receiver path (so each has its own signing secret to verify) and pinged active.

use std::time::Duration;

use serde_json::{json, Value};

use crate::receiver::{Behaviour, Receivers};
use crate::scenario::DeliverySpec;

/// What was subscribed.
#[derive(Debug, Clone)]
pub struct Subscribed {
    pub subscriptions: usize,
    /// Destinations every tenant has and that answer 2xx: every event reaches each once.
    pub checked: Vec<String>,
}

impl Subscribed {
    /// Unique deliveries seen at the checked destinations.
    pub fn checked_deliveries(&self, receivers: &Receivers) -> u64 {
        let names = &self.checked;
        receivers
            .seen(|s| {
                s.unique_events
                    .iter()
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

fn token(data_dir: &std::path::Path, tenant: &str) -> anyhow::Result<String> {
    let secret = std::fs::read_to_string(data_dir.join("jwt-hs256.secret"))?;
    let now = u64::try_from(crate::machine::unix_ms() / 1000)?;
    hub_control::auth::mint_hs256(
        secret.trim().as_bytes(),
        &hub_control::auth::Mint {
            issuer: "access-manager",
            audience: "streaming-hub",
            subject: "loadtest",
            tenant,
            permissions: &["subscriptions:get", "subscriptions:post"],
            ttl_s: 3600,
            now_s: now,
        },
    )
    .map_err(|e| anyhow::anyhow!("minting a token: {e}"))
}

/// Creates and activates every subscription of the run.
pub async fn subscribe(
    hub_url: &str,
    data_dir: &std::path::Path,
    tenants: &[String],
    source: &str,
    spec: &DeliverySpec,
    receivers: &Receivers,
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
            let path = format!("{}-{t}", d.name);
            let created: Value = client
                .post(format!("{hub_url}/v1/subscriptions"))
                .bearer_auth(&token)
                .header("x-idempotency", uuid::Uuid::now_v7().to_string())
                .json(&json!({
                    "name": path,
                    "sink_kind": "webhook",
                    "endpoint": receivers.url(&path),
                    // The run's producer only: the hub's own events (destination.verified of the
                    // tenant's other subscriptions) are not part of the count.
                    "origin": source,
                }))
                .send()
                .await?
                .json()
                .await?;
            let (Some(id), Some(secret)) = (created["id"].as_str(), created["secret"].as_str())
            else {
                anyhow::bail!("creating a subscription failed: {created}");
            };
            receivers.set(
                &path,
                Behaviour {
                    latency: Duration::from_millis(d.latency_ms),
                    failure_rate: d.failure_rate,
                    status: d.status,
                    secret: Some(secret.to_owned()),
                },
            );
            let ping: Value = client
                .post(format!("{hub_url}/v1/subscriptions/{id}/ping"))
                .bearer_auth(&token)
                .send()
                .await?
                .json()
                .await?;
            anyhow::ensure!(
                ping["outcome"] == "success",
                "ping of {path} failed: {ping}"
            );
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
