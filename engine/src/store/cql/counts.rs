//! The pending-jobs gauge of the CQL store (`job_counts`), moved in bulk.
//!
//! Every ingest batch and every delivery step moves the gauge; one counter update each was about
//! 0.4 requests per delivered event (issue 17). This process sums its moves per lane and writes
//! them at most every `WRITE_EVERY_MS`, before any read of the gauge, and when it lets its lanes
//! go. A crash loses the moves not yet written, as a crash between a job's write and its counter
//! update always could: the gauge is a gauge, not a ledger (see the table's comment).

use std::collections::HashMap;
use std::sync::Mutex;

use super::concurrently::all;
use super::jobs::lane_i32;
use super::{unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::{Lane, StoreError};

const WRITE_EVERY_MS: i64 = 1_000;

/// Moves of the gauge not yet written, per lane, and when they were last written.
#[derive(Debug, Default)]
pub(super) struct CountMoves(Mutex<Moves>);

#[derive(Debug, Default)]
struct Moves {
    written_at_ms: i64,
    by_lane: HashMap<Lane, i64>,
}

impl CountMoves {
    fn add(&self, lane: Lane, delta: i64) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *m.by_lane.entry(lane).or_default() += delta;
    }

    /// The moves to write now (all of them when `all_now`, else only once `WRITE_EVERY_MS` has
    /// passed since the last write).
    fn take(&self, all_now: bool, now: i64) -> Vec<(Lane, i64)> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !all_now && now - m.written_at_ms < WRITE_EVERY_MS {
            return Vec::new();
        }
        m.written_at_ms = now;
        m.by_lane.drain().filter(|(_, n)| *n != 0).collect()
    }

    /// Puts back moves whose write failed.
    fn restore(&self, moves: &[(Lane, i64)]) {
        for (lane, n) in moves {
            self.add(*lane, *n);
        }
    }
}

impl CqlStore {
    /// Moves a lane's pending-jobs gauge (written within `WRITE_EVERY_MS`).
    pub(super) async fn count(&self, lane: Lane, delta: i64) -> Result<(), StoreError> {
        if delta != 0 {
            self.count_moves.add(lane, delta);
        }
        self.write_counts(false).await
    }

    /// Writes the gauge's moves: those due, or all of them (`all_now`: before a read, at a stop).
    pub(super) async fn write_counts(&self, all_now: bool) -> Result<(), StoreError> {
        let moves = self.count_moves.take(all_now, now_ms());
        if moves.is_empty() {
            return Ok(());
        }
        let written = all(moves.iter().map(|&(lane, n)| async move {
            self.session
                .execute_unpaged(
                    &self.jt.count_add,
                    (scylla::value::Counter(n), lane_i32(lane)),
                )
                .await
                .map_err(unavailable)
        }))
        .await;
        if written.is_err() {
            // Which of them landed is unknown; a counter update is not idempotent, so counting
            // them again could count twice. Kept for the next write: a gauge may be off by a
            // failed write either way, and a dropped move never comes back.
            self.count_moves.restore(&moves);
        }
        written.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_3_gauge_moves_are_summed_per_lane_and_written_at_most_every_second() {
        let moves = CountMoves::default();
        moves.add(1, 3);
        moves.add(1, -1);
        moves.add(2, 1);
        moves.add(2, -1);
        let mut first = moves.take(false, 5_000);
        first.sort_unstable();
        assert_eq!(
            first,
            vec![(1, 2)],
            "summed; a lane that came to zero is not written"
        );
        moves.add(1, 4);
        assert!(
            moves.take(false, 5_500).is_empty(),
            "within a second of the last write"
        );
        assert_eq!(
            moves.take(true, 5_600),
            vec![(1, 4)],
            "before a read: all at once"
        );
        moves.add(3, 1);
        assert_eq!(moves.take(false, 6_600), vec![(3, 1)]);
    }
}
