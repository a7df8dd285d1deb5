//! The engine's runtime: glommio shards (one executor per core) and the bridge to a small tokio
//! runtime for the tokio-only clients (scylla, aws-sdk, lapin).
//!
//! glommio's last release is 0.9 (2024): every use of it stays behind this module, so a move to
//! another thread-per-core runtime touches one folder.

mod alarm;
pub mod allocator;
mod beside_shards;
mod bridge;
pub mod http;
mod nudge;
mod shards;
mod stop;

pub use alarm::{Alarm, Rings};
pub use beside_shards::{never_preempt_a_shard, spawn_beside_shards};
pub use bridge::{
    build_tokio_runtime, build_tokio_runtime_beside_shards, BridgeClosed, TokioBridge,
};
pub use nudge::note_work;
pub use shards::on_shard;
pub use shards::{
    run_on_own_executor, spawn_shards, ShardConfig, ShardId, ShardRuntimeError, SHARD_PREEMPT,
};
pub use stop::Stop;

/// Sleeps on the current shard's timer (glommio). Only for code running on a shard.
pub async fn shard_sleep(d: std::time::Duration) {
    glommio::timer::sleep(d).await;
}

/// Runs `work` on the current shard, detached: it ends on its own. Only for code running on a
/// shard ([`on_shard`]).
pub fn spawn_on_shard(work: impl std::future::Future<Output = ()> + 'static) {
    glommio::spawn_local(work).detach();
}
