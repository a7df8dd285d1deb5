//! redb table layout of the embedded store.

use redb::{TableDefinition, WriteTransaction};

/// `(tenant, seq)` → encoded `StoredEvent`: the inbox, read by `seq` range.
pub const EVENTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("events");
/// `(tenant, ce-id)` → `seq`: the dedup marks (R-IN-6).
pub const DEDUP: TableDefinition<(&str, u128), u64> = TableDefinition::new("dedup");
/// `(ends at ms, tenant, ce-id)`: dedup marks that outlive their events (a dedup window longer
/// than the retention), by the time they end (R-OP-5).
pub const DEDUP_EXPIRY: TableDefinition<(u64, &str, u128), ()> =
    TableDefinition::new("dedup_expiry");
/// `tenant` → last assigned `seq`.
pub const TENANT_SEQ: TableDefinition<&str, u64> = TableDefinition::new("tenant_seq");
/// `(topic, partition)` → `(generation, next offset or -1)`: ownership fence and durable position.
pub const UNITS: TableDefinition<(&str, i32), (u64, i64)> = TableDefinition::new("units");
/// quarantine number → encoded `QuarantineRecord`.
pub const QUARANTINE: TableDefinition<u64, &[u8]> = TableDefinition::new("quarantine");
/// `(topic, partition, offset)` → quarantine number: a replayed Kafka record is kept once.
pub const QUARANTINE_SEEN: TableDefinition<(&str, i32, i64), u64> =
    TableDefinition::new("quarantine_seen");
/// observation number → encoded `DlqObservation`.
pub const DLQ: TableDefinition<u64, &[u8]> = TableDefinition::new("dlq");
/// `(topic, partition, offset)` → observation number: makes DLQ recording idempotent.
pub const DLQ_SEEN: TableDefinition<(&str, i32, i64), u64> = TableDefinition::new("dlq_seen");
/// Named counters (next row numbers).
pub const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// job id → encoded `JobRecord`.
pub const JOBS: TableDefinition<u128, &[u8]> = TableDefinition::new("jobs");
/// `(lane, tenant, subscription, due_at, job id)`: the due index a lane pages from, per tenant
/// and subscription (so a cold tenant's jobs are never behind a hot tenant's backlog, nor a fast
/// destination's behind a slow one's). A leased job sits at its lease's end.
pub const JOB_DUE: TableDefinition<(u32, &str, u128, u64, u128), ()> =
    TableDefinition::new("job_due_by_subscription");
/// `(lane, tenant, subscription)` → number of jobs: the queues a lane has work in.
pub const LANE_TENANTS: TableDefinition<(u32, &str, u128), u64> =
    TableDefinition::new("lane_queues");
/// job ids leased (attempt started, no outcome yet); released when the store opens, since a lease
/// of a single-node store can only belong to a process that has ended.
pub const LEASED: TableDefinition<u128, ()> = TableDefinition::new("leased");
/// `(tenant, subscription, job id)` → encoded `DeadLetter`.
pub const DEAD: TableDefinition<(&str, u128, u128), &[u8]> = TableDefinition::new("dead_letters");
/// `(tenant, subscription)` → encoded `DeliveryStats`.
pub const STATS: TableDefinition<(&str, u128), &[u8]> = TableDefinition::new("delivery_stats");

/// `(tenant, subscription)` → the pull read position (R-CP-14).
pub const PULL_POSITIONS: TableDefinition<(&str, u128), u64> =
    TableDefinition::new("pull_positions");

pub const QUARANTINE_NEXT: &str = "quarantine_next";
pub const DLQ_NEXT: &str = "dlq_next";

/// Opens every table once so readers never meet a missing one.
pub fn create_tables(txn: &WriteTransaction) -> Result<(), redb::TableError> {
    txn.open_table(EVENTS)?;
    txn.open_table(DEDUP)?;
    txn.open_table(DEDUP_EXPIRY)?;
    txn.open_table(TENANT_SEQ)?;
    txn.open_table(UNITS)?;
    txn.open_table(QUARANTINE)?;
    txn.open_table(QUARANTINE_SEEN)?;
    txn.open_table(DLQ)?;
    txn.open_table(DLQ_SEEN)?;
    txn.open_table(COUNTERS)?;
    txn.open_table(JOBS)?;
    txn.open_table(JOB_DUE)?;
    txn.open_table(LANE_TENANTS)?;
    txn.open_table(LEASED)?;
    txn.open_table(DEAD)?;
    txn.open_table(STATS)?;
    txn.open_table(PULL_POSITIONS)?;
    Ok(())
}
