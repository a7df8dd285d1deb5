//! The control store in a redb file (the standalone hub): every operation is one transaction, so
//! the name index, the revision log and the subscription always agree.

use std::path::Path;
use std::sync::Arc;

use crate::redb_handle::{DbHandle, StorageFailure};
use async_trait::async_trait;
use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;
use uuid::Uuid;

use super::*;

/// `(tenant, id)` → subscription.
const SUBS: TableDefinition<(&str, u128), &[u8]> = TableDefinition::new("subscriptions");
/// `(tenant, name)` → id, live subscriptions only.
const NAMES: TableDefinition<(&str, &str), u128> = TableDefinition::new("subscription_names");
/// revision → change.
const CHANGES: TableDefinition<u64, &[u8]> = TableDefinition::new("subscription_changes");
/// `(tenant, key)` → idempotency record.
const IDEM: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("idempotency");

#[derive(Clone)]
pub struct EmbeddedControlStore {
    /// Reopened after a failed write (a full disk): see `crate::redb_handle`.
    db: Arc<DbHandle>,
}

impl std::fmt::Debug for EmbeddedControlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedControlStore")
    }
}

fn unavailable(e: impl std::fmt::Display) -> ControlStoreError {
    ControlStoreError::Unavailable(e.to_string())
}

impl StorageFailure for ControlStoreError {
    fn unavailable(why: String) -> Self {
        ControlStoreError::Unavailable(why)
    }

    fn is_storage_failure(&self) -> bool {
        matches!(self, ControlStoreError::Unavailable(_))
    }

    fn reason(&self) -> String {
        match self {
            ControlStoreError::Unavailable(why) => why.clone(),
            other => other.to_string(),
        }
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, ControlStoreError> {
    postcard::to_allocvec(v).map_err(unavailable)
}

fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, ControlStoreError> {
    postcard::from_bytes(b)
        .map_err(|e| ControlStoreError::Unavailable(format!("corrupt record: {e}")))
}

fn encode_sub(sub: &Subscription) -> Result<Vec<u8>, ControlStoreError> {
    crate::record::encode(sub).map_err(unavailable)
}

fn decode_sub(b: &[u8]) -> Result<Subscription, ControlStoreError> {
    crate::record::decode(b).map_err(unavailable)
}

impl EmbeddedControlStore {
    pub fn open(path: &Path) -> Result<Self, ControlStoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(unavailable)?;
        }
        let db = Database::create(path).map_err(unavailable)?;
        let txn = db.begin_write().map_err(unavailable)?;
        txn.open_table(SUBS).map_err(unavailable)?;
        txn.open_table(NAMES).map_err(unavailable)?;
        txn.open_table(CHANGES).map_err(unavailable)?;
        txn.open_table(IDEM).map_err(unavailable)?;
        txn.commit().map_err(unavailable)?;
        Ok(Self {
            db: Arc::new(DbHandle::new(path, db)),
        })
    }

    async fn blocking<T, F>(&self, work: F) -> Result<T, ControlStoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, ControlStoreError> + Send + 'static,
    {
        let handle = self.db.clone();
        tokio::task::spawn_blocking(move || handle.run(work))
            .await
            .map_err(unavailable)?
    }

    /// `blocking` for a write transaction: a write that fails for want of storage is remembered
    /// until one lands (readiness reports it: reads may still work on a full disk).
    async fn write<T, F>(&self, work: F) -> Result<T, ControlStoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, ControlStoreError> + Send + 'static,
    {
        let written = self.blocking(work).await;
        match &written {
            Ok(_) => self.db.note_landed(),
            Err(e) if e.is_storage_failure() => self.db.note_failed(e),
            Err(_) => {}
        }
        written
    }
}

/// Appends a change with the next revision number.
fn log_change(
    changes: &mut redb::Table<'_, u64, &[u8]>,
    sub: &Subscription,
) -> Result<(), ControlStoreError> {
    let next = changes
        .last()
        .map_err(unavailable)?
        .map_or(0, |(k, _)| k.value())
        + 1;
    let change = Change {
        revision: next,
        tenant: sub.tenant.clone(),
        id: sub.id,
    };
    changes
        .insert(next, encode(&change)?.as_slice())
        .map_err(unavailable)?;
    Ok(())
}

#[async_trait]
impl ControlStore for EmbeddedControlStore {
    fn write_failure(&self) -> Option<String> {
        self.db.write_failure()
    }

    async fn create(&self, sub: &Subscription) -> Result<(), ControlStoreError> {
        let sub = sub.clone();
        self.write(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut names = txn.open_table(NAMES).map_err(unavailable)?;
                if names
                    .get((sub.tenant.as_str(), sub.name.as_str()))
                    .map_err(unavailable)?
                    .is_some()
                {
                    return Err(ControlStoreError::NameTaken);
                }
                names
                    .insert((sub.tenant.as_str(), sub.name.as_str()), sub.id.as_u128())
                    .map_err(unavailable)?;
                let mut subs = txn.open_table(SUBS).map_err(unavailable)?;
                subs.insert(
                    (sub.tenant.as_str(), sub.id.as_u128()),
                    encode_sub(&sub)?.as_slice(),
                )
                .map_err(unavailable)?;
                log_change(&mut txn.open_table(CHANGES).map_err(unavailable)?, &sub)?;
            }
            txn.commit().map_err(unavailable)
        })
        .await
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<Subscription>, ControlStoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let subs = txn.open_table(SUBS).map_err(unavailable)?;
            let row = subs
                .get((tenant.as_str(), id.as_u128()))
                .map_err(unavailable)?;
            row.map(|r| decode_sub(r.value())).transpose()
        })
        .await
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<Subscription>, ControlStoreError> {
        let tenant = tenant.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let subs = txn.open_table(SUBS).map_err(unavailable)?;
            let start = after.map_or(0, |a| a.as_u128().saturating_add(1));
            let mut out = Vec::new();
            for row in subs
                .range((tenant.as_str(), start)..=(tenant.as_str(), u128::MAX))
                .map_err(unavailable)?
            {
                let (_, v) = row.map_err(unavailable)?;
                let sub: Subscription = decode_sub(v.value())?;
                if !sub.deleted {
                    out.push(sub);
                }
                if out.len() == limit {
                    break;
                }
            }
            Ok(out)
        })
        .await
    }

    async fn mark_deliveries(&self, marks: Vec<DeliveryMark>) -> Result<(), ControlStoreError> {
        self.write(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut subs = txn.open_table(SUBS).map_err(unavailable)?;
                let mut changes = txn.open_table(CHANGES).map_err(unavailable)?;
                for mark in &marks {
                    let key = (mark.tenant.as_str(), mark.subscription.as_u128());
                    let current = match subs.get(key).map_err(unavailable)? {
                        Some(row) => decode_sub(row.value())?,
                        None => continue,
                    };
                    if current.deleted {
                        continue;
                    }
                    let next = mark.applied_to(&current);
                    subs.insert(key, encode_sub(&next)?.as_slice())
                        .map_err(unavailable)?;
                    log_change(&mut changes, &next)?;
                }
            }
            txn.commit().map_err(unavailable)
        })
        .await
    }

    async fn replace(&self, sub: &Subscription, expected: u64) -> Result<(), ControlStoreError> {
        let sub = sub.clone();
        self.write(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut subs = txn.open_table(SUBS).map_err(unavailable)?;
                let key = (sub.tenant.as_str(), sub.id.as_u128());
                let current: Subscription = match subs.get(key).map_err(unavailable)? {
                    Some(row) => decode_sub(row.value())?,
                    None => return Err(ControlStoreError::NotFound),
                };
                if current.revision != expected {
                    return Err(ControlStoreError::Conflict);
                }
                let mut names = txn.open_table(NAMES).map_err(unavailable)?;
                let was_live = !current.deleted;
                let is_live = !sub.deleted;
                if was_live && (!is_live || current.name != sub.name) {
                    names
                        .remove((current.tenant.as_str(), current.name.as_str()))
                        .map_err(unavailable)?;
                }
                if is_live && (!was_live || current.name != sub.name) {
                    let name_key = (sub.tenant.as_str(), sub.name.as_str());
                    if names.get(name_key).map_err(unavailable)?.is_some() {
                        return Err(ControlStoreError::NameTaken);
                    }
                    names
                        .insert(name_key, sub.id.as_u128())
                        .map_err(unavailable)?;
                }
                subs.insert(key, encode_sub(&sub)?.as_slice())
                    .map_err(unavailable)?;
                log_change(&mut txn.open_table(CHANGES).map_err(unavailable)?, &sub)?;
            }
            txn.commit().map_err(unavailable)
        })
        .await
    }

    async fn changes_since(
        &self,
        revision: u64,
        limit: usize,
    ) -> Result<Vec<Change>, ControlStoreError> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let changes = txn.open_table(CHANGES).map_err(unavailable)?;
            let mut out = Vec::new();
            for row in changes
                .range(revision.saturating_add(1)..)
                .map_err(unavailable)?
                .take(limit)
            {
                out.push(decode(row.map_err(unavailable)?.1.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn idem_begin(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: [u8; 32],
        times: IdemTimes,
    ) -> Result<IdemBegin, ControlStoreError> {
        let (tenant, key) = (tenant.to_owned(), key.to_owned());
        self.write(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let decision = {
                let mut idem = txn.open_table(IDEM).map_err(unavailable)?;
                let existing: Option<IdemRecord> = idem
                    .get((tenant.as_str(), key.as_str()))
                    .map_err(unavailable)?
                    .map(|r| decode(r.value()))
                    .transpose()?;
                let decision = IdemRecord::decide(existing.as_ref(), &fingerprint, times);
                if decision == IdemBegin::Fresh {
                    let mark = IdemRecord::InFlight {
                        fingerprint,
                        started_ms: times.now_ms,
                    };
                    idem.insert((tenant.as_str(), key.as_str()), encode(&mark)?.as_slice())
                        .map_err(unavailable)?;
                }
                decision
            };
            txn.commit().map_err(unavailable)?;
            Ok(decision)
        })
        .await
    }

    async fn idem_finish(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: [u8; 32],
        response: StoredResponse,
        now_ms: i64,
    ) -> Result<(), ControlStoreError> {
        let record = IdemRecord::Done {
            fingerprint,
            response,
            at_ms: now_ms,
        };
        self.put_idem(tenant, key, Some(record)).await
    }

    async fn idem_release(&self, tenant: &str, key: &str) -> Result<(), ControlStoreError> {
        self.put_idem(tenant, key, None).await
    }

    async fn idem_unrecorded(
        &self,
        tenant: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<(), ControlStoreError> {
        self.put_idem(tenant, key, Some(IdemRecord::Unrecorded { at_ms: now_ms }))
            .await
    }
}

impl EmbeddedControlStore {
    async fn put_idem(
        &self,
        tenant: &str,
        key: &str,
        record: Option<IdemRecord>,
    ) -> Result<(), ControlStoreError> {
        let (tenant, key) = (tenant.to_owned(), key.to_owned());
        self.write(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            {
                let mut idem = txn.open_table(IDEM).map_err(unavailable)?;
                match record {
                    Some(r) => {
                        idem.insert((tenant.as_str(), key.as_str()), encode(&r)?.as_slice())
                            .map_err(unavailable)?;
                    }
                    None => {
                        idem.remove((tenant.as_str(), key.as_str()))
                            .map_err(unavailable)?;
                    }
                }
            }
            txn.commit().map_err(unavailable)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_cp_13_embedded_control_store_passes_the_conformance_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedControlStore::open(&dir.path().join("control.redb")).expect("open");
        crate::control_store::conformance::run_all(Arc::new(store), "embedded").await;
    }

    /// Issue 19's full disk, R-CP-13: a change that finds no space fails whole and says why;
    /// once space is freed the store reopens its file by itself, keeps every change it
    /// acknowledged, and takes new ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_cp_13_a_full_disk_fails_changes_whole_and_the_store_resumes_when_space_is_freed() {
        use crate::control_store::conformance::subscription;
        use crate::redb_handle::testing::{fill, Tmpfs};

        let dir = tempfile::tempdir().expect("tempdir");
        let _tmpfs = Tmpfs::mount(dir.path(), 8);
        let store = EmbeddedControlStore::open(&dir.path().join("control.redb")).expect("open");
        fill(dir.path(), 64 << 10).expect("filled");
        let mut made = 0;
        let failure = loop {
            let mut sub = subscription("t-full", &format!("s-{made}"));
            // Large rows fill the disk in a few changes.
            sub.endpoint = Some(format!("https://example.com/{}", "p".repeat(16 << 10)));
            match store.create(&sub).await {
                Ok(()) => made += 1,
                Err(e) => break e.to_string(),
            }
            assert!(made < 1000, "the disk never filled");
        };
        assert!(failure.contains("No space left"), "says why: {failure}");
        let reported = store.write_failure().unwrap_or_default();
        assert!(
            reported.contains("No space left"),
            "readiness learns it: {reported:?}"
        );

        std::fs::remove_file(dir.path().join("filler")).expect("space freed");
        let mut resumed = false;
        for _ in 0..50 {
            if store.create(&subscription("t-full", "after")).await.is_ok() {
                resumed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(resumed, "changes resume once space is freed");
        assert_eq!(store.write_failure(), None, "and readiness with them");
        let live = store.list("t-full", None, 1000).await.expect("list");
        assert_eq!(
            live.len(),
            made + 1,
            "every acknowledged change kept, nothing half-made"
        );
    }
}
