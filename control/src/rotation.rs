//! Secret rotation (R-CP-9, R-DI-12): `POST /v1/subscriptions/:id/secret/rotate` (idempotency
//! key; webhook only) issues a new signing secret and returns it with `overlapUntil`; for the
//! next 24 hours every delivery and probe is signed with both the new and the previous secret
//! (`X-Lerian-Signature` and `X-Lerian-Signature-Previous`; two entries in
//! `webhook-signature`), after that with the new one alone. A second rotation during an overlap
//! keeps only the newest previous secret. The ETag changes.

use serde_json::json;

use crate::answer::{Answer, Served};
use crate::auth::Principal;
use crate::partners::Operation;
use crate::rewrite::{contended, until_answered, Attempt};
use crate::service::{write_outcome, Control, Mutation, Outcome};
use crate::store::ControlStoreError;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{binding, rfc3339, SinkKind};
use hub_core::sink::webhook::secrets::SigningSecrets;

impl Control {
    /// `POST /v1/subscriptions/:id/secret/rotate`.
    pub async fn rotate(&self, who: &Principal, id: &str, m: Mutation<'_>) -> Served {
        self.admit(who, Operation::Rotate)?;
        self.idempotent(who, &m, || async {
            until_answered(|| async {
                match self.rotate_once(who, id).await {
                    Err(ControlStoreError::Conflict) => Attempt::Lost,
                    Err(e) => Attempt::Answered(write_outcome(e)),
                    Ok(outcome) => Attempt::Answered(outcome),
                }
            })
            .await
            .unwrap_or_else(|| Outcome::Refused(contended()))
        })
        .await
    }

    /// One read and conditional rewrite; `Err` when the write failed.
    async fn rotate_once(&self, who: &Principal, id: &str) -> Result<Outcome, ControlStoreError> {
        let current = match self.live(who, id).await {
            Ok(s) => s,
            Err(e) => return Ok(Outcome::Refused(e)),
        };
        if current.sink_kind != SinkKind::Webhook {
            return Ok(Outcome::Refused(ApiError::new(
                ErrorCode::RotationUnsupported,
                format!("a {} subscription has no signing secret", current.sink_kind),
            )));
        }
        let now = (self.now_ms)();
        let opened = current
            .secret
            .as_ref()
            .and_then(|sealed| self.keyring.open(sealed, &binding(&current)).ok())
            .and_then(|plain| SigningSecrets::parse(&plain.0));
        let Some(secrets) = opened else {
            return Ok(Outcome::Refused(ApiError::internal(
                "the signing secret could not be opened",
            )));
        };
        let fresh = match self.keyring.new_signing_secret() {
            Ok(s) => s,
            Err(e) => return Ok(Outcome::Refused(ApiError::internal(e.to_string()))),
        };
        let rotated = secrets.rotated(fresh.0.clone(), now, self.rotation_overlap_ms);
        let mut next = current.clone();
        next.secret = match self
            .keyring
            .seal(rotated.to_plain().as_bytes(), &binding(&next))
        {
            Ok(s) => Some(s),
            Err(e) => return Ok(Outcome::Refused(ApiError::internal(e.to_string()))),
        };
        next.revision += 1;
        next.updated_at_ms = now;
        self.write(&next, current.revision).await?;
        let overlap_until = rotated.previous_until_ms.map(rfc3339);
        // The one time the new secret leaves the hub (R-SEC-1).
        let body = json!({"secret": fresh.0, "overlapUntil": overlap_until});
        Ok(Outcome::Written(Answer::ok(body).with_etag(&next)))
    }
}
