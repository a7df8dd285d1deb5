//! The hub's own operational events (R-CP-5) enter the pipeline like a producer's: an accepted
//! inbox event with source `hub` for the subscription's tenant (`studio.lerian.hub.<key>`),
//! stored, numbered, matched and delivered by the same code. Publishing them to
//! `lerian.streaming.hub` on Kafka is not built.

use std::sync::Arc;

use hub_control::probe::HubEvents;
use uuid::Uuid;

use crate::ingest::jobs::JobRouting;
use crate::store::{Fence, InboxEvent, IngestBatch, Store, UnitId};

/// Writes hub events into the store on the tokio side.
#[derive(Debug)]
pub struct PipelineEvents {
    pub store: Arc<dyn Store>,
    pub routing: Option<JobRouting>,
    pub tokio: tokio::runtime::Handle,
}

/// The unit hub events are written under (no Kafka position: dedup by id only).
const UNIT: &str = "http:hub";

impl HubEvents for PipelineEvents {
    fn emit(&self, tenant: &str, key: &str, subscription: Uuid, detail: serde_json::Value) {
        let now = crate::clock::now_ms();
        let event = InboxEvent {
            tenant: tenant.to_owned(),
            id: Uuid::now_v7(),
            source: "hub".into(),
            ce_type: format!("studio.lerian.hub.{key}"),
            key: key.to_owned(),
            schema_version: "1.0.0".into(),
            schema_major: 1,
            time: hub_control::model::rfc3339(now),
            subject: Some(subscription.to_string()),
            data_content_type: Some("application/json".into()),
            data_schema: None,
            traceparent: None,
            tracestate: None,
            payload: detail.to_string().into_bytes(),
            received_at_ms: now,
            offset: -1,
        };
        let mut batch = IngestBatch {
            events: vec![event],
            ..IngestBatch::default()
        };
        let lane = self.routing.as_ref().map(|r| {
            let lane = r.lane_of(UNIT, 0);
            r.attach(&mut batch, lane);
            (r.clone(), lane)
        });
        let store = self.store.clone();
        let key = key.to_owned();
        self.tokio.spawn(async move {
            let unit = UnitId::new(UNIT, 0);
            match store
                .write_batch(&unit, Fence::UNFENCED, Arc::new(batch))
                .await
            {
                Ok(_) => {
                    if let Some((routing, lane)) = lane {
                        routing.wake(lane);
                    }
                }
                Err(e) => tracing::warn!(error = %e, key, "a hub event was not stored"),
            }
        });
    }
}
