//! The `Store` contract (DESIGN invariant 4): one trait, two implementations — `embedded`
//! (a single node, no external process) and `cql` (ScyllaDB) — and one conformance suite run
//! against both.
//!
//! Methods are `Send` futures run on tokio; shards reach them through `runtime::TokioBridge`.

pub mod choice;
pub mod codec;
mod committer_thread;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance_jobs;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance_retention;
pub mod cql;
pub mod embedded;
pub mod expiry;
mod jobs;
pub mod log;
mod model;
pub mod timings;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use hub_core::ownership::EngineOwnership;
use uuid::Uuid;

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

/// The contract both stores keep.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Takes ownership of a unit for a new generation (one higher than any before) and returns it
    /// with the unit's durable next offset.
    async fn claim_unit(&self, unit: &UnitId) -> Result<(Fence, Option<i64>), StoreError>;

    /// Persists one unit's batch: dedup on `(tenant, id)` (first write wins), a `seq` per new
    /// event, the inbox rows, the quarantine rows (once per Kafka position) and the unit's next
    /// offset. When it returns
    /// `Ok`, all of it is durable. Refused with `Fenced` when `fence` is stale.
    async fn write_batch(
        &self,
        unit: &UnitId,
        fence: Fence,
        batch: Arc<IngestBatch>,
    ) -> Result<BatchOutcome, StoreError>;

    /// The unit's durable next offset, if anything was ever written for it.
    async fn unit_offset(&self, unit: &UnitId) -> Result<Option<i64>, StoreError>;

    /// A tenant's events with `seq > after`, in `seq` order, at most `limit`. A reader never
    /// skips an event: once `seq = n` was returned, no `seq < n` appears later (R-IN-8).
    async fn read_events(
        &self,
        tenant: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// A pull subscription's durable read position: the last `seq` handed to a reader that read
    /// without `after` (0 before the first read).
    async fn pull_position(&self, tenant: &str, subscription: Uuid) -> Result<u64, StoreError>;

    /// Moves a pull subscription's read position from `from` to `to`, only if it is still
    /// `from` (compare and set): `false` when another reader moved it first, and then nothing
    /// changed. Readers sharing a subscription thus get disjoint pages (R-CP-14).
    async fn advance_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError>;

    /// Quarantine records, oldest first, starting at `cursor`.
    async fn list_quarantine(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<QuarantineRecord>, StoreError>;

    /// Records a producer dead-letter observation (idempotent on topic/partition/offset).
    async fn record_dlq(&self, obs: Vec<DlqObservation>) -> Result<(), StoreError>;

    /// DLQ observations, oldest first, starting at `cursor`.
    async fn list_dlq(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<DlqObservation>, StoreError>;

    /// Records event keys seen in accepted events `(key, origin, major)` for a control plane in
    /// another process (R-CP-15). The embedded store has no such reader: a no-op.
    async fn record_catalog_keys(
        &self,
        keys: Vec<(String, String, u32)>,
    ) -> Result<(), StoreError> {
        let _ = keys;
        Ok(())
    }

    /// Due jobs of `lanes` (due at or before `now_ms`), at most `per_tenant` of each queue (a
    /// tenant's subscription) and `limit` in all, queues taken in turn starting at `rotation`;
    /// jobs in `skip` (already held by the caller) are passed over.
    async fn due_jobs(
        &self,
        lanes: Vec<Lane>,
        now_ms: i64,
        per_tenant: usize,
        limit: usize,
        rotation: u64,
        skip: Arc<HashSet<u128>>,
    ) -> Result<Vec<JobRecord>, StoreError>;

    /// One delivery step, atomically: records outcomes (retry times, dead letters, statistics,
    /// the failure streak), then leases the jobs to start and returns them with their events.
    async fn delivery_step(&self, step: DeliveryStep) -> Result<StepOutcome, StoreError>;

    /// A subscription's dead letters, oldest job id first, after `cursor`.
    async fn dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        cursor: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, Option<u128>), StoreError>;

    /// Turns dead letters back into jobs due at `now_ms` with a fresh attempt budget: all of the
    /// subscription's, or only `jobs`. Returns how many were replayed.
    async fn replay_dead_letters(
        &self,
        tenant: &str,
        subscription: Uuid,
        jobs: Option<Vec<u128>>,
        now_ms: i64,
    ) -> Result<u64, StoreError>;

    /// A subscription's delivery statistics (health, R-CP-12).
    async fn delivery_stats(
        &self,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<DeliveryStats, StoreError>;

    /// Gives up this process's hold on `lanes` at a clean stop, so another engine (or the next
    /// start) pages them at once. Stores without holds (single node) have nothing to do.
    async fn release_lanes(&self, lanes: Vec<Lane>) -> Result<(), StoreError> {
        let _ = lanes;
        Ok(())
    }

    /// Whether this process may start an attempt of a job of `lane` now: it still holds the
    /// lane (an engine frozen past its hold starts nothing it leased before). Stores one process
    /// holds always may.
    fn holds_lane(&self, lane: Lane, now_ms: i64) -> bool {
        let _ = (lane, now_ms);
        true
    }

    /// Renews this process's holds on `lanes` without paging them (a lane with no room for more
    /// jobs still keeps its lanes). Stores without holds have nothing to do.
    async fn keep_lanes(&self, lanes: Vec<Lane>) -> Result<(), StoreError> {
        let _ = lanes;
        Ok(())
    }

    /// Surveys lanes for engines sharing a store (`delivery::ownership`): asks for the
    /// `assigned` lanes another process holds, finds lanes with queues that nobody has held for
    /// `grace_ms`, and which of this process's `strays` to give up. Stores one process holds
    /// (the embedded one) find nothing.
    async fn survey_lanes(&self, survey: LaneSurvey) -> Result<LaneSurveyFound, StoreError> {
        let _ = survey;
        Ok(LaneSurveyFound::default())
    }

    /// Who holds each of `lanes` and how many jobs wait there, for the operator view. Stores one
    /// process holds: that process, always; no count per lane.
    async fn lane_report(&self, lanes: Vec<Lane>) -> Result<Vec<LaneReport>, StoreError> {
        Ok(lanes
            .into_iter()
            .map(|lane| LaneReport {
                lane,
                holder: Some(self.holder_id()),
                held_here: true,
                ..LaneReport::default()
            })
            .collect())
    }

    /// This process's id where it holds lanes (the operator view's `engine`).
    fn holder_id(&self) -> String {
        "standalone".to_owned()
    }

    /// Keeps this engine's ownership report for the control plane (`hub_core::ownership`), until
    /// a newer one (on CQL at most 30 s: the table's TTL).
    async fn publish_ownership(&self, report: &EngineOwnership) -> Result<(), StoreError>;

    /// Every engine's last ownership report still kept, by engine id.
    async fn ownership_reports(&self) -> Result<Vec<EngineOwnership>, StoreError>;

    /// How many jobs wait (all lanes), for metrics and the load test.
    async fn pending_jobs(&self) -> Result<u64, StoreError>;

    /// Removes, up to a bounded amount of work per call, what has outlived its window (R-OP-5):
    /// events, dedup marks, quarantine records, DLQ observations and dead letters. A store whose
    /// rows expire by themselves (CQL's TTLs) has nothing to do here.
    async fn expire(&self, now_ms: i64) -> Result<Expired, StoreError>;

    /// Time spent per phase of `write_batch` since start (for `/metrics` and the load test).
    fn write_timings(&self) -> Vec<timings::PhaseTotal> {
        Vec::new()
    }

    /// The requests a CQL store sent since start, by statement (for `/metrics` and the load
    /// test's statements and Paxos rounds per delivered event). Empty for other stores.
    fn cql_requests(&self) -> Vec<CqlRequests> {
        Vec::new()
    }

    /// The caller's next `due_jobs` of these lanes must read every queue: jobs were left to the
    /// store that a store keeping queues it knows to be quiet could not know of (ingest could
    /// not hand them over, or the lane could not take them). In memory, cheap; callable from a
    /// shard. A store that reads every queue on every page has nothing to do.
    fn wake_pages(&self, _lanes: &[Lane]) {}

    /// Whether `claim_unit`, `write_batch` and `delivery_step` may be awaited on any executor (a
    /// shard included): they only queue their write for another thread and await its answer,
    /// never blocking the caller's thread nor needing tokio. The shards then call them directly,
    /// with no hop through the tokio bridge (issue 17). False unless a store says so.
    fn writes_anywhere(&self) -> bool {
        false
    }

    /// Whether an ingest batch may write its new jobs already leased (`IngestBatch::
    /// lease_until_ms`), their first start counted, so a lane starts them from the hand-off
    /// without a lease step of its own (issue 17: one sync per event, not two). A store says so
    /// only when its leases cannot strand a job: one process holds it and a crash's leases are
    /// released when it opens (the log), or a lease counts only for the process that took it
    /// and the job's row stays where the lane's next holder pages it at once (CQL). It reports
    /// what it did in `BatchOutcome::jobs_leased`. False unless a store says so.
    fn leases_at_ingest(&self) -> bool {
        false
    }

    /// Why writes fail now, when the store knows it without trying one (the embedded store keeps
    /// its last failed commit until one lands); readiness reports it.
    fn write_failure(&self) -> Option<String> {
        None
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
