//! Shards run on glommio executors, but the ScyllaDB driver, the AWS SDK and lapin need tokio.
//! A glommio task's waker may be woken from any thread, so a shard can hand a future to a tokio
//! runtime and await the reply on a oneshot channel without blocking its executor.

use std::future::Future;

use futures::channel::oneshot;

/// The tokio side went away (runtime shut down) before the reply was sent.
#[derive(Debug, thiserror::Error)]
#[error("tokio bridge closed before replying")]
pub struct BridgeClosed;

/// A handle to the process's tokio runtime, cheap to clone into every shard.
#[derive(Debug, Clone)]
pub struct TokioBridge {
    handle: tokio::runtime::Handle,
}

impl TokioBridge {
    /// Wraps a running tokio runtime.
    pub fn new(handle: tokio::runtime::Handle) -> Self {
        Self { handle }
    }

    /// The tokio handle, for threads that may block on it (never a shard).
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Runs `work` on tokio without waiting for it.
    pub fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handle.spawn(work);
    }

    /// Runs `work` on tokio and resolves, on whatever executor awaits it, to its output.
    ///
    /// The returned future is runtime-agnostic (a `futures` oneshot), so a glommio shard can
    /// await it; it never blocks the calling thread.
    pub fn call<F, T>(&self, work: F) -> impl Future<Output = Result<T, BridgeClosed>> + 'static
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.handle.spawn(async move {
            // The caller may have given up (dropped the future): nothing to tell it then.
            let _ = reply.send(work.await);
        });
        async move { answer.await.map_err(|_| BridgeClosed) }
    }
}

/// Threads for blocking work (the embedded stores' redb calls; tokio's default is 512). Their
/// writes take one lock, so more threads only wait — and each keeps its own allocator heap: when
/// 2,000 subscriptions saw their first delivery together, their timestamp writes started ~500
/// threads and the hub's RSS went from 250 to 850 MiB until they idled out (issue 17).
const BLOCKING_THREADS: usize = 16;

/// Builds the hub's tokio runtime, for a process without shards (the separate control plane).
/// Small on purpose: it only carries driver I/O, never pipeline work.
pub fn build_tokio_runtime(worker_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio_builder(worker_threads).build()
}

/// The tokio runtime an engine keeps beside its shards: its threads never preempt a shard
/// (`never_preempt_a_shard`).
pub fn build_tokio_runtime_beside_shards(
    worker_threads: usize,
) -> std::io::Result<tokio::runtime::Runtime> {
    tokio_builder(worker_threads)
        .on_thread_start(|| {
            super::never_preempt_a_shard();
        })
        .build()
}

fn tokio_builder(worker_threads: usize) -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(worker_threads.max(1))
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_name("hub-tokio")
        .enable_all();
    builder
}
