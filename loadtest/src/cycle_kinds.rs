//! What a profile's cycles were doing, by kind (issue 17): the hub's own code, the kernel's
//! loopback TCP, its disk writes, its sleeping and waking, and — the share that says how much the
//! cores' other tenants cost it — the kernel switching a hub thread out because another thread
//! woke on its core (a reschedule interrupt, or a need to reschedule found on the way back from a
//! syscall). On a machine whose two cores also run the receivers, Kafka and the load's producer,
//! that last share is paid for sharing them, not for the hub's work. So is the profiler's own:
//! `perf stat` counting syscalls adds a tracepoint to each.
//!
//! A sample is placed by the frames of its stack (kernel frames sit above the user frames that
//! entered the kernel); the first kind whose test it passes takes it.

use std::collections::HashMap;

use crate::profile::Share;

/// Whether a sample's frames (outermost first, the thread's name left out) are of a kind.
type Test = fn(&[&str]) -> bool;

/// The kinds, in the order they are tested and reported.
const KINDS: [(&str, Test); 8] = [
    (PROFILER, profiler),
    (SWITCHED_OUT, switched_out),
    (
        "asleep and waking (the reactor's park, futex waits, membarrier)",
        sleeping,
    ),
    ("kernel: loopback TCP", network),
    ("kernel: the log's files (appends, syncs, reads)", disk),
    ("kernel: page faults", |frames| {
        has(frames, "asm_exc_page_fault")
    }),
    (
        "kernel: io_uring's own work (submissions, completions)",
        io_uring,
    ),
    ("kernel: other", in_kernel),
];
const PROFILER: &str = "the profiler's syscall counting (`perf stat`'s tracepoints)";
const SWITCHED_OUT: &str = "switched out for another thread woken on its core";
const USER: &str = "user space (the hub, its libraries, the allocator)";

/// Each kind's cycles in folded stacks (`thread;outer;…;inner cycles` a line), in `KINDS`' order
/// with user space last; kinds no sample fell in are left out.
pub fn kinds(folded: &str) -> Vec<Share> {
    let mut cycles: HashMap<&str, u64> = HashMap::new();
    for (stack, count) in crate::profile::samples(folded) {
        let frames: Vec<&str> = stack.split(';').skip(1).collect();
        let kind = KINDS
            .iter()
            .find(|(_, test)| test(&frames))
            .map_or(USER, |(name, _)| name);
        *cycles.entry(kind).or_default() += count;
    }
    (KINDS.iter().map(|(name, _)| *name).chain([USER]))
        .filter_map(|name| {
            cycles.get(name).map(|&cycles| Share {
                name: name.to_owned(),
                cycles,
            })
        })
        .collect()
}

fn has(frames: &[&str], name: &str) -> bool {
    frames.contains(&name)
}

fn has_prefix(frames: &[&str], prefixes: &[&str]) -> bool {
    (frames.iter()).any(|f| prefixes.iter().any(|p| f.starts_with(p)))
}

/// What the run's `perf stat` adds to every syscall it counts: not the hub's cost.
fn profiler(frames: &[&str]) -> bool {
    has_prefix(
        frames,
        &["perf_syscall_", "syscall_trace_enter", "syscall_exit_work"],
    )
}

/// Preempted: the scheduler ran on the way back to user space (from an interrupt or a syscall),
/// not because the thread waited; or the sample landed where interrupts come back on after a
/// reschedule interrupt.
fn switched_out(frames: &[&str]) -> bool {
    let on_return =
        has(frames, "irqentry_exit_to_user_mode") || has(frames, "exit_to_user_mode_loop");
    let after_reschedule = has(frames, "asm_sysvec_reschedule_ipi")
        && frames.last() == Some(&"irqentry_exit_to_user_mode");
    (on_return && has(frames, "__schedule")) || after_reschedule
}

/// io_uring's submissions and its completions' task work that no other kind took (polls armed,
/// timeouts, wake-ups between rings).
fn io_uring(frames: &[&str]) -> bool {
    has_prefix(
        frames,
        &["__do_sys_io_uring_enter", "io_submit_sqes", "task_work_run"],
    )
}

fn sleeping(frames: &[&str]) -> bool {
    has_prefix(
        frames,
        &[
            "io_cqring_wait",
            "futex_wait",
            "do_epoll_wait",
            "do_sys_poll",
            "__x64_sys_membarrier",
            "__do_sys_membarrier",
            "schedule_hrtimeout",
            "__x64_sys_nanosleep",
            "__x64_sys_clock_nanosleep",
        ],
    )
}

fn network(frames: &[&str]) -> bool {
    has_prefix(
        frames,
        &[
            "tcp_",
            "__tcp_",
            "inet_",
            "sock_",
            "__sys_sendto",
            "__sys_recvfrom",
            "io_send",
            "io_recv",
            "ip_",
            "__ip_",
            "__netif_",
            "net_rx_",
            "__dev_queue_xmit",
            "loopback_xmit",
        ],
    )
}

fn disk(frames: &[&str]) -> bool {
    has_prefix(
        frames,
        &[
            "ksys_pwrite64",
            "ksys_pread64",
            "__x64_sys_pwrite64",
            "__x64_sys_pread64",
            "__x64_sys_fdatasync",
            "ext4_",
            "xfs_",
            "iomap_",
        ],
    )
}

fn in_kernel(frames: &[&str]) -> bool {
    has_prefix(frames, &["entry_SYSCALL_64", "asm_", "ret_from_fork"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_fall_in_the_first_kind_their_frames_pass_user_space_last() {
        let folded = "\
hub-shard-1;main;lane;memcpy 50
hub-shard-1;main;lane;asm_sysvec_reschedule_ipi;irqentry_exit_to_user_mode 7
hub-shard-1;main;send;entry_SYSCALL_64;do_syscall_64;exit_to_user_mode_loop;schedule;__schedule;finish_task_switch 3
hub-shard-1;main;send;entry_SYSCALL_64;do_syscall_64;exit_to_user_mode_loop;task_work_run;io_flush 2
hub-shard-2;park;entry_SYSCALL_64;__do_sys_io_uring_enter;io_cqring_wait;schedule;__schedule;finish_task_switch 10
hub-shard-2;send;entry_SYSCALL_64;__sys_sendto;tcp_sendmsg_locked 20
log-commit;sync;entry_SYSCALL_64;__x64_sys_fdatasync;ext4_sync_file 5
hub-shard-2;lane;asm_exc_page_fault;exc_page_fault 1
hub-shard-2;lane;asm_sysvec_apic_timer_interrupt;irqentry_exit_to_user_mode;schedule;__schedule 4
hub-shard-2;send;entry_SYSCALL_64;do_syscall_64;syscall_trace_enter;perf_syscall_enter 6
hub-shard-2;park;entry_SYSCALL_64;do_syscall_64;__do_sys_io_uring_enter;io_submit_sqes;io_poll_add 8
not a line
";
        let got: Vec<(String, u64)> = kinds(folded)
            .into_iter()
            .map(|s| (s.name, s.cycles))
            .collect();
        let want = [
            (PROFILER, 6),
            (SWITCHED_OUT, 14),
            (KINDS[2].0, 10),
            (KINDS[3].0, 20),
            (KINDS[4].0, 5),
            (KINDS[5].0, 1),
            (KINDS[6].0, 10),
            (USER, 50),
        ];
        let want: Vec<(String, u64)> = want.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        assert_eq!(got, want);
    }
}
