//! The service layer: every `/v1` operation with its rules, independent of the transport. Each
//! operation takes typed input and answers [`Served`]: an [`Answer`] (what was done, the view, its
//! ETag) or an `ApiError` with its code. REST (`http.rs`) and GraphQL (`graphql/`) render it.
//!
//! Order inside a mutation: permission → idempotency key → validation → destination and catalog
//! checks → one store write → recorded response. Nothing is written before every check passes.

use std::sync::Arc;

use ring::digest::{digest, SHA256};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::answer::{recorded, Answer, Served};
use crate::auth::Principal;
use crate::catalog::Catalog;
use crate::partners::Operation;
use crate::store::{ControlStore, ControlStoreError, IdemBegin, IdemTimes, StoredResponse};
use hub_core::destination::{check_endpoint, DestinationPolicy, Resolver};
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{binding, parse_object, validate_create, Subscription};
use hub_core::secrets::Keyring;

/// The outcome of a mutation's body: whether anything may have been written matters to the
/// idempotency record.
pub(crate) enum Outcome {
    Written(Answer),
    /// Refused before any write: the key is released.
    Refused(ApiError),
    /// The store failed during the write: it may or may not have committed.
    Unknown(ApiError),
}

pub(crate) fn store_error(e: ControlStoreError) -> ApiError {
    match e {
        ControlStoreError::NameTaken => ApiError::new(
            ErrorCode::SubscriptionNameTaken,
            "another subscription of this tenant has that name",
        ),
        ControlStoreError::Conflict => ApiError::new(
            ErrorCode::SubscriptionChanged,
            "the subscription changed since it was read",
        ),
        ControlStoreError::NotFound => ApiError::not_found(),
        ControlStoreError::Unavailable(m) => ApiError::unavailable(m),
    }
}

/// Store errors during a write: definite refusals vs. an unknown outcome.
pub(crate) fn write_outcome(e: ControlStoreError) -> Outcome {
    match e {
        ControlStoreError::Unavailable(_) => Outcome::Unknown(store_error(e)),
        other => Outcome::Refused(store_error(other)),
    }
}

/// Marks a recorded response sealed under the keyring.
const SEALED_RESPONSE: &[u8] = b"sealed:v1:";

/// What a recorded response is bound to: its tenant and key.
fn recorded_binding(tenant: &str, key: &str) -> String {
    format!("idempotency/{tenant}/{key}")
}

/// How often keys recorded by engines in other processes are merged into the catalog.
const CATALOG_SYNC_MS: i64 = 5_000;

/// Idempotency settings (R-CP-13).
#[derive(Debug, Clone, Copy)]
pub struct IdemSettings {
    pub retention_ms: i64,
    /// An in-flight key older than this is treated as unrecorded.
    pub stale_ms: i64,
}

impl Default for IdemSettings {
    fn default() -> Self {
        Self {
            retention_ms: 24 * 3_600_000,
            stale_ms: 60_000,
        }
    }
}

/// Everything the operations need.
#[derive(Debug, Clone)]
pub struct Control {
    pub store: Arc<dyn ControlStore>,
    pub keyring: Arc<Keyring>,
    pub policy: Arc<DestinationPolicy>,
    pub resolver: Arc<dyn Resolver>,
    pub catalog: Arc<Catalog>,
    /// Every push kind's client (probes use them as deliveries do).
    pub sinks: hub_core::sink::Sinks,
    /// Where the hub's own operational events go (`hub.destination.verified`, …): set by the
    /// engine that runs this control plane in-process; unset, they are not emitted.
    pub events: hub_core::in_process::HubEventsSlot,
    /// The engine running in this process, if any (the standalone hub): a write answers only
    /// once its index has the change, so an event posted right after a create, ping or resume
    /// is matched. Across processes engines catch up within a second (R-MA-3).
    pub local_index: hub_core::in_process::LocalIndexSlot,
    /// Each attempt's outcome as the engine in this process settles it (GraphQL's live
    /// `deliveryOutcomes`); nothing is published in a control process without an engine.
    pub outcomes: hub_core::outcomes::OutcomeFeed,
    /// The engine in this process, for what it holds (pull, dead letters, health).
    pub reader: hub_core::in_process::ReaderSlot,
    pub idem: IdemSettings,
    /// How long a rotated-out signing secret keeps signing (R-CP-9: 24 h).
    pub rotation_overlap_ms: i64,
    /// The clock (Unix ms), injected so tests control time.
    pub now_ms: fn() -> i64,
    /// Access Manager's partner directory, when the gateway relay is on (R-CP-17).
    pub partners: Option<Arc<hub_core::partners::PartnerDirectory>>,
    /// How many subscription changes this process has written: engines elsewhere long-poll it
    /// (`GET /internal/changes`) to read the revision log at once (R-TR-4's push).
    pub changes: tokio::sync::watch::Sender<u64>,
}

pub use hub_core::in_process::LocalIndex;

impl Control {
    /// Creates `sub`, then waits for the local index.
    pub(crate) async fn write_new(&self, sub: &Subscription) -> Result<(), ControlStoreError> {
        self.store.create(sub).await?;
        self.changes.send_modify(|n| *n += 1);
        self.local_caught_up().await;
        Ok(())
    }

    /// Replaces the subscription at revision `expected` with `next`, then waits for the local
    /// index.
    pub(crate) async fn write(
        &self,
        next: &Subscription,
        expected: u64,
    ) -> Result<(), ControlStoreError> {
        self.store.replace(next, expected).await?;
        self.changes.send_modify(|n| *n += 1);
        self.local_caught_up().await;
        Ok(())
    }

    async fn local_caught_up(&self) {
        if let Some(index) = self.local_index.get() {
            index.caught_up().await;
        }
    }
}

/// What an idempotent request is, for its fingerprint.
#[derive(Debug)]
pub struct Mutation<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub key: Option<&'a str>,
    pub body: &'a [u8],
}

fn fingerprint(m: &Mutation<'_>) -> [u8; 32] {
    let mut input = Vec::with_capacity(m.body.len() + 64);
    input.extend_from_slice(m.method.as_bytes());
    input.push(0);
    input.extend_from_slice(m.path.as_bytes());
    input.push(0);
    input.extend_from_slice(m.body);
    let d = digest(&SHA256, &input);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Whether an `X-Idempotency` key is usable (R-CP-13): 1 to 255 visible ASCII characters.
pub fn valid_key(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Parses `If-Match`: `*`, or one or more quoted (optionally weak) entity tags.
pub fn if_match_tags(value: &str) -> Result<Vec<String>, ApiError> {
    let bad = || ApiError::bad_request("malformed If-Match header");
    if value.trim() == "*" {
        return Ok(vec!["*".into()]);
    }
    value
        .split(',')
        .map(|t| {
            let t = t.trim();
            let t = t.strip_prefix("W/").unwrap_or(t);
            if t.len() >= 2
                && t.starts_with('"')
                && t.ends_with('"')
                && !t[1..t.len() - 1].contains('"')
            {
                Ok(t.to_owned())
            } else {
                Err(bad())
            }
        })
        .collect()
}

impl Control {
    /// Runs `op` under the request's idempotency key (R-CP-13).
    pub(crate) async fn idempotent<F, Fut>(
        &self,
        who: &Principal,
        m: &Mutation<'_>,
        op: F,
    ) -> Served
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Outcome>,
    {
        let Some(key) = m.key else {
            return Err(ApiError::new(
                ErrorCode::MissingIdempotencyKey,
                "X-Idempotency is required",
            ));
        };
        if !valid_key(key) {
            return Err(ApiError::bad_request(
                "X-Idempotency must be 1 to 255 visible ASCII characters",
            ));
        }
        let print = fingerprint(m);
        let times = IdemTimes {
            now_ms: (self.now_ms)(),
            retention_ms: self.idem.retention_ms,
            stale_ms: self.idem.stale_ms,
        };
        match self.store.idem_begin(&who.tenant, key, print, times).await {
            Err(e) => return Err(store_error(e)),
            Ok(IdemBegin::Fresh) => {}
            Ok(IdemBegin::Replay(r)) => return self.replayed(&who.tenant, key, r),
            Ok(IdemBegin::InFlight) => {
                return Err(ApiError::new(
                    ErrorCode::IdempotencyConflict,
                    "a request with this key is still running",
                ))
            }
            Ok(IdemBegin::Mismatch) => {
                return Err(ApiError::new(
                    ErrorCode::IdempotencyConflict,
                    "this key was used for a different request",
                ))
            }
            Ok(IdemBegin::Unrecorded) => return Err(ApiError::new(
                ErrorCode::IdempotencyOutcomeUnrecorded,
                "an earlier request with this key may have taken effect without a recorded outcome",
            )),
        }
        let unrecorded = || {
            ApiError::new(
                ErrorCode::IdempotencyOutcomeUnrecordedNow,
                "the change may have taken effect, but its outcome could not be recorded",
            )
        };
        match op().await {
            Outcome::Written(answer) => {
                let now = (self.now_ms)();
                let plain = answer
                    .body
                    .as_ref()
                    .map(|b| serde_json::to_vec(b).unwrap_or_default())
                    .unwrap_or_default();
                let recorded = match self.seal_recorded(&who.tenant, key, &plain) {
                    Some(body) => {
                        let stored = StoredResponse {
                            status: recorded::code(answer.done),
                            headers: recorded::headers(&answer),
                            body,
                        };
                        self.store
                            .idem_finish(&who.tenant, key, print, stored, now)
                            .await
                            .map_err(|_| ())
                    }
                    None => Err(()),
                };
                match recorded {
                    Ok(()) => Ok(answer),
                    Err(_) => {
                        let _ = self.store.idem_unrecorded(&who.tenant, key, now).await;
                        Err(unrecorded())
                    }
                }
            }
            Outcome::Refused(e) => {
                // Nothing was written: the key may be used again. If even that fails, the
                // in-flight mark goes stale and later sends learn the outcome is unrecorded.
                let _ = self.store.idem_release(&who.tenant, key).await;
                Err(e)
            }
            Outcome::Unknown(e) => {
                tracing::warn!(code = e.code.as_str(), message = %e.message, "a write's outcome is unknown");
                let _ = self
                    .store
                    .idem_unrecorded(&who.tenant, key, (self.now_ms)())
                    .await;
                Err(unrecorded())
            }
        }
    }

    /// The recorded answer of an earlier request with this key.
    fn replayed(&self, tenant: &str, key: &str, r: StoredResponse) -> Served {
        let body = self.open_recorded(tenant, key, r.body)?;
        let body = (!body.is_empty())
            .then(|| serde_json::from_slice(&body))
            .transpose()
            .map_err(|_| ApiError::internal("the recorded response could not be read"))?;
        let mut answer = Answer {
            done: recorded::done(r.status),
            body,
            etag: None,
            location: None,
            replayed: true,
        };
        recorded::from_headers(&mut answer, r.headers);
        Ok(answer)
    }

    /// A response as recorded for replays, sealed (R-SEC-1): a create's or rotation's answer
    /// holds a signing secret, and the record must not keep it in the clear.
    fn seal_recorded(&self, tenant: &str, key: &str, body: &[u8]) -> Option<Vec<u8>> {
        let text = std::str::from_utf8(body).ok()?;
        let sealed = self
            .keyring
            .seal(text.as_bytes(), &recorded_binding(tenant, key))
            .ok()?;
        let mut out = SEALED_RESPONSE.to_vec();
        out.extend(serde_json::to_vec(&sealed).ok()?);
        Some(out)
    }

    /// A recorded response as it was sent (records from before sealing are plain).
    fn open_recorded(&self, tenant: &str, key: &str, stored: Vec<u8>) -> Result<Vec<u8>, ApiError> {
        let Some(sealed) = stored.strip_prefix(SEALED_RESPONSE) else {
            return Ok(stored);
        };
        serde_json::from_slice::<hub_core::secrets::Sealed>(sealed)
            .ok()
            .and_then(|s| self.keyring.open(&s, &recorded_binding(tenant, key)).ok())
            .map(|plain| plain.0.into_bytes())
            .ok_or_else(|| ApiError::internal("the recorded response could not be opened"))
    }

    /// Merges keys engines recorded in the store (other processes) into the catalog, at most every
    /// few seconds. A store failure leaves the catalog as it was.
    pub(crate) async fn sync_catalog(&self) {
        if self.catalog.sync_due((self.now_ms)(), CATALOG_SYNC_MS) {
            match self.store.observed_keys().await {
                Ok(keys) => self
                    .catalog
                    .observe_all(keys.iter().map(|(k, o, m)| (k.as_str(), o.as_str(), *m))),
                Err(e) => tracing::warn!(error = %e, "reading observed event keys failed"),
            }
        }
    }

    /// A live subscription of the caller's tenant, or 404 (another tenant's id included).
    pub(crate) async fn live(&self, who: &Principal, id: &str) -> Result<Subscription, ApiError> {
        let id: Uuid = id.parse().map_err(|_| ApiError::not_found())?;
        match self.store.get(&who.tenant, id).await.map_err(store_error)? {
            Some(s) if !s.deleted && crate::partners::reaches(who, &s) => Ok(s),
            _ => Err(ApiError::not_found()),
        }
    }

    /// `POST /v1/subscriptions` (R-CP-3).
    pub async fn create(&self, who: &Principal, m: Mutation<'_>) -> Served {
        self.admit(who, Operation::Create)?;
        let body = m.body;
        self.idempotent(who, &m, || async {
            let fields = match parse_object(body).and_then(|o| validate_create(&o)) {
                Ok(f) => f,
                Err(e) => return Outcome::Refused(e),
            };
            if who.partner.is_some() && fields.sink_kind == hub_core::model::SinkKind::Pull {
                return Outcome::Refused(ApiError::invalid(
                    "a partner manages push subscriptions only, not pull (R-CP-17)",
                ));
            }
            let mut fields = fields;
            match check_endpoint(
                &self.policy,
                &*self.resolver,
                fields.sink_kind,
                fields.endpoint.as_deref(),
            )
            .await
            {
                // Stored in the form deliveries use (issue 16).
                Ok(used) => fields.endpoint = used,
                Err(e) => return Outcome::Refused(e),
            }
            if let Err(e) = self.catalog.check(
                &fields.event_types,
                fields.schema_major,
                &fields.event_majors,
                fields.origin.as_deref(),
            ) {
                return Outcome::Refused(e);
            }
            let now = (self.now_ms)();
            let id = Uuid::now_v7();
            let mut sub = Subscription {
                id,
                tenant: who.tenant.clone(),
                name: fields.name,
                sink_kind: fields.sink_kind,
                endpoint: fields.endpoint,
                event_types: fields.event_types,
                schema_major: fields.schema_major,
                event_majors: fields.event_majors,
                origin: fields.origin,
                timeout_ms: fields.timeout_ms,
                plan_tier: fields.plan_tier,
                retry_schedule: fields.retry_schedule,
                enabled: true,
                paused: false,
                verification_state: fields.sink_kind.state_at_creation(),
                created_at_ms: now,
                updated_at_ms: now,
                last_success_at_ms: None,
                last_failure_at_ms: None,
                deleted: false,
                secret: None,
                revision: 1,
                marks: Default::default(),
                partner: who.partner.clone(),
                delivery_mark_revisions: 0,
            };
            let mut secret = None;
            if sub.sink_kind == hub_core::model::SinkKind::Webhook {
                let sealed = self.keyring.new_signing_secret().and_then(|s| {
                    let sealed = self.keyring.seal(s.0.as_bytes(), &binding(&sub))?;
                    Ok((s, sealed))
                });
                match sealed {
                    Ok((plain, sealed)) => {
                        sub.secret = Some(sealed);
                        secret = Some(plain);
                    }
                    Err(e) => return Outcome::Refused(ApiError::internal(e.to_string())),
                }
            }
            if let Err(e) = self.write_new(&sub).await {
                return write_outcome(e);
            }
            let mut view = sub.view();
            if let (Some(s), Some(obj)) = (secret, view.as_object_mut()) {
                // The one and only time the secret leaves the hub (R-CP-3, R-SEC-1).
                obj.insert("secret".into(), Value::String(s.0));
            }
            let location = format!("/v1/subscriptions/{id}");
            Outcome::Written(Answer::created(view, location).with_etag(&sub))
        })
        .await
    }

    /// `GET /v1/subscriptions` with cursor pagination.
    pub async fn list(&self, who: &Principal, cursor: Option<&str>, limit: Option<&str>) -> Served {
        self.admit(who, Operation::List)?;
        let after = match cursor.map(str::parse::<Uuid>).transpose() {
            Ok(a) => a,
            Err(_) => return Err(ApiError::bad_request("cursor is not one this API returned")),
        };
        let limit = match limit.map(str::parse::<usize>).transpose() {
            Ok(l) => l.unwrap_or(50),
            Err(_) => return Err(ApiError::bad_request("limit must be a number")),
        };
        if !(1..=200).contains(&limit) {
            return Err(ApiError::bad_request("limit is from 1 to 200"));
        }
        match self.store.list(&who.tenant, after, limit + 1).await {
            Err(e) => Err(store_error(e)),
            Ok(mut subs) => {
                let more = subs.len() > limit;
                subs.truncate(limit);
                let next = more
                    .then(|| subs.last().map(|s| s.id.to_string()))
                    .flatten();
                // A partner's page shows its own (a page may hold fewer than `limit`; the
                // cursor still moves on).
                let items: Vec<Value> = subs
                    .iter()
                    .filter(|s| crate::partners::reaches(who, s))
                    .map(Subscription::view)
                    .collect();
                let mut body = json!({ "items": items });
                if let Some(n) = next {
                    body["next_cursor"] = Value::String(n);
                }
                Ok(Answer::ok(body))
            }
        }
    }

    /// `GET /v1/subscriptions/:id`, with its ETag.
    pub async fn get(&self, who: &Principal, id: &str) -> Served {
        self.admit(who, Operation::Read)?;
        match self.live(who, id).await {
            Ok(s) => Ok(Answer::ok(s.view()).with_etag(&s)),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/catalog` (R-CP-15).
    pub async fn catalog(&self, who: &Principal) -> Served {
        self.admit(who, Operation::Catalog)?;
        self.sync_catalog().await;
        Ok(Answer::ok(self.catalog.list()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_cp_10_if_match_forms() {
        assert_eq!(if_match_tags("\"a-1\"").expect("ok"), vec!["\"a-1\""]);
        assert_eq!(if_match_tags("W/\"a-1\", \"b\"").expect("ok").len(), 2);
        assert_eq!(if_match_tags("*").expect("ok"), vec!["*"]);
        for bad in ["a-1", "\"a", "\"a\"b\"", ""] {
            assert_eq!(
                if_match_tags(bad).expect_err(bad).code,
                ErrorCode::BadRequest,
                "{bad}"
            );
        }
    }
}
