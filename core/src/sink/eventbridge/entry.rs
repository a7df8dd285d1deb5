//! The EventBridge entry of one event (SPEC §4, R-SK-1): `Source` names the hub, not the
//! producer; `DetailType` and `Detail.type` are the plain key; `Detail` carries the CloudEvent
//! attributes and the payload — as JSON in `data` when the payload is JSON, else base64 in
//! `data_base64`. An entry is at most 256 KiB (a larger one is refused before sending).

use serde_json::json;

use crate::sink::{data_field, EventOut};

/// `Source` of every entry: the hub.
pub const SOURCE: &str = "studio.lerian.streaming-hub";
/// EventBridge's limit on one entry.
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;

/// `(DetailType, Detail)` of an event.
pub fn detail(ev: &EventOut<'_>) -> (String, String) {
    let mut d = json!({
        "type": ev.key,
        "id": ev.id,
        "source": ev.source,
        "tenantid": ev.tenant,
        "time": ev.time,
        "schemaversion": ev.schema_version,
        "datacontenttype": ev.content_type(),
    });
    if let Some(s) = ev.subject {
        d["subject"] = s.into();
    }
    for (name, value) in [
        ("traceparent", ev.traceparent),
        ("tracestate", ev.tracestate),
    ] {
        if let Some(v) = value {
            d[name] = v.into();
        }
    }
    let (field, data) = data_field(ev.content_type(), &ev.body);
    d[field] = data;
    (ev.key.to_owned(), d.to_string())
}

/// Bytes EventBridge counts for an entry (source, detail type, detail).
pub fn size(detail_type: &str, detail: &str) -> usize {
    SOURCE.len() + detail_type.len() + detail.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::Value;
    use uuid::Uuid;

    #[test]
    fn r_sk_1_eventbridge_detail_type_and_detail_type_field_are_the_plain_key() {
        let ev = EventOut {
            id: Uuid::nil(),
            key: "loan_application.approved",
            source: "lender",
            tenant: "t-1",
            schema_version: "1.0.0",
            time: "2026-11-29T20:17:42Z",
            subject: None,
            content_type: None,
            traceparent: None,
            tracestate: None,
            body: Bytes::from_static(br#"{"amount":5}"#),
        };
        let (detail_type, d) = detail(&ev);
        assert_eq!(detail_type, "loan_application.approved");
        let d: Value = serde_json::from_str(&d).expect("json");
        assert_eq!(d["type"], "loan_application.approved");
        assert_eq!(d["source"], "lender", "the producer is in the detail");
        assert_eq!(d["data"]["amount"], 5);
        let binary = EventOut {
            content_type: Some("application/octet-stream"),
            traceparent: None,
            tracestate: None,
            body: Bytes::from_static(&[1, 2]),
            ..ev
        };
        let (_, d) = detail(&binary);
        let d: Value = serde_json::from_str(&d).expect("json");
        assert_eq!(d["data_base64"], "AQI=");
    }
}
