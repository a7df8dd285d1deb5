//! A pending job as the log store's index holds it: the `JobRecord` without what a million of
//! them would repeat — its queue (lane, tenant, subscription: 36 bytes and a shared name) is a
//! number into the index's queue names, the id is the map's key, the last attempt's outcome is a
//! number into the index's attempts (most jobs have none), and the lease is a bit of the start
//! count. 56 bytes, where the record's fields took 104 (issue 17: a million pending jobs held in
//! memory).

use uuid::Uuid;

use super::attempts::AttemptNumber;
use super::state::QueueKey;
use crate::store::{AttemptRecord, JobRecord};

/// The bit of `starts_leased` that says an attempt is under way.
const LEASED: u16 = 1 << 15;

#[derive(Debug, Clone)]
pub(super) struct JobEntry {
    /// The job's queue, by number (`State::queue_key`).
    pub queue: u32,
    /// The segment of the job's last record.
    pub seg: u32,
    /// The last attempt, by number (`Attempts`).
    pub last: AttemptNumber,
    /// Attempts and starts are at most a retry schedule's length (12 delays) plus recoveries:
    /// 16 bits hold attempts and 15 the starts, saturating.
    pub attempts: u16,
    /// The starts, and in the top bit whether an attempt is under way (a lease not yet
    /// settled).
    starts_leased: u16,
    pub event_id: Uuid,
    pub event_seq: u64,
    pub received_at_ms: i64,
    pub due_at_ms: i64,
}

fn narrow(n: u32, max: u16) -> u16 {
    u16::try_from(n).unwrap_or(max).min(max)
}

impl JobEntry {
    /// The entry of `job`, whose last attempt is already kept as `last`.
    pub fn new(job: &JobRecord, queue: u32, leased: bool, seg: u32, last: AttemptNumber) -> Self {
        let starts = narrow(job.starts, LEASED - 1);
        Self {
            queue,
            seg,
            last,
            attempts: narrow(job.attempts, u16::MAX),
            starts_leased: if leased { starts | LEASED } else { starts },
            event_id: job.event_id,
            event_seq: job.event_seq,
            received_at_ms: job.received_at_ms,
            due_at_ms: job.due_at_ms,
        }
    }

    pub fn leased(&self) -> bool {
        self.starts_leased & LEASED != 0
    }

    pub fn set_leased(&mut self, leased: bool) {
        self.starts_leased = self.starts() | if leased { LEASED } else { 0 };
    }

    pub fn starts(&self) -> u16 {
        self.starts_leased & !LEASED
    }

    /// The job as stored, `id` being its key, `queue` what its number names and `last` its
    /// last attempt.
    pub fn record(&self, id: u128, queue: &QueueKey, last: Option<&AttemptRecord>) -> JobRecord {
        JobRecord {
            id,
            lane: queue.0,
            tenant: queue.1.clone(),
            subscription: Uuid::from_u128(queue.2),
            event_id: self.event_id,
            event_seq: self.event_seq,
            received_at_ms: self.received_at_ms,
            due_at_ms: self.due_at_ms,
            attempts: u32::from(self.attempts),
            starts: u32::from(self.starts()),
            last: last.cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_8_a_pending_job_is_held_in_56_bytes() {
        assert_eq!(std::mem::size_of::<JobEntry>(), 56);
    }

    /// The lease bit and the start count share 16 bits without touching each other; starts
    /// saturate below the bit.
    #[test]
    fn r_di_8_the_lease_bit_leaves_the_start_count_alone() {
        let mut job = JobRecord::created(
            &crate::store::conformance::event("t", "loan.approved"),
            1,
            Uuid::now_v7(),
            1,
        );
        job.starts = 3;
        let mut entry = JobEntry::new(&job, 0, true, 0, 0);
        assert!(entry.leased() && entry.starts() == 3);
        entry.set_leased(false);
        assert!(!entry.leased() && entry.starts() == 3);
        job.starts = 1_000_000;
        let entry = JobEntry::new(&job, 0, false, 0, 0);
        assert_eq!((entry.starts(), entry.leased()), (LEASED - 1, false));
    }
}
