//! Where a queue's next holder starts paging (`queue_floors`): a lane changes hands (a restart, a
//! rebalance), and its new holder, with no floor of its own, would read each queue from its
//! start — through the tombstones every delivered job leaves for an hour, past the server's limit
//! on a busy queue. So a holder writes down each queue's floor as it rises, `HINT_LAG_MS` behind
//! it, and a new holder pages from there.
//!
//! Sound because a hint is at most a floor its writer paged from, taken a minute back: a live row
//! below it is one that floor passed, which it does only to a row announced (`late_rows.rs`).

use uuid::Uuid;

use super::jobs::lane_i32;
use super::late_rows::FLOOR_TRAILS_MS;
use super::{unavailable, CqlStore};
use crate::store::{Lane, StoreError};

/// How far behind its floor a queue's hint is written.
const HINT_LAG_MS: i64 = 60_000;
const _: () = assert!(HINT_LAG_MS >= 2 * FLOOR_TRAILS_MS);
/// A hint is rewritten once it can rise this much, at most this often.
const HINT_STEP_MS: i64 = 30_000;
/// A hint that did not move is rewritten this often (the table's rows live a day).
const HINT_REFRESH_MS: i64 = 3_600_000;

/// The hint for a floor at `floor_ms`, written at `clock`.
pub(super) fn hint_for(floor_ms: i64, clock: i64) -> i64 {
    floor_ms.min(clock).saturating_sub(HINT_LAG_MS)
}

/// Whether a queue whose hint was last written (`last`, at `last_at`) gets `hint` at `clock`.
pub(super) fn hint_due(last: i64, last_at: i64, hint: i64, clock: i64) -> bool {
    let since = clock.saturating_sub(last_at);
    (hint >= last.saturating_add(HINT_STEP_MS) && since >= HINT_STEP_MS) || since >= HINT_REFRESH_MS
}

impl CqlStore {
    /// The queue's hint, if a holder wrote one.
    pub(super) async fn floor_hint(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
    ) -> Result<Option<i64>, StoreError> {
        let row: Option<(Option<i64>,)> = self
            .first_row(&self.jt.hint_read, (lane_i32(lane), tenant, sub))
            .await?;
        Ok(row.and_then(|(hint,)| hint))
    }

    pub(super) async fn write_floor_hint(
        &self,
        lane: Lane,
        tenant: &str,
        sub: Uuid,
        hint: i64,
    ) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(&self.jt.hint_write, (lane_i32(lane), tenant, sub, hint))
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_1_a_queue_hint_trails_its_floor_and_is_written_as_it_rises() {
        let clock = 10_000_000;
        assert_eq!(hint_for(clock - 5_000, clock), clock - 5_000 - HINT_LAG_MS);
        assert_eq!(
            hint_for(clock + 5_000, clock),
            clock - HINT_LAG_MS,
            "never ahead of the clock"
        );
        assert!(hint_due(i64::MIN, i64::MIN, 0, clock), "never written");
        let (last, at) = (clock - HINT_LAG_MS, clock);
        assert!(
            !hint_due(last, at, last + HINT_STEP_MS, at + 1_000),
            "not twice within the step"
        );
        assert!(hint_due(last, at, last + HINT_STEP_MS, at + HINT_STEP_MS));
        assert!(
            !hint_due(last, at, last + 1_000, at + HINT_STEP_MS),
            "risen too little"
        );
        assert!(
            hint_due(last, at, last, at + HINT_REFRESH_MS),
            "refreshed before its row lapses"
        );
        assert!(
            !hint_due(last, at, last - 50_000, at + HINT_STEP_MS),
            "never lowered"
        );
    }
}
