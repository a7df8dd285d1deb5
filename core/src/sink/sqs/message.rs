//! The SQS message of one event (SPEC §4, R-SK-1): the payload as the body and the CloudEvent
//! attributes as message attributes, `ce-type` the plain key.
//!
//! SQS carries at most 10 attributes; these travel: `ce-specversion`, `ce-id`, `ce-source`,
//! `ce-type`, `ce-time`, `ce-tenantid`, `ce-schemaversion`, `ce-datacontenttype`, `ce-subject`
//! (when the event has one) and, for a payload SQS cannot carry as text (not UTF-8, or holding
//! characters SQS refuses), `ce-datacontentencoding: base64` with the payload base64 in the body.
//! Trace context (`traceparent`, then `tracestate`) travels while fewer than 10 attributes are
//! used (always for a text payload without a subject). Body and attributes together are at most
//! 256 KiB; a larger event is refused before sending (a permanent failure).

use base64::Engine as _;

use crate::sink::EventOut;

/// SQS's limit on message attributes.
pub const MAX_ATTRIBUTES: usize = 10;
/// SQS's limit on a message, body and attributes together.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// A message ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsMessage {
    pub body: String,
    /// (name, string value), at most 10.
    pub attributes: Vec<(&'static str, String)>,
}

impl SqsMessage {
    pub fn of(ev: &EventOut<'_>) -> Self {
        let text = std::str::from_utf8(&ev.body)
            .ok()
            .filter(|t| t.chars().all(sqs_allows));
        let mut attributes = vec![
            ("ce-specversion", "1.0".to_owned()),
            ("ce-id", ev.id.to_string()),
            ("ce-source", ev.source.to_owned()),
            ("ce-type", ev.key.to_owned()),
            ("ce-time", ev.time.to_owned()),
            ("ce-tenantid", ev.tenant.to_owned()),
            ("ce-schemaversion", ev.schema_version.to_owned()),
            ("ce-datacontenttype", ev.content_type().to_owned()),
        ];
        if let Some(s) = ev.subject {
            attributes.push(("ce-subject", s.to_owned()));
        }
        let body = match text {
            Some(t) => t.to_owned(),
            None => {
                attributes.push(("ce-datacontentencoding", "base64".to_owned()));
                base64::engine::general_purpose::STANDARD.encode(&ev.body)
            }
        };
        // Trace context (R-TR-5) while SQS's ten attributes leave room for it.
        for (name, value) in [
            ("traceparent", ev.traceparent),
            ("tracestate", ev.tracestate),
        ] {
            if let (Some(v), true) = (value, attributes.len() < MAX_ATTRIBUTES) {
                attributes.push((name, v.to_owned()));
            }
        }
        Self { body, attributes }
    }

    /// Bytes SQS counts against its limit: the body, and each attribute's name, type and value.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(n, v)| n.len() + "String".len() + v.len())
                .sum::<usize>()
    }
}

/// The characters an SQS message may hold.
fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use uuid::Uuid;

    fn event(body: &'static [u8], subject: Option<&'static str>) -> EventOut<'static> {
        EventOut {
            id: Uuid::nil(),
            key: "loan_application.approved",
            source: "lender",
            tenant: "t-1",
            schema_version: "1.0.0",
            time: "2026-11-29T20:17:42Z",
            subject,
            content_type: None,
            traceparent: None,
            tracestate: None,
            body: Bytes::from_static(body),
        }
    }

    #[test]
    fn r_sk_1_sqs_messages_carry_the_plain_key_and_at_most_ten_attributes() {
        let m = SqsMessage::of(&event(br#"{"a":1}"#, Some("loan-1")));
        assert_eq!(m.body, r#"{"a":1}"#);
        let get = |n: &str| {
            m.attributes
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("ce-type").as_deref(), Some("loan_application.approved"));
        assert_eq!(get("ce-subject").as_deref(), Some("loan-1"));
        assert_eq!(
            get("ce-datacontenttype").as_deref(),
            Some("application/json")
        );
        let binary = SqsMessage::of(&event(&[0, 159, 146, 150], Some("s")));
        assert_eq!(binary.body, "AJ+Slg==");
        assert_eq!(binary.attributes.len(), 10, "the most SQS carries");
        let control = SqsMessage::of(&event(b"a\x00b", None));
        assert_ne!(
            control.body, "a\u{0}b",
            "NUL is not SQS text: sent as base64"
        );
    }
}
