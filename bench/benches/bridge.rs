//! The cost of crossing from a glommio shard to the tokio runtime and back (`TokioBridge::call`),
//! which every store call and every webhook attempt pays once: a trivial future, so what is
//! measured is the hop itself (a task spawned on tokio, a oneshot reply waking the shard).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use hub_engine::runtime::{build_tokio_runtime, spawn_shards, ShardConfig, TokioBridge};

fn bridge_round_trip(c: &mut Criterion) {
    // As the engine builds it: two tokio workers beside the shards.
    let tokio = build_tokio_runtime(2).expect("tokio runtime");
    let bridge = TokioBridge::new(tokio.handle().clone());
    let config = ShardConfig {
        shards: 1,
        pin: false,
        ..ShardConfig::default()
    };
    c.bench_function("bridge/round_trip", |b| {
        b.iter_custom(|iters| {
            let bridge = bridge.clone();
            let took = spawn_shards(&config, move |_| {
                let bridge = bridge.clone();
                async move {
                    let started = Instant::now();
                    for i in 0..iters {
                        let answer = bridge.call(async move { i + 1 }).await;
                        std::hint::black_box(answer.expect("bridge open"));
                    }
                    started.elapsed()
                }
            })
            .expect("one shard");
            took.into_iter().next().unwrap_or(Duration::ZERO)
        })
    });
}

criterion_group!(benches, bridge_round_trip);
criterion_main!(benches);
