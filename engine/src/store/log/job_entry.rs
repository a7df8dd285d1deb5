//! A pending job as the log store's index holds it: the `JobRecord` without what a million of
//! them would repeat — its queue (lane, tenant, subscription: 36 bytes and a shared name) is a
//! number into the index's queue names, the id is the map's key, the last attempt's outcome sits
//! behind a pointer (most jobs have none). 64 bytes, where the record's fields took 104 (issue
//! 17: a million pending jobs held in memory).

use uuid::Uuid;

use super::state::QueueKey;
use crate::store::{AttemptRecord, JobRecord};

#[derive(Debug, Clone)]
pub(super) struct JobEntry {
    /// The job's queue, by number (`State::queue_key`).
    pub queue: u32,
    /// The segment of the job's last record.
    pub seg: u32,
    /// Attempts and starts are at most a retry schedule's length (12 delays) plus recoveries:
    /// 16 bits hold them, saturating.
    pub attempts: u16,
    pub starts: u16,
    /// An attempt is under way (a lease not yet settled).
    pub leased: bool,
    pub event_id: Uuid,
    pub event_seq: u64,
    pub received_at_ms: i64,
    pub due_at_ms: i64,
    pub last: Option<Box<AttemptRecord>>,
}

fn narrow(n: u32) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

impl JobEntry {
    pub fn new(job: JobRecord, queue: u32, leased: bool, seg: u32) -> Self {
        Self {
            queue,
            seg,
            attempts: narrow(job.attempts),
            starts: narrow(job.starts),
            leased,
            event_id: job.event_id,
            event_seq: job.event_seq,
            received_at_ms: job.received_at_ms,
            due_at_ms: job.due_at_ms,
            last: job.last.map(Box::new),
        }
    }

    /// The job as stored, `id` being its key and `queue` what its number names.
    pub fn record(&self, id: u128, queue: &QueueKey) -> JobRecord {
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
            starts: u32::from(self.starts),
            last: self.last.as_deref().cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_8_a_pending_job_is_held_in_64_bytes() {
        assert_eq!(std::mem::size_of::<JobEntry>(), 64);
    }
}
