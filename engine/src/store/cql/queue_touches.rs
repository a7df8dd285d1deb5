//! When a job's creation must touch its queue's row in `job_queues` (the lane's list of queues,
//! which paging reads): a touch per batch and queue was 0.7 requests per delivered event at a
//! steady 1,100/s, most of them rewriting a row written a moment before.
//!
//! A queue's row may go only when it is empty *and* has been untouched for `IDLE_BEFORE_DROP_MS`
//! (`paging.rs`, `drop_if_empty`, deleting only the version it read). A creator that touched the
//! queue itself less than `TOUCH_EVERY_MS` ago may skip the touch: the row's write time is at
//! least that touch's, so no holder drops it for another `IDLE_BEFORE_DROP_MS −
//! TOUCH_EVERY_MS` (40 s, well past any clock skew or delay between the job row and the drop's
//! emptiness check), and by then the drop sees the job row. A drop by this process forgets the
//! queue here, so its next creation touches again.

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

use crate::store::Lane;

/// A creator touches a queue it touched itself at most this often.
const TOUCH_EVERY_MS: i64 = 20_000;
/// A queue's row is dropped only after it has been untouched this long (and has no job).
pub(super) const IDLE_BEFORE_DROP_MS: i64 = 60_000;
// A skipped touch must leave any drop of the queue far behind.
const _: () = assert!(IDLE_BEFORE_DROP_MS - TOUCH_EVERY_MS >= 30_000);

/// Queues remembered at most; past it the memory starts again (and every queue is touched).
const REMEMBERED_MAX: usize = 100_000;

/// The queues this process touched, and when (ms).
#[derive(Debug, Default)]
pub(super) struct QueueTouches {
    last: Mutex<HashMap<(Lane, String, Uuid), i64>>,
}

impl QueueTouches {
    /// Whether a creation in this queue at `now_ms` must touch it.
    pub fn due(&self, lane: Lane, tenant: &str, sub: Uuid, now_ms: i64) -> bool {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(&(lane, tenant.to_owned(), sub))
            .is_none_or(|&at| now_ms - at >= TOUCH_EVERY_MS)
    }

    /// This process touched the queue at `at_ms` (the touch is durable).
    pub fn touched(&self, lane: Lane, tenant: &str, sub: Uuid, at_ms: i64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.len() >= REMEMBERED_MAX {
            last.clear();
        }
        last.insert((lane, tenant.to_owned(), sub), at_ms);
    }

    /// This process dropped the queue's row: its next creation must write it again.
    pub fn dropped(&self, lane: Lane, tenant: &str, sub: Uuid) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.remove(&(lane, tenant.to_owned(), sub));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_1_a_queue_is_touched_again_after_its_interval_or_a_drop() {
        let (touches, lane, sub): (_, Lane, _) = (QueueTouches::default(), 3, Uuid::nil());
        assert!(touches.due(lane, "t", sub, 1_000), "never touched");
        touches.touched(lane, "t", sub, 1_000);
        assert!(!touches.due(lane, "t", sub, 1_000 + TOUCH_EVERY_MS - 1));
        assert!(touches.due(lane, "t", sub, 1_000 + TOUCH_EVERY_MS));
        assert!(touches.due(lane, "u", sub, 1_001), "another queue");
        touches.dropped(lane, "t", sub);
        assert!(touches.due(lane, "t", sub, 1_001), "dropped: written again");
    }
}
