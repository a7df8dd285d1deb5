//! Threads that run beside the shards on their cores — the log's commit thread, the tokio
//! bridge's workers, the Kafka and dead-letter threads — and must not take a core from a shard
//! each time they wake.
//!
//! Measured (issue 17, deliver-backlog on two cores, `perf sched` over the delivery phase): the
//! shards were switched out while still runnable 13,700 times against 8,800 times they parked,
//! 22 % of those times for the log's commit thread and 5 % for the hub's other threads, the rest
//! for the load's receivers and Kafka. Each such switch is two context switches and a shard's
//! caches cooled, paid by the shard. Linux's `SCHED_BATCH` policy keeps a woken thread from
//! preempting the running one: it runs when a shard parks (a busy shard parks every few hundred
//! microseconds) or at the scheduler's next tick. Its share of CPU is unchanged (same nice).

/// Starts thread `name` running `work` under `SCHED_BATCH`: every thread the hub starts beside
/// its shards goes through here, so none is left able to preempt them.
pub fn spawn_beside_shards<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            never_preempt_a_shard();
            work()
        })
}

/// Puts the calling thread under `SCHED_BATCH`; a kernel that refuses leaves it as it was (only
/// the preemptions come back). For threads started elsewhere (the tokio bridge's workers, the
/// load test's). Whether it took.
#[allow(unsafe_code)]
pub fn never_preempt_a_shard() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` with pid 0 changes the calling thread's policy; it reads
    // `param`, a valid local, and keeps no pointer to it.
    let refused = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0;
    if refused {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "this thread may preempt a shard (SCHED_BATCH refused)"
        );
    }
    !refused
}

#[cfg(test)]
mod tests {
    #[allow(unsafe_code)]
    fn policy() -> i32 {
        // SAFETY: reads the calling thread's policy; no arguments but its id (0).
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn r_di_2_a_thread_beside_the_shards_runs_as_batch_and_its_spawner_is_untouched() {
        let before = policy();
        let inside = super::spawn_beside_shards("beside", policy)
            .expect("spawn")
            .join()
            .expect("thread");
        assert_eq!(inside, libc::SCHED_BATCH);
        assert_eq!(policy(), before, "only the calling thread changes");
    }
}
