//! One webhook attempt against a loopback receiver (issue 17), made from a shard the two ways the
//! engine can: on the shard's own client (`ShardWebhooks`: our HTTP/1.1 over glommio's TCP, kept
//! connections; one at a time, and as many at once as a lane has workers) and through the tokio
//! bridge to the process's reqwest client (what every attempt paid before). Both build, sign and
//! judge the request with the same sink code, so the difference is the transport and the hop.
//! The receiver is an axum server on tokio answering 204; it shares the machine, so each figure
//! includes its turn too.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use hub_core::sink::webhook::Attempt;
use hub_engine::delivery::shard_webhook::{fixture, ShardWebhooks};
use hub_engine::runtime::spawn_shards;

#[path = "common/loopback.rs"]
mod loopback;

fn attempt(endpoint: &str) -> Attempt<'_> {
    fixture::attempt(
        endpoint,
        Bytes::from(vec![b'x'; 512]),
        Duration::from_secs(5),
    )
}

fn webhook_attempt(c: &mut Criterion) {
    let loopback = loopback::start();
    let (client, bridge, endpoint) = (&loopback.client, &loopback.bridge, &loopback.endpoint);
    let config = &loopback.one_shard;
    let mut group = c.benchmark_group("webhook_attempt");
    // One attempt at a time, then as many at once as a lane's workers (8 by default, 32).
    for at_once in [1usize, 8, 32] {
        group.throughput(criterion::Throughput::Elements(at_once as u64));
        let name = match at_once {
            1 => "on_the_shard".to_owned(),
            n => format!("on_the_shard_{n}_at_once"),
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let (client, bridge, endpoint) = (client.clone(), bridge.clone(), endpoint.clone());
                let took = spawn_shards(config, move |_| {
                    let webhooks = ShardWebhooks::new(client.clone(), bridge.clone());
                    let endpoint = endpoint.clone();
                    async move {
                        let started = Instant::now();
                        for _ in 0..iters {
                            let round: futures::stream::FuturesUnordered<_> = (0..at_once)
                                .map(|_| {
                                    let (webhooks, endpoint) = (&webhooks, &endpoint);
                                    async move {
                                        let a = attempt(endpoint);
                                        webhooks.send(&a, &fixture::keys()).await
                                    }
                                })
                                .collect();
                            let outcomes: Vec<_> = futures::StreamExt::collect(round).await;
                            assert!(outcomes.iter().all(|o| o.success));
                        }
                        started.elapsed()
                    }
                })
                .expect("one shard");
                took.into_iter().next().unwrap_or(Duration::ZERO)
            })
        });
    }
    group.throughput(criterion::Throughput::Elements(1));
    group.bench_function("through_the_tokio_bridge", |b| {
        b.iter_custom(|iters| {
            let (client, bridge, endpoint) = (client.clone(), bridge.clone(), endpoint.clone());
            let took = spawn_shards(config, move |_| {
                let (client, bridge, endpoint) = (client.clone(), bridge.clone(), endpoint.clone());
                async move {
                    let started = Instant::now();
                    for _ in 0..iters {
                        let (client, endpoint) = (client.clone(), endpoint.clone());
                        let outcome = bridge
                            .call(async move {
                                client.send(&attempt(&endpoint), &fixture::keys()).await
                            })
                            .await
                            .expect("bridge open");
                        assert!(outcome.success, "{outcome:?}");
                    }
                    started.elapsed()
                }
            })
            .expect("one shard");
            took.into_iter().next().unwrap_or(Duration::ZERO)
        })
    });
    group.finish();
}

criterion_group!(benches, webhook_attempt);
criterion_main!(benches);
