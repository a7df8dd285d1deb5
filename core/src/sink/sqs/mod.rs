//! The SQS sink (SPEC §4): `SendMessage` of the event to the tenant's queue with its
//! credential (R-CP-6). FIFO queues get the tenant as message group and the event id as
//! deduplication id (SQS then drops a redelivery within five minutes).
//!
//! - `endpoint`: queue URL or ARN → region, account, queue;
//! - `message`: the body and the attributes that travel (and the size SQS counts);
//! - this file: the client per (region, credential) and the call; errors are classified in
//!   `sink::aws`.

pub mod endpoint;
pub mod message;

use std::sync::Arc;
use std::time::Instant;

use aws_sdk_sqs::types::MessageAttributeValue;

use self::endpoint::SqsTarget;
use self::message::{SqsMessage, MAX_MESSAGE_BYTES};
use crate::sink::aws::{classify, AwsClients, AwsSettings, Keys};
use crate::sink::outcome::{ErrorClass, Outcome};
use crate::sink::EventOut;

/// The SQS client of a process: cheap to clone.
#[derive(Debug, Clone)]
pub struct SqsSink {
    clients: AwsClients<aws_sdk_sqs::Client>,
}

impl SqsSink {
    pub fn new(settings: Arc<AwsSettings>) -> Self {
        Self {
            clients: AwsClients::new(settings),
        }
    }

    /// Sends one event; every failure is an `Outcome`.
    pub async fn send(&self, endpoint: &str, keys: Keys<'_>, ev: &EventOut<'_>) -> Outcome {
        let started = Instant::now();
        let target = match SqsTarget::parse(endpoint) {
            Ok(t) => t,
            Err(why) => return Outcome::refused(ErrorClass::InvalidEndpoint, why),
        };
        let message = SqsMessage::of(ev);
        if message.size() > MAX_MESSAGE_BYTES {
            return Outcome::refused(
                ErrorClass::PayloadTooLarge,
                format!(
                    "the message is {} bytes; SQS takes at most {MAX_MESSAGE_BYTES}",
                    message.size()
                ),
            );
        }
        let mut call = self
            .clients
            .get(&target.region, keys, aws_sdk_sqs::Client::new)
            .send_message()
            .queue_url(target.queue_url(self.clients.settings.endpoint_url.as_deref()))
            .message_body(message.body);
        for (name, value) in message.attributes {
            let attribute = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build();
            match attribute {
                Ok(a) => call = call.message_attributes(name, a),
                Err(e) => return Outcome::refused(ErrorClass::InvalidMessage, e.to_string()),
            }
        }
        if target.fifo() {
            call = call
                .message_group_id(ev.tenant)
                .message_deduplication_id(ev.id.simple().to_string());
        }
        match call.send().await {
            Ok(_) => Outcome::delivered(None, started.elapsed()),
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
    async fn r_di_8_an_event_too_large_for_sqs_is_refused_before_sending_as_permanent() {
        // No endpoint override and no network: the size check answers before any call.
        let sink = SqsSink::new(Arc::new(AwsSettings::default()));
        let big = vec![b'a'; MAX_MESSAGE_BYTES];
        let ev = EventOut {
            id: Uuid::nil(),
            key: "a.b",
            source: "lender",
            tenant: "t",
            schema_version: "1.0.0",
            time: "2026-11-29T20:17:42Z",
            subject: None,
            content_type: None,
            traceparent: None,
            tracestate: None,
            body: Bytes::from(big),
        };
        let keys = Keys {
            access_key_id: "a",
            secret_access_key: "b",
            session_token: None,
        };
        let outcome = sink
            .send("arn:aws:sqs:us-east-1:123456789012:q", keys, &ev)
            .await;
        assert_eq!(outcome.error_class, Some(ErrorClass::PayloadTooLarge));
        assert!(outcome.is_permanent());
    }
}
