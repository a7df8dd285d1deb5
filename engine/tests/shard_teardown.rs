//! Shards started and ended again and again, the way the hub's shards talk: a shard's sleep
//! ended by a wake from another thread (an `async_channel` message, as ingest hands jobs and
//! nudges lanes), and glommio timers.

use std::time::Duration;

use hub_engine::runtime::{shard_sleep, spawn_shards, ShardConfig};

/// R-DI-2: pinned shards that wake each other through channels and end, again and again.
/// glommio's teardown of an executor freed memory its eventfd read could still land in, which
/// the allocator reported by aborting the process at a thread's exit; `run_shard` keeps each
/// executor to the end of the process.
#[test]
fn r_di_2_shards_started_and_ended_again_and_again_leave_the_heap_whole() {
    let config = ShardConfig {
        shards: 2,
        ..ShardConfig::default()
    };
    for _ in 0..150 {
        let (to_1, at_1) = async_channel::bounded::<u64>(4);
        let (to_0, at_0) = async_channel::bounded::<u64>(4);
        let ends = [(to_1, at_0), (to_0, at_1)];
        let outputs = spawn_shards(&config, move |id| {
            let (send, receive) = ends[id.0].clone();
            async move {
                let mut sum = 0;
                for n in 0..20u64 {
                    send.send(n).await.expect("send to the peer");
                    sum += receive.recv().await.expect("recv");
                    if n % 5 == 0 {
                        shard_sleep(Duration::from_micros(200)).await;
                    }
                }
                (id.0, sum)
            }
        })
        .expect("shards");
        assert_eq!(outputs, vec![(0, 190), (1, 190)]);
    }
}
