//! Lightweight-transaction answers, read with the shared `hub_core::cql::LwtAnswer` and
//! turned into this store's errors.

use scylla::response::query_result::QueryResult;

pub use hub_core::cql::LwtAnswer;

use crate::store::StoreError;

/// Reads a conditional statement's or batch's answer.
pub fn lwt(result: QueryResult) -> Result<LwtAnswer, StoreError> {
    LwtAnswer::read(result).map_err(StoreError::Unavailable)
}

/// The answer of a conditional batch of `INSERT ... IF NOT EXISTS` on one partition: applied as a
/// whole, or refused with the rows that already exist (their `id`s).
pub fn existing_ids(result: QueryResult) -> Result<(bool, Vec<uuid::Uuid>), StoreError> {
    let answer = lwt(result)?;
    let ids = answer.uuids("id");
    Ok((answer.applied, ids))
}
