//! Every CQL statement of the store, prepared once at connect with its consistency.
//!
//! Reads and writes use LOCAL_QUORUM; conditions use LOCAL_SERIAL; reads that must settle an
//! unfinished lightweight transaction first (a claim left by a crash, a unit's claim) read at
//! LOCAL_SERIAL, which completes or discards any Paxos round still in flight on that partition.
//! A batch's fence check reads at LOCAL_QUORUM (`CqlStore::check_fence` says why).

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use crate::store::StoreError;

/// The prepared statements, grouped by table.
#[derive(Debug)]
pub struct Statements {
    pub claim_dedup: PreparedStatement,
    pub read_claims: PreparedStatement,
    pub set_intent: PreparedStatement,
    pub log_id_at: PreparedStatement,
    pub log_head: PreparedStatement,
    pub log_head_serial: PreparedStatement,
    pub append_head: PreparedStatement,
    pub append_event: PreparedStatement,
    pub read_log: PreparedStatement,
    pub hint_read: PreparedStatement,
    pub hint_write: PreparedStatement,
    pub unit_read: PreparedStatement,
    pub unit_fence_read: PreparedStatement,
    pub unit_create: PreparedStatement,
    pub unit_raise: PreparedStatement,
    pub unit_advance: PreparedStatement,
    pub seen_claim: PreparedStatement,
    pub listing_put: PreparedStatement,
    pub listing_scan: PreparedStatement,
    pub catalog_key: PreparedStatement,
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// A plain read or write.
    Plain,
    /// A read that settles in-flight lightweight transactions first.
    SerialRead,
    /// A conditional write (or one statement of a conditional batch).
    Conditional,
    /// A plain write that must not be retried blindly (counter updates).
    NotIdempotent,
}

pub(super) async fn prepare(
    session: &Session,
    cql: &str,
    kind: Kind,
) -> Result<PreparedStatement, StoreError> {
    let mut stmt = session
        .prepare(cql)
        .await
        .map_err(|e| StoreError::Unavailable(format!("preparing `{cql}`: {e}")))?;
    match kind {
        Kind::Plain | Kind::NotIdempotent => stmt.set_consistency(Consistency::LocalQuorum),
        Kind::SerialRead => stmt.set_consistency(Consistency::LocalSerial),
        Kind::Conditional => {
            stmt.set_consistency(Consistency::LocalQuorum);
            stmt.set_serial_consistency(Some(SerialConsistency::LocalSerial));
        }
    }
    // Conditional writes are not idempotent at the driver level (a blind retry of an applied
    // append reports "not applied"); the store's own logic handles their retries.
    stmt.set_is_idempotent(matches!(kind, Kind::Plain | Kind::SerialRead));
    Ok(stmt)
}

impl Statements {
    pub async fn prepare_all(session: &Session) -> Result<Self, StoreError> {
        use Kind::*;
        let p = |cql: &'static str, kind| prepare(session, cql, kind);
        Ok(Self {
            claim_dedup: p(
                "INSERT INTO dedup_claims \
                 (tenant, id_bucket, id, attempt, origin, claimed_at, intent) \
                 VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?",
                Plain,
            )
            .await?,
            read_claims: p(
                "SELECT id, attempt, origin, claimed_at, intent FROM dedup_claims \
                 WHERE tenant = ? AND id_bucket = ? AND id IN ?",
                Plain,
            )
            .await?,
            set_intent: p(
                "UPDATE dedup_claims USING TTL ? SET intent = ? \
                 WHERE tenant = ? AND id_bucket = ? AND id = ? AND attempt = ?",
                Plain,
            )
            .await?,
            log_id_at: p(
                "SELECT id FROM tenant_log WHERE tenant = ? AND bucket = ? AND seq = ?",
                SerialRead,
            )
            .await?,
            log_head: p(
                "SELECT head FROM tenant_log WHERE tenant = ? AND bucket = ? LIMIT 1",
                Plain,
            )
            .await?,
            log_head_serial: p(
                "SELECT head FROM tenant_log WHERE tenant = ? AND bucket = ? LIMIT 1",
                SerialRead,
            )
            .await?,
            append_head: p(
                "UPDATE tenant_log USING TTL 0 SET head = ? \
                 WHERE tenant = ? AND bucket = ? IF head = ?",
                Conditional,
            )
            .await?,
            append_event: p(
                "INSERT INTO tenant_log (tenant, bucket, seq, id, event) \
                 VALUES (?, ?, ?, ?, ?) USING TTL ?",
                Conditional,
            )
            .await?,
            read_log: p(
                "SELECT seq, event FROM tenant_log \
                 WHERE tenant = ? AND bucket = ? AND seq > ? LIMIT ?",
                Plain,
            )
            .await?,
            hint_read: p("SELECT bucket FROM tenant_heads WHERE tenant = ?", Plain).await?,
            hint_write: p("UPDATE tenant_heads SET bucket = ? WHERE tenant = ?", Plain).await?,
            unit_read: p(
                "SELECT generation, next_offset FROM units WHERE topic = ? AND partition = ?",
                SerialRead,
            )
            .await?,
            unit_fence_read: p(
                "SELECT generation FROM units WHERE topic = ? AND partition = ?",
                Plain,
            )
            .await?,
            unit_create: p(
                "INSERT INTO units (topic, partition, generation) VALUES (?, ?, 1) IF NOT EXISTS",
                Conditional,
            )
            .await?,
            unit_raise: p(
                "UPDATE units SET generation = ? WHERE topic = ? AND partition = ? \
                 IF generation = ?",
                Conditional,
            )
            .await?,
            unit_advance: p(
                "UPDATE units SET next_offset = ? WHERE topic = ? AND partition = ? \
                 IF generation = ?",
                Conditional,
            )
            .await?,
            seen_claim: p(
                "INSERT INTO forensics_seen (kind, topic, partition, offset, qid, record) \
                 VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?",
                Conditional,
            )
            .await?,
            listing_put: p(
                "INSERT INTO forensics (kind, day, qid, record) VALUES (?, ?, ?, ?) USING TTL ?",
                Plain,
            )
            .await?,
            listing_scan: p(
                "SELECT qid, record FROM forensics WHERE kind = ? AND day = ? AND qid >= ? LIMIT ?",
                Plain,
            )
            .await?,
            catalog_key: p(
                "INSERT INTO catalog_keys (part, key, origin, major) VALUES (0, ?, ?, ?)",
                Plain,
            )
            .await?,
        })
    }
}
