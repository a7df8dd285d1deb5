//! Runtime: two pinned glommio shards exchange messages over the mesh, and each shard awaits a
//! reply computed on the tokio side (the bridge the engine uses for scylla, aws-sdk and lapin).

use std::time::Duration;

use hub_engine::runtime::{build_tokio_runtime, spawn_shards, ShardConfig, ShardMesh, TokioBridge};
use hub_tests::report;

const ROUNDS: u64 = 1_000;

#[test]
fn runtime_two_shards_exchange_messages_and_await_tokio_replies() -> anyhow::Result<()> {
    let tokio = build_tokio_runtime(1)?;
    let bridge = TokioBridge::new(tokio.handle().clone());
    let mesh: ShardMesh<u64> = ShardMesh::full(2, 64);
    let config = ShardConfig {
        shards: 2,
        ..ShardConfig::default()
    };

    let outputs = spawn_shards(&config, move |shard| {
        let mesh = mesh.clone();
        let bridge = bridge.clone();
        async move {
            let (senders, receivers) = mesh.join().await.expect("join the mesh");
            let me = senders.peer_id();
            let peer = 1 - me;
            // Ping-pong: each shard sends 0..ROUNDS and echoes back what it receives + 1.
            let mut sum = 0u64;
            for n in 0..ROUNDS {
                senders.send_to(peer, n).await.expect("send to peer");
                let got = receivers
                    .recv_from(peer)
                    .await
                    .expect("recv")
                    .expect("open");
                sum += got;
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
        "2 glommio shards exchanged {ROUNDS} messages each way over the mesh; each awaited a reply from a tokio task ({:?})",
        outputs.iter().map(|o| o.2.clone()).collect::<Vec<_>>()
    ));
    Ok(())
}
