//! The retention loop (R-OP-5): asks the store to expire what has outlived its windows, once a
//! minute and once at start, and counts what went.

use std::sync::Arc;
use std::time::Duration;

use super::StoreOps;
use crate::runtime::Stop;

/// How often a pass runs. Windows are days long; a minute late is nothing, and a pass that finds
/// nothing old reads one row per tenant and table.
pub const EVERY: Duration = Duration::from_secs(60);

/// Runs passes, the first at once, until `stop`.
pub async fn run(store: Arc<dyn StoreOps>, every: Duration, stop: Stop) {
    while !stop.is_set() {
        match store.expire(crate::clock::now_ms()).await {
            Ok(expired) => {
                crate::telemetry::METRICS.expired(&expired);
                if expired.total() > 0 {
                    tracing::info!(?expired, "retention removed expired rows");
                }
            }
            Err(e) => tracing::warn!(error = %e, "retention pass failed; next pass retries"),
        }
        stop.sleep(every).await;
    }
}
