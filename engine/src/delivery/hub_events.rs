//! The hub's own operational events (R-CP-5) enter the pipeline like a producer's: an accepted
//! inbox event with source `hub` for the subscription's tenant (`studio.lerian.hub.<key>`),
//! stored, numbered, matched and delivered by the same code. When Kafka is configured they are
//! also published to `lerian.streaming.hub` as binary-mode CloudEvents, for anyone else who
//! listens; the hub's own consumer reads that copy back as a duplicate of what it stored (same
//! tenant and id), so it is neither stored nor delivered twice.

mod publisher;

use std::sync::Arc;

use hub_core::in_process::HubEvents;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::ClientConfig;
use uuid::Uuid;

pub use publisher::{Outgoing, Publisher};

use crate::ingest::jobs::JobRouting;
use crate::store::{Fence, InboxEvent, Ingest, IngestBatch, UnitId};

/// Writes hub events into the store on the tokio side, and publishes them to Kafka.
pub struct PipelineEvents {
    pub store: Arc<dyn Ingest>,
    pub routing: Option<JobRouting>,
    pub tokio: tokio::runtime::Handle,
    pub kafka: Option<Publisher>,
}

impl std::fmt::Debug for PipelineEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineEvents")
            .field("kafka", &self.kafka.is_some())
            .finish()
    }
}

/// The topic hub events are published to.
pub const HUB_TOPIC: &str = "lerian.streaming.hub";

/// The producer a hub with this configuration publishes its events with: none without Kafka
/// or when publishing is off (`publish_hub_events`).
pub fn configured_producer(config: &crate::config::HubConfig) -> anyhow::Result<Option<Publisher>> {
    match &config.kafka_brokers {
        Some(brokers) if config.publish_hub_events => {
            Ok(Some(hub_producer(brokers, &config.kafka_security)?))
        }
        _ => Ok(None),
    }
}

/// A producer for hub events on `brokers`, reached as `security` says.
fn hub_producer(
    brokers: &str,
    security: &crate::ingest::kafka_security::KafkaSecurity,
) -> anyhow::Result<Publisher> {
    let mut config = ClientConfig::new();
    security.apply(&mut config);
    config
        .set("bootstrap.servers", brokers)
        .set("message.timeout.ms", "30000");
    Publisher::new(&config)
}

/// The binary-mode CloudEvent headers of a hub event (the attributes R-IN-2 reads).
fn cloud_event_headers(e: &InboxEvent) -> OwnedHeaders {
    let (resource, kind) = e.key.split_once('.').unwrap_or((e.key.as_str(), ""));
    let id = e.id.to_string();
    let mut attrs = vec![
        ("ce-specversion", "1.0"),
        ("ce-id", id.as_str()),
        ("ce-source", e.source.as_str()),
        ("ce-type", e.ce_type.as_str()),
        ("ce-time", e.time.as_str()),
        ("ce-schemaversion", e.schema_version.as_str()),
        ("ce-resourcetype", resource),
        ("ce-eventtype", kind),
        ("ce-tenantid", e.tenant.as_str()),
        ("ce-datacontenttype", "application/json"),
    ];
    if let Some(subject) = &e.subject {
        attrs.push(("ce-subject", subject.as_str()));
    }
    attrs
        .into_iter()
        .fold(OwnedHeaders::new(), |h, (key, value)| {
            h.insert(Header {
                key,
                value: Some(value.as_bytes()),
            })
        })
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
            time: hub_core::model::rfc3339(now),
            subject: Some(subscription.to_string()),
            data_content_type: Some("application/json".into()),
            data_schema: None,
            traceparent: None,
            tracestate: None,
            payload: detail.to_string().into_bytes().into(),
            received_at_ms: now,
            offset: -1,
        };
        let published = self.kafka.clone().map(|producer| {
            let headers = cloud_event_headers(&event);
            (
                producer,
                headers,
                event.payload.clone(),
                subscription.to_string(),
            )
        });
        let mut batch = IngestBatch {
            events: vec![event],
            ..IngestBatch::default()
        };
        let routing = self.routing.as_ref().map(|r| {
            let reserved = r.attach(&mut batch, r.lane_of(UNIT, 0));
            (r.clone(), reserved)
        });
        // A process without delivery lanes (a control process on its own) that can publish
        // leaves the event to the engines that consume the topic: a copy stored here would make
        // theirs a duplicate, and duplicates create no jobs.
        let store = (self.routing.is_some() || published.is_none()).then(|| self.store.clone());
        let key = key.to_owned();
        self.tokio.spawn(async move {
            let unit = UnitId::new(UNIT, 0);
            if let Some(store) = store {
                let batch = Arc::new(batch);
                match store
                    .write_batch(&unit, Fence::UNFENCED, batch.clone())
                    .await
                {
                    Ok(outcome) => {
                        if let Some((routing, reserved)) = routing {
                            routing.written(&batch, &outcome, reserved);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, key, "a hub event was not stored"),
                }
            }
            if let Some((producer, headers, payload, record_key)) = published {
                let record = Outgoing {
                    topic: HUB_TOPIC,
                    key: &record_key,
                    payload: &payload,
                    headers,
                };
                if let Err(e) = producer.send(record).await {
                    tracing::warn!(error = %e, key, "a hub event was not published to Kafka");
                }
            }
        });
    }
}
