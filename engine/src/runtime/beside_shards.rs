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

/// Puts the calling thread under `SCHED_BATCH`; a kernel that refuses leaves it as it was (only
/// the preemptions come back).
#[allow(unsafe_code)]
pub fn never_preempt_a_shard() {
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
}

#[cfg(test)]
mod tests {
    #[allow(unsafe_code)]
    fn policy() -> i32 {
        // SAFETY: reads the calling thread's policy; no arguments but its id (0).
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a plain test thread, not a shard
    fn r_di_2_a_thread_beside_the_shards_runs_as_batch_and_its_spawner_is_untouched() {
        let before = policy();
        let inside = std::thread::spawn(|| {
            super::never_preempt_a_shard();
            policy()
        })
        .join()
        .expect("thread");
        assert_eq!(inside, libc::SCHED_BATCH);
        assert_eq!(policy(), before, "only the calling thread changes");
    }
}
