//! Pull read positions on CQL (R-CP-14, table `pull_positions` of `schema/cql/delivery.cql`):
//! read at LOCAL_SERIAL (so a move still in flight is settled first) and moved by lightweight
//! transactions from the position read, so readers sharing a subscription, on any engine, get
//! disjoint pages.

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

use super::lwt::lwt;
use super::statements::{prepare, Kind};
use super::{as_i64, unavailable, CqlStore};
use crate::store::StoreError;

#[derive(Debug)]
pub(super) struct PullStatements {
    read: PreparedStatement,
    create: PreparedStatement,
    advance: PreparedStatement,
}

impl PullStatements {
    pub async fn prepare_all(session: &Session) -> Result<Self, StoreError> {
        Ok(Self {
            read: prepare(
                session,
                "SELECT position FROM pull_positions WHERE tenant = ? AND subscription = ?",
                Kind::SerialRead,
            )
            .await?,
            create: prepare(
                session,
                "INSERT INTO pull_positions (tenant, subscription, position) VALUES (?, ?, ?) \
                 IF NOT EXISTS",
                Kind::Conditional,
            )
            .await?,
            advance: prepare(
                session,
                "UPDATE pull_positions SET position = ? WHERE tenant = ? AND subscription = ? \
                 IF position = ?",
                Kind::Conditional,
            )
            .await?,
        })
    }
}

impl CqlStore {
    pub(super) async fn read_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<u64, StoreError> {
        let row: Option<(Option<i64>,)> = self
            .first_row(&self.pt.read, (tenant, subscription))
            .await?;
        Ok(row
            .and_then(|(p,)| p)
            .map_or(0, |p| u64::try_from(p).unwrap_or(0)))
    }

    pub(super) async fn move_pull_position(
        &self,
        tenant: &str,
        subscription: Uuid,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        let to = as_i64(to)?;
        if from == 0 {
            // No row yet reads as 0: the first move creates it.
            let created = lwt(self
                .session
                .execute_unpaged(&self.pt.create, (tenant, subscription, to))
                .await
                .map_err(unavailable)?)?;
            if created.applied {
                return Ok(true);
            }
        }
        let moved = lwt(self
            .session
            .execute_unpaged(&self.pt.advance, (to, tenant, subscription, as_i64(from)?))
            .await
            .map_err(unavailable)?)?;
        Ok(moved.applied)
    }
}
