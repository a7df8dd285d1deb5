//! Ingest back-pressure (issue 17): when delivery falls behind past the operator's bound, ingest
//! holds back, so a flood of new events cannot starve delivery of the machine.
//!
//! What "behind" means is measured where it happens: each shard's lane reports its **delivery
//! lag** once a second — how late (past their due time) the attempts it started in that second
//! started; the least of them, so one slow destination (its jobs wait for its own cap, R-DI-3)
//! does not count as the hub being behind while other jobs still start at once. A lane that
//! started nothing while every worker was busy reports the age of the oldest job it holds.
//! Optionally the jobs pending in the store count too (retries waiting for broken destinations
//! are pending, so that bound is off by default).
//!
//! The gate is pure (`Gate::next`): it closes when a bound is passed, opens again when the lag is
//! under half its bound (hysteresis: no flapping at the edge), and never stays closed longer than
//! `max_pause_ms` at a time — then it opens for a quarter of that, so events still trickle in and
//! the lag of fresh jobs can show that delivery caught up. Closed, the Kafka consumer pauses its
//! partitions and HTTP ingest answers 429 `ingest_throttled` with `Retry-After`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::Stop;
use crate::store::Jobs;

/// How long a lane gathers start lags before it reports one.
pub const WINDOW_MS: i64 = 1_000;

/// How often the gate is evaluated.
const EVALUATE_EVERY: Duration = Duration::from_millis(250);

/// The operator's bounds (settings `backpressure_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Delivery lag at which ingest holds back, in ms; 0 turns this bound off.
    pub lag_ms: i64,
    /// Jobs pending in the store at which ingest holds back; 0 turns this bound off.
    pub pending_jobs: u64,
    /// Longest the gate stays closed at a time before it opens for a quarter of it.
    pub max_pause_ms: i64,
}

impl Bounds {
    /// Whether any bound is on (when none is, nothing is measured and the gate stays open).
    #[must_use]
    pub fn any(&self) -> bool {
        self.lag_ms > 0 || self.pending_jobs > 0
    }

    fn passed(&self, r: &Reading) -> bool {
        let lagging = self.lag_ms > 0 && r.lag_ms >= self.lag_ms;
        let piled_up = self.pending_jobs > 0 && r.pending.is_some_and(|p| p >= self.pending_jobs);
        lagging || piled_up
    }

    fn cleared(&self, r: &Reading) -> bool {
        let lag_ok = self.lag_ms == 0 || r.lag_ms < self.lag_ms / 2;
        let pending_ok = self.pending_jobs == 0
            || r.pending
                .is_none_or(|p| p < self.pending_jobs - self.pending_jobs / 10);
        lag_ok && pending_ok
    }

    fn probe_ms(&self) -> i64 {
        (self.max_pause_ms / 4).max(1)
    }
}

/// What the gate decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The worst shard's delivery lag, in ms.
    pub lag_ms: i64,
    /// Jobs pending in the store (`None`: not measured, or the store did not answer).
    pub pending: Option<u64>,
}

/// Whether ingest may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Ingest goes on; until `probe_until` it stays open whatever the readings say.
    Open { probe_until: i64 },
    /// Ingest holds back since `since`.
    Closed { since: i64 },
}

impl Gate {
    /// The gate after `reading` at `now`.
    #[must_use]
    pub fn next(self, reading: &Reading, bounds: &Bounds, now: i64) -> Gate {
        match self {
            Gate::Open { probe_until } if now >= probe_until && bounds.passed(reading) => {
                Gate::Closed { since: now }
            }
            Gate::Open { .. } => self,
            Gate::Closed { .. } if bounds.cleared(reading) => Gate::Open { probe_until: now },
            Gate::Closed { since } if now - since >= bounds.max_pause_ms => Gate::Open {
                probe_until: now + bounds.probe_ms(),
            },
            Gate::Closed { .. } => self,
        }
    }

    /// Seconds a refused producer should wait: until the gate's next forced opening.
    #[must_use]
    pub fn retry_after_s(self, bounds: &Bounds, now: i64) -> u64 {
        match self {
            Gate::Open { .. } => 0,
            Gate::Closed { since } => {
                let left = (since + bounds.max_pause_ms - now).max(0);
                u64::try_from((left + 999) / 1000).unwrap_or(1).max(1)
            }
        }
    }
}

/// A lane's start lags over one window.
#[derive(Debug, Clone, Default)]
pub struct LagWindow {
    since: i64,
    least: Option<i64>,
}

impl LagWindow {
    /// An attempt was chosen to start `lag_ms` after its due time.
    pub fn started(&mut self, lag_ms: i64) {
        let lag = lag_ms.max(0);
        self.least = Some(self.least.map_or(lag, |l| l.min(lag)));
    }

    /// At the end of a window, the lane's lag: the least start lag of the window, or, when
    /// nothing started, how long the oldest held job has waited if `stalled` names one (every
    /// worker busy), else 0. `None` before the window ends.
    pub fn close(&mut self, now: i64, stalled: impl FnOnce() -> Option<i64>) -> Option<i64> {
        if now - self.since < WINDOW_MS {
            return None;
        }
        let lag = match self.least.take() {
            Some(least) => least,
            None => stalled().map_or(0, |due| (now - due).max(0)),
        };
        self.since = now;
        Some(lag)
    }
}

/// The engine's gate, shared by the lanes (which report lags), the watcher (which decides) and
/// ingest (which reads it).
#[derive(Debug)]
pub struct Backpressure {
    pub bounds: Bounds,
    lags: Box<[AtomicI64]>,
    closed: AtomicBool,
    retry_after_s: AtomicU64,
}

impl Backpressure {
    #[must_use]
    pub fn new(bounds: Bounds, shards: usize) -> Self {
        Self {
            bounds,
            lags: (0..shards.max(1)).map(|_| AtomicI64::new(0)).collect(),
            closed: AtomicBool::new(false),
            retry_after_s: AtomicU64::new(1),
        }
    }

    /// Shard `shard`'s lane reports its lag.
    pub fn report_lag(&self, shard: usize, lag_ms: i64) {
        if let Some(slot) = self.lags.get(shard) {
            slot.store(lag_ms, Ordering::Relaxed);
        }
    }

    /// The worst shard's lag.
    #[must_use]
    pub fn lag_ms(&self) -> i64 {
        self.lags
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// Whether ingest should hold back now.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// What a refused HTTP producer is told to wait, in seconds.
    #[must_use]
    pub fn retry_after_s(&self) -> u64 {
        self.retry_after_s.load(Ordering::Relaxed)
    }

    fn set(&self, gate: Gate, now: i64) {
        let closed = matches!(gate, Gate::Closed { .. });
        self.retry_after_s
            .store(gate.retry_after_s(&self.bounds, now), Ordering::Relaxed);
        self.closed.store(closed, Ordering::Relaxed);
    }
}

/// Evaluates the gate every 250 ms until `stop` (on tokio). Not started when no bound is on.
pub async fn watch(bp: Arc<Backpressure>, store: Arc<dyn Jobs>, stop: Stop) {
    let metrics = &crate::telemetry::METRICS;
    metrics.backpressure_bounds(&bp.bounds);
    let mut gate = Gate::Open { probe_until: 0 };
    while !stop.is_set() {
        let pending = if bp.bounds.pending_jobs > 0 {
            let answer = tokio::time::timeout(Duration::from_secs(1), store.pending_jobs()).await;
            answer.ok().and_then(Result::ok)
        } else {
            None
        };
        let reading = Reading {
            lag_ms: bp.lag_ms(),
            pending,
        };
        let now = crate::clock::now_ms();
        let next = gate.next(&reading, &bp.bounds, now);
        match (gate, next) {
            (Gate::Open { .. }, Gate::Closed { .. }) => {
                metrics.ingest_backpressure_pauses.inc();
                tracing::warn!(
                    lag_ms = reading.lag_ms,
                    pending = ?reading.pending,
                    "delivery is behind its bound: ingest holds back"
                );
            }
            (Gate::Closed { since }, Gate::Open { .. }) => tracing::info!(
                lag_ms = reading.lag_ms,
                paused_ms = now - since,
                "ingest goes on"
            ),
            _ => {}
        }
        gate = next;
        bp.set(gate, now);
        metrics
            .ingest_backpressure
            .set(i64::from(matches!(gate, Gate::Closed { .. })));
        metrics
            .delivery_lag_seconds
            .set(reading.lag_ms as f64 / 1000.0);
        stop.sleep(EVALUATE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        lag_ms: 10_000,
        pending_jobs: 0,
        max_pause_ms: 4_000,
    };

    fn lag(ms: i64) -> Reading {
        Reading {
            lag_ms: ms,
            pending: None,
        }
    }

    #[test]
    fn backpressure_closes_past_the_lag_bound_and_opens_under_half_of_it() {
        let open = Gate::Open { probe_until: 0 };
        assert_eq!(open.next(&lag(9_999), &BOUNDS, 10), open);
        let closed = open.next(&lag(10_000), &BOUNDS, 10);
        assert_eq!(closed, Gate::Closed { since: 10 });
        // Between half the bound and the bound: stays as it is (no flapping at the edge).
        assert_eq!(closed.next(&lag(6_000), &BOUNDS, 20), closed);
        assert_eq!(
            closed.next(&lag(4_999), &BOUNDS, 30),
            Gate::Open { probe_until: 30 }
        );
    }

    #[test]
    fn backpressure_never_holds_longer_than_max_pause_and_then_lets_events_trickle() {
        let closed = Gate::Closed { since: 0 };
        assert_eq!(closed.next(&lag(60_000), &BOUNDS, 3_999), closed);
        let probing = closed.next(&lag(60_000), &BOUNDS, 4_000);
        assert_eq!(probing, Gate::Open { probe_until: 5_000 });
        // Open for a quarter of the pause whatever the lag says, then closed again.
        assert_eq!(probing.next(&lag(60_000), &BOUNDS, 4_999), probing);
        assert_eq!(
            probing.next(&lag(60_000), &BOUNDS, 5_000),
            Gate::Closed { since: 5_000 }
        );
    }

    #[test]
    fn backpressure_counts_pending_jobs_only_when_that_bound_is_on() {
        let bounds = Bounds {
            lag_ms: 0,
            pending_jobs: 1_000,
            ..BOUNDS
        };
        let open = Gate::Open { probe_until: 0 };
        let many = Reading {
            lag_ms: 99_000,
            pending: Some(1_000),
        };
        let closed = open.next(&many, &bounds, 1);
        assert_eq!(closed, Gate::Closed { since: 1 });
        let fewer = Reading {
            pending: Some(950),
            ..many
        };
        assert_eq!(closed.next(&fewer, &bounds, 2), closed, "hysteresis: 10 %");
        let unknown = Reading {
            pending: None,
            ..many
        };
        assert_eq!(
            open.next(&unknown, &bounds, 3),
            open,
            "no answer is no reason"
        );
        assert!(!BOUNDS.passed(&Reading {
            lag_ms: 0,
            pending: Some(u64::MAX)
        }));
    }

    #[test]
    fn backpressure_tells_a_refused_producer_when_the_gate_opens_next() {
        let closed = Gate::Closed { since: 1_000 };
        assert_eq!(closed.retry_after_s(&BOUNDS, 1_000), 4);
        assert_eq!(closed.retry_after_s(&BOUNDS, 4_500), 1);
        assert_eq!(closed.retry_after_s(&BOUNDS, 9_000), 1);
        assert_eq!(Gate::Open { probe_until: 0 }.retry_after_s(&BOUNDS, 0), 0);
    }

    #[test]
    fn a_lane_reports_the_least_start_lag_of_its_window() {
        let mut window = LagWindow::default();
        window.started(300);
        window.started(40);
        window.started(-5);
        assert_eq!(window.close(WINDOW_MS - 1, || None), None);
        assert_eq!(window.close(WINDOW_MS, || Some(0)), Some(0));
        // Nothing started since: with a free worker the lane is idle, not behind.
        assert_eq!(window.close(2 * WINDOW_MS, || None), Some(0));
        // Nothing started while every worker was busy: the oldest held job's wait.
        assert_eq!(window.close(3 * WINDOW_MS, || Some(500)), Some(2_500));
    }
}
