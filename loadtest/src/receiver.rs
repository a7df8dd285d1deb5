//! Webhook receivers on loopback, as a benchmark needs them: each path behaves as configured
//! (latency, failure rate, status), verifies every delivery's Standard Webhooks signature on its
//! own (no hub code), and records event id, tenant and arrival time into an HDR histogram of
//! end-to-end latency. Also the physical limit for deliveries: the raw HTTP POST rate a plain
//! client reaches against the same receiver.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::Rng;
use ring::hmac;

use crate::tally::{sent_ms, Tally};

/// How one receiver path behaves.
#[derive(Debug, Clone)]
pub struct Behaviour {
    pub latency: Duration,
    /// Share of requests answered with `status` instead of 204.
    pub failure_rate: f64,
    pub status: u16,
    /// The signing secret (`whsec_…`) of each tenant's subscription posting here, by tenant id:
    /// a request is checked against the secret of the tenant it names (a path shared by many
    /// tenants' subscriptions has one each; one HMAC per request, not one per secret). None
    /// accepts unsigned requests.
    pub secrets: HashMap<String, String>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            failure_rate: 0.0,
            status: 500,
            secrets: HashMap::new(),
        }
    }
}

#[derive(Clone)]
struct Shared {
    behaviours: Arc<std::sync::RwLock<HashMap<String, Behaviour>>>,
    tally: Tally,
}

/// Verifies a Standard Webhooks signature header against `secret`.
pub fn verify(secret: &str, id: &str, timestamp: &str, body: &[u8], signatures: &str) -> bool {
    let Ok(key) = STANDARD.decode(secret.strip_prefix("whsec_").unwrap_or(secret)) else {
        return false;
    };
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key);
    let mut content = Vec::with_capacity(id.len() + timestamp.len() + body.len() + 2);
    content.extend_from_slice(id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(timestamp.as_bytes());
    content.push(b'.');
    content.extend_from_slice(body);
    signatures.split(' ').any(|s| {
        s.strip_prefix("v1,")
            .and_then(|b64| STANDARD.decode(b64).ok())
            .is_some_and(|sig| hmac::verify(&key, &content, &sig).is_ok())
    })
}

async fn hook(
    State(s): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let b = s
        .behaviours
        .read()
        .ok()
        .and_then(|m| m.get(&name).cloned())
        .unwrap_or_default();
    if !b.latency.is_zero() {
        tokio::time::sleep(b.latency).await;
    }
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    if h("x-lerian-event-id").is_empty() {
        // Not the hub (the raw POST baseline): answered, not counted.
        return StatusCode::NO_CONTENT;
    }
    let signed = b.secrets.is_empty()
        || b.secrets
            .get(h("x-lerian-tenant-id"))
            .is_some_and(|secret| {
                verify(
                    secret,
                    h("webhook-id"),
                    h("webhook-timestamp"),
                    &body,
                    h("webhook-signature"),
                )
            });
    if !signed {
        s.tally.record_failure(true);
        return StatusCode::UNAUTHORIZED;
    }
    // A destination that fails still answers the verification ping: it broke after it was
    // verified, which is when a hub has to cope with it.
    let ping = h("x-lerian-event-type") == "destination.ping";
    if !ping && b.failure_rate > 0.0 && rand::thread_rng().gen_bool(b.failure_rate.min(1.0)) {
        s.tally.record_failure(false);
        return StatusCode::from_u16(b.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    }
    if ping {
        return StatusCode::NO_CONTENT;
    }
    s.tally.record(
        &name,
        h("x-lerian-event-id"),
        h("x-lerian-tenant-id"),
        sent_ms(&body),
    );
    StatusCode::NO_CONTENT
}

/// Running receivers: `url(name)` is where a subscription named `name` should point.
pub struct Receivers {
    pub addr: std::net::SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Receivers {
    pub async fn start(behaviours: HashMap<String, Behaviour>) -> anyhow::Result<Self> {
        let shared = Shared {
            behaviours: Arc::new(std::sync::RwLock::new(behaviours)),
            tally: Tally::new()?,
        };
        let app = Router::new()
            .route("/hook/{name}", post(hook))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://{}/hook/{name}", self.addr)
    }

    /// Sets how path `name` behaves (a new subscription's secret, its latency, its failures);
    /// a path set again (a destination shared by many subscriptions) keeps the secrets it had.
    pub fn set(&self, name: &str, mut behaviour: Behaviour) {
        if let Ok(mut m) = self.shared.behaviours.write() {
            if let Some(before) = m.get_mut(name) {
                behaviour.secrets.extend(before.secrets.drain());
            }
            m.insert(name.to_owned(), behaviour);
        }
    }

    /// What the receivers saw.
    pub fn tally(&self) -> &Tally {
        &self.shared.tally
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The physical limit for webhook delivery on this machine: `concurrency` keep-alive clients
/// POSTing a `body_bytes` body to `url` for `duration`. Returns successful POSTs per second.
pub async fn raw_post_rate(
    url: &str,
    concurrency: usize,
    duration: Duration,
    body_bytes: usize,
) -> anyhow::Result<f64> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()?;
    let body = Bytes::from(vec![b'x'; body_bytes]);
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.to_owned(), body.clone());
            tokio::spawn(async move {
                let mut ok = 0u64;
                while Instant::now() < deadline {
                    if let Ok(r) = client.post(&url).body(body.clone()).send().await {
                        if r.status().is_success() {
                            ok += 1;
                        }
                    }
                }
                ok
            })
        })
        .collect();
    let mut total = 0;
    for w in workers {
        total += w.await?;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receiver's own verifier accepts what the hub's signer produces (two implementations,
    /// one standard), and refuses a tampered body.
    #[tokio::test]
    async fn receivers_verify_hub_signatures_and_count_deliveries() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let behaviours = HashMap::from([(
            "a".to_owned(),
            Behaviour {
                secrets: HashMap::from([("t1".to_owned(), secret.into())]),
                ..Behaviour::default()
            },
        )]);
        let r = Receivers::start(behaviours).await.expect("start");
        let key = hub_engine::delivery::signature::SigningKey::from_secret(secret).expect("key");
        let client = reqwest::Client::new();
        for (body, want) in [(&b"{\"n\":1}"[..], 204), (&b"{\"n\":2}"[..], 401)] {
            let h = hub_engine::delivery::signature::headers(
                &key,
                None,
                &reqwest::header::HeaderValue::from_static("evt-1"),
                1_764_000_000,
                b"{\"n\":1}",
            )
            .expect("headers");
            let mut req = client
                .post(r.url("a"))
                .body(body.to_vec())
                .header("x-lerian-event-id", "evt-1")
                .header("x-lerian-tenant-id", "t1");
            for (k, v) in h {
                req = req.header(k, v);
            }
            assert_eq!(req.send().await.expect("post").status().as_u16(), want);
        }
        assert_eq!(
            r.tally()
                .seen(|s| (s.deliveries, s.bad_signatures, s.unique_events.len())),
            Some((2, 1, 1))
        );
        let rate = raw_post_rate(&r.url("open"), 4, Duration::from_millis(300), 256)
            .await
            .expect("rate");
        assert!(rate > 0.0);
    }
}
