//! How a subscription is kept in a store. Records are JSON (self-describing: a field added later
//! is read as its default from older records, so adding one never makes stored subscriptions
//! unreadable). Records written before that (postcard, without `partner`) are still read, through
//! [`Legacy`], and are rewritten as JSON by their next change.

use serde::Deserialize;
use uuid::Uuid;

use crate::model::{Marks, SinkKind, Subscription, VerificationState};
use crate::secrets::Sealed;

/// The bytes stored for `sub`.
pub fn encode(sub: &Subscription) -> Result<Vec<u8>, String> {
    serde_json::to_vec(sub).map_err(|e| e.to_string())
}

/// A stored subscription, in either form.
pub fn decode(bytes: &[u8]) -> Result<Subscription, String> {
    if bytes.first() == Some(&b'{') {
        return serde_json::from_slice(bytes).map_err(|e| format!("corrupt record: {e}"));
    }
    postcard::from_bytes::<Legacy>(bytes)
        .map(Subscription::from)
        .map_err(|e| format!("corrupt record: {e}"))
}

/// The postcard layout of subscriptions stored before records became JSON (field order is the
/// layout: never change it).
#[derive(Deserialize)]
struct Legacy {
    id: Uuid,
    tenant: String,
    name: String,
    sink_kind: SinkKind,
    endpoint: Option<String>,
    event_types: Vec<String>,
    schema_major: u32,
    event_majors: std::collections::BTreeMap<String, u32>,
    origin: Option<String>,
    timeout_ms: Option<u32>,
    plan_tier: Option<String>,
    retry_schedule: Option<Vec<u32>>,
    enabled: bool,
    paused: bool,
    verification_state: VerificationState,
    created_at_ms: i64,
    updated_at_ms: i64,
    last_success_at_ms: Option<i64>,
    last_failure_at_ms: Option<i64>,
    deleted: bool,
    secret: Option<Sealed>,
    revision: u64,
    marks: Marks,
}

impl From<Legacy> for Subscription {
    fn from(l: Legacy) -> Self {
        Subscription {
            id: l.id,
            tenant: l.tenant,
            name: l.name,
            sink_kind: l.sink_kind,
            endpoint: l.endpoint,
            event_types: l.event_types,
            schema_major: l.schema_major,
            event_majors: l.event_majors,
            origin: l.origin,
            timeout_ms: l.timeout_ms,
            plan_tier: l.plan_tier,
            retry_schedule: l.retry_schedule,
            enabled: l.enabled,
            paused: l.paused,
            verification_state: l.verification_state,
            created_at_ms: l.created_at_ms,
            updated_at_ms: l.updated_at_ms,
            last_success_at_ms: l.last_success_at_ms,
            last_failure_at_ms: l.last_failure_at_ms,
            deleted: l.deleted,
            secret: l.secret,
            revision: l.revision,
            marks: l.marks,
            partner: None,
            delivery_mark_revisions: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legacy layout, as the stores wrote it (for this test only).
    #[derive(serde::Serialize)]
    struct Written<'a> {
        id: Uuid,
        tenant: &'a str,
        name: &'a str,
        sink_kind: SinkKind,
        endpoint: Option<&'a str>,
        event_types: Vec<String>,
        schema_major: u32,
        event_majors: std::collections::BTreeMap<String, u32>,
        origin: Option<&'a str>,
        timeout_ms: Option<u32>,
        plan_tier: Option<&'a str>,
        retry_schedule: Option<Vec<u32>>,
        enabled: bool,
        paused: bool,
        verification_state: VerificationState,
        created_at_ms: i64,
        updated_at_ms: i64,
        last_success_at_ms: Option<i64>,
        last_failure_at_ms: Option<i64>,
        deleted: bool,
        secret: Option<Sealed>,
        revision: u64,
        marks: Marks,
    }

    #[test]
    fn records_round_trip_and_older_records_stay_readable() {
        let mut sub = Subscription::new("t", "n", SinkKind::Webhook, 7);
        sub.partner = Some("fund-1".into());
        assert_eq!(decode(&encode(&sub).expect("encode")), Ok(sub.clone()));

        let old = Written {
            id: sub.id,
            tenant: "t",
            name: "n",
            sink_kind: SinkKind::Webhook,
            endpoint: Some("https://example.com/h"),
            event_types: vec!["a.b".into()],
            schema_major: 1,
            event_majors: Default::default(),
            origin: None,
            timeout_ms: None,
            plan_tier: None,
            retry_schedule: None,
            enabled: true,
            paused: false,
            verification_state: VerificationState::Active,
            created_at_ms: 7,
            updated_at_ms: 7,
            last_success_at_ms: None,
            last_failure_at_ms: None,
            deleted: false,
            secret: None,
            revision: 3,
            marks: Marks::default(),
        };
        let bytes = postcard::to_allocvec(&old).expect("postcard");
        let read = decode(&bytes).expect("a legacy record reads");
        assert_eq!(
            (read.revision, read.endpoint.as_deref(), read.partner),
            (3, Some("https://example.com/h"), None)
        );
        assert!(decode(b"\xff\xff").is_err());
    }
}
