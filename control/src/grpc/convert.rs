//! Messages from and to the service's JSON: a subscription message is read from the same view REST
//! sends, and a request becomes the same JSON body REST takes, so all transports validate alike.

use serde_json::{json, Map, Value};

use crate::answer::put;

use super::pb;

fn text(v: &Value, f: &str) -> Option<String> {
    v.get(f).and_then(Value::as_str).map(str::to_owned)
}

fn small(v: &Value, f: &str) -> Option<u32> {
    v.get(f)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

pub fn subscription(v: &Value, etag: Option<String>) -> pb::Subscription {
    let flag = |f: &str| v.get(f).and_then(Value::as_bool).unwrap_or(false);
    pb::Subscription {
        id: text(v, "id").unwrap_or_default(),
        name: text(v, "name").unwrap_or_default(),
        sink_kind: text(v, "sink_kind").unwrap_or_default(),
        endpoint: text(v, "endpoint"),
        event_types: v["event_types"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        schema_major: small(v, "schema_major").unwrap_or(1),
        event_majors: v["event_majors"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, n)| Some((k.clone(), u32::try_from(n.as_u64()?).ok()?)))
                    .collect()
            })
            .unwrap_or_default(),
        origin: text(v, "origin"),
        timeout_ms: small(v, "timeout_ms"),
        plan_tier: text(v, "plan_tier"),
        retry_schedule: v["retry_schedule"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| u32::try_from(n.as_u64()?).ok())
                    .collect()
            })
            .unwrap_or_default(),
        enabled: flag("enabled"),
        paused: flag("paused"),
        verification_state: text(v, "verification_state").unwrap_or_default(),
        revision: v["revision"].as_u64().unwrap_or_default(),
        etag: etag.unwrap_or_default(),
        secret: text(v, "secret"),
        created_at: text(v, "created_at").unwrap_or_default(),
        updated_at: text(v, "updated_at").unwrap_or_default(),
        last_success_at: text(v, "last_success_at"),
        last_failure_at: text(v, "last_failure_at"),
        last_probe_at: text(v, "last_probe_at"),
        last_probe_outcome: text(v, "last_probe_outcome"),
        last_probe_error_class: text(v, "last_probe_error_class"),
        next_verification_attempt_at: text(v, "next_verification_attempt_at"),
        disabled_at: text(v, "disabled_at"),
        disabled_reason: text(v, "disabled_reason"),
        partner_id: text(v, "partner_id"),
    }
}

pub fn probe(v: &Value) -> pb::ProbeResult {
    pb::ProbeResult {
        outcome: text(v, "outcome").unwrap_or_default(),
        verification_state: text(v, "verification_state").unwrap_or_default(),
        enabled: v["enabled"].as_bool().unwrap_or(false),
        paused: v["paused"].as_bool().unwrap_or(false),
        error_class: text(v, "error_class"),
        status_code: small(v, "status_code"),
        detail: text(v, "detail"),
    }
}

pub fn catalog_entries(list: &Value, part: &str) -> Vec<pb::CatalogEntry> {
    list[part]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| pb::CatalogEntry {
                    event_key: text(i, "eventKey").unwrap_or_default(),
                    origin: text(i, "origin").unwrap_or_default(),
                    majors: i["majors"]
                        .as_array()
                        .map(|m| {
                            m.iter()
                                .filter_map(|n| u32::try_from(n.as_u64()?).ok())
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON body `POST /v1/subscriptions` takes.
pub fn create_body(r: &pb::CreateSubscriptionRequest) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("name".into(), r.name.clone().into());
    m.insert("sink_kind".into(), r.sink_kind.clone().into());
    put(&mut m, "endpoint", r.endpoint.clone().map(Value::from));
    put(
        &mut m,
        "event_types",
        (!r.event_types.is_empty()).then(|| json!(r.event_types)),
    );
    put(&mut m, "schema_major", r.schema_major.map(Value::from));
    put(
        &mut m,
        "event_majors",
        (!r.event_majors.is_empty()).then(|| json!(r.event_majors)),
    );
    put(&mut m, "origin", r.origin.clone().map(Value::from));
    put(&mut m, "timeout_ms", r.timeout_ms.map(Value::from));
    put(&mut m, "plan_tier", r.plan_tier.clone().map(Value::from));
    put(
        &mut m,
        "retry_schedule",
        (!r.retry_schedule.is_empty()).then(|| json!(r.retry_schedule)),
    );
    serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
}

/// The JSON body `PATCH /v1/subscriptions/:id` takes.
pub fn edit_body(r: &pb::EditSubscriptionRequest) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("schema_major".into(), r.schema_major.into());
    put(&mut m, "name", r.name.clone().map(Value::from));
    put(&mut m, "endpoint", r.endpoint.clone().map(Value::from));
    put(
        &mut m,
        "event_types",
        r.event_types.as_ref().map(|t| json!(t.values)),
    );
    put(
        &mut m,
        "event_majors",
        r.event_majors.as_ref().map(|t| json!(t.values)),
    );
    if r.reset_timeout {
        m.insert("timeout_ms".into(), 0.into()); // REST's way to put the default back
    } else {
        put(&mut m, "timeout_ms", r.timeout_ms.map(Value::from));
    }
    serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
}
