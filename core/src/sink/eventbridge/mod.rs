//! The EventBridge sink (SPEC §4): `PutEvents` of one entry to the tenant's bus with its
//! credential (R-CP-6). A 200 answer may still refuse the entry (`FailedEntryCount`): that is
//! a failure, classified by the entry's error code.
//!
//! - `endpoint`: the bus ARN → region;
//! - `entry`: source, detail type and detail of one event;
//! - this file: the client per (region, credential) and the call; errors are classified in
//!   `sink::aws`.

pub mod endpoint;
pub mod entry;

use std::sync::Arc;
use std::time::Instant;

use aws_sdk_eventbridge::types::PutEventsRequestEntry;

use self::endpoint::BusTarget;
use self::entry::{detail, size, MAX_ENTRY_BYTES, SOURCE};
use crate::sink::aws::{by_code, classify, AwsClients, AwsSettings, Keys};
use crate::sink::outcome::{ErrorClass, Outcome};
use crate::sink::EventOut;

/// The EventBridge client of a process: cheap to clone.
#[derive(Debug, Clone)]
pub struct EventBridgeSink {
    clients: AwsClients<aws_sdk_eventbridge::Client>,
}

impl EventBridgeSink {
    pub fn new(settings: Arc<AwsSettings>) -> Self {
        Self {
            clients: AwsClients::new(settings),
        }
    }

    /// Puts one event; every failure is an `Outcome`.
    pub async fn send(&self, endpoint: &str, keys: Keys<'_>, ev: &EventOut<'_>) -> Outcome {
        let started = Instant::now();
        let target = match BusTarget::parse(endpoint) {
            Ok(t) => t,
            Err(why) => return Outcome::refused(ErrorClass::InvalidEndpoint, why),
        };
        let (detail_type, detail) = detail(ev);
        let bytes = size(&detail_type, &detail);
        if bytes > MAX_ENTRY_BYTES {
            return Outcome::refused(
                ErrorClass::PayloadTooLarge,
                format!("the entry is {bytes} bytes; EventBridge takes at most {MAX_ENTRY_BYTES}"),
            );
        }
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&target.arn)
            .source(SOURCE)
            .detail_type(detail_type)
            .detail(detail)
            .build();
        let answer = self
            .clients
            .get(&target.region, keys, aws_sdk_eventbridge::Client::new)
            .put_events()
            .entries(entry)
            .send()
            .await;
        match answer {
            Ok(out) if out.failed_entry_count() == 0 => Outcome::delivered(None, started.elapsed()),
            Ok(out) => {
                let failed = out.entries().first();
                let code = failed.and_then(|e| e.error_code()).unwrap_or_default();
                let message = failed.and_then(|e| e.error_message()).unwrap_or_default();
                Outcome::refused(
                    by_code(code, false),
                    format!("entry refused: {code}: {message}"),
                )
                .took(started)
            }
            Err(e) => classify(&e).took(started),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use uuid::Uuid;

    #[tokio::test]
    async fn r_di_8_an_entry_too_large_for_eventbridge_is_refused_before_sending_as_permanent() {
        let sink = EventBridgeSink::new(Arc::new(AwsSettings::default()));
        let ev = EventOut {
            id: Uuid::nil(),
            key: "a.b",
            source: "lender",
            tenant: "t",
            schema_version: "1.0.0",
            time: "2026-11-29T20:17:42Z",
            subject: None,
            content_type: Some("application/octet-stream"),
            traceparent: None,
            tracestate: None,
            body: Bytes::from(vec![7u8; MAX_ENTRY_BYTES]),
        };
        let keys = Keys {
            access_key_id: "a",
            secret_access_key: "b",
            session_token: None,
        };
        let outcome = sink
            .send(
                "arn:aws:events:us-east-1:123456789012:event-bus/b",
                keys,
                &ev,
            )
            .await;
        assert_eq!(outcome.error_class, Some(ErrorClass::PayloadTooLarge));
        assert!(outcome.is_permanent());
    }
}
