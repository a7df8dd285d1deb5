//! One glommio executor per core. Shards share nothing mutable: they talk through a channel mesh,
//! and each owns the Kafka partitions the router gives it (see `ingest::router`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use glommio::{CpuSet, LocalExecutorPoolBuilder, PoolPlacement};

/// Index of a shard in `0..shard_count`, stable for the life of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId(pub usize);

/// How many shards to start and how to place them.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Number of executors; defaults to the number of online CPUs.
    pub shards: usize,
    /// Pin each executor to its own CPU. Off when there are more shards than CPUs.
    pub pin: bool,
    /// io_uring registered buffer memory per executor. Kept small: the memlock limit must hold
    /// three times this per executor, and the engine does no large DMA I/O.
    pub io_memory: usize,
    /// Longest a shard runs its tasks before it looks at its reactor again (glommio's preempt
    /// timer, `SHARD_PREEMPT`).
    pub preempt: std::time::Duration,
}

/// A wake-up from another thread (the log's commit thread answering a write, the Kafka thread
/// handing records, the tokio bridge) reaches a busy shard only when it next polls its reactor:
/// glommio writes the shard's eventfd only when it sleeps, so a shard with work keeps running
/// tasks until its preempt timer fires. glommio's default of 100 ms let a lane wait that long
/// for a store step already durable, which made most of the 100–300 ms latency tails at 4.4 k/s
/// (issue 17). 5 ms cost no measurable CPU at 500/s (415 against 419 µs per event).
pub const SHARD_PREEMPT: std::time::Duration = std::time::Duration::from_millis(5);

/// How often every shard is woken from another thread (see [`nudge_shards`]).
pub const NUDGE_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// Wakes every shard from another thread each [`NUDGE_EVERY`], until the shards are gone.
///
/// A glommio 0.9 shard can sleep in `io_uring_enter` with work to do and only a write to its
/// eventfd — a wake from another thread — gets it out: at 9,000 events/s under load a shard
/// stopped for good (both shards parked, the log's commit thread idle, jobs and records
/// waiting) until a debugger's attach interrupted the sleep, and neither its own timers (a
/// 10 ms one was tried) nor its Kafka queue's 1 s idle wait woke it; records arriving did
/// (issue 17). glommio parks an executor that still has runnable task queues when its preempt
/// timer fired before it ran them (fixed upstream after 0.9, glommio/glommio#53, in no release
/// yet), and a timer of the latency ring did not end the sleep here. Each nudge makes a
/// sleeping shard poll its rings and run its queues; on an idle shard it costs 100 wake-ups a
/// second.
fn nudge_shards(
    nudges: Vec<async_channel::Sender<()>>,
    done: Arc<AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("shard-nudge".into())
        .spawn(move || {
            while !done.load(Ordering::Acquire) {
                std::thread::park_timeout(NUDGE_EVERY);
                for nudge in &nudges {
                    // Full: the last nudge is not taken yet, so the shard is awake or woken.
                    let _ = nudge.try_send(());
                }
            }
        })
        .map(|_| ())
}

/// Takes the nudges on a shard, doing nothing else: being woken is the point.
async fn take_nudges(nudges: async_channel::Receiver<()>) {
    while nudges.recv().await.is_ok() {}
}

impl Default for ShardConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            shards: cpus,
            pin: true,
            io_memory: 1 << 20,
            preempt: SHARD_PREEMPT,
        }
    }
}

/// The shards could not be started or one of them failed.
#[derive(Debug, thiserror::Error)]
pub enum ShardRuntimeError {
    /// glommio refused to build or run an executor (memlock limit, io_uring, CPU set).
    #[error("shard runtime: {0}")]
    Glommio(String),
}

/// The cross-shard channels handed to each shard: `send_to(peer, msg)` and per-peer receivers.
pub type ShardMesh<M> = MeshBuilder<M, Full>;

/// Senders and receivers of one shard once it joined the mesh.
pub type JoinedMesh<M> = (Senders<M>, Receivers<M>);

/// Starts `config.shards` executors, runs `make(shard_id)` on each, and waits for all of them.
///
/// Returns each shard's output in shard order.
pub fn spawn_shards<G, F, T>(config: &ShardConfig, make: G) -> Result<Vec<T>, ShardRuntimeError>
where
    G: Fn(ShardId) -> F + Send + Clone + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let shards = config.shards.max(1);
    let cpus = CpuSet::online().ok();
    let enough_cpus = cpus.as_ref().is_some_and(|set| set.len() >= shards);
    let placement = if config.pin && enough_cpus {
        PoolPlacement::MaxSpread(shards, cpus)
    } else {
        PoolPlacement::Unbound(shards)
    };
    let next_index = Arc::new(AtomicUsize::new(0));
    let (nudges, nudged): (Vec<_>, Vec<_>) = (0..shards).map(|_| async_channel::bounded(1)).unzip();
    let nudged = Arc::new(std::sync::Mutex::new(nudged));
    let done = Arc::new(AtomicBool::new(false));
    nudge_shards(nudges, done.clone()).map_err(|e| ShardRuntimeError::Glommio(e.to_string()))?;
    let handles = LocalExecutorPoolBuilder::new(placement)
        .name("hub-shard")
        .io_memory(config.io_memory)
        .preempt_timer(config.preempt)
        .on_all_shards(move || {
            let id = ShardId(next_index.fetch_add(1, Ordering::Relaxed));
            let make = make.clone();
            let nudged = nudged.lock().ok().and_then(|mut n| n.pop());
            async move {
                // Detached: the shard ends with its own future.
                if let Some(nudged) = nudged {
                    glommio::spawn_local(take_nudges(nudged)).detach();
                }
                (id, make(id).await)
            }
        })
        .map_err(|e| {
            done.store(true, Ordering::Release);
            ShardRuntimeError::Glommio(e.to_string())
        })?;
    let joined = handles.join_all();
    done.store(true, Ordering::Release);
    let mut outputs = Vec::with_capacity(shards);
    for joined in joined {
        outputs.push(joined.map_err(|e| ShardRuntimeError::Glommio(e.to_string()))?);
    }
    outputs.sort_by_key(|(id, _)| *id);
    Ok(outputs.into_iter().map(|(_, out)| out).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shard's future runs to its end while the nudges come (they wake it, they do not
    /// end it), and the outputs come back in shard order once every shard is done.
    #[test]
    fn r_di_2_shards_run_to_their_end_with_the_nudges_and_answer_in_order() {
        let config = ShardConfig {
            shards: 2,
            pin: false,
            ..ShardConfig::default()
        };
        let outputs = spawn_shards(&config, |id| async move {
            // Several nudge periods with nothing else to wake the shard.
            glommio::timer::sleep(NUDGE_EVERY * 5).await;
            id.0 * 10
        })
        .expect("shards");
        assert_eq!(outputs, vec![0, 10]);
    }
}
