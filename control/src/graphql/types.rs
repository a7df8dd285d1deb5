//! The GraphQL types: views of the service's answers. A subscription is read from the same view
//! REST sends (`Subscription::view`), so both transports show the same fields and values.

use async_graphql::{Enum, InputObject, MaybeUndefined, Object, SimpleObject};
use serde_json::{json, Map, Value};

use crate::answer::put;

/// A subscription as a tenant sees it (never its secret, but once: at creation).
pub struct SubscriptionNode {
    pub view: Value,
    pub etag: Option<String>,
}

impl SubscriptionNode {
    fn text(&self, field: &str) -> Option<String> {
        self.view
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
    fn number(&self, field: &str) -> Option<u64> {
        self.view.get(field).and_then(Value::as_u64)
    }
    fn flag(&self, field: &str) -> bool {
        self.view
            .get(field)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

#[Object(name = "Subscription")]
impl SubscriptionNode {
    async fn id(&self) -> String {
        self.text("id").unwrap_or_default()
    }
    async fn name(&self) -> String {
        self.text("name").unwrap_or_default()
    }
    async fn sink_kind(&self) -> String {
        self.text("sink_kind").unwrap_or_default()
    }
    async fn endpoint(&self) -> Option<String> {
        self.text("endpoint")
    }
    async fn event_types(&self) -> Vec<String> {
        self.view["event_types"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
    async fn schema_major(&self) -> u64 {
        self.number("schema_major").unwrap_or(1)
    }
    /// Per event type, the schema major it is delivered at (when not `schemaMajor`).
    async fn event_majors(&self) -> Option<async_graphql::Json<Value>> {
        self.view
            .get("event_majors")
            .cloned()
            .map(async_graphql::Json)
    }
    async fn origin(&self) -> Option<String> {
        self.text("origin")
    }
    async fn timeout_ms(&self) -> Option<u64> {
        self.number("timeout_ms")
    }
    async fn plan_tier(&self) -> Option<String> {
        self.text("plan_tier")
    }
    async fn retry_schedule(&self) -> Option<Vec<u64>> {
        self.view["retry_schedule"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
    }
    async fn enabled(&self) -> bool {
        self.flag("enabled")
    }
    async fn paused(&self) -> bool {
        self.flag("paused")
    }
    async fn verification_state(&self) -> String {
        self.text("verification_state").unwrap_or_default()
    }
    /// The revision this view shows (also in `etag`), R-TR-4.
    async fn revision(&self) -> u64 {
        self.number("revision").unwrap_or_default()
    }
    /// The entity tag to pass as `ifMatch` to an edit (R-CP-10).
    async fn etag(&self) -> Option<String> {
        self.etag.clone()
    }
    /// The signing secret: present only in the answer that created the subscription.
    async fn secret(&self) -> Option<String> {
        self.text("secret")
    }
    async fn created_at(&self) -> String {
        self.text("created_at").unwrap_or_default()
    }
    async fn updated_at(&self) -> String {
        self.text("updated_at").unwrap_or_default()
    }
    async fn last_success_at(&self) -> Option<String> {
        self.text("last_success_at")
    }
    async fn last_failure_at(&self) -> Option<String> {
        self.text("last_failure_at")
    }
    async fn last_probe_at(&self) -> Option<String> {
        self.text("last_probe_at")
    }
    async fn last_probe_outcome(&self) -> Option<String> {
        self.text("last_probe_outcome")
    }
    async fn last_probe_error_class(&self) -> Option<String> {
        self.text("last_probe_error_class")
    }
    async fn next_verification_attempt_at(&self) -> Option<String> {
        self.text("next_verification_attempt_at")
    }
    async fn disabled_at(&self) -> Option<String> {
        self.text("disabled_at")
    }
    async fn disabled_reason(&self) -> Option<String> {
        self.text("disabled_reason")
    }

    /// The partner that manages it through the gateway relay (R-CP-17).
    async fn partner_id(&self) -> Option<String> {
        self.text("partner_id")
    }
}

/// One page of the tenant's subscriptions.
#[derive(SimpleObject)]
pub struct SubscriptionPage {
    pub items: Vec<SubscriptionNode>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// What a ping or verification probe found (R-CP-6).
#[derive(SimpleObject)]
pub struct ProbeResult {
    /// `success` or `failure`.
    pub outcome: String,
    pub verification_state: String,
    pub enabled: bool,
    pub paused: bool,
    pub error_class: Option<String>,
    pub status_code: Option<u64>,
    pub detail: Option<String>,
}

impl ProbeResult {
    pub fn from_view(v: &Value) -> Self {
        let text = |f: &str| v.get(f).and_then(Value::as_str).map(str::to_owned);
        Self {
            outcome: text("outcome").unwrap_or_default(),
            verification_state: text("verification_state").unwrap_or_default(),
            enabled: v["enabled"].as_bool().unwrap_or(false),
            paused: v["paused"].as_bool().unwrap_or(false),
            error_class: text("error_class"),
            status_code: v["status_code"].as_u64(),
            detail: text("detail"),
        }
    }
}

/// A rotation's answer (R-CP-9): the new secret, once, and until when the old one still signs.
#[derive(SimpleObject)]
pub struct RotatedSecret {
    pub secret: String,
    pub overlap_until: Option<String>,
    /// The subscription's new entity tag.
    pub etag: Option<String>,
}

/// An event type of the catalog (R-CP-15).
#[derive(SimpleObject)]
pub struct CatalogEntry {
    pub event_key: String,
    pub origin: String,
    pub majors: Vec<u64>,
}

impl CatalogEntry {
    pub fn all(list: &Value, part: &str) -> Vec<Self> {
        list[part]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| CatalogEntry {
                        event_key: i["eventKey"].as_str().unwrap_or_default().to_owned(),
                        origin: i["origin"].as_str().unwrap_or_default().to_owned(),
                        majors: i["majors"]
                            .as_array()
                            .map(|m| m.iter().filter_map(Value::as_u64).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The catalog: producers' event types and the hub's own.
#[derive(SimpleObject)]
pub struct Catalog {
    pub items: Vec<CatalogEntry>,
    pub hub: Vec<CatalogEntry>,
}

#[derive(Debug, Enum, Copy, Clone, Eq, PartialEq)]
pub enum SinkKind {
    Webhook,
    Pull,
    Sqs,
    Rabbitmq,
    Eventbridge,
}

impl SinkKind {
    fn wire(self) -> &'static str {
        match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Pull => "pull",
            SinkKind::Sqs => "sqs",
            SinkKind::Rabbitmq => "rabbitmq",
            SinkKind::Eventbridge => "eventbridge",
        }
    }
}

/// A new subscription (R-CP-3): the fields of `POST /v1/subscriptions`.
#[derive(InputObject)]
pub struct CreateSubscriptionInput {
    pub name: String,
    pub sink_kind: SinkKind,
    pub endpoint: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub schema_major: Option<u32>,
    pub event_majors: Option<async_graphql::Json<Value>>,
    pub origin: Option<String>,
    pub timeout_ms: Option<u32>,
    pub plan_tier: Option<String>,
    pub retry_schedule: Option<Vec<u32>>,
}

impl CreateSubscriptionInput {
    /// The same JSON object a REST client sends, for the same validation.
    pub fn to_body(&self) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("name".into(), self.name.clone().into());
        m.insert("sink_kind".into(), self.sink_kind.wire().into());
        put(&mut m, "endpoint", self.endpoint.clone().map(Value::from));
        put(
            &mut m,
            "event_types",
            self.event_types.as_ref().map(|t| json!(t)),
        );
        put(&mut m, "schema_major", self.schema_major.map(Value::from));
        put(
            &mut m,
            "event_majors",
            self.event_majors.as_ref().map(|j| j.0.clone()),
        );
        put(&mut m, "origin", self.origin.clone().map(Value::from));
        put(&mut m, "timeout_ms", self.timeout_ms.map(Value::from));
        put(&mut m, "plan_tier", self.plan_tier.clone().map(Value::from));
        put(
            &mut m,
            "retry_schedule",
            self.retry_schedule.as_ref().map(|r| json!(r)),
        );
        serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
    }
}

/// An edit (R-CP-10): the fields of `PATCH /v1/subscriptions/:id`; `schemaMajor` is required as it
/// is there. `timeoutMs: null` puts the default back.
#[derive(InputObject)]
pub struct EditSubscriptionInput {
    pub schema_major: u32,
    pub name: Option<String>,
    pub endpoint: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub event_majors: Option<async_graphql::Json<Value>>,
    pub timeout_ms: MaybeUndefined<u32>,
}

impl EditSubscriptionInput {
    pub fn to_body(&self) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("schema_major".into(), self.schema_major.into());
        put(&mut m, "name", self.name.clone().map(Value::from));
        put(&mut m, "endpoint", self.endpoint.clone().map(Value::from));
        put(
            &mut m,
            "event_types",
            self.event_types.as_ref().map(|t| json!(t)),
        );
        put(
            &mut m,
            "event_majors",
            self.event_majors.as_ref().map(|j| j.0.clone()),
        );
        match &self.timeout_ms {
            MaybeUndefined::Undefined => {}
            // REST's way to put the default back.
            MaybeUndefined::Null => {
                m.insert("timeout_ms".into(), 0.into());
            }
            MaybeUndefined::Value(t) => {
                m.insert("timeout_ms".into(), (*t).into());
            }
        }
        serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
    }
}
