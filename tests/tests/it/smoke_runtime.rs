//! Runtime: two pinned glommio shards exchange messages over cross-thread channels (each message
//! wakes the sleeping peer, as ingest's hand-offs wake a lane), and each shard awaits a reply
//! computed on the tokio side (the bridge the engine uses for scylla, aws-sdk and lapin).

use std::time::Duration;

use hub_engine::runtime::{build_tokio_runtime, spawn_shards, ShardConfig, TokioBridge};
use hub_tests::report;

const ROUNDS: u64 = 1_000;

#[test]
fn runtime_two_shards_exchange_messages_and_await_tokio_replies() -> anyhow::Result<()> {
    let tokio = build_tokio_runtime(1)?;
    let bridge = TokioBridge::new(tokio.handle().clone());
    let (to_1, at_1) = async_channel::bounded::<u64>(64);
    let (to_0, at_0) = async_channel::bounded::<u64>(64);
    let ends = [(to_1, at_0), (to_0, at_1)];
    let config = ShardConfig {
        shards: 2,
        ..ShardConfig::default()
    };

    let outputs = spawn_shards(&config, move |shard| {
        let (send, receive) = ends[shard.0].clone();
        let bridge = bridge.clone();
        async move {
            // Ping-pong: each shard sends 0..ROUNDS and sums what its peer sends.
            let mut sum = 0u64;
            for n in 0..ROUNDS {
                send.send(n).await.expect("send to peer");
                sum += receive.recv().await.expect("recv");
            }
            let shard_thread = std::thread::current().name().map(str::to_owned);
            let tokio_thread = bridge
                .call(async {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    std::thread::current().name().map(str::to_owned)
                })
                .await
                .expect("tokio replies");
            (shard.0, sum, shard_thread, tokio_thread)
        }
    })?;

    assert_eq!(outputs.len(), 2);
    let expected: u64 = (0..ROUNDS).sum();
    for (shard, sum, shard_thread, tokio_thread) in &outputs {
        assert_eq!(
            *sum, expected,
            "shard {shard} received every message from its peer"
        );
        assert_eq!(
            tokio_thread.as_deref(),
            Some("hub-tokio"),
            "the reply was computed on tokio"
        );
        assert_ne!(shard_thread, tokio_thread);
    }
    report("runtime", &format!(
        "2 glommio shards exchanged {ROUNDS} messages each way over cross-thread channels; each awaited a reply from a tokio task ({:?})",
        outputs.iter().map(|o| o.2.clone()).collect::<Vec<_>>()
    ));
    Ok(())
}
