//! The delivery statements of the CQL store (schema `schema/cql/delivery.cql`), prepared once.

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

use super::statements::{prepare, Kind};
use crate::store::StoreError;

#[derive(Debug)]
pub struct JobStatements {
    /// A job's creation, at the timestamp of its event's claim.
    pub job_create: PreparedStatement,
    pub job_put: PreparedStatement,
    pub job_delete: PreparedStatement,
    pub job_page: PreparedStatement,
    pub job_page_after: PreparedStatement,
    /// A queue's first row from a due time on.
    pub job_any: PreparedStatement,
    pub queue_touch: PreparedStatement,
    pub queue_list: PreparedStatement,
    pub queue_drop: PreparedStatement,
    pub count_add: PreparedStatement,
    pub count_all: PreparedStatement,
    pub lane_read: PreparedStatement,
    pub lane_create: PreparedStatement,
    pub lane_take: PreparedStatement,
    pub lane_let_go: PreparedStatement,
    /// A lane's holder and hold without a serial read (the survey of strays).
    pub lane_peek: PreparedStatement,
    /// Every lane with a queue.
    pub lanes_listed: PreparedStatement,
    pub lane_want: PreparedStatement,
    pub lane_wanted: PreparedStatement,
    pub count_lane: PreparedStatement,
    pub ownership_put: PreparedStatement,
    pub ownership_all: PreparedStatement,
    pub dead_put: PreparedStatement,
    pub dead_page: PreparedStatement,
    pub dead_delete: PreparedStatement,
    pub stats_lane: PreparedStatement,
    pub stats_all: PreparedStatement,
    pub stats_put: PreparedStatement,
    /// Events of one bucket at a list of seqs (`seq IN ?`).
    pub log_events_in: PreparedStatement,
    /// A job row read by its key (an announced late row, `late_rows.rs`).
    pub job_at: PreparedStatement,
    pub late_announce: PreparedStatement,
    pub late_list: PreparedStatement,
    pub late_forget: PreparedStatement,
    /// A queue's floor hint (`floor_hints.rs`).
    pub hint_read: PreparedStatement,
    pub hint_write: PreparedStatement,
}

impl JobStatements {
    pub async fn prepare_all(session: &Session) -> Result<Self, StoreError> {
        use Kind::*;
        let p = |cql: &'static str, kind| prepare(session, cql, kind);
        Ok(Self {
            job_create: p(
                "INSERT INTO queued_jobs (lane, tenant, subscription, due_ms, id, job) \
                 VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?",
                Plain,
            )
            .await?,
            job_put: p(
                "INSERT INTO queued_jobs (lane, tenant, subscription, due_ms, id, job) \
                 VALUES (?, ?, ?, ?, ?, ?)",
                Plain,
            )
            .await?,
            job_delete: p(
                "DELETE FROM queued_jobs WHERE lane = ? AND tenant = ? AND subscription = ? \
                 AND due_ms = ? AND id = ?",
                Plain,
            )
            .await?,
            job_page: p(
                "SELECT due_ms, id, job FROM queued_jobs WHERE lane = ? AND tenant = ? \
                 AND subscription = ? AND due_ms >= ? AND due_ms <= ? LIMIT ?",
                Plain,
            )
            .await?,
            job_page_after: p(
                "SELECT due_ms, id, job FROM queued_jobs WHERE lane = ? AND tenant = ? \
                 AND subscription = ? AND (due_ms, id) > (?, ?) AND (due_ms) <= (?) LIMIT ?",
                Plain,
            )
            .await?,
            job_any: p(
                "SELECT due_ms FROM queued_jobs WHERE lane = ? AND tenant = ? \
                 AND subscription = ? AND due_ms >= ? LIMIT 1",
                Plain,
            )
            .await?,
            queue_touch: p(
                "UPDATE job_queues SET touched = ? WHERE lane = ? AND tenant = ? \
                 AND subscription = ?",
                Plain,
            )
            .await?,
            queue_list: p(
                "SELECT tenant, subscription, WRITETIME(touched) FROM job_queues WHERE lane = ?",
                Plain,
            )
            .await?,
            queue_drop: p(
                "DELETE FROM job_queues USING TIMESTAMP ? WHERE lane = ? AND tenant = ? \
                 AND subscription = ?",
                Plain,
            )
            .await?,
            count_add: p(
                "UPDATE job_counts SET n = n + ? WHERE lane = ?",
                NotIdempotent,
            )
            .await?,
            count_all: p("SELECT n FROM job_counts", Plain).await?,
            lane_read: p(
                "SELECT owner, until_ms FROM lanes WHERE lane = ?",
                SerialRead,
            )
            .await?,
            lane_create: p(
                "INSERT INTO lanes (lane, owner, until_ms) VALUES (?, ?, ?) IF NOT EXISTS",
                Conditional,
            )
            .await?,
            lane_take: p(
                "UPDATE lanes SET owner = ?, until_ms = ? WHERE lane = ? \
                 IF owner = ? AND until_ms = ?",
                Conditional,
            )
            .await?,
            lane_let_go: p(
                "UPDATE lanes SET until_ms = ? WHERE lane = ? IF owner = ?",
                Conditional,
            )
            .await?,
            lane_peek: p("SELECT owner, until_ms FROM lanes WHERE lane = ?", Plain).await?,
            lanes_listed: p("SELECT DISTINCT lane FROM job_queues", Plain).await?,
            lane_want: p(
                "INSERT INTO lane_wanted (lane, engine, at_ms) VALUES (?, ?, ?)",
                Plain,
            )
            .await?,
            lane_wanted: p(
                "SELECT engine, at_ms FROM lane_wanted WHERE lane = ?",
                Plain,
            )
            .await?,
            count_lane: p("SELECT n FROM job_counts WHERE lane = ?", Plain).await?,
            ownership_put: p(
                "INSERT INTO engine_ownership (engine, report) VALUES (?, ?)",
                Plain,
            )
            .await?,
            ownership_all: p("SELECT report FROM engine_ownership", Plain).await?,
            dead_put: p(
                "INSERT INTO dead_letters (tenant, subscription, id, letter) VALUES (?, ?, ?, ?) \
                 USING TTL ?",
                Plain,
            )
            .await?,
            dead_page: p(
                "SELECT id, letter FROM dead_letters WHERE tenant = ? AND subscription = ? \
                 AND id > ? LIMIT ?",
                Plain,
            )
            .await?,
            dead_delete: p(
                "DELETE FROM dead_letters WHERE tenant = ? AND subscription = ? AND id = ?",
                Plain,
            )
            .await?,
            stats_lane: p(
                "SELECT stats FROM delivery_stats WHERE tenant = ? AND subscription = ? \
                 AND lane = ?",
                Plain,
            )
            .await?,
            stats_all: p(
                "SELECT lane, stats FROM delivery_stats WHERE tenant = ? AND subscription = ?",
                Plain,
            )
            .await?,
            stats_put: p(
                "INSERT INTO delivery_stats (tenant, subscription, lane, stats) \
                 VALUES (?, ?, ?, ?)",
                Plain,
            )
            .await?,
            log_events_in: p(
                "SELECT seq, id, event FROM tenant_log WHERE tenant = ? AND bucket = ? \
                 AND seq IN ?",
                Plain,
            )
            .await?,
            job_at: p(
                "SELECT job FROM queued_jobs WHERE lane = ? AND tenant = ? \
                 AND subscription = ? AND due_ms = ? AND id = ?",
                Plain,
            )
            .await?,
            late_announce: p(
                "INSERT INTO late_jobs (lane, tenant, subscription, due_ms, id) \
                 VALUES (?, ?, ?, ?, ?)",
                Plain,
            )
            .await?,
            late_list: p(
                "SELECT tenant, subscription, due_ms, id FROM late_jobs WHERE lane = ? LIMIT ?",
                Plain,
            )
            .await?,
            late_forget: p(
                "DELETE FROM late_jobs WHERE lane = ? AND tenant = ? AND subscription = ? \
                 AND due_ms = ? AND id = ?",
                Plain,
            )
            .await?,
            hint_read: p(
                "SELECT floor_ms FROM queue_floors WHERE lane = ? AND tenant = ? \
                 AND subscription = ?",
                Plain,
            )
            .await?,
            hint_write: p(
                "INSERT INTO queue_floors (lane, tenant, subscription, floor_ms) \
                 VALUES (?, ?, ?, ?)",
                Plain,
            )
            .await?,
        })
    }
}
