//! A shard's wake-up at a set instant, registered with the reactor once per instant.
//!
//! glommio's `Timer` registers itself again on every poll while pending: a clock read, a hash
//! lookup, a `BTreeMap` removal and insertion and a waker clone. A lane polls its wait every
//! time anything wakes it, and made a new timer for every wait (the next page or the outcomes'
//! linger), and an attempt polls its timeout with every step of its request: about 2 % of the
//! hub's cycles in a deliver-backlog profile went to timers (issue 17). An [`Alarm`] keeps its
//! timer while the instant stays the same, and while its waker is registered a poll only reads
//! the clock.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use glommio::timer::Timer;

/// How close two instants are to count as the same for [`Alarm::set`].
const SAME_INSTANT: Duration = Duration::from_millis(1);

/// A wake-up at an instant, moved with [`Alarm::set`] and awaited with [`Alarm::rings`]. Only
/// for code running on a shard.
#[derive(Debug, Default)]
pub struct Alarm {
    /// The instant and the timer for it, once set.
    armed: Option<(Instant, Timer)>,
    /// The waker the timer holds, while it holds one.
    registered: Option<Waker>,
}

impl Alarm {
    /// An alarm set `after` from now.
    pub fn after(after: Duration) -> Self {
        let mut alarm = Self::default();
        alarm.set(Instant::now() + after);
        alarm
    }

    /// Rings at `at` from now on. An instant within a millisecond of the one set changes
    /// nothing: waits are counted in milliseconds from a clock read each time, so a wait for the
    /// same deadline comes back a little different.
    pub fn set(&mut self, at: Instant) {
        let same = |set: Instant| at.max(set) - at.min(set) < SAME_INSTANT;
        if self.armed.as_ref().is_some_and(|(set, _)| same(*set)) {
            return;
        }
        // Dropping the old timer takes it out of the reactor.
        self.armed = Some((at, Timer::new(at.saturating_duration_since(Instant::now()))));
        self.registered = None;
    }

    /// Ready once the set instant has passed; never, while none is set.
    pub fn rings(&mut self) -> Rings<'_> {
        Rings(self)
    }
}

/// The future of [`Alarm::rings`].
#[derive(Debug)]
pub struct Rings<'a>(&'a mut Alarm);

impl Future for Rings<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let alarm = &mut *self.get_mut().0;
        let Some((at, timer)) = alarm.armed.as_mut() else {
            return Poll::Pending;
        };
        if Instant::now() >= *at {
            alarm.registered = None;
            return Poll::Ready(());
        }
        if alarm
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        match Pin::new(timer).poll(cx) {
            Poll::Ready(_) => {
                alarm.registered = None;
                Poll::Ready(())
            }
            Poll::Pending => {
                alarm.registered = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::run_on_own_executor;

    fn on_a_shard<T: Send + 'static, F: Future<Output = T> + 'static>(
        make: impl FnOnce() -> F + Send + 'static,
    ) -> T {
        run_on_own_executor(make).expect("a shard")
    }

    #[test]
    fn r_di_13_an_alarm_rings_at_its_instant_and_not_before() {
        let waited = on_a_shard(|| async {
            let begun = Instant::now();
            let mut alarm = Alarm::after(Duration::from_millis(30));
            alarm.rings().await;
            begun.elapsed()
        });
        assert!(waited >= Duration::from_millis(30), "rang after {waited:?}");
    }

    #[test]
    fn r_di_13_an_alarm_moved_while_awaited_rings_at_the_new_instant() {
        let (early, late) = on_a_shard(|| async {
            let begun = Instant::now();
            let mut alarm = Alarm::after(Duration::from_secs(60));
            // Polled once (registered for a minute), then moved closer: it must not wait the
            // minute, nor ring before the new instant.
            let first = futures::future::FutureExt::now_or_never(alarm.rings());
            alarm.set(begun + Duration::from_millis(20));
            alarm.rings().await;
            let early = begun.elapsed();
            // Moved further and polled from a select with another branch, as the lane does.
            alarm.set(Instant::now() + Duration::from_millis(20));
            let other = crate::runtime::shard_sleep(Duration::from_secs(60));
            futures::pin_mut!(other);
            let rang = futures::future::select(alarm.rings(), other).await;
            assert!(matches!(rang, futures::future::Either::Left(_)));
            assert!(first.is_none());
            (early, begun.elapsed())
        });
        assert!(early >= Duration::from_millis(20) && early < Duration::from_secs(30));
        assert!(late >= Duration::from_millis(40) && late < Duration::from_secs(30));
    }

    #[test]
    fn r_di_13_an_alarm_never_set_never_rings_and_the_same_instant_keeps_its_timer() {
        on_a_shard(|| async {
            let mut unset = Alarm::default();
            assert!(futures::future::FutureExt::now_or_never(unset.rings()).is_none());
            let at = Instant::now() + Duration::from_millis(10);
            let mut alarm = Alarm::default();
            alarm.set(at);
            assert!(futures::future::FutureExt::now_or_never(alarm.rings()).is_none());
            assert!(
                alarm.registered.is_some(),
                "the first poll registers the waker"
            );
            alarm.set(at);
            assert!(
                alarm.registered.is_some(),
                "the same instant keeps the registration"
            );
            alarm.rings().await;
            assert!(Instant::now() >= at);
        });
    }
}
