//! The last attempts of the log store's pending jobs, kept apart from the jobs. Most pending
//! jobs have none (a million waiting behind an open breaker), so a job names its own by a
//! 4-byte number instead of carrying an 8-byte pointer, and its entry is 56 bytes, not 64
//! (issue 17: ~8 MiB a million jobs). A job that has one costs what a boxed record did: the
//! record and its job's id, inline.
//!
//! The slab stays dense like the job map: a freed slot takes the last one, and the caller tells
//! the moved attempt's job its new number, so a drained backlog of failures gives memory back.

use super::job_map::{halves, whole, Halves};
use crate::store::AttemptRecord;

/// A job's attempt number: 0 names none, `n` names slot `n - 1`.
pub(super) type AttemptNumber = u32;

/// The no-attempt number.
pub(super) const NONE: AttemptNumber = 0;

#[derive(Debug, Default)]
pub(super) struct Attempts {
    /// Each attempt and the id of the job it belongs to.
    slots: Vec<(Halves, AttemptRecord)>,
}

impl Attempts {
    /// Keeps `attempt` for job `job`; returns its number.
    pub fn add(&mut self, job: u128, attempt: AttemptRecord) -> AttemptNumber {
        self.slots.push((halves(job), attempt));
        u32::try_from(self.slots.len()).expect("fewer than 2^32 attempts")
    }

    pub fn get(&self, n: AttemptNumber) -> Option<&AttemptRecord> {
        let slot = n.checked_sub(1)?;
        self.slots.get(slot as usize).map(|(_, a)| a)
    }

    /// Replaces attempt `n` in place.
    pub fn set(&mut self, n: AttemptNumber, attempt: AttemptRecord) {
        if let Some(slot) = n
            .checked_sub(1)
            .and_then(|s| self.slots.get_mut(s as usize))
        {
            slot.1 = attempt;
        }
    }

    /// Keeps `attempt` as job `job`'s last, which was `kept`: returns its number, and the job
    /// an attempt moved for (as `free`).
    pub fn keep(
        &mut self,
        job: u128,
        kept: AttemptNumber,
        attempt: Option<AttemptRecord>,
    ) -> (AttemptNumber, Option<(u128, AttemptNumber)>) {
        match (kept, attempt) {
            (NONE, None) => (NONE, None),
            (NONE, Some(attempt)) => (self.add(job, attempt), None),
            (kept, Some(attempt)) => {
                self.set(kept, attempt);
                (kept, None)
            }
            (kept, None) => (NONE, self.free(kept)),
        }
    }

    /// Frees attempt `n` (none for `NONE`). When the last attempt moved into its slot, returns
    /// that attempt's job and its new number, `n`, which the caller tells the job.
    pub fn free(&mut self, n: AttemptNumber) -> Option<(u128, AttemptNumber)> {
        let slot = n.checked_sub(1)? as usize;
        if slot >= self.slots.len() {
            return None;
        }
        self.slots.swap_remove(slot);
        if self.slots.len() * 4 < self.slots.capacity() && self.slots.capacity() > 64 {
            self.slots.shrink_to(self.slots.len() * 2);
        }
        self.slots.get(slot).map(|(job, _)| (whole(*job), n))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: u64) -> AttemptRecord {
        AttemptRecord {
            at_ms: n as i64,
            success: false,
            error_class: None,
            status_code: Some(503),
            detail: String::new(),
            duration_ms: n,
        }
    }

    /// Freeing an attempt moves the last one into its slot and names that attempt's job, so
    /// every number the caller keeps stays right.
    #[test]
    fn r_di_8_a_freed_attempt_slot_is_taken_by_the_last_and_its_job_is_named() {
        let mut attempts = Attempts::default();
        let numbers: Vec<_> = (0..5u64)
            .map(|n| attempts.add(u128::from(n) << 70, attempt(n)))
            .collect();
        assert_eq!(numbers, vec![1, 2, 3, 4, 5]);
        assert_eq!(attempts.get(NONE), None);
        assert_eq!(
            attempts.free(2),
            Some((4u128 << 70, 2)),
            "the last moved into slot 2"
        );
        assert_eq!(attempts.get(2).map(|a| a.duration_ms), Some(4));
        assert_eq!(
            attempts.free(4),
            None,
            "the last slot itself: nothing moved"
        );
        attempts.set(1, attempt(40));
        assert_eq!(attempts.get(1).map(|a| a.duration_ms), Some(40));
        assert_eq!(attempts.len(), 3);
        assert_eq!(attempts.free(9), None);
        assert_eq!(attempts.free(NONE), None);
        assert_eq!(attempts.keep(7, NONE, None), (NONE, None));
        assert_eq!(attempts.keep(7, NONE, Some(attempt(7))), (4, None));
        assert_eq!(
            attempts.keep(7, 4, None),
            (NONE, None),
            "the last slot: nothing moved"
        );
    }
}
