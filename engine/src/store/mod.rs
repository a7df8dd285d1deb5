//! The store (DESIGN invariant 4): one contract (`contract`, cut into its parts), its
//! implementations — the append-only `log` and `embedded` redb for a single node with no external
//! process, `cql` for ScyllaDB — and one conformance suite run against each.

pub mod choice;
pub mod codec;
mod committer_thread;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance_jobs;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance_retention;
mod contract;
pub mod cql;
pub mod embedded;
pub mod expiry;
mod jobs;
pub mod log;
mod model;
pub mod timings;

pub use contract::*;
pub use jobs::*;
pub use model::*;

/// Store failures. Ingest treats every one as "not durable": the offset is not committed and the
/// batch is retried.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or refused the operation.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Another owner holds a newer generation of this unit; this writer must stop writing it.
    #[error("stale owner of {topic}/{partition}: generation {ours} < {current}")]
    Fenced {
        topic: String,
        partition: i32,
        ours: u64,
        current: u64,
    },
    /// Stored bytes could not be decoded (corruption or an incompatible version).
    #[error("corrupt stored record: {0}")]
    Corrupt(String),
}

/// A failure of the store's own machinery (I/O, a driver, a thread), as every store reports it.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl Fence {
    /// Checks a writer's fence against the unit's `current` generation: refused with `Fenced`
    /// when another owner claimed the unit since (an unfenced writer always passes).
    pub fn check(self, unit: &UnitId, current: u64) -> Result<(), StoreError> {
        if self == Fence::UNFENCED || current == self.generation {
            return Ok(());
        }
        Err(StoreError::Fenced {
            topic: unit.topic.clone(),
            partition: unit.partition,
            ours: self.generation,
            current,
        })
    }
}

/// How long a store keeps what it holds (R-OP-5, R-IN-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Accepted events (the inbox), and dead letters, whose events they are.
    pub events_s: u32,
    /// Dedup marks: at least `events_s`, so an event still stored is never accepted twice.
    pub dedup_s: u32,
    /// Quarantine records and DLQ observations.
    pub forensics_s: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            events_s: 7 * 86_400,
            dedup_s: 7 * 86_400,
            forensics_s: 30 * 86_400,
        }
    }
}

/// The requests of one statement a CQL store sent: each one request, and how many of them were
/// Paxos rounds (conditional writes and serial reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqlRequests {
    /// The statement's verb and table (`insert jobs`, `update units if`, `batch insert log if`).
    pub statement: String,
    pub requests: u64,
    pub paxos: u64,
}

/// What one `Store::expire` call removed, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    pub events: u64,
    pub dedup_marks: u64,
    pub quarantined: u64,
    pub dlq_observations: u64,
    pub dead_letters: u64,
}

impl Expired {
    pub fn total(&self) -> u64 {
        self.events
            + self.dedup_marks
            + self.quarantined
            + self.dlq_observations
            + self.dead_letters
    }
}

impl ForensicsFilter {
    /// Whether a quarantine record or DLQ observation passes the filter.
    pub fn matches(
        &self,
        topic: &str,
        tenant: Option<&str>,
        class: Option<&str>,
        at_ms: i64,
    ) -> bool {
        self.source
            .as_deref()
            .is_none_or(|s| source_of_topic(topic) == Some(s))
            && self.tenant.as_deref().is_none_or(|t| tenant == Some(t))
            && self.class.as_deref().is_none_or(|c| class == Some(c))
            && self.since_ms.is_none_or(|s| at_ms >= s)
            && self.until_ms.is_none_or(|u| at_ms < u)
    }
}

impl ForensicsFilter {
    /// Whether a quarantine record passes (its reason is the class).
    pub fn keeps_quarantined(&self, r: &QuarantineRecord) -> bool {
        self.matches(
            &r.topic,
            r.tenant.as_deref(),
            Some(&r.reason),
            r.received_at_ms,
        )
    }

    /// Whether a DLQ observation passes (its error class is the class).
    pub fn keeps_observation(&self, o: &DlqObservation) -> bool {
        self.matches(
            &o.topic,
            o.tenant.as_deref(),
            o.error_class.as_deref(),
            o.observed_at_ms,
        )
    }
}

/// The producer source named by a unit's topic: `lerian.streaming.<source>[.dlq]` or `http:<source>`.
pub fn source_of_topic(topic: &str) -> Option<&str> {
    topic
        .strip_prefix("http:")
        .or_else(|| crate::verdict::topic_source(topic))
        .or_else(|| crate::verdict::dlq_topic_source(topic))
}
