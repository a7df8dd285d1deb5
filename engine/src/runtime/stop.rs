//! The hub's stop, as two things at once: a flag that threads and shards read between steps, and
//! a wake for the tokio tasks, whose loops sleep through it (`Stop::sleep`) rather than waking on
//! a timer to read the flag: the listener and the retention loop did so every 100 and 200 ms, ~15
//! wakes a second of an idle hub, and every periodic loop noticed a stop only at its next period.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Set once, when the hub stops; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    said: Arc<tokio::sync::Notify>,
}

impl Stop {
    /// The flag alone, for code that reads it between steps (threads, shards, loops that wake
    /// for their own work anyway).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    /// Stops: sets the flag, then wakes every task waiting in [`Stop::said`].
    pub fn set(&self) {
        self.flag.store(true, Ordering::Release);
        self.said.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once the hub stops (at once if it has).
    pub async fn said(&self) {
        let notified = self.said.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a `set` between the two still wakes us.
        notified.as_mut().enable();
        if self.is_set() {
            return;
        }
        notified.await;
    }

    /// Sleeps for `period`, or less if the hub stops meanwhile: whether it stopped.
    pub async fn sleep(&self, period: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(period) => self.is_set(),
            () = self.said() => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sleep_ends_when_the_hub_stops_not_when_its_period_does() {
        let stop = Stop::default();
        let sleeping = tokio::spawn({
            let stop = stop.clone();
            async move { stop.sleep(Duration::from_secs(3600)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        stop.set();
        let ended = tokio::time::timeout(Duration::from_secs(60), sleeping).await;
        assert!(
            ended.expect("ends well before its hour").expect("no panic"),
            "says it stopped"
        );
        assert!(stop.flag().load(Ordering::Acquire), "the threads' flag too");
    }

    #[tokio::test]
    async fn a_sleep_begun_after_the_stop_ends_at_once() {
        let stop = Stop::default();
        stop.set();
        assert!(stop.sleep(Duration::from_secs(3600)).await);
        stop.said().await;
    }

    #[tokio::test]
    async fn a_sleep_that_runs_its_period_says_the_hub_goes_on() {
        let stop = Stop::default();
        assert!(!stop.sleep(Duration::from_millis(5)).await);
        assert!(!stop.is_set());
    }
}
