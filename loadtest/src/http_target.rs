//! HTTP ingest as the load's target (R-IN-10): the same generated records POSTed to
//! `/ingest/<source>` in the CloudEvents HTTP binary binding. The hub answers after the store
//! write (202 accepted, 200 duplicate, 202 dropped, 400 quarantined), so an answer is durable
//! progress. A 429 (`ingest_throttled`: delivery is behind, ingest held back) is honoured the way
//! a well-behaved producer does: the same record again after `Retry-After`, counted.

use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};

use crate::kafka::{Budget, ProducedCounts};
use crate::workload::Generator;

/// Requests in flight at once.
const IN_FLIGHT: usize = 64;

/// POSTs records as `budget` allows; `on_ack(n)` after each durable answer.
pub async fn produce(
    client: &reqwest::Client,
    url: &str,
    generator: &mut Generator,
    mut budget: impl FnMut(Duration, u64) -> Budget,
    mut on_ack: impl FnMut(u64),
) -> anyhow::Result<ProducedCounts> {
    let started = Instant::now();
    let mut counts = ProducedCounts::default();
    let mut acked = 0;
    let mut in_flight = FuturesUnordered::new();
    let mut throttled = 0;
    let mut settle = |(r, held): (reqwest::Result<reqwest::Response>, u64)| -> anyhow::Result<()> {
        throttled += held;
        let status = r?.status().as_u16();
        anyhow::ensure!(
            matches!(status, 200 | 202 | 400),
            "the hub answered {status} to an ingest POST"
        );
        acked += 1;
        on_ack(acked);
        Ok(())
    };
    loop {
        match budget(started.elapsed(), counts.total) {
            Budget::Done => break,
            Budget::Wait(d) => {
                let _ = tokio::time::timeout(d, async {
                    while let Some(r) = in_flight.next().await {
                        settle(r)?;
                    }
                    Ok::<_, anyhow::Error>(())
                })
                .await;
            }
            Budget::Send(n) => {
                for _ in 0..n {
                    let record = generator.next_record();
                    counts.add(record.kind);
                    let mut req = client.post(url).body(record.value);
                    for (k, v) in record.headers {
                        req = req.header(k, v);
                    }
                    in_flight.push(send_until_taken(req));
                    while in_flight.len() >= IN_FLIGHT {
                        if let Some(r) = in_flight.next().await {
                            settle(r)?;
                        }
                    }
                }
            }
        }
    }
    while let Some(r) = in_flight.next().await {
        settle(r)?;
    }
    counts.throttled = throttled;
    Ok(counts)
}

/// Sends `req`, and sends it again after `Retry-After` while the hub answers 429; the last answer
/// and how many 429s came before it.
async fn send_until_taken(
    req: reqwest::RequestBuilder,
) -> (reqwest::Result<reqwest::Response>, u64) {
    let mut held = 0;
    loop {
        let Some(attempt) = req.try_clone() else {
            return (req.send().await, held);
        };
        match attempt.send().await {
            Ok(r) if r.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                held += 1;
                let wait = r
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            answer => return (answer, held),
        }
    }
}
