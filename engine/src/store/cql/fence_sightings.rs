//! When a batch may skip its fence check: the unit's generation was confirmed ours a moment ago.
//!
//! A batch's fence check was a quorum read of `units` per batch, 0.56 requests per delivered
//! event at a steady 1,100/s. It only narrows a window it cannot close (a raise may land just
//! after the read), and what a stale owner writes in that window does no harm: its events are
//! stored once whoever writes them (`claim.rs`: one id, one seq), its jobs are the rows the new
//! owner's replay writes too (the same claim time, the same received time), its quarantine rows
//! are claimed once per Kafka position, and its offset moves only `IF generation = ours`, so it
//! is refused and never committed. So a unit whose generation this process confirmed — by its
//! claim, an applied offset move or a check — within the unit-advance interval (200 ms on CQL)
//! is not read again. The clock is monotonic and runs on while a process is stopped, so a
//! member frozen past its session (SIGSTOP) checks again when it wakes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::{Fence, UnitId};

/// Each unit's generation as this process last confirmed it, and when.
#[derive(Debug, Default)]
pub(super) struct FenceSightings {
    seen: Mutex<HashMap<UnitId, (u64, Instant)>>,
}

/// What a batch under `fence` needs to know of the unit's generation.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FenceCheck {
    /// Confirmed ours within the interval: no read.
    Fresh,
    /// This process saw a later generation: the batch is stale.
    Stale(u64),
    /// Read it.
    Read,
}

impl FenceSightings {
    /// Whether a batch under `fence` may skip its read, given the interval `fresh_for`.
    pub fn check(&self, unit: &UnitId, fence: Fence, fresh_for: Duration) -> FenceCheck {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get(unit) {
            Some(&(generation, _)) if generation > fence.generation => {
                FenceCheck::Stale(generation)
            }
            Some(&(generation, at))
                if generation == fence.generation && at.elapsed() < fresh_for =>
            {
                FenceCheck::Fresh
            }
            _ => FenceCheck::Read,
        }
    }

    /// The unit's generation is `fence`'s, as of now.
    pub fn confirmed(&self, unit: &UnitId, fence: Fence) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get_mut(unit) {
            Some(entry) if entry.0 <= fence.generation => {
                *entry = (fence.generation, Instant::now())
            }
            Some(_) => {}
            None => {
                seen.insert(unit.clone(), (fence.generation, Instant::now()));
            }
        }
    }

    /// The unit's generation is no longer `fence`'s: every later batch under it reads again.
    pub fn refused(&self, unit: &UnitId) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.remove(unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_in_7_a_unit_confirmed_a_moment_ago_skips_its_fence_read_until_the_interval_ends() {
        let (sightings, unit) = (FenceSightings::default(), UnitId::new("t", 0));
        let (old, new) = (Fence { generation: 4 }, Fence { generation: 5 });
        let long = Duration::from_secs(60);
        assert_eq!(
            sightings.check(&unit, old, long),
            FenceCheck::Read,
            "never seen"
        );
        sightings.confirmed(&unit, old);
        assert_eq!(sightings.check(&unit, old, long), FenceCheck::Fresh);
        assert_eq!(
            sightings.check(&unit, old, Duration::ZERO),
            FenceCheck::Read,
            "interval over"
        );
        sightings.confirmed(&unit, new);
        assert_eq!(
            sightings.check(&unit, old, long),
            FenceCheck::Stale(5),
            "we claimed it again"
        );
        sightings.confirmed(&unit, old);
        assert_eq!(
            sightings.check(&unit, new, long),
            FenceCheck::Fresh,
            "an older sighting never wins"
        );
        sightings.refused(&unit);
        assert_eq!(sightings.check(&unit, new, long), FenceCheck::Read);
    }
}
