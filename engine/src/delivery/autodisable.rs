//! Auto-disable (R-DI-10): a destination's open failure streak disables its subscription only when
//! both gates hold — the streak has lasted the failure window (default 120 h) and at least 12 h
//! separate its first and last failure — so a short outage, or a burst of failures in one bad
//! hour, never disables anyone. One success clears the streak. The streak is persisted by the
//! caller so restarts do not reset it.

use serde::{Deserialize, Serialize};

pub const DEFAULT_WINDOW_MS: i64 = 120 * 3_600_000;
pub const MIN_SPREAD_MS: i64 = 12 * 3_600_000;

/// The open failure streak of one destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streak {
    pub first_failure_ms: Option<i64>,
    pub last_failure_ms: Option<i64>,
}

/// The gates, and the operator's kill switch (`STREAMING_HUB_AUTODISABLE_ENABLED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub enabled: bool,
    pub window_ms: i64,
    pub min_spread_ms: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            enabled: true,
            window_ms: DEFAULT_WINDOW_MS,
            min_spread_ms: MIN_SPREAD_MS,
        }
    }
}

/// Why a subscription was disabled, recorded with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disabled {
    pub at_ms: i64,
    pub reason: String,
}

impl Streak {
    pub fn failure(&mut self, now_ms: i64) {
        self.first_failure_ms.get_or_insert(now_ms);
        self.last_failure_ms = Some(now_ms);
    }

    pub fn success(&mut self) {
        *self = Self::default();
    }

    /// Whether the subscription is to be disabled now, and why.
    pub fn verdict(&self, now_ms: i64, policy: &Policy) -> Option<Disabled> {
        let (first, last) = (self.first_failure_ms?, self.last_failure_ms?);
        let lasted = now_ms - first;
        let spread = last - first;
        (policy.enabled && lasted >= policy.window_ms && spread >= policy.min_spread_ms).then(
            || Disabled {
                at_ms: now_ms,
                reason: format!(
                    "failing for {} h (failures spread over {} h) with no success",
                    lasted / 3_600_000,
                    spread / 3_600_000
                ),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    #[test]
    fn r_di_10_needs_both_the_window_and_the_spread() {
        let p = Policy::default();
        let mut s = Streak::default();
        s.failure(0);
        s.failure(11 * H);
        assert!(
            s.verdict(200 * H, &p).is_none(),
            "120 h passed, but failures only 11 h apart"
        );
        s.failure(12 * H);
        assert!(
            s.verdict(119 * H, &p).is_none(),
            "spread reached, window not"
        );
        let d = s.verdict(120 * H, &p).expect("both gates");
        assert_eq!(d.at_ms, 120 * H);
        assert!(d.reason.contains("120 h"));
    }

    #[test]
    fn r_di_10_one_success_clears_the_streak_and_the_switch_turns_it_off() {
        let mut s = Streak::default();
        s.failure(0);
        s.failure(50 * H);
        s.success();
        assert!(s.verdict(500 * H, &Policy::default()).is_none());
        s.failure(0);
        s.failure(50 * H);
        let off = Policy {
            enabled: false,
            ..Policy::default()
        };
        assert!(s.verdict(500 * H, &off).is_none());
        assert!(s.verdict(500 * H, &Policy::default()).is_some());
    }
}
