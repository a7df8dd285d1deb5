//! The store's CQL session, counting every request it sends by statement (issue 17: CQL
//! statements and Paxos rounds per delivered event, read from `/metrics` by the load test).
//!
//! Every request of the store goes through [`Counted`] (statements are prepared on the session
//! before it is wrapped). A request counts once whatever the driver does under it (retries,
//! speculative executions); a paged read counts its first page only.
//!
//! A request is a Paxos round when it is conditional or a serial read. The store marks those
//! by their consistency (`statements::prepare`): a conditional statement or batch carries a
//! serial consistency, a serial read the `LOCAL_SERIAL` consistency; nothing else sets either.

use std::collections::HashMap;
use std::sync::Mutex;

use scylla::client::pager::QueryPager;
use scylla::client::session::Session;
use scylla::errors::{ExecutionError, PagerExecutionError};
use scylla::response::query_result::QueryResult;
use scylla::serialize::batch::BatchValues;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchStatement};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use crate::store::CqlRequests;

/// The session and what it has sent.
pub struct Counted {
    session: Session,
    sent: Mutex<HashMap<String, Sent>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    requests: u64,
    paxos: u64,
}

impl Counted {
    pub fn new(session: Session) -> Self {
        Self {
            session,
            sent: Mutex::new(HashMap::new()),
        }
    }

    pub async fn execute_unpaged(
        &self,
        stmt: &PreparedStatement,
        values: impl SerializeRow,
    ) -> Result<QueryResult, ExecutionError> {
        self.count_statement(stmt);
        self.session.execute_unpaged(stmt, values).await
    }

    pub async fn execute_iter(
        &self,
        stmt: PreparedStatement,
        values: impl SerializeRow,
    ) -> Result<QueryPager, PagerExecutionError> {
        self.count_statement(&stmt);
        self.session.execute_iter(stmt, values).await
    }

    pub async fn batch(
        &self,
        batch: &Batch,
        values: impl BatchValues,
    ) -> Result<QueryResult, ExecutionError> {
        self.count(
            batch_label(batch),
            is_paxos(batch.get_consistency(), batch.get_serial_consistency()),
        );
        self.session.batch(batch, values).await
    }

    fn count_statement(&self, stmt: &PreparedStatement) {
        self.count(
            statement_label(stmt.get_statement()),
            is_paxos(stmt.get_consistency(), stmt.get_serial_consistency()),
        );
    }

    fn count(&self, label: String, paxos: bool) {
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let s = sent.entry(label).or_default();
        s.requests += 1;
        s.paxos += u64::from(paxos);
    }

    /// What was sent so far, by statement, most requests first.
    pub fn requests(&self) -> Vec<CqlRequests> {
        let sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<CqlRequests> = sent
            .iter()
            .map(|(statement, s)| CqlRequests {
                statement: statement.clone(),
                requests: s.requests,
                paxos: s.paxos,
            })
            .collect();
        all.sort_by(|a, b| {
            b.requests
                .cmp(&a.requests)
                .then_with(|| a.statement.cmp(&b.statement))
        });
        all
    }
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted").finish_non_exhaustive()
    }
}

fn is_paxos(consistency: Option<Consistency>, serial: Option<SerialConsistency>) -> bool {
    serial.is_some()
        || matches!(
            consistency,
            Some(Consistency::Serial | Consistency::LocalSerial)
        )
}

/// `batch` and its first statement's label: a batch of the store writes one kind of row.
fn batch_label(batch: &Batch) -> String {
    let first = match batch.statements.first() {
        Some(BatchStatement::PreparedStatement(p)) => statement_label(p.get_statement()),
        Some(BatchStatement::Query(q)) => statement_label(&q.contents),
        // `BatchStatement` is non-exhaustive.
        _ => "other".to_owned(),
    };
    format!("batch {first}")
}

/// A statement's verb and table, as `insert jobs` or `select due`: few enough to be a label,
/// enough to tell the store's statements apart where it matters (a verb on a table).
pub fn statement_label(cql: &str) -> String {
    let words: Vec<&str> = cql.split_whitespace().take(64).collect();
    let verb = words.first().map_or("", |w| w).to_ascii_lowercase();
    let after = |keyword: &str| {
        words
            .iter()
            .position(|w| w.eq_ignore_ascii_case(keyword))
            .and_then(|i| words.get(i + 1))
    };
    let table = match verb.as_str() {
        "insert" => after("into"),
        "update" => words.get(1),
        "select" | "delete" => after("from"),
        _ => None,
    };
    let table = table.map(|t| {
        t.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase()
    });
    let conditional = words.iter().any(|w| w.eq_ignore_ascii_case("if"));
    match table {
        Some(t) if conditional => format!("{verb} {t} if"),
        Some(t) => format!("{verb} {t}"),
        None => verb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_the_verb_and_the_table() {
        assert_eq!(
            statement_label("INSERT INTO jobs (id, body) VALUES (?, ?)"),
            "insert jobs"
        );
        assert_eq!(
            statement_label("SELECT generation, next FROM units WHERE topic = ?"),
            "select units"
        );
        assert_eq!(
            statement_label("DELETE FROM due WHERE lane = ? AND id = ?"),
            "delete due"
        );
        assert_eq!(
            statement_label("UPDATE units SET next = ? WHERE t = ? IF generation = ?"),
            "update units if"
        );
        assert_eq!(
            statement_label("INSERT INTO dedup(tenant, id) VALUES (?, ?) IF NOT EXISTS"),
            "insert dedup if"
        );
    }

    #[test]
    fn serial_consistency_or_a_serial_read_is_a_paxos_round() {
        assert!(is_paxos(
            Some(Consistency::LocalQuorum),
            Some(SerialConsistency::LocalSerial)
        ));
        assert!(is_paxos(Some(Consistency::LocalSerial), None));
        assert!(!is_paxos(Some(Consistency::LocalQuorum), None));
        assert!(!is_paxos(None, None));
    }
}
