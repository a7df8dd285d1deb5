//! What waking a parked shard costs (issue 17). At a steady rate each event wakes its shard
//! about three times (its record arrives, its write is durable, its webhook answers), and the
//! hub's CPU per event follows those wake-ups, not its own code (the load test's `--profile`).
//!
//! Measured in CPU time of the whole process (every thread) per round trip: a thread hands a
//! parked receiver one message and blocks until it answers. Into a glommio shard built as the
//! engine builds it (an `async_channel` wakes it, as the commit thread's answers and the
//! partition feed's wakes do), and between two plain threads: the least two wake-ups cost on
//! this machine.

use std::sync::mpsc;

use criterion::{criterion_group, criterion_main, Criterion};
use hub_engine::runtime::{spawn_shards, ShardConfig};

mod cpu_time;
use cpu_time::CpuTime;

fn parked_shard(c: &mut Criterion<CpuTime>) {
    let (to_shard, from_bench) = async_channel::bounded::<u64>(1);
    let (to_bench, from_shard) = mpsc::sync_channel::<u64>(1);
    let config = ShardConfig {
        shards: 1,
        pin: false,
        ..ShardConfig::default()
    };
    let shard = std::thread::spawn(move || {
        spawn_shards(&config, move |_| {
            let (from_bench, to_bench) = (from_bench.clone(), to_bench.clone());
            async move {
                while let Ok(n) = from_bench.recv().await {
                    if to_bench.send(n + 1).is_err() {
                        break;
                    }
                }
            }
        })
    });
    round_trips(
        c,
        "wake/parked_glommio_shard_round_trip",
        |n| to_shard.send_blocking(n).expect("the shard runs"),
        || from_shard.recv().expect("the shard answers"),
    );
    drop(to_shard);
    let _ = shard.join();
}

fn parked_thread(c: &mut Criterion<CpuTime>) {
    let (to_thread, from_bench) = mpsc::sync_channel::<u64>(1);
    let (to_bench, from_thread) = mpsc::sync_channel::<u64>(1);
    let thread = std::thread::spawn(move || {
        while let Ok(n) = from_bench.recv() {
            if to_bench.send(n + 1).is_err() {
                break;
            }
        }
    });
    round_trips(
        c,
        "wake/parked_thread_round_trip",
        |n| to_thread.send(n).expect("the thread runs"),
        || from_thread.recv().expect("the thread answers"),
    );
    drop(to_thread);
    let _ = thread.join();
}

/// One round trip a measured iteration: hand the parked side a message, block for its answer.
fn round_trips(
    c: &mut Criterion<CpuTime>,
    name: &str,
    mut hand: impl FnMut(u64),
    mut answer: impl FnMut() -> u64,
) {
    c.bench_function(name, |b| {
        b.iter(|| {
            hand(1);
            answer()
        });
    });
}

criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(CpuTime);
    targets = parked_shard, parked_thread
}
criterion_main!(cpu);
