//! Reading the answers of lightweight transactions. When a condition holds, Cassandra returns only
//! `[applied]`; when it fails, ScyllaDB and Cassandra return the current row as well, in an order of
//! their own — so every column is found by name, never by position.

use scylla::response::query_result::{QueryResult, QueryRowsResult};
use scylla::value::{CqlValue, Row};

use crate::store::StoreError;

use super::unavailable;

/// The outcome of one conditional statement or batch.
#[derive(Debug)]
pub struct LwtAnswer {
    pub applied: bool,
    names: Vec<String>,
    row: Row,
}

/// The answer's column names and the position of `[applied]` among them.
fn columns(rows: &QueryRowsResult) -> Result<(Vec<String>, usize), StoreError> {
    let names: Vec<String> = rows
        .column_specs()
        .iter()
        .map(|spec| spec.name().to_owned())
        .collect();
    let applied = names
        .iter()
        .position(|n| n == "[applied]")
        .ok_or_else(|| StoreError::Unavailable("LWT answer has no [applied]".into()))?;
    Ok((names, applied))
}

impl LwtAnswer {
    pub fn read(result: QueryResult) -> Result<Self, StoreError> {
        let rows = result.into_rows_result().map_err(unavailable)?;
        let (names, index) = columns(&rows)?;
        let row: Row = rows.first_row().map_err(unavailable)?;
        let applied = match row.columns.get(index) {
            Some(Some(CqlValue::Boolean(b))) => *b,
            other => {
                return Err(StoreError::Unavailable(format!(
                    "[applied] is not a boolean: {other:?}"
                )))
            }
        };
        Ok(Self {
            applied,
            names,
            row,
        })
    }

    fn column(&self, name: &str) -> Option<&CqlValue> {
        let index = self.names.iter().position(|n| n == name)?;
        self.row.columns.get(index)?.as_ref()
    }

    /// Whether the answer carries the column at all (null or not).
    pub fn has(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// A `bigint` column of the current row, `None` when absent or null.
    pub fn bigint(&self, name: &str) -> Option<i64> {
        match self.column(name) {
            Some(CqlValue::BigInt(v)) => Some(*v),
            _ => None,
        }
    }

    /// A `text` column of the current row.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.column(name) {
            Some(CqlValue::Text(v)) => Some(v),
            _ => None,
        }
    }

    /// A `blob` column of the current row.
    pub fn blob(&self, name: &str) -> Option<&[u8]> {
        match self.column(name) {
            Some(CqlValue::Blob(v)) => Some(v),
            _ => None,
        }
    }
}

/// The answer of a conditional batch of `INSERT ... IF NOT EXISTS` on one partition: applied as a
/// whole, or refused with the rows that already exist (their `id`s).
pub fn existing_ids(result: QueryResult) -> Result<(bool, Vec<uuid::Uuid>), StoreError> {
    let rows = result.into_rows_result().map_err(unavailable)?;
    let (names, applied_at) = columns(&rows)?;
    let id_at = names.iter().position(|n| n == "id");
    let mut applied = false;
    let mut ids = Vec::new();
    for row in rows.rows::<Row>().map_err(unavailable)? {
        let row = row.map_err(unavailable)?;
        if let Some(Some(CqlValue::Boolean(b))) = row.columns.get(applied_at) {
            applied = *b;
        }
        if let Some(Some(CqlValue::Uuid(id))) = id_at.and_then(|i| row.columns.get(i)) {
            ids.push(*id);
        }
    }
    Ok((applied, ids))
}
