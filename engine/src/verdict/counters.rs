//! Counters per verdict and per quarantine reason (R-IN-4). One instance per shard: only that
//! shard increments it, so relaxed atomics cost next to nothing; a scrape sums the shards.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{DropReason, QuarantineReason, Verdict};

/// Live counters of one shard.
#[derive(Debug, Default)]
pub struct VerdictCounters {
    accepted: AtomicU64,
    deduplicated: AtomicU64,
    dropped_system: AtomicU64,
    quarantined: [AtomicU64; QuarantineReason::CODES.len()],
}

/// A point-in-time copy, summable across shards.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerdictSnapshot {
    /// Records accepted by the verdict (before dedup).
    pub accepted: u64,
    /// Accepted records that were duplicates of a stored event (dedup drops, R-IN-6).
    pub deduplicated: u64,
    /// System events dropped.
    pub dropped_system: u64,
    /// Quarantined records per reason code, in [`QuarantineReason::CODES`] order.
    pub quarantined: [u64; QuarantineReason::CODES.len()],
}

impl VerdictCounters {
    /// Counts one verdict.
    pub fn count(&self, verdict: &Verdict<'_>) {
        match verdict {
            Verdict::Accept(_) => self.accepted.fetch_add(1, Relaxed),
            Verdict::Drop(DropReason::SystemEvent) => self.dropped_system.fetch_add(1, Relaxed),
            Verdict::Quarantine(r) => self.quarantined[r.code_index()].fetch_add(1, Relaxed),
        };
    }

    /// Counts `n` accepted records that dedup found already stored.
    pub fn count_duplicates(&self, n: u64) {
        self.deduplicated.fetch_add(n, Relaxed);
    }

    pub fn snapshot(&self) -> VerdictSnapshot {
        let mut s = VerdictSnapshot {
            accepted: self.accepted.load(Relaxed),
            deduplicated: self.deduplicated.load(Relaxed),
            dropped_system: self.dropped_system.load(Relaxed),
            ..VerdictSnapshot::default()
        };
        for (out, c) in s.quarantined.iter_mut().zip(&self.quarantined) {
            *out = c.load(Relaxed);
        }
        s
    }
}

impl VerdictSnapshot {
    /// Adds another shard's counts.
    pub fn add(&mut self, other: &VerdictSnapshot) {
        self.accepted += other.accepted;
        self.deduplicated += other.deduplicated;
        self.dropped_system += other.dropped_system;
        for (a, b) in self.quarantined.iter_mut().zip(&other.quarantined) {
            *a += b;
        }
    }

    /// Total quarantined records over every reason.
    pub fn quarantined_total(&self) -> u64 {
        self.quarantined.iter().sum()
    }

    /// Quarantined count for one reason code.
    pub fn quarantined_for(&self, code: &str) -> u64 {
        QuarantineReason::CODES
            .iter()
            .position(|c| *c == code)
            .map_or(0, |i| self.quarantined[i])
    }
}
