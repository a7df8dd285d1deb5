//! The load generator stands in for other machines: the destinations' receivers, the
//! producers of the events, the clients of HTTP ingest. On the two cores it shares with the hub,
//! each of its threads woken while a hub shard runs would preempt the shard — a switch out, two
//! context switches and the shard's caches cooled, charged to the hub's CPU, which no
//! deployment with its destinations elsewhere pays (issue 17: ~10 % of the hub's cycles in the
//! forty-fifth session's profiles, most of it for the receivers).
//!
//! So the load's threads run under Linux's `SCHED_BATCH`, as the hub's own threads beside its
//! shards do (`hub_engine::runtime::never_preempt_a_shard`): a woken load thread waits for the
//! running thread to park, or for the scheduler's next tick, with its share of CPU unchanged.
//! The processes it starts — the hub, the floor's probe (measured against the hub, so under the
//! same policy), the services — run under the normal policy again. `--load-may-preempt` keeps
//! the load as it was before, to compare.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this process's threads were put under `SCHED_BATCH`.
static STANDING_ASIDE: AtomicBool = AtomicBool::new(false);

/// Puts the calling thread, and the threads it starts after (they inherit the policy), under
/// `SCHED_BATCH`. A kernel that refuses leaves the load as it was; the report says which.
pub fn stand_aside() {
    if hub_engine::runtime::never_preempt_a_shard() {
        STANDING_ASIDE.store(true, Ordering::Relaxed);
    }
}

/// Whether the load's threads run under `SCHED_BATCH` (the report's line about it).
pub fn standing_aside() -> bool {
    STANDING_ASIDE.load(Ordering::Relaxed)
}

/// `command`'s process runs under the normal policy, whatever the thread that starts it has.
#[allow(unsafe_code)]
pub fn as_a_peer(command: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // `sched_setscheduler`, which is async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(|| {
            let param = libc::sched_param { sched_priority: 0 };
            if libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy in a `/proc/…/sched` text.
    fn policy_in(sched: &str) -> i32 {
        sched
            .lines()
            .find(|l| l.starts_with("policy"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no policy line in {sched}"))
    }

    #[test]
    fn load_threads_stand_aside_and_the_processes_they_start_do_not() {
        let (mine, childs) = std::thread::spawn(|| {
            stand_aside();
            let mine = std::fs::read_to_string("/proc/thread-self/sched").expect("readable");
            let mut cmd = Command::new("cat");
            cmd.arg("/proc/self/sched");
            let out = as_a_peer(&mut cmd).output().expect("cat runs");
            (mine, String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .join()
        .expect("thread");
        assert_eq!(policy_in(&mine), libc::SCHED_BATCH);
        assert!(standing_aside());
        assert_eq!(policy_in(&childs), libc::SCHED_OTHER);
    }
}
