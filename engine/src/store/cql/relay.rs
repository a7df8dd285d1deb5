//! Delivery outcomes relayed through the store (tables `outcome_watches` and `relayed_outcomes`
//! of `schema/cql/delivery.cql`), so a control process of its own can stream GraphQL's
//! `deliveryOutcomes` for attempts that engines elsewhere settle. A listener's process marks its
//! subscription watched ([`CqlStore::watch_outcomes`], renewed while it listens); each engine's
//! [`run_relay`] reads the marks every second and, only while some exist, takes the lanes'
//! in-process outcome feed and writes the watched subscriptions' outcomes. The listener reads
//! them back ([`CqlStore::relayed_outcomes`]) a quarter second apart.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use tokio::sync::broadcast::error::TryRecvError;
use uuid::Uuid;

use hub_core::outcomes::{DeliveryOutcome, OutcomeFeed, Relayed};

use super::statements::{prepare, Kind};
use super::{unavailable, CqlStore};
use crate::runtime::Stop;
use crate::store::StoreError;

/// How long a watch mark lives unless renewed.
pub const WATCH_TTL_S: i32 = 30;
/// How often an engine reads the watch marks (and so how soon after a watch starts outcomes flow).
const WATCHES_EVERY: Duration = Duration::from_secs(1);
/// How often an engine writes what it collected for watched subscriptions.
const RELAY_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub(super) struct RelayStatements {
    watch: PreparedStatement,
    watches: PreparedStatement,
    put: PreparedStatement,
    read: PreparedStatement,
}

impl RelayStatements {
    pub async fn prepare_all(session: &Session) -> Result<Self, StoreError> {
        Ok(Self {
            watch: prepare(
                session,
                "INSERT INTO outcome_watches (bucket, tenant, subscription) VALUES (0, ?, ?) \
                 USING TTL ?",
                Kind::Plain,
            )
            .await?,
            watches: prepare(
                session,
                "SELECT tenant, subscription FROM outcome_watches WHERE bucket = 0",
                Kind::Plain,
            )
            .await?,
            put: prepare(
                session,
                "INSERT INTO relayed_outcomes (tenant, subscription, relayed_at, id, outcome) \
                 VALUES (?, ?, ?, ?, ?)",
                Kind::Plain,
            )
            .await?,
            read: prepare(
                session,
                "SELECT relayed_at, id, outcome FROM relayed_outcomes \
                 WHERE tenant = ? AND subscription = ? AND relayed_at >= ?",
                Kind::Plain,
            )
            .await?,
        })
    }
}

impl CqlStore {
    /// Marks `subscription` watched for [`WATCH_TTL_S`].
    pub async fn watch_outcomes(&self, tenant: &str, subscription: Uuid) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(&self.rt.watch, (tenant, subscription, WATCH_TTL_S))
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn watched(&self) -> Result<HashSet<(String, Uuid)>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.rt.watches, ())
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        rows.rows::<(String, Uuid)>()
            .map_err(unavailable)?
            .map(|r| r.map_err(unavailable))
            .collect()
    }

    async fn relay(&self, outcomes: &[DeliveryOutcome]) -> Result<(), StoreError> {
        let now = crate::clock::now_ms();
        for o in outcomes {
            let blob = serde_json::to_vec(o).map_err(unavailable)?;
            self.session
                .execute_unpaged(
                    &self.rt.put,
                    (&o.tenant, o.subscription, now, Uuid::now_v7(), blob),
                )
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// The outcomes of `subscription` relayed at or after `since_ms`, in relay order.
    pub async fn relayed_outcomes(
        &self,
        tenant: &str,
        subscription: Uuid,
        since_ms: i64,
    ) -> Result<Vec<Relayed>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.rt.read, (tenant, subscription, since_ms))
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut out = Vec::new();
        for row in rows.rows::<(i64, Uuid, Vec<u8>)>().map_err(unavailable)? {
            let (relayed_at_ms, id, blob) = row.map_err(unavailable)?;
            match serde_json::from_slice(&blob) {
                Ok(outcome) => out.push(Relayed {
                    relayed_at_ms,
                    id,
                    outcome,
                }),
                Err(e) => tracing::warn!(error = %e, "an unreadable relayed outcome skipped"),
            }
        }
        Ok(out)
    }
}

/// An engine's relay: while any subscription is watched, writes the watched subscriptions'
/// outcomes from `feed` (the lanes' in-process broadcast) to the store; while none is, it holds
/// no receiver, so the lanes publish to nobody. Ends when `stop` is set.
pub async fn run_relay(store: Arc<CqlStore>, feed: OutcomeFeed, stop: Stop) {
    let mut watched: HashSet<(String, Uuid)> = HashSet::new();
    let mut receiver = None;
    let mut next_watch_read = tokio::time::Instant::now();
    while !stop.is_set() {
        if tokio::time::Instant::now() >= next_watch_read {
            next_watch_read += WATCHES_EVERY;
            match store.watched().await {
                Ok(w) => watched = w,
                Err(e) => tracing::warn!(error = %e, "reading outcome watches failed"),
            }
            match (watched.is_empty(), receiver.is_some()) {
                (false, false) => receiver = Some(feed.subscribe()),
                (true, true) => receiver = None,
                _ => {}
            }
        }
        let mut batch = Vec::new();
        if let Some(rx) = receiver.as_mut() {
            loop {
                match rx.try_recv() {
                    Ok(o) if watched.contains(&(o.tenant.clone(), o.subscription)) => batch.push(o),
                    Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                    Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                }
            }
        }
        if !batch.is_empty() {
            if let Err(e) = store.relay(&batch).await {
                tracing::warn!(error = %e, n = batch.len(), "relaying delivery outcomes failed");
            }
        }
        stop.sleep(RELAY_EVERY).await;
    }
}
