//! Waking a shard that glommio 0.9 may have left asleep with work, and only one that might be.
//!
//! A glommio 0.9 shard can sleep in `io_uring_enter` with runnable tasks: it parks when its
//! preempt timer fired before it ran them (fixed upstream after 0.9, glommio/glommio#53, in no
//! release yet), and only a wake from another thread — a write to its eventfd — ends that sleep.
//! At 9,000 events/s one shard stopped for good that way (both shards parked, the log's commit
//! thread idle, jobs and records waiting): a partition's queue wakes its shard only when it goes
//! from empty to non-empty, and neither the shard's own timers nor its Kafka queue's idle wait
//! woke it (issue 17).
//!
//! A thread looks at every shard each [`LOOK_EVERY`] and wakes it from outside when it might be
//! stuck. Waking every shard at every look kept an idle hub at 2 % of a core (200 wakes a
//! second, each ten system calls and two context switches on a sleeping shard); what it cost per
//! event at 500 events/s was within the runs' spread. A stuck shard is asleep, so it
//! shows no work; what tells it from an idle one is that it was doing something just before:
//!
//! - it did work in the last look's interval and none in this one (it may have parked with
//!   work left), or
//! - something woke its thread (the kernel's count of times it ran rose by more than a nudge of
//!   ours explains) and no work followed (woken, then parked before it ran the woken task).
//!
//! Work is what the shard's loops report through [`note_work`] (a delivery lane's turn, an
//! ingest pass); the count of runs is the thread's `/proc/thread-self/schedstat`. Each shard is
//! also woken at least every [`WAKE_AT_LEAST_EVERY`], a bound on any case these miss. A busy
//! shard does work every look and is left alone: what wakes it (records, answers, replies)
//! already gets it out of such a sleep, unless it stops coming, which the first rule sees.
//!
//! A wake goes through a channel whose one slot the shard's own task empties. When that task
//! does not run — the shard parked again before it — the slot stays full, and a send reaches
//! nobody: on CQL at 1,100 events/s a shard slept that way for four minutes, its partitions'
//! records waiting, until a debugger's attach interrupted its `io_uring_enter` (fortieth
//! session). So a wake left untaken for [`WAKE_AT_LEAST_EVERY`] is followed by a signal to the
//! shard's thread ([`INTERRUPT`], whose handler does nothing): it ends the sleep with `EINTR`,
//! which glommio takes as a wake-up.

use std::cell::OnceCell;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How often the watching thread looks at every shard while any of them works.
pub const LOOK_EVERY: Duration = Duration::from_millis(10);

/// How often it looks once every shard has been quiet (no work, nothing woke it) for
/// [`QUIET_LOOKS_TO_IDLE`] looks in a row: an idle hub's looks were half a percent of a core,
/// read from `/proc` a hundred times a second (forty-eighth session), and what a look of an
/// idle hub can find — a shard woken by an arrival that parked before it ran — waits this long
/// at most instead of [`LOOK_EVERY`].
pub const LOOK_IDLE_EVERY: Duration = Duration::from_millis(50);

/// Quiet looks in a row before the watching thread looks every [`LOOK_IDLE_EVERY`].
const QUIET_LOOKS_TO_IDLE: u32 = 3;

/// Runs of a shard's thread one wake of ours explains. A wake makes a sleeping shard run once
/// to take it, and often twice (its reactor's eventfd read completes after it parked again);
/// counted as one, the second looked like a wake from elsewhere with no work after it, and was
/// answered with another wake: an idle hub woke each shard ~15 times a second.
const RUNS_A_WAKE_EXPLAINS: u64 = 2;

/// The longest a shard goes without a wake from outside, whatever it shows.
pub const WAKE_AT_LEAST_EVERY: Duration = Duration::from_millis(250);

/// What a shard shows the watching thread.
#[derive(Debug, Default)]
pub struct Pulse {
    /// Work its loops did (`note_work`).
    work: AtomicU64,
    /// Its thread's scheduler counters, opened by the thread itself.
    schedstat: OnceLock<File>,
    /// Wakes sent to it (read by the tests).
    wakes: AtomicU64,
    /// Its thread's id (0 until attached), for [`INTERRUPT`].
    tid: AtomicI32,
}

/// The signal that ends a shard's sleep when a wake through its channel cannot.
const INTERRUPT: libc::c_int = libc::SIGURG;

extern "C" fn on_interrupt(_: libc::c_int) {}

/// Installs the handler of [`INTERRUPT`] once: one that does nothing, without `SA_RESTART`, so a
/// sleeping system call returns `EINTR` (the default disposition, ignore, would not end it).
#[allow(unsafe_code)]
fn install_interrupt_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a handler that touches nothing is async-signal-safe; the struct is zeroed
        // (no flags, empty mask) before the fields set here.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(INTERRUPT, &action, std::ptr::null_mut());
        }
    });
}

impl Pulse {
    /// How many times the shard's thread has been run by the kernel, if it can be read.
    fn runs(&self) -> Option<u64> {
        let file = self.schedstat.get()?;
        let mut buf = [0u8; 96];
        let n = file.read_at(&mut buf, 0).ok()?;
        // "<ns on the CPU> <ns waiting for it> <times run>\n"
        std::str::from_utf8(&buf[..n])
            .ok()?
            .split_whitespace()
            .nth(2)?
            .parse()
            .ok()
    }

    /// Interrupts the shard's thread; false when it is not attached or the signal failed.
    #[allow(unsafe_code)]
    fn interrupt(&self) -> bool {
        let tid = self.tid.load(Ordering::Relaxed);
        // SAFETY: tgkill with this process's id and a thread of it; the signal's handler is
        // installed before any tid is published.
        tid != 0 && unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, INTERRUPT) == 0 }
    }

    /// Its thread's id, 0 when not attached or ended.
    #[cfg(test)]
    fn tid(&self) -> i32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// Wakes sent to this shard so far.
    #[cfg(test)]
    fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }
}

/// A pulse made a thread's by [`attach`]. When the thread ends (its thread-locals are dropped
/// just before its id is freed) the pulse forgets the id, so the watcher never signals a thread
/// id the kernel may give to another thread of the process (ids wrap at `pid_max`, 32,768 on
/// these machines; a test process starts and ends hundreds of shard threads while watchers of
/// other tests still look).
struct Attached(Arc<Pulse>);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.tid.store(0, Ordering::Relaxed);
    }
}

thread_local! {
    static CURRENT: OnceCell<Attached> = const { OnceCell::new() };
}

/// Makes `pulse` the calling thread's: called on a shard's thread before its executor starts.
#[allow(unsafe_code)]
pub(super) fn attach(pulse: Arc<Pulse>) {
    if let Ok(file) = File::open("/proc/thread-self/schedstat") {
        let _ = pulse.schedstat.set(file);
    }
    install_interrupt_handler();
    // SAFETY: gettid has no preconditions.
    pulse
        .tid
        .store(unsafe { libc::gettid() }, Ordering::Relaxed);
    CURRENT.with(|current| {
        let _ = current.set(Attached(pulse));
    });
}

/// Tells the watching thread that this shard just did work (a no-op off the hub's shards).
pub fn note_work() {
    CURRENT.with(|current| {
        if let Some(Attached(pulse)) = current.get() {
            pulse.work.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// What one look saw of a shard, against the look before.
#[derive(Debug, Clone, Copy)]
struct Seen {
    worked_before: bool,
    worked: bool,
    /// Run by the kernel more often than our last wake explains (true when unknown).
    woken: bool,
    since_last_wake: Duration,
}

/// Whether a shard that showed `seen` might be asleep with work.
fn might_be_stuck(seen: Seen) -> bool {
    let stopped_or_woken_for_nothing = !seen.worked && (seen.worked_before || seen.woken);
    stopped_or_woken_for_nothing || seen.since_last_wake >= WAKE_AT_LEAST_EVERY
}

/// The watching thread's memory of one shard.
struct Watched {
    pulse: Arc<Pulse>,
    wake: async_channel::Sender<()>,
    work: u64,
    runs: Option<u64>,
    worked: bool,
    woke_it: bool,
    last_wake: Instant,
}

impl Watched {
    /// A shard not looked at yet, last woken at `last_wake`.
    fn new(pulse: Arc<Pulse>, wake: async_channel::Sender<()>, last_wake: Instant) -> Self {
        Self {
            pulse,
            wake,
            work: 0,
            runs: None,
            worked: false,
            woke_it: false,
            last_wake,
        }
    }

    /// Looks at the shard and wakes it when it might be stuck; whether it was quiet (did no
    /// work, and nothing woke it).
    fn look(&mut self, now: Instant) -> bool {
        let work = self.pulse.work.load(Ordering::Relaxed);
        let worked = work != self.work;
        // The kernel's count speaks only of a shard that did no work, and reading it is a read
        // of `/proc`: a working shard's is not read (two hundred reads a second under load).
        // The count kept is then an old one, which only the next look without work sees, and
        // that look wakes the shard anyway, for having stopped.
        let runs = if worked { self.runs } else { self.pulse.runs() };
        let woken = match (runs, self.runs) {
            (Some(now), Some(before)) => {
                now.saturating_sub(before) > RUNS_A_WAKE_EXPLAINS * u64::from(self.woke_it)
            }
            _ => true,
        };
        let seen = Seen {
            worked_before: self.worked,
            worked,
            woken,
            since_last_wake: now.duration_since(self.last_wake),
        };
        (self.work, self.runs, self.worked) = (work, runs, seen.worked);
        let stuck = might_be_stuck(seen);
        // Full: the last wake is not taken yet, so the shard is awake or being woken — unless it
        // stayed untaken past the bound, and then only a signal reaches the shard.
        self.woke_it = stuck && self.wake.try_send(()).is_ok();
        let interrupted = stuck
            && !self.woke_it
            && seen.since_last_wake >= WAKE_AT_LEAST_EVERY
            && self.pulse.interrupt();
        if self.woke_it || interrupted {
            self.last_wake = now;
            self.pulse.wakes.fetch_add(1, Ordering::Relaxed);
            crate::telemetry::METRICS.shard_wakes.inc();
        }
        if interrupted {
            crate::telemetry::METRICS.shard_interrupts.inc();
            tracing::debug!("a shard left its wake untaken: its sleep interrupted");
        }
        !seen.worked && !seen.woken
    }
}

/// How long the watching thread waits before its next look, after `quiet_looks` looks in a
/// row that found every shard quiet.
fn next_look_after(quiet_looks: u32) -> Duration {
    if quiet_looks >= QUIET_LOOKS_TO_IDLE {
        LOOK_IDLE_EVERY
    } else {
        LOOK_EVERY
    }
}

/// Starts the thread that watches `shards` (each a pulse and the channel its shard takes wakes
/// from) until `done`.
pub(super) fn watch_shards(
    shards: Vec<(Arc<Pulse>, async_channel::Sender<()>)>,
    done: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let now = Instant::now();
    let mut watched: Vec<Watched> = shards
        .into_iter()
        .map(|(pulse, wake)| Watched::new(pulse, wake, now))
        .collect();
    std::thread::Builder::new()
        .name("shard-nudge".into())
        .spawn(move || {
            let mut quiet_looks = 0u32;
            while !done.load(Ordering::Acquire) {
                std::thread::park_timeout(next_look_after(quiet_looks));
                let now = Instant::now();
                // Every shard is looked at, quiet or not.
                let quiet = watched
                    .iter_mut()
                    .fold(true, |quiet, shard| shard.look(now) & quiet);
                quiet_looks = if quiet {
                    quiet_looks.saturating_add(1)
                } else {
                    0
                };
            }
        })
        .map(|_| ())
}

/// Takes the wakes on a shard, doing nothing else: being woken is the point.
pub(super) async fn take_wakes(wakes: async_channel::Receiver<()>) {
    while wakes.recv().await.is_ok() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(worked_before: bool, worked: bool, woken: bool) -> Seen {
        Seen {
            worked_before,
            worked,
            woken,
            since_last_wake: Duration::ZERO,
        }
    }

    /// A shard is woken when it stopped working, or was woken by something and did no work;
    /// not while it works, nor while it sleeps undisturbed after a quiet interval.
    #[test]
    fn r_di_2_a_shard_is_woken_only_when_it_might_be_asleep_with_work() {
        assert!(might_be_stuck(seen(true, false, false)), "stopped working");
        assert!(might_be_stuck(seen(false, false, true)), "woken, no work");
        assert!(!might_be_stuck(seen(true, true, true)), "working");
        assert!(!might_be_stuck(seen(false, true, false)), "started working");
        assert!(
            !might_be_stuck(seen(false, false, false)),
            "asleep and idle"
        );
        let quiet_long = Seen {
            since_last_wake: WAKE_AT_LEAST_EVERY,
            ..seen(false, false, false)
        };
        assert!(might_be_stuck(quiet_long), "the bound on anything missed");
    }

    /// The kernel's count of a thread's runs can be read, and it rises when the thread runs.
    #[test]
    #[allow(clippy::disallowed_methods)] // a plain test thread, not a shard
    fn r_di_2_a_threads_runs_are_read_from_its_schedstat() {
        let pulse = Arc::new(Pulse::default());
        attach(pulse.clone());
        let first = pulse.runs().expect("schedstat of this thread");
        std::thread::sleep(Duration::from_millis(5));
        let second = pulse.runs().expect("schedstat again");
        assert!(
            second > first,
            "{first} then {second}: the sleep made the thread run again"
        );
    }

    /// Once a shard's thread has ended its pulse signals no one: the thread's id may already be
    /// another thread's.
    #[test]
    fn r_di_2_a_pulse_whose_thread_ended_is_never_signalled() {
        let pulse = Arc::new(Pulse::default());
        let attached = pulse.clone();
        std::thread::spawn(move || {
            attach(attached);
            assert_ne!(CURRENT.with(|c| c.get().map(|a| a.0.tid())), Some(0));
        })
        .join()
        .expect("the thread");
        assert_eq!(pulse.tid(), 0, "the id is forgotten as the thread ends");
        assert!(!pulse.interrupt(), "no signal to an id that may be reused");
    }

    /// A thread parked in a test, standing for a shard asleep: it runs once for each unpark.
    struct ParkedShard {
        thread: std::thread::JoinHandle<()>,
        stop: Arc<AtomicBool>,
    }

    impl ParkedShard {
        /// The thread, started and attached to the pulse returned.
        fn start() -> (Arc<Pulse>, Self) {
            let pulse = Arc::new(Pulse::default());
            let attached = pulse.clone();
            let stop = Arc::new(AtomicBool::new(false));
            let (ready, is_ready) = std::sync::mpsc::channel();
            let thread = std::thread::spawn({
                let stop = stop.clone();
                move || {
                    attach(attached);
                    ready.send(()).expect("test waits");
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park();
                    }
                }
            });
            is_ready.recv().expect("attached");
            (pulse, Self { thread, stop })
        }

        fn stop(self) {
            self.stop.store(true, Ordering::Release);
            self.thread.thread().unpark();
            self.thread.join().expect("shard thread");
        }
    }

    /// A shard that works is not woken; once it stops it is woken once, and then left asleep.
    /// A thread parked in the test stands for the shard (its wakes go to a channel no one
    /// drains), and the watcher's looks are made by hand, with and without work between them.
    #[test]
    fn r_di_2_a_shard_that_stops_working_is_woken_once_then_left_asleep() {
        let (pulse, shard) = ParkedShard::start();
        let (wake, woken) = async_channel::bounded(1);
        let mut watched = Watched::new(pulse.clone(), wake, Instant::now());
        for _ in 0..5 {
            pulse.work.fetch_add(1, Ordering::Relaxed);
            watched.look(Instant::now());
        }
        let while_working = pulse.wakes();
        let counted = crate::telemetry::METRICS.shard_wakes.get();
        for _ in 0..10 {
            watched.look(Instant::now());
        }
        shard.stop();
        assert_eq!(while_working, 0, "woken while it worked");
        assert_eq!(pulse.wakes(), 1, "woken once it stopped, then left asleep");
        assert_eq!(woken.len(), 1);
        assert!(
            crate::telemetry::METRICS.shard_wakes.get() > counted,
            "the wake is counted on /metrics"
        );
    }

    /// The runs a wake of ours makes (a shard often runs twice to take one) are not taken for a
    /// wake from elsewhere, which would be answered with another wake, and so on (an idle hub
    /// woke each shard ~15 times a second that way); more runs than a wake explains still are.
    /// The looks slow down once every shard has been quiet for a few of them.
    #[test]
    #[allow(clippy::disallowed_methods)] // a plain test thread, not a shard
    fn r_di_2_a_shards_runs_after_our_wake_are_not_taken_for_another_wake() {
        let (pulse, shard) = ParkedShard::start();
        let run_once = || {
            shard.thread.thread().unpark();
            std::thread::sleep(Duration::from_millis(5));
        };
        let (wake, woken) = async_channel::bounded(8);
        let mut watched = Watched::new(pulse.clone(), wake, Instant::now());
        pulse.work.fetch_add(1, Ordering::Relaxed);
        assert!(!watched.look(Instant::now()), "it worked: not quiet");
        assert!(
            !watched.look(Instant::now()),
            "it stopped: woken, not quiet"
        );
        assert_eq!(pulse.wakes(), 1);
        // Our wake's run, as a shard's thread would take it.
        run_once();
        assert!(
            watched.look(Instant::now()),
            "quiet: its run was our wake's"
        );
        assert_eq!(pulse.wakes(), 1, "not woken again");
        assert!(watched.look(Instant::now()), "asleep and idle");
        // Woken from elsewhere, more than a wake of ours explains, with no work after it.
        for _ in 0..RUNS_A_WAKE_EXPLAINS + 2 {
            run_once();
        }
        assert!(!watched.look(Instant::now()), "woken for nothing");
        assert_eq!(pulse.wakes(), 2);
        shard.stop();
        assert_eq!(woken.len(), 2);
        assert_eq!(next_look_after(0), LOOK_EVERY);
        assert_eq!(next_look_after(QUIET_LOOKS_TO_IDLE - 1), LOOK_EVERY);
        assert_eq!(next_look_after(QUIET_LOOKS_TO_IDLE), LOOK_IDLE_EVERY);
    }

    /// A shard whose last wake stayed untaken past the bound (its channel full: the task that
    /// takes it never ran) has its sleep interrupted by a signal. A thread sleeping in `pause`
    /// stands for the shard asleep in `io_uring_enter`.
    #[test]
    #[allow(unsafe_code, clippy::disallowed_methods)] // a plain test thread, not a shard
    fn r_di_2_a_shard_that_left_its_wake_untaken_has_its_sleep_interrupted() {
        let pulse = Arc::new(Pulse::default());
        let attached = pulse.clone();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let (ended, sleep_ended) = std::sync::mpsc::channel();
        let shard = std::thread::spawn(move || {
            attach(attached);
            ready.send(()).expect("test waits");
            // SAFETY: pause has no preconditions; it returns when a handled signal arrives.
            unsafe { libc::pause() };
            ended.send(()).expect("test waits");
        });
        is_ready.recv().expect("attached");
        let (wake, _woken) = async_channel::bounded(1);
        wake.try_send(()).expect("the untaken wake");
        let mut watched = Watched::new(pulse.clone(), wake, Instant::now());
        let interrupts = crate::telemetry::METRICS.shard_interrupts.get();
        // Looked at again past the bound until the sleep ends: a signal that lands before the
        // thread is in `pause` is lost, as a shard's would be before its sleep.
        let start = Instant::now();
        let mut looks = 0;
        let ended_sleep = (1..=50).any(|k| {
            looks = k;
            watched.look(start + WAKE_AT_LEAST_EVERY * k);
            sleep_ended.recv_timeout(Duration::from_millis(200)).is_ok()
        });
        assert!(ended_sleep, "the sleep was interrupted");
        shard.join().expect("shard thread");
        assert_eq!(
            pulse.wakes(),
            u64::from(looks),
            "each look past the bound interrupted it"
        );
        assert!(crate::telemetry::METRICS.shard_interrupts.get() > interrupts);
    }
}
