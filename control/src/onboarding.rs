//! Queue onboarding (R-CP-6): `PUT /v1/subscriptions/:id/credential` takes a write-only
//! credential, probes the destination with it at once (connect, authenticate, and a synthetic
//! publish: the destination exists and the permissions suffice), and only when the probe
//! succeeds seals it into the subscription and activates it. A failed probe stores nothing and
//! answers 422 `destination_probe_failed` with its `error_class`. Like a ping, it never
//! re-enables a subscription the hub stopped, and never resumes a paused one.

use serde_json::json;

use crate::answer::{Answer, Served};
use crate::auth::Principal;
use crate::partners::Operation;
use crate::probe::{after_probe, ProbeKind};
use crate::service::Control;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::binding;
use hub_core::model::{parse_object, Subscription, VerificationState};
use hub_core::sink::credential::Credential;
use hub_core::sink::outcome::Outcome;
use hub_core::sink::Material;

impl Control {
    /// `PUT /v1/subscriptions/:id/credential`.
    pub async fn put_credential(&self, who: &Principal, id: &str, body: &[u8]) -> Served {
        self.admit(who, Operation::Credential)?;
        let sub = match self.live(who, id).await {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        let credential = match parse_object(body).and_then(|b| Credential::parse(sub.sink_kind, &b))
        {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        let material = Material::Credential(credential);
        let outcome = self.probe_destination(&sub, Some(&material)).await;
        if !outcome.success {
            return Err(probe_failed(&outcome));
        }
        let Material::Credential(credential) = material else {
            return Err(ApiError::internal("credential lost"));
        };
        let was_pending = sub.verification_state == VerificationState::PendingVerification;
        match self.store_credential(sub, &credential, &outcome).await {
            Ok(stored) => {
                if was_pending && stored.verification_state == VerificationState::Active {
                    self.announce_verified(&stored);
                }
                Ok(Answer::ok(stored.view()).with_etag(&stored))
            }
            Err(e) => Err(e),
        }
    }

    /// Seals the credential into the subscription with what the successful probe changes.
    async fn store_credential(
        &self,
        current: Subscription,
        credential: &Credential,
        outcome: &Outcome,
    ) -> Result<Subscription, ApiError> {
        self.rewrite(current, |c| {
            let mut next = after_probe(c, ProbeKind::Ping, outcome, (self.now_ms)());
            next.secret = Some(
                self.keyring
                    .seal(&credential.to_bytes(), &binding(&next))
                    .map_err(|e| ApiError::internal(e.to_string()))?,
            );
            Ok(next)
        })
        .await
    }
}

/// 422 `destination_probe_failed` with the probe's classification (R-CP-6, R-CP-10).
pub fn probe_failed(outcome: &Outcome) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::DestinationProbeFailed,
        "the destination did not accept the probe; nothing was stored",
    );
    let mut extra = json!({});
    if let Some(class) = outcome.error_class {
        extra["error_class"] = class.as_str().into();
    }
    if let Some(code) = outcome.status_code {
        extra["status_code"] = code.into();
    }
    if !outcome.detail.is_empty() {
        extra["detail"] = outcome.detail.clone().into();
    }
    e.extra = Some(extra);
    e
}
