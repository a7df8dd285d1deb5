//! A pending job as the log store's index holds it: the `JobRecord` without what a million of
//! them would repeat — the tenant is the index's shared name, the id is the map's key, the last
//! attempt's outcome sits behind a pointer (most jobs have none).

use std::sync::Arc;

use uuid::Uuid;

use crate::store::{AttemptRecord, JobRecord, Lane};

#[derive(Debug, Clone)]
pub(super) struct JobEntry {
    pub lane: Lane,
    pub tenant: Arc<str>,
    pub subscription: Uuid,
    pub event_id: Uuid,
    pub event_seq: u64,
    pub received_at_ms: i64,
    pub due_at_ms: i64,
    pub attempts: u32,
    pub starts: u32,
    pub last: Option<Box<AttemptRecord>>,
    /// An attempt is under way (a lease not yet settled).
    pub leased: bool,
    /// The segment of the job's last record.
    pub seg: u32,
}

impl JobEntry {
    pub fn new(job: JobRecord, tenant: Arc<str>, leased: bool, seg: u32) -> Self {
        Self {
            lane: job.lane,
            tenant,
            subscription: job.subscription,
            event_id: job.event_id,
            event_seq: job.event_seq,
            received_at_ms: job.received_at_ms,
            due_at_ms: job.due_at_ms,
            attempts: job.attempts,
            starts: job.starts,
            last: job.last.map(Box::new),
            leased,
            seg,
        }
    }

    /// The job as stored, `id` being its key.
    pub fn record(&self, id: u128) -> JobRecord {
        JobRecord {
            id,
            lane: self.lane,
            tenant: self.tenant.to_string(),
            subscription: self.subscription,
            event_id: self.event_id,
            event_seq: self.event_seq,
            received_at_ms: self.received_at_ms,
            due_at_ms: self.due_at_ms,
            attempts: self.attempts,
            starts: self.starts,
            last: self.last.as_deref().cloned(),
        }
    }
}
