//! HTTP ingest as the load's target (R-IN-10): the same generated records POSTed to
//! `/ingest/<source>` in the CloudEvents HTTP binary binding. The hub answers after the store
//! write (202 accepted, 200 duplicate, 202 dropped, 400 quarantined), so an answer is durable
//! progress.

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
    let mut settle = |r: Result<reqwest::Response, reqwest::Error>| -> anyhow::Result<()> {
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
                    in_flight.push(req.send());
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
    Ok(counts)
}
