//! Ping and verify (R-CP-5, R-CP-8): a synthetic event sent through the real delivery path (the
//! same `Sinks` the engine's workers use: signed for a webhook, published with the stored
//! credential for a queue), a classified outcome, and what a success
//! changes: a pending subscription becomes active; verify also re-enables one the hub stopped (in
//! place: same id, same secret) and clears the auto-disable mark. Neither ever resumes a paused
//! subscription, and a failed verify changes nothing.

use bytes::Bytes;
use serde_json::json;
use uuid::Uuid;

use crate::answer::{Answer, Served};
use crate::auth::Principal;
use crate::partners::Operation;
use crate::service::{store_error, Control};
use crate::store::ControlStoreError;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{SinkKind, Subscription, VerificationState};
use hub_core::sink::credential::Credential;
use hub_core::sink::grant::{check_trust, unsafe_trust, Trust};
use hub_core::sink::outcome::Outcome;
use hub_core::sink::{EventOut, Material};

pub use hub_core::in_process::HubEvents;

/// Which probe a tenant asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    Ping,
    Verify,
}

impl Control {
    /// `POST /v1/subscriptions/:id/ping` or `…/verify`.
    pub async fn probe(&self, who: &Principal, id: &str, kind: ProbeKind) -> Served {
        self.admit(
            who,
            match kind {
                ProbeKind::Ping => Operation::Ping,
                ProbeKind::Verify => Operation::Verify,
            },
        )?;
        let sub = match self.live(who, id).await {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        let outcome = self.probe_destination(&sub, None).await;
        let was_pending = sub.verification_state == VerificationState::PendingVerification;
        let recorded = match self.record_probe(sub, kind, &outcome).await {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        if was_pending && recorded.verification_state == VerificationState::Active {
            self.announce_verified(&recorded);
        }
        let mut body = json!({
            "outcome": if outcome.success { "success" } else { "failure" },
            "verification_state": recorded.verification_state,
            "enabled": recorded.enabled,
            "paused": recorded.paused,
        });
        if let Some(class) = outcome.error_class {
            body["error_class"] = class.as_str().into();
        }
        if let Some(code) = outcome.status_code {
            body["status_code"] = code.into();
        }
        if !outcome.detail.is_empty() {
            body["detail"] = outcome.detail.clone().into();
        }
        Ok(Answer::ok(body))
    }

    /// One synthetic delivery to the subscription's destination through its sink: with
    /// `material` when given (a credential being onboarded), else with the stored secret or
    /// credential. A pull subscription has no destination: its probe succeeds.
    pub async fn probe_destination(
        &self,
        sub: &Subscription,
        material: Option<&Material>,
    ) -> Outcome {
        if sub.sink_kind == SinkKind::Pull {
            return Outcome::delivered(None, std::time::Duration::ZERO);
        }
        let now = (self.now_ms)();
        let event_id = Uuid::now_v7();
        let time = hub_core::model::rfc3339(now);
        let body = json!({
            "specversion": "1.0",
            "id": event_id,
            "source": "hub",
            "type": "studio.lerian.hub.destination.ping",
            "time": time,
            "data": {"subscription_id": sub.id, "probe": true},
        });
        let ev = EventOut {
            id: event_id,
            key: "destination.ping",
            source: "hub",
            tenant: &sub.tenant,
            schema_version: "1.0.0",
            time: &time,
            subject: None,
            content_type: Some("application/json"),
            traceparent: None,
            tracestate: None,
            body: Bytes::from(body.to_string()),
        };
        let opened;
        let material = match material {
            Some(m) => m,
            None => match hub_core::sink::open(&self.keyring, sub, now) {
                Ok(m) => {
                    opened = m;
                    &opened
                }
                Err(refused) => return refused,
            },
        };
        // A delegated grant's probe is the hardened one (R-CP-7): the role must refuse the hub
        // without the ExternalId before the publish (which assumes it with the ExternalId).
        if let Material::Credential(Credential::AwsRole { role_arn, region }) = material {
            match check_trust(&self.sinks.roles, role_arn, region).await {
                Trust::Demanded => {}
                Trust::Unsafe => return unsafe_trust(),
                Trust::Unknown(outcome) => return outcome,
            }
        }
        self.sinks.send(sub, material, &ev, now).await
    }

    /// Writes what the probe changes (nothing for a failed verify) and returns the subscription
    /// as it now is.
    async fn record_probe(
        &self,
        current: Subscription,
        kind: ProbeKind,
        outcome: &Outcome,
    ) -> Result<Subscription, ApiError> {
        if kind == ProbeKind::Verify && !outcome.success {
            return Ok(current);
        }
        self.rewrite(current, |c| {
            Ok(after_probe(c, kind, outcome, (self.now_ms)()))
        })
        .await
    }

    /// Writes `change(current)` in place of `current`; on a concurrent change, reads the
    /// subscription again and applies `change` to that (at most five times, then 409).
    pub(crate) async fn rewrite(
        &self,
        mut current: Subscription,
        change: impl Fn(&Subscription) -> Result<Subscription, ApiError>,
    ) -> Result<Subscription, ApiError> {
        for _ in 0..5 {
            let next = change(&current)?;
            match self.write(&next, current.revision).await {
                Ok(()) => return Ok(next),
                Err(ControlStoreError::Conflict) => {
                    current = match self.store.get(&current.tenant, current.id).await {
                        Ok(Some(s)) if !s.deleted => s,
                        Ok(_) => return Err(ApiError::not_found()),
                        Err(e) => return Err(store_error(e)),
                    };
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        Err(ApiError::new(
            ErrorCode::SubscriptionContended,
            "the subscription kept changing; retry",
        ))
    }
}

/// First automatic probe of a pending webhook, after creation.
pub const AUTO_PROBE_FIRST_MS: i64 = 60_000;
/// The automatic probe interval doubles up to this.
pub const AUTO_PROBE_MAX_MS: i64 = 3_600_000;

/// When a pending, unpaused webhook is due for its automatic probe (R-CP-5), or `None` when it
/// is not probed automatically.
pub fn auto_probe_due(sub: &Subscription) -> Option<i64> {
    let probed = sub.sink_kind == SinkKind::Webhook
        && sub.verification_state == VerificationState::PendingVerification
        && !sub.paused
        && !sub.deleted;
    probed.then(|| {
        sub.marks
            .next_verification_attempt_at_ms
            .unwrap_or(sub.created_at_ms + AUTO_PROBE_FIRST_MS)
    })
}

/// The subscription after an automatic probe: a success activates it like a ping; a failure
/// records the probe and doubles the interval to the next one (1 minute, 2, 4 … capped at 1 h).
pub fn after_auto_probe(current: &Subscription, outcome: &Outcome, now_ms: i64) -> Subscription {
    let mut next = after_probe(current, ProbeKind::Ping, outcome, now_ms);
    if !outcome.success {
        let interval = current
            .marks
            .probe_interval_ms
            .map_or(AUTO_PROBE_FIRST_MS, |i| (i * 2).min(AUTO_PROBE_MAX_MS));
        next.marks.probe_interval_ms = Some(interval);
        next.marks.next_verification_attempt_at_ms = Some(now_ms + interval);
    }
    next
}

#[async_trait::async_trait]
impl hub_core::in_process::AutoProbe for Control {
    async fn auto_probe(&self, sub: &Subscription, now_ms: i64) -> bool {
        if auto_probe_due(sub).is_none_or(|due| due > now_ms) {
            return false;
        }
        // Probe the stored version, not a possibly stale copy.
        let Ok(Some(current)) = self.store.get(&sub.tenant, sub.id).await else {
            return false;
        };
        if auto_probe_due(&current).is_none_or(|due| due > now_ms) {
            return false;
        }
        let outcome = self.probe_destination(&current, None).await;
        let next = after_auto_probe(&current, &outcome, (self.now_ms)());
        // A concurrent change wins; the next round probes again if still due.
        if self.write(&next, current.revision).await.is_ok()
            && next.verification_state == VerificationState::Active
        {
            self.announce_verified(&next);
        }
        true
    }
}

impl Control {
    /// `hub.destination.verified`, unless the subscription is paused (R-CP-5).
    pub(crate) fn announce_verified(&self, sub: &Subscription) {
        if let (Some(events), false) = (self.events.get(), sub.paused) {
            events.emit(
                &sub.tenant,
                "destination.verified",
                sub.id,
                json!({"subscription_id": sub.id, "name": sub.name, "endpoint": sub.endpoint}),
            );
        }
    }
}

/// The subscription after a probe (pure).
pub fn after_probe(
    current: &Subscription,
    kind: ProbeKind,
    outcome: &Outcome,
    now_ms: i64,
) -> Subscription {
    let mut next = current.clone();
    next.marks.last_probe_at_ms = Some(now_ms);
    next.marks.last_probe_outcome = Some(
        if outcome.success {
            "success"
        } else {
            "failure"
        }
        .into(),
    );
    next.marks.last_probe_error_class = outcome.class_name();
    if outcome.success {
        next.verification_state = VerificationState::Active;
        next.marks.next_verification_attempt_at_ms = None;
        next.marks.probe_interval_ms = None;
        let stopped_by_hub = !current.enabled && !current.paused;
        if kind == ProbeKind::Verify && stopped_by_hub {
            next.enabled = true;
            next.marks.disabled_at_ms = None;
            next.marks.disabled_reason = None;
            next.last_failure_at_ms = None;
            // Failures before re-enabling never count toward the next auto-disable.
            next.marks.resumed_at_ms = Some(now_ms);
        }
    }
    next.revision += 1;
    next.updated_at_ms = now_ms;
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::subscription;

    fn outcome(success: bool) -> Outcome {
        Outcome {
            success,
            error_class: (!success).then_some(hub_core::sink::outcome::ErrorClass::HttpStatus),
            status_code: Some(if success { 200 } else { 500 }),
            detail: String::new(),
            duration_ms: 1,
        }
    }

    #[test]
    fn r_cp_5_a_successful_ping_activates_a_pending_subscription() {
        let pending = subscription("t", "s");
        assert_eq!(
            pending.verification_state,
            VerificationState::PendingVerification
        );
        let next = after_probe(&pending, ProbeKind::Ping, &outcome(true), 5);
        assert_eq!(next.verification_state, VerificationState::Active);
        assert_eq!(next.revision, pending.revision + 1);
        let failed = after_probe(&pending, ProbeKind::Ping, &outcome(false), 5);
        assert_eq!(
            failed.verification_state,
            VerificationState::PendingVerification
        );
        assert_eq!(
            failed.marks.last_probe_error_class.as_deref(),
            Some("http_status")
        );
    }

    #[test]
    fn r_cp_5_pending_webhooks_are_probed_after_a_minute_then_at_a_doubling_interval() {
        let mut s = subscription("t", "s");
        s.sink_kind = SinkKind::Webhook;
        s.created_at_ms = 1_000;
        assert_eq!(auto_probe_due(&s), Some(61_000));
        let mut at = 61_000;
        let mut intervals = Vec::new();
        for _ in 0..8 {
            s = after_auto_probe(&s, &outcome(false), at);
            let next = auto_probe_due(&s).expect("still pending");
            intervals.push((next - at) / 60_000);
            at = next;
        }
        assert_eq!(intervals, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        s = after_auto_probe(&s, &outcome(true), at);
        assert_eq!(s.verification_state, VerificationState::Active);
        assert_eq!(auto_probe_due(&s), None, "active: no more probes");
        let mut paused = subscription("t", "p");
        paused.sink_kind = SinkKind::Webhook;
        paused.paused = true;
        assert_eq!(auto_probe_due(&paused), None);
    }

    #[test]
    fn r_cp_8_verify_re_enables_a_stopped_subscription_but_never_resumes_a_paused_one() {
        let mut stopped = subscription("t", "s");
        stopped.verification_state = VerificationState::Active;
        stopped.enabled = false;
        stopped.marks.disabled_reason = Some("failing for 120 h".into());
        let next = after_probe(&stopped, ProbeKind::Verify, &outcome(true), 9);
        assert!(next.enabled);
        assert_eq!(next.marks.disabled_reason, None);
        assert_eq!(next.id, stopped.id);
        assert_eq!(next.secret, stopped.secret);

        let mut paused = stopped.clone();
        paused.paused = true;
        let next = after_probe(&paused, ProbeKind::Verify, &outcome(true), 9);
        assert!(!next.enabled && next.paused, "verify never resumes");
        let pinged = after_probe(&stopped, ProbeKind::Ping, &outcome(true), 9);
        assert!(!pinged.enabled, "ping does not re-enable");
    }

    #[test]
    fn r_cp_4_onboarding_activates_a_pending_queue_but_never_re_enables_or_resumes() {
        // `PUT …/credential` records its successful probe as a ping does.
        let pending = subscription("t", "q");
        let active = after_probe(&pending, ProbeKind::Ping, &outcome(true), 5);
        assert_eq!(active.verification_state, VerificationState::Active);
        assert!(active.enabled && !active.paused);
        let mut stopped = active.clone();
        stopped.enabled = false;
        let after = after_probe(&stopped, ProbeKind::Ping, &outcome(true), 6);
        assert!(!after.enabled && !after.paused, "still stopped by the hub");
        let mut paused = active;
        paused.enabled = false;
        paused.paused = true;
        let after = after_probe(&paused, ProbeKind::Ping, &outcome(true), 7);
        assert!(!after.enabled && after.paused, "still paused");
    }
}
