//! The control plane's store contract: subscriptions (with a name index and a revision per
//! change), the revision log engines follow, and idempotency records. Implemented by `embedded`
//! (redb; the standalone hub) and `cql` (ScyllaDB).

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod cql;
pub mod embedded;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::Subscription;

/// The tenant a readiness read asks about: no tenant has this name (tenant ids are producers'
/// `ce-tenantid`s), and CQL refuses an empty partition key.
pub const PROBE_TENANT: &str = "_readiness";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlStoreError {
    #[error("control store unavailable: {0}")]
    Unavailable(String),
    /// Another live subscription of the tenant has this name.
    #[error("name taken")]
    NameTaken,
    /// The subscription changed since it was read (its revision moved).
    #[error("changed since read")]
    Conflict,
    #[error("not found")]
    NotFound,
}

/// An attempt's outcome to record on its subscription's delivery timestamps (R-CP-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryMark {
    pub tenant: String,
    pub subscription: Uuid,
    pub success: bool,
    pub at_ms: i64,
}

impl DeliveryMark {
    /// An outcome of `sub` at `at_ms`.
    pub fn of(sub: &Subscription, success: bool, at_ms: i64) -> Self {
        Self {
            tenant: sub.tenant.clone(),
            subscription: sub.id,
            success,
            at_ms,
        }
    }

    /// `current` with this outcome marked: a success sets `last_success_at` and clears
    /// `last_failure_at`; a failure sets `last_failure_at`. The revision moves, the ETag does
    /// not (`Subscription::etag`).
    #[must_use]
    pub fn applied_to(&self, current: &Subscription) -> Subscription {
        let mut next = current.clone();
        if self.success {
            next.last_success_at_ms = Some(self.at_ms);
            next.last_failure_at_ms = None;
        } else {
            next.last_failure_at_ms = Some(self.at_ms);
        }
        next.revision += 1;
        next.delivery_mark_revisions += 1;
        next
    }
}

/// One change of one subscription, in the order engines apply them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub revision: u64,
    pub tenant: String,
    pub id: Uuid,
}

/// A response kept for an idempotency key, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What the store knows of an idempotency key when a request arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdemBegin {
    /// Unknown (or expired): this request now holds it.
    Fresh,
    /// The first request with this key is still running.
    InFlight,
    /// Done with the same request: replay this.
    Replay(StoredResponse),
    /// Used before with a different request.
    Mismatch,
    /// A mutation with this key may have committed without its outcome being recorded.
    Unrecorded,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdemRecord {
    InFlight {
        fingerprint: [u8; 32],
        started_ms: i64,
    },
    Done {
        fingerprint: [u8; 32],
        response: StoredResponse,
        at_ms: i64,
    },
    Unrecorded {
        at_ms: i64,
    },
}

/// How long a key is remembered (R-CP-13) and how long an in-flight mark is trusted.
#[derive(Debug, Clone, Copy)]
pub struct IdemTimes {
    pub now_ms: i64,
    pub retention_ms: i64,
    /// An in-flight mark older than this belongs to a request that died: its outcome is unknown.
    pub stale_ms: i64,
}

impl IdemRecord {
    /// The pure decision shared by every store: what `begin` answers given the stored record.
    pub fn decide(
        existing: Option<&IdemRecord>,
        fingerprint: &[u8; 32],
        t: IdemTimes,
    ) -> IdemBegin {
        match existing {
            None => IdemBegin::Fresh,
            Some(IdemRecord::Done { at_ms, .. }) | Some(IdemRecord::Unrecorded { at_ms })
                if t.now_ms - at_ms > t.retention_ms =>
            {
                IdemBegin::Fresh
            }
            Some(IdemRecord::Done {
                fingerprint: f,
                response,
                ..
            }) => {
                if f == fingerprint {
                    IdemBegin::Replay(response.clone())
                } else {
                    IdemBegin::Mismatch
                }
            }
            Some(IdemRecord::Unrecorded { .. }) => IdemBegin::Unrecorded,
            Some(IdemRecord::InFlight { started_ms, .. }) if t.now_ms - started_ms > t.stale_ms => {
                IdemBegin::Unrecorded
            }
            Some(IdemRecord::InFlight { .. }) => IdemBegin::InFlight,
        }
    }
}

#[async_trait]
pub trait ControlStore: Send + Sync + std::fmt::Debug {
    /// Why writes fail now, when the store knows it without trying one (the embedded store
    /// keeps its last failed write until one lands; a full disk still serves reads). Readiness
    /// reports it.
    fn write_failure(&self) -> Option<String> {
        None
    }

    /// Stores a new subscription (revision 1); `NameTaken` if a live one of the tenant has its
    /// name. Appends to the revision log.
    async fn create(&self, sub: &Subscription) -> Result<(), ControlStoreError>;

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<Subscription>, ControlStoreError>;

    /// Live (not deleted) subscriptions of a tenant in id order, after `after`.
    async fn list(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<Subscription>, ControlStoreError>;

    /// Replaces a subscription whose stored revision is `expected` with `sub` (whose revision
    /// must be `expected + 1`), keeping the name index true; appends to the revision log.
    async fn replace(&self, sub: &Subscription, expected: u64) -> Result<(), ControlStoreError>;

    /// Records delivery outcomes on their subscriptions (R-CP-2), each a change like any
    /// other; a subscription deleted or gone is passed over. A conflict with another writer is
    /// tried again a few times, then left to a later attempt's mark. The embedded store writes
    /// them all in one transaction, so a burst of marks costs one sync.
    async fn mark_deliveries(&self, marks: Vec<DeliveryMark>) -> Result<(), ControlStoreError> {
        for mark in marks {
            for _ in 0..3 {
                let current = match self.get(&mark.tenant, mark.subscription).await? {
                    Some(current) if !current.deleted => current,
                    _ => break,
                };
                match self
                    .replace(&mark.applied_to(&current), current.revision)
                    .await
                {
                    Err(ControlStoreError::Conflict) => continue,
                    Err(ControlStoreError::NotFound) => break,
                    other => other?,
                }
                break;
            }
        }
        Ok(())
    }

    /// Whether a change's log entry may be read before its row lands (CQL writes the entry
    /// first): a follower then reads the change's subscription again for a while. The embedded
    /// store writes both in one transaction, so what a follower reads is never behind its entry.
    fn rows_may_lag_log(&self) -> bool {
        false
    }

    /// Log entries after `revision`, oldest first.
    async fn changes_since(
        &self,
        revision: u64,
        limit: usize,
    ) -> Result<Vec<Change>, ControlStoreError>;

    /// Claims an idempotency key for a request with `fingerprint`, atomically.
    async fn idem_begin(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: [u8; 32],
        times: IdemTimes,
    ) -> Result<IdemBegin, ControlStoreError>;

    /// Records the outcome of the request holding the key.
    async fn idem_finish(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: [u8; 32],
        response: StoredResponse,
        now_ms: i64,
    ) -> Result<(), ControlStoreError>;

    /// Releases a key whose request wrote nothing (validation failed before any write), so the
    /// same key can be used again.
    async fn idem_release(&self, tenant: &str, key: &str) -> Result<(), ControlStoreError>;

    /// Marks a key whose mutation may have committed without a recorded outcome.
    async fn idem_unrecorded(
        &self,
        tenant: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<(), ControlStoreError>;

    /// Event keys engines recorded from accepted events `(key, origin, major)` (R-CP-15). The
    /// embedded store has none: there the engine feeds the catalog in-process.
    async fn observed_keys(&self) -> Result<Vec<(String, String, u32)>, ControlStoreError> {
        Ok(Vec::new())
    }
}
