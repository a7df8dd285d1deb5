//! Subscriptions (R-CP-2, R-CP-4): the stored record, what a read shows, and the validation of
//! create and edit requests. Pure: no I/O here (destination and catalog checks come after).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::ApiError;
use crate::secrets::Sealed;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    Webhook,
    Pull,
    Sqs,
    Rabbitmq,
    Eventbridge,
}

impl std::fmt::Display for SinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SinkKind {
    /// Every kind, each at its own place (`kind as usize`).
    pub const ALL: [SinkKind; 5] = [
        SinkKind::Webhook,
        SinkKind::Pull,
        SinkKind::Sqs,
        SinkKind::Rabbitmq,
        SinkKind::Eventbridge,
    ];

    /// The kind as the API and the metrics name it.
    pub const fn as_str(self) -> &'static str {
        match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Pull => "pull",
            SinkKind::Sqs => "sqs",
            SinkKind::Rabbitmq => "rabbitmq",
            SinkKind::Eventbridge => "eventbridge",
        }
    }

    /// A new subscription's state: pull has no destination to probe, so it is active at once
    /// (R-CP-14); every push kind waits for a successful probe (R-CP-4).
    pub fn state_at_creation(self) -> VerificationState {
        match self {
            SinkKind::Pull => VerificationState::Active,
            _ => VerificationState::PendingVerification,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationState {
    PendingVerification,
    Active,
}

/// A subscription as stored. `revision` changes with every change of any kind; the ETag with
/// every change but a delivery mark ([`Subscription::etag`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub id: Uuid,
    pub tenant: String,
    pub name: String,
    pub sink_kind: SinkKind,
    pub endpoint: Option<String>,
    /// Empty means every event.
    pub event_types: Vec<String>,
    pub schema_major: u32,
    pub event_majors: BTreeMap<String, u32>,
    pub origin: Option<String>,
    pub timeout_ms: Option<u32>,
    pub plan_tier: Option<String>,
    pub retry_schedule: Option<Vec<u32>>,
    pub enabled: bool,
    pub paused: bool,
    pub verification_state: VerificationState,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_success_at_ms: Option<i64>,
    pub last_failure_at_ms: Option<i64>,
    pub deleted: bool,
    /// The webhook signing secret, sealed (R-SEC-1). Never part of a read.
    pub secret: Option<Sealed>,
    pub revision: u64,
    /// What probes and the delivery engine recorded (R-CP-5, R-DI-10).
    pub marks: Marks,
    /// The partner that created it through the gateway relay (R-CP-17): only that partner
    /// reaches it, and it delivers only while Access Manager shows the partner active.
    /// (A field added after records existed: absent from older records, so defaulted.)
    #[serde(default)]
    pub partner: Option<String>,
    /// How many of the revisions only marked a delivery (`last_success_at`, `last_failure_at`,
    /// R-CP-2). (Added after records existed: absent from older records, so zero.)
    #[serde(default)]
    pub delivery_mark_revisions: u64,
}

/// Probe results and the hub's own decisions about a subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    pub last_probe_at_ms: Option<i64>,
    /// `success` or `failure`.
    pub last_probe_outcome: Option<String>,
    pub last_probe_error_class: Option<String>,
    /// When the next automatic probe of a pending webhook is due, and the interval after it.
    pub next_verification_attempt_at_ms: Option<i64>,
    pub probe_interval_ms: Option<i64>,
    /// Why and when the hub stopped delivering (auto-disable, R-DI-10).
    pub disabled_at_ms: Option<i64>,
    pub disabled_reason: Option<String>,
    /// The last resume: failures before it never count toward auto-disable (R-CP-11).
    pub resumed_at_ms: Option<i64>,
}

pub const DEFAULT_TIMEOUT_MS: u32 = 10_000;

/// What a subscription's sealed secret or credential is bound to (the AEAD's associated data):
/// a sealed value copied to another subscription does not open.
pub fn binding(sub: &Subscription) -> String {
    format!("{}/{}", sub.tenant, sub.id)
}
const MAX_NAME: usize = 200;
const MAX_EVENT_TYPES: usize = 256;

pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

impl Subscription {
    /// A new subscription of `tenant` with every optional field unset: enabled, unpaused, at
    /// revision 1, in the verification state its kind starts in, created `now_ms`. Create sets
    /// the fields a request gave; tests and benches start from here.
    pub fn new(tenant: &str, name: &str, sink_kind: SinkKind, now_ms: i64) -> Self {
        Self {
            id: Uuid::now_v7(),
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            sink_kind,
            endpoint: None,
            event_types: Vec::new(),
            schema_major: 1,
            event_majors: BTreeMap::new(),
            origin: None,
            timeout_ms: None,
            plan_tier: None,
            retry_schedule: None,
            enabled: true,
            paused: false,
            verification_state: sink_kind.state_at_creation(),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            last_success_at_ms: None,
            last_failure_at_ms: None,
            deleted: false,
            secret: None,
            revision: 1,
            marks: Marks::default(),
            partner: None,
            delivery_mark_revisions: 0,
        }
    }

    /// The read view (R-CP-2): fields without a value are omitted; no secret, ever.
    pub fn view(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), self.id.to_string().into());
        m.insert("name".into(), self.name.clone().into());
        m.insert("sink_kind".into(), self.sink_kind.to_string().into());
        if let Some(e) = &self.endpoint {
            m.insert("endpoint".into(), e.clone().into());
        }
        let types: Vec<Value> = if self.event_types.is_empty() {
            vec!["*".into()]
        } else {
            self.event_types.iter().cloned().map(Value::from).collect()
        };
        m.insert("event_types".into(), types.into());
        m.insert("schema_major".into(), self.schema_major.into());
        if !self.event_majors.is_empty() {
            m.insert("event_majors".into(), serde_json::json!(self.event_majors));
        }
        if let Some(o) = &self.origin {
            m.insert("origin".into(), o.clone().into());
        }
        if self.sink_kind == SinkKind::Webhook {
            m.insert(
                "timeout_ms".into(),
                self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).into(),
            );
        }
        if let Some(p) = &self.partner {
            m.insert("partner_id".into(), p.clone().into());
        }
        if let Some(p) = &self.plan_tier {
            m.insert("plan_tier".into(), p.clone().into());
        }
        if let Some(r) = &self.retry_schedule {
            m.insert("retry_schedule".into(), serde_json::json!(r));
        }
        m.insert("enabled".into(), self.enabled.into());
        m.insert("paused".into(), self.paused.into());
        m.insert(
            "verification_state".into(),
            serde_json::to_value(self.verification_state).unwrap_or(Value::Null),
        );
        // R-TR-4: answers carry the revision (also in the ETag), so a client can tell which
        // change it is looking at.
        m.insert("revision".into(), self.revision.into());
        m.insert("created_at".into(), rfc3339(self.created_at_ms).into());
        m.insert("updated_at".into(), rfc3339(self.updated_at_ms).into());
        if let Some(t) = self.last_success_at_ms {
            m.insert("last_success_at".into(), rfc3339(t).into());
        }
        if let Some(t) = self.last_failure_at_ms {
            m.insert("last_failure_at".into(), rfc3339(t).into());
        }
        let marks = &self.marks;
        let times = [
            ("last_probe_at", marks.last_probe_at_ms),
            (
                "next_verification_attempt_at",
                marks.next_verification_attempt_at_ms,
            ),
            ("disabled_at", marks.disabled_at_ms),
        ];
        for (name, t) in times {
            if let Some(t) = t {
                m.insert(name.into(), rfc3339(t).into());
            }
        }
        let texts = [
            ("last_probe_outcome", &marks.last_probe_outcome),
            ("last_probe_error_class", &marks.last_probe_error_class),
            ("disabled_reason", &marks.disabled_reason),
        ];
        for (name, text) in texts {
            if let Some(text) = text {
                m.insert(name.into(), text.clone().into());
            }
        }
        Value::Object(m)
    }

    /// The strong ETag: it moves with every change (an edit, a pause, a rotation, a probe, an
    /// auto-disable; R-CP-10) but a delivery mark. A subscription that delivers marks itself
    /// several times a second, and an ETag that moved with those would make every `If-Match`
    /// edit of a busy subscription fail (`subscription_changed`) for a field no edit touches.
    pub fn etag(&self) -> String {
        let version = self.revision.saturating_sub(self.delivery_mark_revisions);
        format!("\"{}-{}\"", self.id.simple(), version)
    }
}

/// Reads a JSON object body: a syntax error is 400, anything not an object 422.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if let Ok(Some(key)) = crate::json::repeated_key(body) {
        return Err(ApiError::bad_request(format!(
            "the key {key:?} appears twice in one object"
        )));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::invalid("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("malformed JSON: {e}"))),
    }
}

fn string(m: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(format!("{key} must be a string"))),
    }
}

fn whole(v: &Value, what: &str, max: u64) -> Result<u32, ApiError> {
    v.as_u64()
        .filter(|n| *n <= max)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ApiError::invalid(format!("{what} must be a whole number from 0 to {max}")))
}

/// Characters a name may not hold: controls (NUL, newlines, escapes) and the bidirectional
/// formatting marks that make text display other than it reads (CVE-2021-42574's trick).
fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

fn name(m: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match string(m, "name")? {
        Some(n) if n.trim().is_empty() => Err(ApiError::invalid("name must not be empty")),
        Some(n) if n.chars().any(unprintable) => Err(ApiError::invalid(
            "name must not hold control characters or bidirectional formatting marks",
        )),
        Some(n) if n.chars().count() > MAX_NAME => Err(ApiError::invalid(format!(
            "name is longer than {MAX_NAME} characters"
        ))),
        other => Ok(other),
    }
}

/// Whether `s` is a `<source>` as topics name it (`lerian.streaming.<source>`, R-IN-1): a lower-case
/// letter or digit, then lower-case letters, digits, `_` and `-`, short enough for the topic name
/// to fit Kafka's 249 characters.
pub fn is_source(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= MAX_SOURCE
        && matches!(bytes.next(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// The longest `<source>`: Kafka topic names stop at 249 characters, and `lerian.streaming.`
/// plus `.dlq` take 21 of them.
pub const MAX_SOURCE: usize = 249 - "lerian.streaming.".len() - ".dlq".len();

/// `origin`: a producer's source (R-CP-2), so it can ever match.
fn origin(m: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match string(m, "origin")? {
        Some(o) if !is_source(&o) => Err(ApiError::invalid(format!(
            "origin is a producer's source: lower-case letters, digits, '_' and '-', at most {MAX_SOURCE}"
        ))),
        other => Ok(other),
    }
}

/// The plan tiers and the weight each gives a tenant in the delivery rotation (R-DI-2, R-DI-3:
/// `[decided]` `plan_tier` sets a tenant's weight). A subscription without one weighs 1.
pub const PLAN_TIERS: &[(&str, u32)] = &[
    ("basic", 1),
    ("standard", 2),
    ("premium", 4),
    ("enterprise", 8),
];

/// The rotation weight of `plan_tier`.
pub fn tier_weight(plan_tier: Option<&str>) -> u32 {
    PLAN_TIERS
        .iter()
        .find(|(t, _)| Some(*t) == plan_tier)
        .map_or(1, |(_, w)| *w)
}

fn plan_tier(m: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match string(m, "plan_tier")? {
        Some(t) if !PLAN_TIERS.iter().any(|(known, _)| *known == t) => {
            let known: Vec<&str> = PLAN_TIERS.iter().map(|(t, _)| *t).collect();
            Err(ApiError::invalid(format!(
                "plan_tier is one of {}",
                known.join(", ")
            )))
        }
        other => Ok(other),
    }
}

/// `<resourcetype>.<eventtype>`: lower-case letters, digits, `_` and `-`, two dot-separated parts
/// (or more: some producers nest).
fn valid_key(key: &str) -> bool {
    let parts: Vec<&str> = key.split('.').collect();
    parts.len() >= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        })
}

/// `event_types`: `[]` or `["*"]` mean all and are stored empty.
fn event_types(v: &Value) -> Result<Vec<String>, ApiError> {
    let items = v
        .as_array()
        .ok_or_else(|| ApiError::invalid("event_types must be an array of event keys"))?;
    if items.len() > MAX_EVENT_TYPES {
        return Err(ApiError::invalid(format!(
            "at most {MAX_EVENT_TYPES} event_types"
        )));
    }
    let keys: Vec<String> = items
        .iter()
        .map(|i| {
            i.as_str()
                .map(str::to_owned)
                .ok_or_else(|| ApiError::invalid("event_types must hold strings"))
        })
        .collect::<Result<_, _>>()?;
    if keys.is_empty() || keys == ["*"] {
        return Ok(Vec::new());
    }
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    for k in &unique {
        if !valid_key(k) {
            return Err(ApiError::invalid(format!(
                "{k:?} is not an event key (<resourcetype>.<eventtype>) or \"*\""
            )));
        }
    }
    Ok(unique)
}

fn event_majors(v: &Value, types: &[String]) -> Result<BTreeMap<String, u32>, ApiError> {
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid("event_majors must be an object of key → major"))?;
    let mut out = BTreeMap::new();
    for (k, major) in obj {
        if !types.contains(k) {
            return Err(ApiError::invalid(format!(
                "event_majors key {k:?} must be one of an explicit event_types"
            )));
        }
        let m = whole(major, "an event major", 1_000)?;
        if m < 1 {
            return Err(ApiError::invalid("an event major is at least 1"));
        }
        out.insert(k.clone(), m);
    }
    Ok(out)
}

fn schema_major(v: &Value) -> Result<u32, ApiError> {
    if v.is_null() {
        return Ok(1);
    }
    let m = whole(v, "schema_major", 1_000)?;
    if m < 1 {
        return Err(ApiError::invalid("schema_major is at least 1"));
    }
    Ok(m)
}

fn timeout_ms(v: &Value, kind: SinkKind, zero_is_default: bool) -> Result<Option<u32>, ApiError> {
    if kind != SinkKind::Webhook {
        return Err(ApiError::invalid("timeout_ms applies to webhooks only"));
    }
    let t = whole(v, "timeout_ms", 20_000)?;
    if t == 0 && zero_is_default {
        return Ok(None);
    }
    if !(1_000..=20_000).contains(&t) {
        return Err(ApiError::invalid("timeout_ms is from 1000 to 20000"));
    }
    Ok(Some(t))
}

/// R-DI-7: 1 to 12 whole seconds, each 0 to 36000.
fn retry_schedule(v: &Value) -> Result<Vec<u32>, ApiError> {
    let items = v
        .as_array()
        .filter(|a| (1..=12).contains(&a.len()))
        .ok_or_else(|| {
            ApiError::invalid("retry_schedule is an array of 1 to 12 delays in seconds")
        })?;
    items
        .iter()
        .map(|d| whole(d, "a retry delay", 36_000))
        .collect()
}

const CREATE_FIELDS: &[&str] = &[
    "name",
    "sink_kind",
    "endpoint",
    "event_types",
    "schema_major",
    "event_majors",
    "origin",
    "timeout_ms",
    "plan_tier",
    "retry_schedule",
    "credential",
    "sink_config",
];

/// A validated create request (R-CP-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSubscription {
    pub name: String,
    pub sink_kind: SinkKind,
    pub endpoint: Option<String>,
    pub event_types: Vec<String>,
    pub schema_major: u32,
    pub event_majors: BTreeMap<String, u32>,
    pub origin: Option<String>,
    pub timeout_ms: Option<u32>,
    pub plan_tier: Option<String>,
    pub retry_schedule: Option<Vec<u32>>,
}

pub fn validate_create(m: &Map<String, Value>) -> Result<NewSubscription, ApiError> {
    if let Some(unknown) = m.keys().find(|k| !CREATE_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!("unknown field {unknown:?}")));
    }
    let name = name(m)?.ok_or_else(|| ApiError::invalid("name is required"))?;
    let sink_kind: SinkKind = match m.get("sink_kind") {
        Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
            ApiError::invalid("sink_kind is one of webhook, pull, sqs, rabbitmq, eventbridge")
        })?,
        None => return Err(ApiError::invalid("sink_kind is required")),
    };
    if sink_kind != SinkKind::Webhook && sink_kind != SinkKind::Pull {
        for inline in ["credential", "sink_config"] {
            if m.contains_key(inline) {
                return Err(ApiError::invalid(format!(
                    "a {sink_kind} subscription takes no inline {inline}: use the credential or delegated-grant onboarding"
                )));
            }
        }
    } else if let Some(k) = ["credential", "sink_config"]
        .iter()
        .find(|k| m.contains_key(**k))
    {
        return Err(ApiError::invalid(format!(
            "{k} does not apply to a {sink_kind} subscription"
        )));
    }
    let event_types = m
        .get("event_types")
        .map(event_types)
        .transpose()?
        .unwrap_or_default();
    let event_majors = m
        .get("event_majors")
        .map(|v| event_majors(v, &event_types))
        .transpose()?
        .unwrap_or_default();
    Ok(NewSubscription {
        name,
        sink_kind,
        endpoint: string(m, "endpoint")?,
        event_types,
        schema_major: m
            .get("schema_major")
            .map(schema_major)
            .transpose()?
            .unwrap_or(1),
        event_majors,
        origin: origin(m)?,
        timeout_ms: m
            .get("timeout_ms")
            .map(|v| timeout_ms(v, sink_kind, false))
            .transpose()?
            .flatten(),
        plan_tier: plan_tier(m)?,
        retry_schedule: m.get("retry_schedule").map(retry_schedule).transpose()?,
    })
}

const PATCH_FIELDS: &[&str] = &[
    "schema_major",
    "name",
    "endpoint",
    "event_types",
    "event_majors",
    "timeout_ms",
];

/// A validated edit (R-CP-10): every field optional but `schema_major`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edit {
    pub schema_major: u32,
    pub name: Option<String>,
    pub endpoint: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub event_majors: Option<BTreeMap<String, u32>>,
    /// `Some(None)`: back to the default.
    pub timeout_ms: Option<Option<u32>>,
}

pub fn validate_edit(m: &Map<String, Value>, current: &Subscription) -> Result<Edit, ApiError> {
    if let Some(unknown) = m.keys().find(|k| !PATCH_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!("{unknown:?} cannot be edited")));
    }
    let major = m.get("schema_major").ok_or_else(|| {
        ApiError::invalid("schema_major is required on an edit (a number ≥ 1, or null for 1)")
    })?;
    let endpoint = string(m, "endpoint")?;
    if endpoint.is_some() && current.sink_kind == SinkKind::Pull {
        return Err(ApiError::invalid("a pull subscription has no endpoint"));
    }
    let event_types = m.get("event_types").map(event_types).transpose()?;
    let types_for_majors = event_types.as_ref().unwrap_or(&current.event_types);
    Ok(Edit {
        schema_major: schema_major(major)?,
        name: name(m)?,
        endpoint,
        event_majors: m
            .get("event_majors")
            .map(|v| event_majors(v, types_for_majors))
            .transpose()?,
        event_types,
        timeout_ms: m
            .get("timeout_ms")
            .map(|v| timeout_ms(v, current.sink_kind, true))
            .transpose()?,
    })
}

impl Edit {
    /// Applies the edit; states (`verification_state`, `enabled`, `paused`) never change here.
    pub fn apply(&self, s: &mut Subscription) {
        s.schema_major = self.schema_major;
        if let Some(n) = &self.name {
            s.name = n.clone();
        }
        if let Some(e) = &self.endpoint {
            if s.endpoint.as_ref() != Some(e) {
                // A new destination has no failure history (R-CP-2).
                s.last_failure_at_ms = None;
            }
            s.endpoint = Some(e.clone());
        }
        if let Some(t) = &self.event_types {
            s.event_types = t.clone();
            s.event_majors.retain(|k, _| t.contains(k));
        }
        if let Some(m) = &self.event_majors {
            s.event_majors = m.clone();
        }
        if let Some(t) = self.timeout_ms {
            s.timeout_ms = t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_sink_kind_is_listed_at_its_own_place() {
        for (place, kind) in SinkKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, place, "{kind}");
        }
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    fn code(r: Result<impl std::fmt::Debug, ApiError>) -> (u16, &'static str) {
        r.map_or_else(|e| (e.status(), e.code.as_str()), |_| (200, "ok"))
    }

    #[test]
    fn r_cp_2_create_defaults_and_normalises() {
        let n = validate_create(&obj(
            json!({"name": "n", "sink_kind": "webhook", "endpoint": "https://x",
            "event_types": ["*"]}),
        ))
        .expect("valid");
        assert!(n.event_types.is_empty(), "[\"*\"] means all");
        assert_eq!((n.schema_major, n.timeout_ms), (1, None));
        let n = validate_create(&obj(json!({"name": "n", "sink_kind": "pull",
            "event_types": ["loan.approved", "loan.approved", "account.created"],
            "event_majors": {"loan.approved": 2}})))
        .expect("valid");
        assert_eq!(n.event_types, vec!["account.created", "loan.approved"]);
        assert_eq!(n.event_majors["loan.approved"], 2);
    }

    #[test]
    fn r_cp_2_create_rejects_each_bad_field_with_422() {
        for body in [
            json!({"sink_kind": "webhook"}),
            json!({"name": " ", "sink_kind": "webhook"}),
            json!({"name": "n"}),
            json!({"name": "n", "sink_kind": "smtp"}),
            json!({"name": "n", "sink_kind": "webhook", "colour": "red"}),
            json!({"name": 3, "sink_kind": "webhook"}),
            json!({"name": "n", "sink_kind": "webhook", "timeout_ms": 999}),
            json!({"name": "n", "sink_kind": "webhook", "timeout_ms": 20001}),
            json!({"name": "n", "sink_kind": "pull", "timeout_ms": 5000}),
            json!({"name": "n", "sink_kind": "webhook", "schema_major": 0}),
            json!({"name": "n", "sink_kind": "webhook", "event_types": ["Loan Approved"]}),
            json!({"name": "n", "sink_kind": "webhook", "event_majors": {"a.b": 2}}),
            json!({"name": "n", "sink_kind": "webhook", "retry_schedule": []}),
            json!({"name": "n", "sink_kind": "webhook", "retry_schedule": [1,2,3,4,5,6,7,8,9,10,11,12,13]}),
            json!({"name": "n", "sink_kind": "webhook", "retry_schedule": [36001]}),
            json!({"name": "n", "sink_kind": "webhook", "retry_schedule": [1.5]}),
            json!({"name": "n", "sink_kind": "sqs", "credential": {"k": "v"}}),
            json!({"name": "n", "sink_kind": "rabbitmq", "sink_config": {}}),
            // Names that hide what they are; origins no producer can have; unknown tiers.
            json!({"name": "a\u{0}b", "sink_kind": "pull"}),
            json!({"name": "line\nbreak", "sink_kind": "pull"}),
            json!({"name": "abc\u{202E}txt.exe", "sink_kind": "pull"}),
            json!({"name": "n", "sink_kind": "pull", "origin": "Lender"}),
            json!({"name": "n", "sink_kind": "pull", "origin": "../x"}),
            json!({"name": "n", "sink_kind": "pull", "origin": "a".repeat(MAX_SOURCE + 1)}),
            json!({"name": "n", "sink_kind": "pull", "plan_tier": "gold"}),
        ] {
            assert_eq!(
                code(validate_create(&obj(body.clone()))),
                (422, "validation_failed"),
                "{body}"
            );
        }
    }

    #[test]
    fn r_cp_2_known_tiers_set_the_rotation_weight_and_origins_are_sources() {
        let ok = validate_create(&obj(json!({"name": "n", "sink_kind": "pull",
            "origin": "lender", "plan_tier": "premium"})))
        .expect("valid");
        assert_eq!(ok.plan_tier.as_deref(), Some("premium"));
        assert_eq!(tier_weight(Some("enterprise")), 8);
        assert_eq!(tier_weight(None), 1);
        assert!(is_source(&"a".repeat(MAX_SOURCE)));
        assert!(!is_source(&"a".repeat(MAX_SOURCE + 1)));
        assert!(!is_source("") && !is_source("-x") && !is_source("a.b"));
    }

    #[test]
    fn bad_json_is_400_and_a_non_object_422() {
        assert_eq!(code(parse_object(b"{\"name\":")), (400, "bad_request"));
        assert_eq!(code(parse_object(b"[1]")), (422, "validation_failed"));
    }

    fn current(kind: SinkKind) -> Subscription {
        Subscription {
            event_types: vec!["a.b".into()],
            timeout_ms: Some(5000),
            verification_state: VerificationState::PendingVerification,
            last_failure_at_ms: Some(1),
            ..Subscription::new("t", "n", kind, 0)
        }
    }

    #[test]
    fn r_cp_10_the_etag_moves_with_every_change_but_a_delivery_mark() {
        let sub = Subscription::new("t", "n", SinkKind::Webhook, 0);
        let mut marked = sub.clone();
        marked.revision += 1;
        marked.delivery_mark_revisions += 1;
        assert_eq!(marked.etag(), sub.etag());
        let mut paused = marked.clone();
        paused.revision += 1;
        assert_ne!(paused.etag(), marked.etag());
        let mut marked_again = paused.clone();
        marked_again.revision += 1;
        marked_again.delivery_mark_revisions += 1;
        assert_eq!(marked_again.etag(), paused.etag());
        assert_ne!(
            marked_again.etag(),
            sub.etag(),
            "never an earlier ETag again"
        );
    }

    #[test]
    fn r_cp_10_edit_rules() {
        let w = current(SinkKind::Webhook);
        assert_eq!(
            code(validate_edit(&obj(json!({"name": "x"})), &w)),
            (422, "validation_failed"),
            "schema_major required"
        );
        assert_eq!(
            code(validate_edit(&obj(json!({"schema_major": 0})), &w)),
            (422, "validation_failed")
        );
        assert_eq!(
            code(validate_edit(
                &obj(json!({"schema_major": 1, "sink_kind": "pull"})),
                &w
            )),
            (422, "validation_failed")
        );
        assert_eq!(
            code(validate_edit(
                &obj(json!({"schema_major": 1, "endpoint": "https://x"})),
                &current(SinkKind::Pull)
            )),
            (422, "validation_failed")
        );
        let e = validate_edit(
            &obj(json!({"schema_major": null, "timeout_ms": 0, "event_types": []})),
            &w,
        )
        .expect("valid");
        assert_eq!(
            (e.schema_major, e.timeout_ms, e.event_types.clone()),
            (1, Some(None), Some(vec![]))
        );
        let mut s = w.clone();
        validate_edit(
            &obj(json!({"schema_major": 2, "endpoint": "https://new"})),
            &w,
        )
        .expect("valid")
        .apply(&mut s);
        assert_eq!(
            (
                s.schema_major,
                s.last_failure_at_ms,
                s.enabled,
                s.verification_state
            ),
            (2, None, true, VerificationState::PendingVerification)
        );
    }

    #[test]
    fn r_cp_2_reads_omit_empty_fields_and_never_show_the_secret() {
        let mut s = current(SinkKind::Webhook);
        s.secret = Some(Sealed {
            key_id: "k1".into(),
            nonce: vec![0; 12],
            ciphertext: vec![1, 2, 3],
        });
        let v = s.view();
        let text = v.to_string();
        assert!(
            !text.contains("secret") && !text.contains("ciphertext"),
            "{text}"
        );
        assert!(v.get("origin").is_none() && v.get("last_success_at").is_none());
        assert!(v.get("last_failure_at").is_some());
    }
}
