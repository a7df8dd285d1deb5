//! Changing a subscription after it was created: `PATCH` (R-CP-10), `DELETE` (R-CP-16), pause
//! and resume (R-CP-11). Each is a read, a decision and a write conditional on the revision
//! read; a write lost to another writer is decided again (`rewrite`), unless the caller named
//! the revision it edits (`If-Match`).

use crate::answer::{Answer, Served};
use crate::auth::Principal;
use crate::partners::Operation;
use crate::rewrite::{contended, until_answered, Attempt};
use crate::service::{if_match_tags, store_error, write_outcome, Control, Mutation, Outcome};
use crate::store::ControlStoreError;
use hub_core::destination::check_endpoint;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{parse_object, validate_edit, Subscription, VerificationState};

impl Control {
    /// `PATCH /v1/subscriptions/:id` (R-CP-10).
    pub async fn patch(
        &self,
        who: &Principal,
        id: &str,
        if_match: Option<&str>,
        m: Mutation<'_>,
    ) -> Served {
        self.admit(who, Operation::Edit)?;
        let tags = if_match.map(if_match_tags).transpose()?;
        let body = m.body;
        self.idempotent(who, &m, || async {
            until_answered(|| self.patch_once(who, id, tags.as_deref(), body))
                .await
                .unwrap_or_else(|| Outcome::Refused(contended()))
        })
        .await
    }

    /// One read, check and conditional write of a `PATCH`.
    async fn patch_once(
        &self,
        who: &Principal,
        id: &str,
        tags: Option<&[String]>,
        body: &[u8],
    ) -> Attempt<Outcome> {
        let refused = |e| Attempt::Answered(Outcome::Refused(e));
        let current = match self.live(who, id).await {
            Ok(s) => s,
            Err(e) => return refused(e),
        };
        if let Some(tags) = tags {
            if !tags.iter().any(|t| t == "*" || *t == current.etag()) {
                return refused(store_error(ControlStoreError::Conflict));
            }
        }
        let next = match self.edited(&current, body).await {
            Ok(next) => next,
            Err(e) => return refused(e),
        };
        match self.write(&next, current.revision).await {
            Ok(()) => Attempt::Answered(Outcome::Written(Answer::ok(next.view()).with_etag(&next))),
            // A write lost to another (most often the engine's delivery marks) is read and
            // applied again; an If-Match is checked again against what is read, so a change
            // that moved the ETag meanwhile answers 412 then.
            Err(ControlStoreError::Conflict) => Attempt::Lost,
            Err(e) => Attempt::Answered(write_outcome(e)),
        }
    }

    /// `current` with the edit in `body` applied, checked as a creation is: the endpoint (and, for
    /// an active subscription that moves, a probe of the new destination), the event types.
    async fn edited(&self, current: &Subscription, body: &[u8]) -> Result<Subscription, ApiError> {
        let mut edit = parse_object(body).and_then(|o| validate_edit(&o, current))?;
        if let Some(sent) = &edit.endpoint {
            // Stored in the form deliveries use (issue 16).
            edit.endpoint =
                check_endpoint(&self.policy, &*self.resolver, current.sink_kind, Some(sent))
                    .await?;
        }
        if let Some(endpoint) = &edit.endpoint {
            if current.verification_state == VerificationState::Active
                && current.endpoint.as_ref() != Some(endpoint)
            {
                // An active subscription moves only after the new destination answers a probe
                // made with the stored secret or credential; nothing changes else.
                let mut target = current.clone();
                target.endpoint = Some(endpoint.clone());
                let outcome = self.probe_destination(&target, None).await;
                if !outcome.success {
                    return Err(crate::onboarding::probe_failed(&outcome));
                }
            }
        }
        let mut next = current.clone();
        edit.apply(&mut next);
        if next.endpoint != current.endpoint {
            // A move leaves the old destination's failures behind (R-CP-2).
            next.last_failure_at_ms = None;
        }
        self.sync_catalog().await;
        let types = edit.event_types.as_ref().unwrap_or(&next.event_types);
        self.catalog.check(
            types,
            next.schema_major,
            &next.event_majors,
            next.origin.as_deref(),
        )?;
        next.revision = current.revision + 1;
        next.updated_at_ms = (self.now_ms)();
        Ok(next)
    }

    /// `DELETE /v1/subscriptions/:id` (R-CP-16): soft delete; the name is free again.
    pub async fn delete(&self, who: &Principal, id: &str, m: Mutation<'_>) -> Served {
        self.admit(who, Operation::Delete)?;
        self.idempotent(who, &m, || async {
            until_answered(|| self.delete_once(who, id))
                .await
                .unwrap_or_else(|| Outcome::Refused(contended()))
        })
        .await
    }

    async fn delete_once(&self, who: &Principal, id: &str) -> Attempt<Outcome> {
        let current = match self.live(who, id).await {
            Ok(s) => s,
            Err(e) => return Attempt::Answered(Outcome::Refused(e)),
        };
        let mut next = current.clone();
        next.deleted = true;
        next.enabled = false;
        next.revision += 1;
        next.updated_at_ms = (self.now_ms)();
        match self.write(&next, current.revision).await {
            Ok(()) => Attempt::Answered(Outcome::Written(Answer::deleted())),
            Err(ControlStoreError::Conflict) => Attempt::Lost,
            Err(e) => Attempt::Answered(write_outcome(e)),
        }
    }

    /// `POST …/pause` and `POST …/resume` (R-CP-11): no key, `subscriptions:post`, 200 without
    /// a body, a repeat is a no-op; a hub-stopped subscription answers 409.
    pub async fn set_paused(&self, who: &Principal, id: &str, pause: bool) -> Served {
        let op = if pause {
            Operation::Pause
        } else {
            Operation::Resume
        };
        self.admit(who, op)?;
        until_answered(|| self.set_paused_once(who, id, pause))
            .await
            .unwrap_or_else(|| Err(contended()))
    }

    async fn set_paused_once(&self, who: &Principal, id: &str, pause: bool) -> Attempt<Served> {
        let current = match self.live(who, id).await {
            Ok(s) => s,
            Err(e) => return Attempt::Answered(Err(e)),
        };
        if !current.enabled && !current.paused {
            return Attempt::Answered(Err(ApiError::new(
                ErrorCode::SubscriptionStoppedByHub,
                "the hub stopped this subscription; verify it to re-enable",
            )));
        }
        if current.paused == pause {
            return Attempt::Answered(Ok(Answer::ok_empty()));
        }
        let mut next = current.clone();
        next.paused = pause;
        next.enabled = !pause;
        if !pause {
            // Resume clears the failure history (paused time never counts).
            next.last_failure_at_ms = None;
            next.marks.resumed_at_ms = Some((self.now_ms)());
        }
        next.revision += 1;
        next.updated_at_ms = (self.now_ms)();
        match self.write(&next, current.revision).await {
            Ok(()) => Attempt::Answered(Ok(Answer::ok_empty())),
            Err(ControlStoreError::Conflict) => Attempt::Lost,
            Err(e) => Attempt::Answered(Err(store_error(e))),
        }
    }
}
