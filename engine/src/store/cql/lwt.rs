//! Lightweight-transaction answers, read with the shared `hub_core::cql::LwtAnswer` and
//! turned into this store's errors.

use scylla::response::query_result::QueryResult;

pub use hub_core::cql::LwtAnswer;

use crate::store::StoreError;

/// Reads a conditional statement's or batch's answer.
pub fn lwt(result: QueryResult) -> Result<LwtAnswer, StoreError> {
    LwtAnswer::read(result).map_err(StoreError::Unavailable)
}
