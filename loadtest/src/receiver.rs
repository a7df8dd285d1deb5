//! Webhook receivers on loopback, as a benchmark needs them: each path behaves as configured
//! (latency, failure rate, status), verifies every delivery's Standard Webhooks signature on its
//! own (no hub code), and records event id, tenant and arrival time into an HDR histogram of
//! end-to-end latency. Also the physical limit for deliveries: the raw HTTP POST rate a plain
//! client reaches against the same receiver.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hdrhistogram::Histogram;
use rand::Rng;
use ring::hmac;

/// How one receiver path behaves.
#[derive(Debug, Clone)]
pub struct Behaviour {
    pub latency: Duration,
    /// Share of requests answered with `status` instead of 204.
    pub failure_rate: f64,
    pub status: u16,
    /// The subscription's signing secret (`whsec_…`); `None` accepts unsigned requests.
    pub secret: Option<String>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            failure_rate: 0.0,
            status: 500,
            secret: None,
        }
    }
}

/// What the receivers saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub deliveries: u64,
    pub bad_signatures: u64,
    /// `(receiver path, event id)` answered 2xx, pings left out.
    pub unique_events: std::collections::HashSet<(String, String)>,
    pub per_tenant: HashMap<String, u64>,
}

#[derive(Clone)]
struct Shared {
    behaviours: Arc<std::sync::RwLock<HashMap<String, Behaviour>>>,
    /// Successful non-ping deliveries, for the progress sampler.
    delivered: Arc<std::sync::atomic::AtomicU64>,
    seen: Arc<Mutex<Seen>>,
    latency_us: Arc<Mutex<Histogram<u64>>>,
    /// The same, per tenant.
    tenant_latency_us: Arc<Mutex<HashMap<String, Histogram<u64>>>>,
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

/// The producer's send time, written into every payload as `"sent_ms":<unix ms>`.
fn sent_ms(body: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(body.get(..body.len().min(96))?).ok()?;
    let rest = &text[text.find("\"sent_ms\":")? + 10..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
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
    let signed = b.secret.as_deref().is_none_or(|secret| {
        verify(
            secret,
            h("webhook-id"),
            h("webhook-timestamp"),
            &body,
            h("webhook-signature"),
        )
    });
    if !signed {
        if let Ok(mut seen) = s.seen.lock() {
            seen.deliveries += 1;
            seen.bad_signatures += 1;
        }
        return StatusCode::UNAUTHORIZED;
    }
    // A destination that fails still answers the verification ping: it broke after it was
    // verified, which is when a hub has to cope with it.
    let ping = h("x-lerian-event-type") == "destination.ping";
    if !ping && b.failure_rate > 0.0 && rand::thread_rng().gen_bool(b.failure_rate.min(1.0)) {
        if let Ok(mut seen) = s.seen.lock() {
            seen.deliveries += 1;
        }
        return StatusCode::from_u16(b.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    }
    if ping {
        return StatusCode::NO_CONTENT;
    }
    if let Ok(mut seen) = s.seen.lock() {
        seen.deliveries += 1;
        let fresh = seen
            .unique_events
            .insert((name.clone(), h("x-lerian-event-id").to_owned()));
        if fresh {
            s.delivered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        *seen
            .per_tenant
            .entry(h("x-lerian-tenant-id").to_owned())
            .or_default() += 1;
    }
    // End-to-end latency: from the producer's send (in the payload) to now.
    if let Some(sent) = sent_ms(&body) {
        let now = crate::machine::unix_ms();
        let us = u64::try_from((now - sent).max(0) * 1000).unwrap_or(0);
        if let Ok(mut hist) = s.latency_us.lock() {
            let _ = hist.record(us);
        }
        if let Ok(mut per) = s.tenant_latency_us.lock() {
            let tenant = h("x-lerian-tenant-id");
            if !per.contains_key(tenant) {
                if let Ok(fresh) = Histogram::new_with_bounds(1, 3_600_000_000, 2) {
                    per.insert(tenant.to_owned(), fresh);
                }
            }
            if let Some(hist) = per.get_mut(tenant) {
                let _ = hist.record(us);
            }
        }
    }
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
            delivered: Arc::default(),
            seen: Arc::default(),
            latency_us: Arc::new(Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3)?)),
            tenant_latency_us: Arc::default(),
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

    /// Sets how path `name` behaves (a new subscription's secret, its latency, its failures).
    pub fn set(&self, name: &str, behaviour: Behaviour) {
        if let Ok(mut m) = self.shared.behaviours.write() {
            m.insert(name.to_owned(), behaviour);
        }
    }

    /// The count of unique successful deliveries, shared with the progress sampler.
    pub fn delivered_counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.shared.delivered.clone()
    }

    pub fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> Option<T> {
        self.shared.seen.lock().ok().map(|s| read(&s))
    }

    /// p50, p90, p99, p99.9 and max of end-to-end latency, in ms.
    pub fn latency_ms(&self) -> Option<[f64; 5]> {
        let h = self.shared.latency_us.lock().ok()?;
        if h.is_empty() {
            return None;
        }
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
        Some([q(0.5), q(0.9), q(0.99), q(0.999), h.max() as f64 / 1000.0])
    }

    /// The latency distribution: (percentile, ms) from p0 to p99.99, denser in the tail.
    pub fn latency_curve(&self) -> Vec<(f64, f64)> {
        let Ok(h) = self.shared.latency_us.lock() else {
            return Vec::new();
        };
        if h.is_empty() {
            return Vec::new();
        }
        let mut points: Vec<f64> = (0..=90).map(f64::from).collect();
        points.extend((1..=9).map(|i| 90.0 + f64::from(i)));
        points.extend([99.5, 99.9, 99.95, 99.99]);
        points
            .into_iter()
            .map(|p| (p, h.value_at_quantile(p / 100.0) as f64 / 1000.0))
            .collect()
    }

    /// Per tenant: (tenant, deliveries, p50 ms, p99 ms, max ms), most deliveries first.
    pub fn tenant_latency(&self) -> Vec<(String, u64, f64, f64, f64)> {
        let Ok(per) = self.shared.tenant_latency_us.lock() else {
            return Vec::new();
        };
        let ms = |v: u64| v as f64 / 1000.0;
        let mut out: Vec<_> = per
            .iter()
            .map(|(t, h)| {
                (
                    t.clone(),
                    h.len(),
                    ms(h.value_at_quantile(0.5)),
                    ms(h.value_at_quantile(0.99)),
                    ms(h.max()),
                )
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
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
                secret: Some(secret.into()),
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
                "evt-1",
                1_764_000_000,
                b"{\"n\":1}",
            );
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
            r.seen(|s| (s.deliveries, s.bad_signatures, s.unique_events.len())),
            Some((2, 1, 1))
        );
        let rate = raw_post_rate(&r.url("open"), 4, Duration::from_millis(300), 256)
            .await
            .expect("rate");
        assert!(rate > 0.0);
    }
}
