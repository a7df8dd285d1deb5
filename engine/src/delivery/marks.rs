//! Delivery timestamps on the subscription (R-CP-2): `last_success_at` is the last successful
//! delivery; `last_failure_at` the last failed one since then, cleared by a success — so when it
//! is present, the destination is failing. Each write is a control-store change every engine's
//! index follows, so a lane writes a subscription's marks only when they change meaning (its
//! first failure, its first success after failures) or have aged a minute, and not again until
//! its last write can have come back through the follower.

use std::collections::HashMap;

use hub_core::model::Subscription;
use uuid::Uuid;

/// How stale a timestamp may get before a delivery refreshes it.
pub const MARK_EVERY_MS: i64 = 60_000;

/// What a lane last wrote, per subscription: (when, success).
#[derive(Debug, Default)]
pub struct Marks {
    written: HashMap<Uuid, (i64, bool)>,
}

impl Marks {
    /// Whether an attempt's outcome must be written to `sub` now (and, if so, notes the write).
    pub fn due(&mut self, sub: &Subscription, success: bool, now: i64) -> bool {
        let stale = |t: Option<i64>| t.is_none_or(|t| now - t >= MARK_EVERY_MS);
        let needed = if success {
            sub.last_failure_at_ms.is_some() || stale(sub.last_success_at_ms)
        } else {
            stale(sub.last_failure_at_ms)
        };
        let just_written = self
            .written
            .get(&sub.id)
            .is_some_and(|(at, was)| *was == success && now - at < MARK_EVERY_MS);
        if !needed || just_written {
            return false;
        }
        self.written.insert(sub.id, (now, success));
        true
    }
}

/// The subscription with an attempt's outcome marked.
pub fn marked(current: &Subscription, success: bool, now: i64) -> Subscription {
    let mut next = current.clone();
    if success {
        next.last_success_at_ms = Some(now);
        next.last_failure_at_ms = None;
    } else {
        next.last_failure_at_ms = Some(now);
    }
    next.revision += 1;
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_control::store::conformance::subscription;

    #[test]
    fn r_cp_2_deliveries_mark_success_and_failure_without_a_write_per_attempt() {
        let mut marks = Marks::default();
        let mut sub = subscription("t", "s");
        assert!(marks.due(&sub, true, 1_000), "the first success is marked");
        assert!(
            !marks.due(&sub, true, 2_000),
            "not again before it comes back"
        );
        sub = marked(&sub, true, 1_000);
        assert_eq!(sub.last_success_at_ms, Some(1_000));
        assert!(!marks.due(&sub, true, 30_000), "fresh enough");
        assert!(
            marks.due(&sub, false, 31_000),
            "the first failure is marked at once"
        );
        sub = marked(&sub, false, 31_000);
        assert_eq!(sub.last_failure_at_ms, Some(31_000));
        assert!(!marks.due(&sub, false, 32_000));
        assert!(
            marks.due(&sub, true, 33_000),
            "a success clears the failure at once"
        );
        sub = marked(&sub, true, 33_000);
        assert_eq!(sub.last_failure_at_ms, None);
        assert!(
            marks.due(&sub, true, 33_000 + MARK_EVERY_MS),
            "refreshed after a minute"
        );
    }
}
