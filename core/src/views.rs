//! What the engine knows about a subscription, as every transport shows it: a pull page (R-CP-14),
//! dead letters (R-DI-8) and delivery health (R-CP-12). The engine fills these from its store;
//! REST serialises them as they are, GraphQL and gRPC map their fields one to one. One typed
//! shape, so no transport re-reads another's JSON.

use serde::Serialize;
use serde_json::Value;

/// One event of a pull page, with its payload as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledEvent {
    pub seq: u64,
    pub id: String,
    pub key: String,
    pub origin: String,
    pub schema_version: String,
    pub time: String,
    pub subject: Option<String>,
    pub content_type: String,
    pub payload: bytes::Bytes,
}

impl PulledEvent {
    /// R-CP-14's JSON: a JSON payload as `data`, anything else base64 in `data_base64`.
    pub fn view(&self) -> Value {
        let mut v = serde_json::json!({
            "seq": self.seq,
            "id": self.id,
            "key": self.key,
            "origin": self.origin,
            "schema_version": self.schema_version,
            "time": self.time,
            "content_type": self.content_type,
        });
        if let Some(s) = &self.subject {
            v["subject"] = s.clone().into();
        }
        let (field, data) = crate::sink::data_field(&self.content_type, &self.payload);
        v[field] = data;
        v
    }
}

/// A page of pulled events; `next_after` is the `after` of the next page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventPage {
    pub items: Vec<PulledEvent>,
    pub next_after: u64,
}

impl EventPage {
    /// `{"items": [...], "next_after": n}`.
    pub fn view(&self) -> Value {
        serde_json::json!({
            "items": self.items.iter().map(PulledEvent::view).collect::<Vec<_>>(),
            "next_after": self.next_after,
        })
    }
}

/// One delivery attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptView {
    pub at: String,
    /// `success` or `failure`.
    pub outcome: &'static str,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A dead letter: the job that ran out of attempts, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterView {
    /// The id a replay names.
    pub id: String,
    pub event_id: String,
    pub seq: u64,
    pub reason: String,
    pub attempts: u32,
    pub received_at: String,
    pub dead_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<AttemptView>,
}

/// A page of dead letters, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeadLetterPage {
    pub items: Vec<DeadLetterView>,
    pub next_cursor: Option<String>,
}

/// Where a subscription stands with auto-disable (R-DI-10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AutoDisableView {
    pub enabled: bool,
    pub window_hours: u64,
    pub would_disable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streak_first_failure_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streak_last_failure_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
}

/// R-CP-12: a subscription's delivery health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthView {
    /// Healthy, Failing, Pending, Paused or Stopped.
    pub status: &'static str,
    pub window_start: String,
    pub snapshot_at: String,
    pub recent_outcomes: Vec<AttemptView>,
    pub delivered: u64,
    pub failed_attempts: u64,
    pub dead_letters: u64,
    pub auto_disable: AutoDisableView,
    /// The master key id the subscription's secret is sealed under, when the process serving
    /// this cannot open it: every attempt fails `secret_unavailable` until the key is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_missing: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(content_type: &str, payload: &[u8]) -> PulledEvent {
        PulledEvent {
            seq: 7,
            id: "0190f0e2-0000-7000-8000-000000000001".into(),
            key: "loan.approved".into(),
            origin: "lender".into(),
            schema_version: "1.0.0".into(),
            time: "2026-01-01T00:00:00Z".into(),
            subject: Some("loan-1".into()),
            content_type: content_type.into(),
            payload: bytes::Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn r_cp_14_items_carry_json_as_data_and_anything_else_as_base64() {
        let json_item = event("application/json", br#"{"amount":100}"#).view();
        assert_eq!(json_item["seq"], 7);
        assert_eq!(json_item["key"], "loan.approved");
        assert_eq!(json_item["origin"], "lender");
        assert_eq!(json_item["subject"], "loan-1");
        assert_eq!(json_item["data"]["amount"], 100);
        assert!(json_item.get("data_base64").is_none());

        let binary = event("application/octet-stream", &[0, 159, 146, 150]).view();
        assert_eq!(binary["data_base64"], "AJ+Slg==");
        assert!(binary.get("data").is_none());

        let broken = event("application/cloudevents+json; charset=utf-8", b"not json").view();
        assert!(
            broken.get("data_base64").is_some(),
            "unparsable JSON is kept as bytes"
        );
    }

    #[test]
    fn r_cp_12_absent_optional_fields_are_left_out() {
        let a = AttemptView {
            at: "t".into(),
            outcome: "success",
            duration_ms: 3,
            error_class: None,
            status_code: Some(200),
            detail: None,
        };
        let v = serde_json::to_value(&a).expect("serialises");
        assert_eq!(v["status_code"], 200);
        assert!(v.get("error_class").is_none() && v.get("detail").is_none());
    }
}
