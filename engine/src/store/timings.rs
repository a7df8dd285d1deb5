//! Where a store's write time goes: a count and a sum of wall time per named phase, cheap enough
//! for every batch (two relaxed atomic adds per phase). Exposed on `/metrics` and read by the load
//! test's report.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One phase's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTotal {
    pub phase: &'static str,
    pub count: u64,
    pub nanos: u64,
}

/// Totals for a fixed set of phases, indexed by position in `names`.
#[derive(Debug)]
pub struct PhaseTimings {
    names: &'static [&'static str],
    counts: Vec<AtomicU64>,
    nanos: Vec<AtomicU64>,
}

impl PhaseTimings {
    pub fn new(names: &'static [&'static str]) -> Self {
        Self {
            names,
            counts: names.iter().map(|_| AtomicU64::new(0)).collect(),
            nanos: names.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds the time since `started` to phase `index`.
    pub fn record(&self, index: usize, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let (Some(c), Some(n)) = (self.counts.get(index), self.nanos.get(index)) {
            c.fetch_add(1, Ordering::Relaxed);
            n.fetch_add(nanos, Ordering::Relaxed);
        }
        if let Some(stage) = self.names.get(index) {
            crate::telemetry::METRICS
                .store_write_seconds
                .get_or_create(&crate::telemetry::StageLabel { stage })
                .observe(nanos as f64 / 1e9);
        }
    }

    pub fn snapshot(&self) -> Vec<PhaseTotal> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, phase)| PhaseTotal {
                phase,
                count: self.counts[i].load(Ordering::Relaxed),
                nanos: self.nanos[i].load(Ordering::Relaxed),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_accumulate_separately() {
        let t = PhaseTimings::new(&["a", "b"]);
        let start = Instant::now();
        t.record(1, start);
        t.record(1, start);
        t.record(7, start); // an unknown phase is ignored, not a panic
        let snap = t.snapshot();
        assert_eq!(snap[0].count, 0);
        assert_eq!(snap[1].count, 2);
        assert_eq!(snap[1].phase, "b");
    }
}
