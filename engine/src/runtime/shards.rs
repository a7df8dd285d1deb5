//! One glommio executor per core. Shards share nothing mutable: they talk through channels
//! (`async_channel`, which wake a sleeping shard from any thread), and each owns the Kafka
//! partitions the router gives it (see `ingest::router`).
//!
//! glommio's own channel mesh is not offered: shards started and ended again and again over it
//! corrupted the heap about one run in six (glibc aborted, mimalloc's free lists broke), and
//! never without it (`engine/tests/shard_teardown.rs`, 50 runs of 150 rounds). The hub never
//! used it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use glommio::{CpuSet, LocalExecutorBuilder, Placement, PoolPlacement};

use super::nudge::{self, Pulse};

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

/// Starts `config.shards` executors, runs `make(shard_id)` on each, and waits for all of them.
///
/// `make` is called on the shard's thread before its executor starts, so only the future it
/// returns may use glommio. Returns each shard's output in shard order.
pub fn spawn_shards<G, F, T>(config: &ShardConfig, make: G) -> Result<Vec<T>, ShardRuntimeError>
where
    G: Fn(ShardId) -> F + Send + Clone + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let shards = config.shards.max(1);
    let placements = shard_placements(config.pin, shards);
    let pulses: Vec<Arc<Pulse>> = (0..shards).map(|_| Arc::default()).collect();
    let (wakes, woken): (Vec<_>, Vec<_>) = (0..shards).map(|_| async_channel::bounded(1)).unzip();
    let done = Arc::new(AtomicBool::new(false));
    nudge::watch_shards(pulses.iter().cloned().zip(wakes).collect(), done.clone())
        .map_err(|e| ShardRuntimeError::Glommio(e.to_string()))?;
    let mut threads = Vec::with_capacity(shards);
    let shards_of = placements.into_iter().enumerate().zip(woken).zip(pulses);
    for (((index, placement), woken), pulse) in shards_of {
        let executor = LocalExecutorBuilder::new(placement)
            .name("hub-shard")
            .io_memory(config.io_memory)
            .preempt_timer(config.preempt);
        let make = make.clone();
        let spawned = start_shard(format!("hub-shard-{}", index + 1), executor, move || {
            nudge::attach(pulse);
            let work = make(ShardId(index));
            async move {
                // Detached: the shard ends with its own future.
                glommio::spawn_local(nudge::take_wakes(woken)).detach();
                work.await
            }
        });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => {
                done.store(true, Ordering::Release);
                return Err(e);
            }
        }
    }
    let joined: Vec<_> = threads.into_iter().map(joined).collect();
    done.store(true, Ordering::Release);
    joined.into_iter().collect()
}

/// A shard's thread, its output once joined.
type ShardThread<T> = std::thread::JoinHandle<Result<T, ShardRuntimeError>>;

/// Starts thread `name` running `make()`'s future on `executor` (`run_shard`). `make` is called
/// on that thread before the executor starts, so it and what it holds are dropped after the
/// executor stopped.
fn start_shard<T, F>(
    name: String,
    executor: LocalExecutorBuilder,
    make: impl FnOnce() -> F + Send + 'static,
) -> Result<ShardThread<T>, ShardRuntimeError>
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let work = make();
            run_shard(executor, work)
        })
        .map_err(|e| ShardRuntimeError::Glommio(e.to_string()))
}

/// A shard's output, or a panic on its thread as an error.
fn joined<T>(thread: ShardThread<T>) -> Result<T, ShardRuntimeError> {
    let name = thread.thread().name().unwrap_or("a shard").to_owned();
    thread
        .join()
        .unwrap_or_else(|_| Err(ShardRuntimeError::Glommio(format!("{name} panicked"))))
}

/// Where each shard runs: spread over the online CPUs (distinct cores before siblings), or
/// anywhere when pinning is off or there are fewer CPUs than shards.
fn shard_placements(pin: bool, shards: usize) -> Vec<Placement> {
    let cpus = CpuSet::online()
        .ok()
        .filter(|set| pin && set.len() >= shards);
    let spread = cpus.and_then(|set| {
        PoolPlacement::MaxSpread(shards, Some(set))
            .generate_cpu_set()
            .ok()
    });
    match spread {
        Some(mut spread) => (0..shards)
            .map(|_| {
                let cpu = spread
                    .next()
                    .cpu_binding()
                    .and_then(|cpus| cpus.into_iter().next());
                cpu.map_or(Placement::Unbound, Placement::Fixed)
            })
            .collect(),
        None => (0..shards).map(|_| Placement::Unbound).collect(),
    }
}

thread_local! {
    static ON_SHARD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread runs a shard's executor (so glommio's timers and tasks are there).
pub fn on_shard() -> bool {
    ON_SHARD.with(std::cell::Cell::get)
}

/// Runs one shard's future on this thread's executor, then leaves the executor to the end of
/// the process instead of dropping it.
///
/// glommio 0.9 frees an executor's state while its rings can still complete an operation into
/// it: the read armed on the executor's eventfd (a wake-up from another thread, or glommio's
/// own linked wake-up write) lands in freed memory if it completes during the drop or before
/// the thread exits. glibc caught it as `tcache_thread_shutdown(): unaligned tcache chunk
/// detected` in about one run of `smoke_runtime` in thirty (in CI, and in a loop);
/// under mimalloc, the hub's allocator, the same write would go unnoticed into a free list.
/// Once this thread has exited the kernel no longer runs the read (a request whose task is
/// gone is cancelled), so the leak only has to outlive the thread. It costs the executor's
/// rings and buffers and its idle blocking-pool thread, once per shard: the hub starts its
/// shards once per process.
fn run_shard<T>(
    executor: LocalExecutorBuilder,
    work: impl Future<Output = T> + 'static,
) -> Result<T, ShardRuntimeError> {
    let executor = executor
        .make()
        .map_err(|e| ShardRuntimeError::Glommio(e.to_string()))?;
    ON_SHARD.with(|on| on.set(true));
    let output = executor.run(work);
    ON_SHARD.with(|on| on.set(false));
    std::mem::forget(executor);
    Ok(output)
}

/// Runs `make()` on a glommio executor of its own, on a new thread, and returns its output:
/// one shard without the hub's mesh or nudges, for tests of code that runs on a shard.
pub fn run_on_own_executor<T, F>(
    make: impl FnOnce() -> F + Send + 'static,
) -> Result<T, ShardRuntimeError>
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let executor = LocalExecutorBuilder::new(Placement::Unbound);
    joined(start_shard("hub-shard-own".into(), executor, make)?)
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
            // Longer than the bound on a shard's sleep, with nothing else to wake it.
            glommio::timer::sleep(nudge::WAKE_AT_LEAST_EVERY * 2).await;
            id.0 * 10
        })
        .expect("shards");
        assert_eq!(outputs, vec![0, 10]);
    }

    /// Pinned shards get a CPU each, all different; unpinned, or more shards than CPUs, none.
    #[test]
    fn r_di_2_pinned_shards_each_get_their_own_cpu_and_unpinned_ones_none() {
        let cpus = CpuSet::online().map_or(1, |set| set.len());
        let pinned = shard_placements(true, cpus);
        let mut fixed: Vec<usize> = pinned
            .iter()
            .filter_map(|p| match p {
                Placement::Fixed(cpu) => Some(*cpu),
                _ => None,
            })
            .collect();
        fixed.sort_unstable();
        fixed.dedup();
        assert_eq!(fixed.len(), cpus, "one distinct CPU per shard: {pinned:?}");
        for placements in [
            shard_placements(false, cpus),
            shard_placements(true, cpus + 1),
        ] {
            assert!(placements.iter().all(|p| matches!(p, Placement::Unbound)));
        }
    }
}
