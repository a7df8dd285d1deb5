//! The ScyllaDB store (CQL; Cassandra 5 stands in for tests). Same contract as the embedded store,
//! kept without multi-partition transactions:
//!
//! - **Fence** (DESIGN invariant 2): `units.generation`, raised by a lightweight transaction on
//!   each claim; a batch checks it first (a quorum read) and moves the unit's offset only
//!   `IF generation = ours`, at most every `unit_advance_every` while records keep coming.
//! - **Dedup** (R-IN-6): each attempt at an event writes a claim of its own (a plain write) naming
//!   its origin and the seq it intends to take, and reads the id's other claims: one naming a
//!   seq that holds the id means the event is stored (our own replay: finish its jobs; another
//!   origin: a duplicate). The tenant's conditional append, on the head known before that read,
//!   orders writers of one id. See `claim.rs`.
//! - **Seq** (R-IN-8): per tenant, a log in buckets whose static `head` moves in the same
//!   conditional batch that writes the events: seqs appear all at once and in order, so a reader
//!   never skips, whichever engine writes. See `log.rs`.
//! - **Forensics**: quarantine and DLQ rows claimed once per Kafka position. See `forensics.rs`.
//! - **Jobs** (R-DI-1): written after their event's append, before the unit's offset; moved and
//!   settled in a crash-safe order (`jobs.rs`), paged per queue from a floor (`paging.rs`) by the
//!   engine holding the lane (`lanes.rs`), never through the tombstones below it (rows that may
//!   lie there are announced: `late_rows.rs`; a new holder starts from a hint: `floor_hints.rs`);
//!   dead letters and per-lane statistics in `outcomes.rs`.
//!
//! The order of writes in a batch is fence check → (claims → appends → jobs, and forensics
//! alongside) → unit offset, so the offset moves last and only after everything before it is
//! durable (R-IN-7).

mod claim;
mod concurrently;
mod counted;
mod counts;
mod fence_sightings;
mod floor_hints;
mod forensics;
mod job_events;
mod job_rows;
mod job_statements;
mod job_step;
mod jobs;
mod lanes;
mod late_rows;
mod log;
mod lwt;
mod outcomes;
mod ownership;
mod paging;
mod pull;
mod queue_touches;
mod recent;
pub mod relay;
mod statements;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use uuid::Uuid;

use fence_sightings::FenceCheck;

use super::timings::{PhaseTimings, PhaseTotal};
use super::{
    BatchOutcome, DlqObservation, EventLog, Fence, Forensics, ForensicsFilter, Ingest, IngestBatch,
    Jobs, LaneHolds, Page, QuarantineRecord, StoreError, StoreOps, StoredEvent, UnitId,
};
use job_statements::JobStatements;
use lwt::lwt;
use statements::Statements;

/// How to reach the CQL cluster and how long things live.
#[derive(Debug, Clone)]
pub struct CqlSettings {
    /// Contact points, `host:port`.
    pub nodes: Vec<String>,
    /// Credentials and TLS.
    pub access: hub_core::cql::CqlAccess,
    /// Created if missing. Letters, digits and `_` only.
    pub keyspace: String,
    /// The keyspace's replication map, used only when creating it. On ScyllaDB with tablets
    /// (where lightweight transactions need a recent release), create the keyspace by hand.
    pub replication: String,
    /// Dedup window (R-IN-6), at least the retention.
    pub dedup_ttl_s: u32,
    /// Inbox retention.
    pub retention_ttl_s: u32,
    /// How long quarantine and DLQ records are kept.
    pub forensics_ttl_s: u32,
    /// Seqs per tenant-log partition.
    pub bucket_size: u64,
    /// Most event bytes in one conditional append (ScyllaDB warns above 128 KiB per batch).
    pub append_bytes: usize,
    /// Encoded bytes of the events appended last kept in memory, so leasing their jobs reads
    /// nothing back (see `recent.rs`).
    pub recent_events_bytes: usize,
    /// How long a unit's offset may trail its durable batches while records keep coming
    /// (`Ingest::unit_advance_every`); zero moves it with every batch.
    pub unit_advance_every: std::time::Duration,
    /// The least time between the starts of a shard's ingest passes (`Ingest::pass_interval`).
    pub pass_interval: std::time::Duration,
}

impl Default for CqlSettings {
    fn default() -> Self {
        Self {
            nodes: vec!["127.0.0.1:9042".into()],
            access: hub_core::cql::CqlAccess::default(),
            keyspace: "streaming_hub".into(),
            replication: "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}".into(),
            dedup_ttl_s: 7 * 86_400,
            retention_ttl_s: 7 * 86_400,
            forensics_ttl_s: 30 * 86_400,
            bucket_size: 16_384,
            append_bytes: 96 * 1024,
            recent_events_bytes: 16 << 20,
            unit_advance_every: std::time::Duration::from_millis(200),
            pass_interval: std::time::Duration::ZERO,
        }
    }
}

/// The CQL store. Cheap to share behind an `Arc`.
pub struct CqlStore {
    /// Every request goes through it, counted by statement.
    session: counted::Counted,
    st: Statements,
    jt: JobStatements,
    pt: pull::PullStatements,
    rt: relay::RelayStatements,
    settings: CqlSettings,
    /// The delivery lanes this process holds.
    holds: lanes::Holds,
    /// Jobs of held lanes as stored, kept by their only writer (see `jobs.rs`).
    known: jobs::Known,
    /// Statistics rows of held lanes, written at most once a second (see `outcomes.rs`).
    stats_rows: outcomes::StatsRows,
    count_moves: counts::CountMoves,
    paging: paging::PagingState,
    late_reads: late_rows::LateReads,
    touches: queue_touches::QueueTouches,
    fences: fence_sightings::FenceSightings,
    /// The events appended last, encoded (see `recent.rs`).
    recent: recent::RecentEvents,
    /// Last known head per tenant: a guess that saves a read; a wrong guess costs one failed
    /// condition, never correctness.
    heads: Mutex<HashMap<String, u64>>,
    /// Last forensics key handed out (keeps this process's keys strictly increasing).
    last_qid: AtomicU64,
    timings: PhaseTimings,
    /// Set by a crash test: the next job creation stops after its job rows, as a process killed
    /// there would (`crash_after_job_rows`).
    #[cfg(feature = "conformance")]
    crash_after_job_rows: std::sync::atomic::AtomicBool,
}

/// The phases of `write_batch`, in order (indexes into `PhaseTimings`).
const PHASES: &[&str] = &[
    "fence_check",
    "dedup_claims",
    "log_appends",
    "jobs",
    "forensics",
    "unit_offset",
];
const FENCE_CHECK: usize = 0;
pub(crate) const DEDUP_CLAIMS: usize = 1;
pub(crate) const LOG_APPENDS: usize = 2;
const JOBS: usize = 3;
const FORENSICS: usize = 4;
const UNIT_OFFSET: usize = 5;

impl std::fmt::Debug for CqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlStore")
            .field("nodes", &self.settings.nodes)
            .field("keyspace", &self.settings.keyspace)
            .finish()
    }
}

pub(crate) use crate::store::unavailable;

/// CQL has no unsigned integers; seqs, generations and keys stay far below `i64::MAX`.
pub(crate) fn as_i64(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(unavailable)
}

const SCHEMA: &str = concat!(
    include_str!("../../../../schema/cql/ingest.cql"),
    "\n",
    include_str!("../../../../schema/cql/delivery.cql")
);

#[cfg(feature = "conformance")]
impl CqlStore {
    /// For crash tests: the next batch that creates jobs writes their job rows, then fails (its
    /// queues untouched, its offset unmoved), as if the process died there.
    pub fn crash_after_job_rows(&self) {
        self.crash_after_job_rows
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn crash_point(&self) -> Result<(), StoreError> {
        if self
            .crash_after_job_rows
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return Err(StoreError::Unavailable(
                "crash point: stopped after the job rows".into(),
            ));
        }
        Ok(())
    }
}

impl CqlStore {
    /// Connects, creates the keyspace and tables if missing, prepares every statement.
    pub async fn connect(settings: CqlSettings) -> Result<Self, StoreError> {
        let session = hub_core::cql::open(
            &settings.nodes,
            &settings.access,
            &settings.keyspace,
            &settings.replication,
            SCHEMA,
        )
        .await
        .map_err(StoreError::Unavailable)?;
        let st = Statements::prepare_all(&session).await?;
        let pt = pull::PullStatements::prepare_all(&session).await?;
        let rt = relay::RelayStatements::prepare_all(&session).await?;
        // Boxed, and last so that no other await holds its many statements: dozens of statements
        // in this future make every caller's future large.
        let jt = Box::pin(JobStatements::prepare_all(&session)).await?;
        Ok(Self {
            recent: recent::RecentEvents::new(settings.recent_events_bytes),
            session: counted::Counted::new(session),
            st,
            jt,
            pt,
            rt,
            settings,
            holds: lanes::Holds::new(),
            known: jobs::Known::default(),
            stats_rows: outcomes::StatsRows::default(),
            count_moves: counts::CountMoves::default(),
            paging: paging::PagingState::default(),
            late_reads: late_rows::LateReads::default(),
            touches: queue_touches::QueueTouches::default(),
            fences: fence_sightings::FenceSightings::default(),
            heads: Mutex::new(HashMap::new()),
            last_qid: AtomicU64::new(0),
            timings: PhaseTimings::new(PHASES),
            #[cfg(feature = "conformance")]
            crash_after_job_rows: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The first row of a single-row read, if any.
    pub(crate) async fn first_row<R>(
        &self,
        stmt: &scylla::statement::prepared::PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> Result<Option<R>, StoreError>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        hub_core::cql::first_of(self.session.execute_unpaged(stmt, values).await)
            .map_err(StoreError::Unavailable)
    }

    /// The unit's `(generation, next_offset)`, settling any claim in flight.
    async fn read_unit(&self, unit: &UnitId) -> Result<Option<(i64, Option<i64>)>, StoreError> {
        let row: Option<(Option<i64>, Option<i64>)> = self
            .first_row(&self.st.unit_read, (&unit.topic, unit.partition))
            .await?;
        Ok(row.map(|(g, next)| (g.unwrap_or(0), next)))
    }

    fn fenced(unit: &UnitId, fence: Fence, current: i64) -> StoreError {
        StoreError::Fenced {
            topic: unit.topic.clone(),
            partition: unit.partition,
            ours: fence.generation,
            current: u64::try_from(current).unwrap_or(0),
        }
    }

    /// Whether `fence` is still the unit's generation, read at LOCAL_QUORUM, not serially: a
    /// raise is a lightweight transaction, so once it is committed a quorum read sees it, and a
    /// raise still in flight is no different from one that starts just after the read — which
    /// no read before the writes can exclude (the unit's offset moves only `IF generation =
    /// ours`). A serial read here was a Paxos round per batch (issue 17). Not read at all when
    /// this process confirmed the generation within the unit-advance interval
    /// (`fence_sightings.rs` says why that is safe).
    async fn check_fence(&self, unit: &UnitId, fence: Fence) -> Result<(), StoreError> {
        match self
            .fences
            .check(unit, fence, self.settings.unit_advance_every)
        {
            FenceCheck::Fresh => return Ok(()),
            FenceCheck::Stale(current) => {
                return Err(Self::fenced(
                    unit,
                    fence,
                    i64::try_from(current).unwrap_or(0),
                ))
            }
            FenceCheck::Read => {}
        }
        let row: Option<(Option<i64>,)> = self
            .first_row(&self.st.unit_fence_read, (&unit.topic, unit.partition))
            .await?;
        let current = row.and_then(|(g,)| g).unwrap_or(0);
        if u64::try_from(current).ok() != Some(fence.generation) {
            self.fences.refused(unit);
            return Err(Self::fenced(unit, fence, current));
        }
        self.fences.confirmed(unit, fence);
        Ok(())
    }

    async fn advance_unit(&self, unit: &UnitId, fence: Fence, next: i64) -> Result<(), StoreError> {
        let generation = i64::try_from(fence.generation).map_err(unavailable)?;
        let answer = lwt(self
            .session
            .execute_unpaged(
                &self.st.unit_advance,
                (next, &unit.topic, unit.partition, generation),
            )
            .await
            .map_err(unavailable)?)?;
        if !answer.applied {
            self.fences.refused(unit);
            let current = answer.bigint("generation").unwrap_or(0);
            return Err(Self::fenced(unit, fence, current));
        }
        self.fences.confirmed(unit, fence);
        Ok(())
    }
}

/// Claims retried under contention before giving up (each retry follows a lost race).
const CLAIM_ATTEMPTS: usize = 64;

#[async_trait]
impl Ingest for CqlStore {
    async fn claim_unit(&self, unit: &UnitId) -> Result<(Fence, Option<i64>), StoreError> {
        for _ in 0..CLAIM_ATTEMPTS {
            let answer = match self.read_unit(unit).await? {
                None => {
                    let answer = lwt(self
                        .session
                        .execute_unpaged(&self.st.unit_create, (&unit.topic, unit.partition))
                        .await
                        .map_err(unavailable)?)?;
                    if answer.applied {
                        let fence = Fence { generation: 1 };
                        self.fences.confirmed(unit, fence);
                        return Ok((fence, None));
                    }
                    continue;
                }
                Some((generation, next)) => {
                    let answer = lwt(self
                        .session
                        .execute_unpaged(
                            &self.st.unit_raise,
                            (generation + 1, &unit.topic, unit.partition, generation),
                        )
                        .await
                        .map_err(unavailable)?)?;
                    (answer, generation, next)
                }
            };
            let (answer, generation, next) = answer;
            if answer.applied {
                let fence = Fence {
                    generation: u64::try_from(generation + 1).map_err(unavailable)?,
                };
                self.fences.confirmed(unit, fence);
                return Ok((fence, next.filter(|n| *n >= 0)));
            }
        }
        Err(StoreError::Unavailable(format!(
            "could not claim {}/{} after {CLAIM_ATTEMPTS} contended attempts",
            unit.topic, unit.partition
        )))
    }

    async fn write_batch(
        &self,
        unit: &UnitId,
        fence: Fence,
        batch: Arc<IngestBatch>,
    ) -> Result<BatchOutcome, StoreError> {
        let fenced = fence != Fence::UNFENCED;
        if fenced {
            let started = Instant::now();
            self.check_fence(unit, fence).await?;
            self.timings.record(FENCE_CHECK, started);
        }
        // Quarantine rows do not depend on the events: write both at once.
        let forensics = async {
            let started = Instant::now();
            let n = self.record_quarantine(&batch.quarantined).await?;
            self.timings.record(FORENSICS, started);
            Ok::<_, StoreError>(n)
        };
        let events = async {
            let (outcome, appended) = self.store_events(unit, fenced, &batch.events).await?;
            // R-DI-1: the jobs are durable before the unit's offset moves past their events.
            let started = Instant::now();
            let jobs_leased = self.create_jobs(&batch, &appended).await?;
            self.timings.record(JOBS, started);
            Ok::<_, StoreError>(BatchOutcome {
                jobs_leased,
                ..outcome
            })
        };
        let (mut outcome, quarantined) = futures::future::try_join(events, forensics).await?;
        outcome.quarantined = quarantined;
        if let (Some(next), true) = (batch.next_offset, fenced) {
            let started = Instant::now();
            self.advance_unit(unit, fence, next).await?;
            self.timings.record(UNIT_OFFSET, started);
        }
        Ok(outcome)
    }

    async fn unit_offset(&self, unit: &UnitId) -> Result<Option<i64>, StoreError> {
        Ok(self
            .read_unit(unit)
            .await?
            .and_then(|(_, next)| next)
            .filter(|n| *n >= 0))
    }

    async fn record_catalog_keys(
        &self,
        keys: Vec<(String, String, u32)>,
    ) -> Result<(), StoreError> {
        let writes = keys.iter().map(|(key, origin, major)| {
            let major = i32::try_from(*major).unwrap_or(i32::MAX);
            self.session
                .execute_unpaged(&self.st.catalog_key, (key, origin, major))
        });
        futures::future::try_join_all(writes)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// A lease counts only for the process that took it (`StoredJob::leased_by`), and a job
    /// created leased keeps its row where an unleased one's is: another holder, or this process after a
    /// restart, pages it at once.
    fn leases_at_ingest(&self) -> bool {
        true
    }

    /// A batch's offset move is a Paxos round of its own; at a steady rate batches hold a few
    /// events, so moving it with every batch was a fifth of the rounds per event (issue 17).
    fn unit_advance_every(&self) -> Option<std::time::Duration> {
        let every = self.settings.unit_advance_every;
        (!every.is_zero()).then_some(every)
    }

    fn pass_interval(&self) -> Option<std::time::Duration> {
        let interval = self.settings.pass_interval;
        (!interval.is_zero()).then_some(interval)
    }
}

#[async_trait]
impl EventLog for CqlStore {
    async fn read_events(
        &self,
        tenant: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read_log(tenant, after, limit).await
    }

    async fn pull_position(&self, tenant: &str, subscription: Uuid) -> Result<u64, StoreError> {
        self.read_pull_position(tenant, subscription).await
    }

    async fn advance_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        self.move_pull_position(tenant, subscription, from, to)
            .await
    }
}

#[async_trait]
impl Forensics for CqlStore {
    async fn list_quarantine(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<QuarantineRecord>, StoreError> {
        self.list_forensics(
            forensics::QUARANTINE,
            cursor,
            limit,
            |r: &QuarantineRecord| filter.keeps_quarantined(r),
        )
        .await
    }

    async fn record_dlq(&self, obs: Vec<DlqObservation>) -> Result<(), StoreError> {
        self.record_observations(&obs).await
    }

    async fn list_dlq(
        &self,
        filter: &ForensicsFilter,
        cursor: u64,
        limit: usize,
    ) -> Result<Page<DlqObservation>, StoreError> {
        self.list_forensics(forensics::DLQ, cursor, limit, |o: &DlqObservation| {
            filter.keeps_observation(o)
        })
        .await
    }
}

#[async_trait]
impl Jobs for CqlStore {
    async fn due_jobs(&self, query: super::DueQuery) -> Result<super::DuePage, StoreError> {
        self.flush_idle_stats().await?;
        self.write_counts(false).await?;
        self.page_due(&query).await
    }

    async fn delivery_step(
        &self,
        step: super::DeliveryStep,
    ) -> Result<super::StepOutcome, StoreError> {
        self.step(step).await
    }

    async fn dead_letters(
        &self,
        tenant: &str,
        subscription: uuid::Uuid,
        cursor: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<super::DeadLetter>, Option<u128>), StoreError> {
        self.list_dead_letters(tenant, subscription, cursor, limit)
            .await
    }

    async fn replay_dead_letters(
        &self,
        tenant: &str,
        subscription: uuid::Uuid,
        jobs: Option<Vec<u128>>,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        self.replay(tenant, subscription, jobs, now_ms).await
    }

    async fn delivery_stats(
        &self,
        tenant: &str,
        subscription: uuid::Uuid,
    ) -> Result<super::DeliveryStats, StoreError> {
        self.subscription_stats(tenant, subscription).await
    }

    async fn pending_jobs(&self) -> Result<u64, StoreError> {
        self.pending().await
    }

    fn wake_pages(&self, lanes: &[super::Lane]) {
        self.paging.wake(lanes);
    }
}

#[async_trait]
impl LaneHolds for CqlStore {
    async fn release_lanes(&self, lanes: Vec<super::Lane>) -> Result<(), StoreError> {
        self.let_go(&lanes).await
    }

    fn holds_lane(&self, lane: super::Lane, now_ms: i64) -> bool {
        self.holds.holds(lane, now_ms)
    }

    async fn keep_lanes(&self, lanes: Vec<super::Lane>) -> Result<(), StoreError> {
        self.hold_lanes(&lanes, crate::clock::now_ms()).await?;
        Ok(())
    }

    async fn survey_lanes(
        &self,
        survey: super::LaneSurvey,
    ) -> Result<super::LaneSurveyFound, StoreError> {
        self.survey(survey).await
    }

    async fn lane_report(
        &self,
        lanes: Vec<super::Lane>,
    ) -> Result<Vec<super::LaneReport>, StoreError> {
        self.report(lanes).await
    }

    fn holder_id(&self) -> String {
        self.holds.owner.to_string()
    }

    async fn publish_ownership(
        &self,
        report: &hub_core::ownership::EngineOwnership,
    ) -> Result<(), StoreError> {
        self.put_ownership(report).await
    }

    async fn ownership_reports(
        &self,
    ) -> Result<Vec<hub_core::ownership::EngineOwnership>, StoreError> {
        self.all_ownership().await
    }
}

#[async_trait]
impl StoreOps for CqlStore {
    /// Every row that expires is written with its window as TTL: the server removes it.
    async fn expire(&self, _now_ms: i64) -> Result<super::Expired, StoreError> {
        Ok(super::Expired::default())
    }

    fn write_timings(&self) -> Vec<PhaseTotal> {
        self.timings.snapshot()
    }

    fn cql_requests(&self) -> Vec<super::CqlRequests> {
        self.session.requests()
    }
}
