//! What a shard's timed waits cost (issue 17): a lane waits on a deadline (the next page, the
//! outcomes' linger) every time anything wakes it, and each webhook attempt races its timeout,
//! polled at each step of its request. Measured on a shard, futures polled by hand as the
//! executor would poll them while nothing is due:
//!
//! - `lane_wait_4_rounds`: four rounds of a lane's loop waiting on one unchanged deadline, each
//!   polling its wait once — a glommio timer made per round (what the lane did), or one
//!   [`Alarm`] set to the deadline every round;
//! - `attempt_timeout_3_polls`: one attempt's timeout, made, polled three times and dropped.

use std::future::Future;
use std::time::{Duration, Instant};

use criterion::Criterion;
use futures::FutureExt;
use hub_engine::runtime::{run_on_own_executor, shard_sleep, Alarm};

fn pending<F: Future>(f: F) {
    let f = std::pin::pin!(f);
    assert!(f.now_or_never().is_none(), "nothing is due within a minute");
}

fn timers(c: &mut Criterion) {
    let mut group = c.benchmark_group("timers");
    let far = Duration::from_secs(60);
    group.bench_function("lane_wait_4_rounds/a_timer_per_round", |b| {
        b.iter(|| {
            for _ in 0..4 {
                pending(shard_sleep(far));
            }
        });
    });
    let mut alarm = Alarm::default();
    let deadline = Instant::now() + far;
    group.bench_function("lane_wait_4_rounds/one_alarm", |b| {
        b.iter(|| {
            for _ in 0..4 {
                alarm.set(deadline);
                pending(alarm.rings());
            }
        });
    });
    group.bench_function("attempt_timeout_3_polls/a_timer", |b| {
        b.iter(|| {
            let mut timer = Box::pin(shard_sleep(far));
            for _ in 0..3 {
                assert!((&mut timer).now_or_never().is_none());
            }
        });
    });
    group.bench_function("attempt_timeout_3_polls/an_alarm", |b| {
        b.iter(|| {
            let mut alarm = Alarm::after(far);
            for _ in 0..3 {
                pending(alarm.rings());
            }
        });
    });
    group.finish();
}

/// Criterion runs on the shard itself: timers belong to the executor of the thread that makes
/// them.
fn main() {
    run_on_own_executor(|| async {
        let mut c = Criterion::default().configure_from_args();
        timers(&mut c);
        c.final_summary();
    })
    .expect("a shard");
}
