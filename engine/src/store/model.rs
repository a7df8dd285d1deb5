//! What the store keeps for ingest: the inbox event, quarantine records, dead-letter observations,
//! and the per-partition durable unit that carries them.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::verdict::CloudEvent;

/// Where a record came from. HTTP ingest uses topic `http:<source>` and no partition offsets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UnitId {
    pub topic: String,
    pub partition: i32,
}

impl UnitId {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// An accepted event as stored in the inbox. The payload is kept as bytes and never parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEvent {
    pub tenant: String,
    pub id: Uuid,
    pub source: String,
    pub ce_type: String,
    /// `<resourcetype>.<eventtype>`.
    pub key: String,
    pub schema_version: String,
    pub schema_major: u32,
    pub time: String,
    pub subject: Option<String>,
    pub data_content_type: Option<String>,
    pub data_schema: Option<String>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// Shared, not copied, by every attempt that sends it (issue 17: a copy and an allocation
    /// per attempt). Stored as the bytes `serde_bytes` wrote before, so old records read alike.
    pub payload: bytes::Bytes,
    /// When the hub received it (Unix ms); the 24-hour attempt rule counts from here.
    pub received_at_ms: i64,
    /// Kafka position it came from (offset -1 for HTTP ingest).
    pub offset: i64,
}

impl InboxEvent {
    /// Copies a judged event's attributes out of the record and takes its payload.
    pub fn from_verdict(
        ev: &CloudEvent<'_>,
        payload: Vec<u8>,
        received_at_ms: i64,
        offset: i64,
    ) -> Self {
        let own = |s: Option<&str>| s.map(str::to_owned);
        Self {
            tenant: ev.tenant.to_owned(),
            id: ev.id,
            source: ev.source.to_owned(),
            ce_type: ev.ce_type.to_owned(),
            key: ev.key(),
            schema_version: ev.schema_version.to_owned(),
            schema_major: ev.schema_major,
            time: ev.time.to_owned(),
            subject: own(ev.subject),
            data_content_type: own(ev.data_content_type),
            data_schema: own(ev.data_schema),
            traceparent: own(ev.traceparent),
            tracestate: own(ev.tracestate),
            payload: payload.into(),
            received_at_ms,
            offset,
        }
    }
}

/// The encoding view of a `StoredEvent` (same layout), so a batch is encoded without copying.
#[derive(Debug, Serialize)]
pub struct StoredEventRef<'a> {
    pub seq: u64,
    pub event: &'a InboxEvent,
}

/// An inbox event with its per-tenant arrival sequence (R-IN-8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub seq: u64,
    pub event: InboxEvent,
}

/// A header as received: the key lossily decoded, the value bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawHeader {
    pub key: String,
    #[serde(with = "serde_bytes")]
    pub value: Option<Vec<u8>>,
}

/// A malformed record kept for forensics (R-IN-4): never retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The reason code (a `QuarantineReason::code`) and its human description.
    pub reason: String,
    pub detail: String,
    /// The tenant header when it could be read (for filtering), even though the record is invalid.
    pub tenant: Option<String>,
    pub headers: Vec<RawHeader>,
    /// At most [`QUARANTINE_VALUE_PREFIX`] bytes of the value.
    #[serde(with = "serde_bytes")]
    pub value_prefix: Vec<u8>,
    pub value_len: u64,
    pub received_at_ms: i64,
}

/// How much of a quarantined value, and of each header value, is kept.
pub const QUARANTINE_VALUE_PREFIX: usize = 4096;
/// How much of one header value is kept in quarantine and DLQ records.
pub const HEADER_VALUE_PREFIX: usize = 1024;

/// A record seen on a producer's `.dlq` topic (R-IN-9): observability only, never delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqObservation {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub source: String,
    pub tenant: Option<String>,
    /// `x-lerian-dlq-error-class`, when present.
    pub error_class: Option<String>,
    pub headers: Vec<RawHeader>,
    #[serde(with = "serde_bytes")]
    pub value_prefix: Vec<u8>,
    pub value_len: u64,
    pub observed_at_ms: i64,
}

/// One partition's records, persisted as one unit (R-IN-7): all or nothing.
#[derive(Debug, Clone, Default)]
pub struct IngestBatch {
    pub events: Vec<InboxEvent>,
    /// The subscriptions each event matched (same order as `events`; shorter means no matches):
    /// one job per match, written with the event (R-DI-1). A duplicate creates none.
    pub matches: Vec<super::Matches>,
    /// The delivery lane the jobs join (the owning shard).
    pub lane: super::Lane,
    pub quarantined: Vec<QuarantineRecord>,
    /// The next offset to read on this unit after the batch (last offset + 1); `None` for HTTP.
    pub next_offset: Option<i64>,
    /// When set, the new jobs are written leased until then, their first start counted
    /// (`JobRecord::leased_until`), for a lane that takes them from the hand-off at once. Only
    /// a store that `leases_at_ingest` is given one.
    pub lease_until_ms: Option<i64>,
}

/// What a batch write did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Events stored for the first time, with the `seq` each got, in batch order.
    pub stored: Vec<(String, Uuid, u64)>,
    /// Events already stored (dedup drops, R-IN-6), in batch order.
    pub duplicates: Vec<(String, Uuid)>,
    pub quarantined: usize,
    /// Whether the store wrote every job of the batch leased as `IngestBatch::lease_until_ms`
    /// asked (the lane then starts them from the hand-off); false when it asked for none, or
    /// when the store wrote them unleased instead (a replay, a lane no longer held).
    pub jobs_leased: bool,
}

/// Ownership of a durable unit: the writer's generation, written conditionally so a stale owner's
/// writes are refused (DESIGN invariant 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub generation: u64,
}

impl Fence {
    /// For units without offsets or owners (HTTP ingest): no generation check, no offset kept.
    /// Dedup still makes concurrent writers safe.
    pub const UNFENCED: Fence = Fence { generation: 0 };
}

/// Filters for the operator's quarantine and DLQ listings (`/admin/...`).
#[derive(Debug, Clone, Default)]
pub struct ForensicsFilter {
    pub source: Option<String>,
    pub tenant: Option<String>,
    /// Quarantine reason code, or DLQ error class.
    pub class: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// A page of a listing and the cursor for the next one.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<u64>,
}
