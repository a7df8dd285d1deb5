//! When a shard moves a unit's offset (and commits it to Kafka), on a store where the move costs a
//! round of its own (`Ingest::unit_advance_every`; CQL: a Paxos round, issue 17).
//!
//! A batch moves the unit's offset when the unit's last move is at least `every` old; otherwise
//! it is written without one and its offset trails. A trailing offset is moved by an empty batch
//! once it is `every` old (the shard wakes for it), or when the shard stops (one try). Only what a
//! move made durable is committed to Kafka, so the committed position never passes the store's
//! (R-IN-7); a crash replays what trailed, and dedup makes the replay a no-op. Where moves are
//! free (`every` is `None`), every batch moves the offset, as before.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::store::UnitId;

/// The units' moves of one shard.
#[derive(Debug, Default)]
pub(super) struct UnitAdvances {
    every: Option<Duration>,
    units: HashMap<UnitId, Trail>,
}

#[derive(Debug, Clone, Copy)]
struct Trail {
    /// When the unit's offset last moved.
    moved_at: Instant,
    /// The next offset durable but not moved to yet.
    pending: Option<i64>,
}

impl UnitAdvances {
    pub fn new(every: Option<Duration>) -> Self {
        Self {
            every,
            units: HashMap::new(),
        }
    }

    /// Where a batch whose records end before `next` moves its unit's offset: to `next` when
    /// the unit's last move is `every` old or moves are free, else nowhere (`None`).
    pub fn move_for(&self, unit: &UnitId, next: Option<i64>, now: Instant) -> Option<i64> {
        let Some(every) = self.every else {
            return next;
        };
        match self.units.get(unit) {
            Some(t) if now.duration_since(t.moved_at) < every => None,
            _ => next,
        }
    }

    /// After a durable batch of `unit` whose records end before `next`, which moved the offset
    /// there (`moved`) or left it trailing.
    pub fn written(&mut self, unit: &UnitId, next: Option<i64>, moved: bool, now: Instant) {
        if self.every.is_none() {
            return; // every batch moves its offset: nothing ever trails
        }
        if moved {
            self.units.insert(
                unit.clone(),
                Trail {
                    moved_at: now,
                    pending: None,
                },
            );
        } else if let (Some(next), Some(t)) = (next, self.units.get_mut(unit)) {
            t.pending = Some(t.pending.map_or(next, |p| p.max(next)));
        }
    }

    /// A unit this shard no longer writes (revoked, or owned by a newer generation): what
    /// trailed is replayed by its next owner.
    pub fn forget(&mut self, unit: &UnitId) {
        self.units.remove(unit);
    }

    /// The trailing offsets due at `now` (their unit's last move `every` old), or all of them
    /// (`all`, at a stop), with the offset each moves to.
    pub fn due(&self, now: Instant, all: bool) -> Vec<(UnitId, i64)> {
        let every = self.every.unwrap_or_default();
        self.units
            .iter()
            .filter(|(_, t)| all || now.duration_since(t.moved_at) >= every)
            .filter_map(|(u, t)| t.pending.map(|p| (u.clone(), p)))
            .collect()
    }

    /// When the first trailing offset falls due, if any trails.
    pub fn next_due(&self) -> Option<Instant> {
        let every = self.every?;
        self.units
            .values()
            .filter(|t| t.pending.is_some())
            .map(|t| t.moved_at + every)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(p: i32) -> UnitId {
        UnitId::new("lerian.streaming.t", p)
    }

    #[test]
    fn r_in_7_free_moves_go_with_every_batch() {
        let mut a = UnitAdvances::new(None);
        let now = Instant::now();
        assert_eq!(a.move_for(&unit(0), Some(5), now), Some(5));
        a.written(&unit(0), Some(5), true, now);
        assert_eq!(a.move_for(&unit(0), Some(9), now), Some(9));
        assert!(a.next_due().is_none());
    }

    #[test]
    fn r_in_7_a_costly_move_trails_at_most_its_interval_and_never_passes_what_is_durable() {
        let every = Duration::from_millis(200);
        let mut a = UnitAdvances::new(Some(every));
        let t0 = Instant::now();
        // The first batch of a unit moves it.
        assert_eq!(a.move_for(&unit(0), Some(5), t0), Some(5));
        a.written(&unit(0), Some(5), true, t0);
        // Batches within the interval trail; the trailing offset is the furthest durable one.
        let t1 = t0 + Duration::from_millis(50);
        assert_eq!(a.move_for(&unit(0), Some(9), t1), None);
        a.written(&unit(0), Some(9), false, t1);
        a.written(&unit(0), Some(12), false, t1);
        assert!(a.due(t1, false).is_empty());
        assert_eq!(a.next_due(), Some(t0 + every));
        // Once the interval has passed it is due, and a batch then moves it too.
        let t2 = t0 + every;
        assert_eq!(a.due(t2, false), vec![(unit(0), 12)]);
        assert_eq!(a.move_for(&unit(0), Some(15), t2), Some(15));
        a.written(&unit(0), Some(15), true, t2);
        assert!(a.due(t2, true).is_empty());
        assert!(a.next_due().is_none());
    }

    #[test]
    fn r_in_7_a_stop_moves_every_trailing_offset_and_a_lost_unit_moves_none() {
        let mut a = UnitAdvances::new(Some(Duration::from_secs(1)));
        let t0 = Instant::now();
        for p in 0..2 {
            a.written(&unit(p), Some(1), true, t0);
            a.written(&unit(p), Some(4), false, t0);
        }
        a.forget(&unit(1));
        assert_eq!(a.due(t0, true), vec![(unit(0), 4)]);
        assert!(a.due(t0, false).is_empty());
    }
}
