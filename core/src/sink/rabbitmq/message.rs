//! The AMQP message of one event (SPEC §4, R-SK-1): the raw payload as the body, persistent,
//! the content type from the event, and the CloudEvent attributes as `ce-*` headers with
//! `ce-type` the plain key `<resource>.<event>` (subscribers who care about the producer pin
//! `origin`).

use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

use crate::sink::EventOut;

/// Delivery mode 2: the broker writes the message to disk (with a durable queue).
const PERSISTENT: u8 = 2;

/// The message's properties and headers.
pub fn properties(ev: &EventOut<'_>) -> BasicProperties {
    let mut headers = FieldTable::default();
    let mut put = |name: &str, value: &str| {
        headers.insert(ShortString::from(name), AMQPValue::LongString(value.into()));
    };
    put("ce-specversion", "1.0");
    put("ce-id", &ev.id.to_string());
    put("ce-source", ev.source);
    put("ce-type", ev.key);
    put("ce-time", ev.time);
    put("ce-tenantid", ev.tenant);
    put("ce-schemaversion", ev.schema_version);
    put("ce-datacontenttype", ev.content_type());
    if let Some(subject) = ev.subject {
        put("ce-subject", subject);
    }
    // W3C trace context (R-TR-5), under its own names as the AMQP binding of the spec has it.
    for (name, value) in [
        ("traceparent", ev.traceparent),
        ("tracestate", ev.tracestate),
    ] {
        if let Some(v) = value {
            put(name, v);
        }
    }
    BasicProperties::default()
        .with_content_type(ShortString::from(ev.content_type()))
        .with_delivery_mode(PERSISTENT)
        .with_message_id(ShortString::from(ev.id.to_string()))
        .with_app_id(ShortString::from("lerian-streaming-hub"))
        .with_headers(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use uuid::Uuid;

    #[test]
    fn r_sk_1_rabbitmq_messages_carry_ce_headers_with_the_plain_key_and_are_persistent() {
        let id = Uuid::now_v7();
        let ev = EventOut {
            id,
            key: "loan_application.approved",
            source: "lender",
            tenant: "t-1",
            schema_version: "1.2.0",
            time: "2026-11-29T20:17:42Z",
            subject: None,
            content_type: None,
            traceparent: None,
            tracestate: None,
            body: Bytes::from_static(b"{}"),
        };
        let p = properties(&ev);
        assert_eq!(p.delivery_mode(), &Some(2));
        assert_eq!(
            p.content_type().as_ref().map(|c| c.as_str()),
            Some("application/json")
        );
        let headers = p.headers().clone().unwrap_or_default();
        let h = |n: &str| match headers.inner().get(n) {
            Some(AMQPValue::LongString(s)) => Some(s.to_string()),
            _ => None,
        };
        assert_eq!(h("ce-type").as_deref(), Some("loan_application.approved"));
        assert_eq!(h("ce-id"), Some(id.to_string()));
        assert_eq!(h("ce-tenantid").as_deref(), Some("t-1"));
        assert_eq!(h("ce-subject"), None, "absent attributes are not sent");
        let traced = EventOut {
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            ..ev
        };
        let headers = properties(&traced).headers().clone().unwrap_or_default();
        assert!(
            headers.inner().contains_key("traceparent"),
            "R-TR-5: trace context travels"
        );
    }
}
