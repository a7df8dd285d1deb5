//! Engines' ownership reports (`hub_core::ownership`) in the `engine_ownership` table: one row per
//! engine, rewritten every few seconds, gone 30 s after its engine stops writing (the table's
//! TTL). Read whole: one small row per engine.

use futures::TryStreamExt;
use hub_core::ownership::EngineOwnership;

use super::{unavailable, CqlStore};
use crate::store::StoreError;

impl CqlStore {
    /// `Store::publish_ownership`.
    pub(super) async fn put_ownership(&self, report: &EngineOwnership) -> Result<(), StoreError> {
        let json = serde_json::to_string(report).map_err(unavailable)?;
        self.session
            .execute_unpaged(&self.jt.ownership_put, (&report.engine, json))
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// `Store::ownership_reports`: a report that does not parse (written by another version) is
    /// left out, and said.
    pub(super) async fn all_ownership(&self) -> Result<Vec<EngineOwnership>, StoreError> {
        let rows: Vec<(Option<String>,)> = self
            .session
            .execute_iter(self.jt.ownership_all.clone(), ())
            .await
            .map_err(unavailable)?
            .rows_stream::<(Option<String>,)>()
            .map_err(unavailable)?
            .try_collect()
            .await
            .map_err(unavailable)?;
        let mut reports: Vec<EngineOwnership> = rows
            .into_iter()
            .filter_map(|(json,)| {
                serde_json::from_str(json.as_deref()?)
                    .inspect_err(|e| tracing::warn!(error = %e, "unreadable ownership report"))
                    .ok()
            })
            .collect();
        reports.sort_by(|a, b| a.engine.cmp(&b.engine));
        Ok(reports)
    }
}
