//! The circuit breaker per (tenant, destination) (R-DI-9): closed → open after repeated failures →
//! half-open after a cool-down, where one probe attempt decides → closed on success. While open,
//! jobs wait without an attempt (not counted as attempts), except a job's last attempt, which may
//! still run so that a job is never dead-lettered without its final try.

/// When the breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open it.
    pub failures_to_open: u32,
    /// How long it stays open before a probe.
    pub cool_down_ms: i64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures_to_open: 5,
            cool_down_ms: 30_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed {
        consecutive_failures: u32,
    },
    Open {
        until_ms: i64,
    },
    /// One probe is out; everything else waits for its outcome.
    HalfOpen,
}

/// What a job may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Attempt,
    /// The half-open probe: its outcome closes or reopens the breaker.
    Probe,
    /// Reschedule to this time without an attempt.
    WaitUntil(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    pub state: State,
    pub config: BreakerConfig,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            state: State::Closed {
                consecutive_failures: 0,
            },
            config,
        }
    }

    /// Asks to attempt a job; `last_attempt` jobs are never held back.
    pub fn admit(&mut self, now_ms: i64, last_attempt: bool) -> Admit {
        match self.state {
            State::Closed { .. } => Admit::Attempt,
            State::Open { until_ms } if now_ms >= until_ms => {
                self.state = State::HalfOpen;
                Admit::Probe
            }
            State::Open { .. } | State::HalfOpen if last_attempt => Admit::Attempt,
            State::Open { until_ms } => Admit::WaitUntil(until_ms),
            State::HalfOpen => Admit::WaitUntil(now_ms + self.config.cool_down_ms),
        }
    }

    /// Records an attempt's outcome.
    pub fn record(&mut self, now_ms: i64, success: bool) {
        let reopen = State::Open {
            until_ms: now_ms + self.config.cool_down_ms,
        };
        self.state = match (self.state, success) {
            (_, true) => State::Closed {
                consecutive_failures: 0,
            },
            (
                State::Closed {
                    consecutive_failures,
                },
                false,
            ) => {
                let n = consecutive_failures + 1;
                if n >= self.config.failures_to_open {
                    reopen
                } else {
                    State::Closed {
                        consecutive_failures: n,
                    }
                }
            }
            (State::HalfOpen, false) => reopen,
            // A last attempt let through while open failed: stay open as we were.
            (open @ State::Open { .. }, false) => open,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            failures_to_open: 3,
            cool_down_ms: 1000,
        })
    }

    #[test]
    fn r_di_9_opens_after_repeated_failures_and_holds_jobs_back() {
        let mut b = breaker();
        for t in 0..2 {
            assert_eq!(b.admit(t, false), Admit::Attempt);
            b.record(t, false);
        }
        assert!(matches!(
            b.state,
            State::Closed {
                consecutive_failures: 2
            }
        ));
        b.record(2, false);
        assert_eq!(b.state, State::Open { until_ms: 1002 });
        assert_eq!(
            b.admit(500, false),
            Admit::WaitUntil(1002),
            "waits without an attempt"
        );
    }

    #[test]
    fn r_di_9_a_last_attempt_runs_even_while_open() {
        let mut b = breaker();
        b.state = State::Open { until_ms: 1000 };
        assert_eq!(b.admit(10, true), Admit::Attempt);
        b.record(11, false);
        assert_eq!(
            b.state,
            State::Open { until_ms: 1000 },
            "its failure does not extend the cool-down"
        );
        b.state = State::HalfOpen;
        assert_eq!(b.admit(10, true), Admit::Attempt);
    }

    #[test]
    fn r_di_9_half_open_probe_closes_on_success_and_reopens_on_failure() {
        let mut b = breaker();
        b.state = State::Open { until_ms: 1000 };
        assert_eq!(b.admit(1000, false), Admit::Probe);
        assert_eq!(
            b.admit(1001, false),
            Admit::WaitUntil(2001),
            "one probe at a time"
        );
        b.record(1002, false);
        assert_eq!(b.state, State::Open { until_ms: 2002 });
        assert_eq!(b.admit(2002, false), Admit::Probe);
        b.record(2003, true);
        assert_eq!(
            b.state,
            State::Closed {
                consecutive_failures: 0
            }
        );
        assert_eq!(b.admit(2004, false), Admit::Attempt);
    }

    #[test]
    fn r_di_9_a_success_resets_the_count() {
        let mut b = breaker();
        b.record(0, false);
        b.record(1, false);
        b.record(2, true);
        b.record(3, false);
        assert!(matches!(
            b.state,
            State::Closed {
                consecutive_failures: 1
            }
        ));
    }
}
