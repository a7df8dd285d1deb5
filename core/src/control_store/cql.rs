//! The control store on ScyllaDB/CQL (schema `schema/cql/control.cql`). A tenant's subscriptions
//! and name index share a partition, so create and replace are single conditional batches; the
//! revision counter and idempotency keys move only by lightweight transactions.

use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::response::query_result::QueryResult;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::CqlValue;
use uuid::Uuid;

use super::*;
use crate::cql::LwtAnswer;

const SCHEMA: &str = include_str!("../../../schema/cql/control.cql");
const SUB: i8 = 0;
const NAME: i8 = 1;
const LOG_BUCKET: i64 = 10_000;

fn unavailable(e: impl std::fmt::Display) -> ControlStoreError {
    ControlStoreError::Unavailable(e.to_string())
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, ControlStoreError> {
    postcard::to_allocvec(v).map_err(unavailable)
}

fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, ControlStoreError> {
    postcard::from_bytes(b).map_err(|e| unavailable(format!("corrupt record: {e}")))
}

fn encode_sub(sub: &Subscription) -> Result<Vec<u8>, ControlStoreError> {
    crate::record::encode(sub).map_err(unavailable)
}

fn decode_sub(b: &[u8]) -> Result<Subscription, ControlStoreError> {
    crate::record::decode(b).map_err(unavailable)
}

fn lwt(result: QueryResult) -> Result<LwtAnswer, ControlStoreError> {
    LwtAnswer::read(result).map_err(ControlStoreError::Unavailable)
}

#[derive(Debug)]
struct Statements {
    insert_sub: PreparedStatement,
    update_sub: PreparedStatement,
    claim_name: PreparedStatement,
    free_name: PreparedStatement,
    get_sub: PreparedStatement,
    list_subs: PreparedStatement,
    read_counter: PreparedStatement,
    create_counter: PreparedStatement,
    bump_counter: PreparedStatement,
    put_change: PreparedStatement,
    changes: PreparedStatement,
    idem_read: PreparedStatement,
    idem_create: PreparedStatement,
    idem_swap: PreparedStatement,
    idem_set: PreparedStatement,
    idem_delete: PreparedStatement,
    observed_keys: PreparedStatement,
}

pub struct CqlControlStore {
    session: Session,
    st: Statements,
    idem_ttl_s: i32,
}

impl std::fmt::Debug for CqlControlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CqlControlStore")
    }
}

async fn prepare(
    s: &Session,
    cql: &str,
    conditional: bool,
    serial_read: bool,
) -> Result<PreparedStatement, ControlStoreError> {
    let mut p = s
        .prepare(cql)
        .await
        .map_err(|e| unavailable(format!("preparing `{cql}`: {e}")))?;
    if serial_read {
        p.set_consistency(Consistency::LocalSerial);
    } else {
        p.set_consistency(Consistency::LocalQuorum);
    }
    if conditional {
        p.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    }
    p.set_is_idempotent(!conditional);
    Ok(p)
}

impl CqlControlStore {
    /// Connects, creates the keyspace (with `replication`) and tables if missing.
    pub async fn connect(
        (nodes, access): (&[String], &crate::cql::CqlAccess),
        keyspace: &str,
        replication: &str,
        idem_retention_s: u32,
    ) -> Result<Self, ControlStoreError> {
        let session = crate::cql::open(nodes, access, keyspace, replication, SCHEMA)
            .await
            .map_err(ControlStoreError::Unavailable)?;
        let s = &session;
        let st = Statements {
            insert_sub: prepare(s, "INSERT INTO tenant_subscriptions (tenant, kind, key, id, revision, record) VALUES (?, 0, ?, ?, ?, ?) IF NOT EXISTS", true, false).await?,
            update_sub: prepare(s, "UPDATE tenant_subscriptions SET revision = ?, record = ? WHERE tenant = ? AND kind = 0 AND key = ? IF revision = ?", true, false).await?,
            claim_name: prepare(s, "INSERT INTO tenant_subscriptions (tenant, kind, key, id) VALUES (?, 1, ?, ?) IF NOT EXISTS", true, false).await?,
            free_name: prepare(s, "DELETE FROM tenant_subscriptions WHERE tenant = ? AND kind = 1 AND key = ? IF id = ?", true, false).await?,
            get_sub: prepare(s, "SELECT record FROM tenant_subscriptions WHERE tenant = ? AND kind = 0 AND key = ?", false, false).await?,
            list_subs: prepare(s, "SELECT record FROM tenant_subscriptions WHERE tenant = ? AND kind = 0 AND key > ? LIMIT ?", false, false).await?,
            read_counter: prepare(s, "SELECT value FROM control_counters WHERE name = 'revision'", false, true).await?,
            create_counter: prepare(s, "INSERT INTO control_counters (name, value) VALUES ('revision', 1) IF NOT EXISTS", true, false).await?,
            bump_counter: prepare(s, "UPDATE control_counters SET value = ? WHERE name = 'revision' IF value = ?", true, false).await?,
            put_change: prepare(s, "INSERT INTO subscription_changes (bucket, revision, tenant, id) VALUES (?, ?, ?, ?)", false, false).await?,
            changes: prepare(s, "SELECT revision, tenant, id FROM subscription_changes WHERE bucket = ? AND revision > ? LIMIT ?", false, false).await?,
            idem_read: prepare(s, "SELECT record FROM idempotency WHERE tenant = ? AND key = ?", false, true).await?,
            idem_create: prepare(s, "INSERT INTO idempotency (tenant, key, record) VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?", true, false).await?,
            idem_swap: prepare(s, "UPDATE idempotency USING TTL ? SET record = ? WHERE tenant = ? AND key = ? IF record = ?", true, false).await?,
            idem_set: prepare(s, "UPDATE idempotency USING TTL ? SET record = ? WHERE tenant = ? AND key = ? IF EXISTS", true, false).await?,
            observed_keys: prepare(s, "SELECT key, origin, major FROM catalog_keys WHERE part = 0", false, false).await?,
            idem_delete: prepare(s, "DELETE FROM idempotency WHERE tenant = ? AND key = ? IF EXISTS", true, false).await?,
        };
        Ok(Self {
            session,
            st,
            idem_ttl_s: i32::try_from(idem_retention_s).unwrap_or(i32::MAX),
        })
    }

    /// The first row of a single-row read, if any.
    async fn first_row<R>(
        &self,
        stmt: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> Result<Option<R>, ControlStoreError>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        crate::cql::first_row(&self.session, stmt, values)
            .await
            .map_err(ControlStoreError::Unavailable)
    }

    fn conditional_batch() -> Batch {
        let mut b = Batch::new(BatchType::Logged);
        b.set_consistency(Consistency::LocalQuorum);
        b.set_serial_consistency(Some(SerialConsistency::LocalSerial));
        b
    }

    /// Takes the next global revision and logs the change under it (before the change itself).
    async fn log_change(&self, sub: &Subscription) -> Result<(), ControlStoreError> {
        for _ in 0..100 {
            let current: Option<(Option<i64>,)> = self.first_row(&self.st.read_counter, ()).await?;
            let (applied, next) = match current.and_then(|(v,)| v) {
                None => {
                    let r = self
                        .session
                        .execute_unpaged(&self.st.create_counter, ())
                        .await
                        .map_err(unavailable)?;
                    (lwt(r)?.applied, 1)
                }
                Some(v) => {
                    let r = self
                        .session
                        .execute_unpaged(&self.st.bump_counter, (v + 1, v))
                        .await
                        .map_err(unavailable)?;
                    (lwt(r)?.applied, v + 1)
                }
            };
            if applied {
                self.session
                    .execute_unpaged(
                        &self.st.put_change,
                        (next / LOG_BUCKET, next, &sub.tenant, sub.id),
                    )
                    .await
                    .map_err(unavailable)?;
                return Ok(());
            }
        }
        Err(unavailable("the revision counter stayed contended"))
    }

    async fn read_idem(
        &self,
        tenant: &str,
        key: &str,
    ) -> Result<Option<(Vec<u8>, IdemRecord)>, ControlStoreError> {
        let row: Option<(Option<Vec<u8>>,)> =
            self.first_row(&self.st.idem_read, (tenant, key)).await?;
        match row.and_then(|(r,)| r) {
            Some(bytes) => {
                let record = decode(&bytes)?;
                Ok(Some((bytes, record)))
            }
            None => Ok(None),
        }
    }

    async fn set_idem(
        &self,
        tenant: &str,
        key: &str,
        record: &IdemRecord,
    ) -> Result<(), ControlStoreError> {
        self.session
            .execute_unpaged(
                &self.st.idem_set,
                (self.idem_ttl_s, encode(record)?, tenant, key),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait]
impl ControlStore for CqlControlStore {
    /// The log entry is written just before the row.
    fn rows_may_lag_log(&self) -> bool {
        true
    }

    async fn create(&self, sub: &Subscription) -> Result<(), ControlStoreError> {
        self.log_change(sub).await?;
        let mut batch = Self::conditional_batch();
        batch.append_statement(self.st.claim_name.clone());
        batch.append_statement(self.st.insert_sub.clone());
        let id = sub.id.to_string();
        let record = encode_sub(sub)?;
        let revision = i64::try_from(sub.revision).map_err(unavailable)?;
        let result = self
            .session
            .batch(
                &batch,
                (
                    (&sub.tenant, &sub.name, sub.id),
                    (&sub.tenant, &id, sub.id, revision, &record),
                ),
            )
            .await
            .map_err(unavailable)?;
        if lwt(result)?.applied {
            Ok(())
        } else {
            Err(ControlStoreError::NameTaken)
        }
    }

    async fn get(&self, tenant: &str, id: Uuid) -> Result<Option<Subscription>, ControlStoreError> {
        let row: Option<(Option<Vec<u8>>,)> = self
            .first_row(&self.st.get_sub, (tenant, id.to_string()))
            .await?;
        row.and_then(|(r,)| r).map(|b| decode_sub(&b)).transpose()
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<Subscription>, ControlStoreError> {
        let mut out = Vec::new();
        let mut from = after.map(|a| a.to_string()).unwrap_or_default();
        loop {
            let page = 256;
            let rows = self
                .session
                .execute_unpaged(&self.st.list_subs, (tenant, &from, page))
                .await
                .map_err(unavailable)?
                .into_rows_result()
                .map_err(unavailable)?;
            let mut read = 0;
            for row in rows.rows::<(Option<Vec<u8>>,)>().map_err(unavailable)? {
                read += 1;
                let Some(bytes) = row.map_err(unavailable)?.0 else {
                    continue;
                };
                let sub: Subscription = decode_sub(&bytes)?;
                from = sub.id.to_string();
                if !sub.deleted {
                    out.push(sub);
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
            if read < page {
                return Ok(out);
            }
        }
    }

    async fn replace(&self, sub: &Subscription, expected: u64) -> Result<(), ControlStoreError> {
        let Some(current) = self.get(&sub.tenant, sub.id).await? else {
            return Err(ControlStoreError::NotFound);
        };
        if current.revision != expected {
            return Err(ControlStoreError::Conflict);
        }
        self.log_change(sub).await?;
        let id = sub.id.to_string();
        let record = encode_sub(sub)?;
        let revision = i64::try_from(sub.revision).map_err(unavailable)?;
        let expected_i = i64::try_from(expected).map_err(unavailable)?;
        let mut batch = Self::conditional_batch();
        let mut values: Vec<Box<dyn scylla::serialize::row::SerializeRow + Send + Sync + '_>> =
            Vec::new();
        batch.append_statement(self.st.update_sub.clone());
        values.push(Box::new((
            revision,
            record,
            sub.tenant.clone(),
            id,
            expected_i,
        )));
        let (was_live, is_live) = (!current.deleted, !sub.deleted);
        let renamed = current.name != sub.name;
        if was_live && (!is_live || renamed) {
            batch.append_statement(self.st.free_name.clone());
            values.push(Box::new((
                current.tenant.clone(),
                current.name.clone(),
                current.id,
            )));
        }
        if is_live && (!was_live || renamed) {
            batch.append_statement(self.st.claim_name.clone());
            values.push(Box::new((sub.tenant.clone(), sub.name.clone(), sub.id)));
        }
        let answer = lwt(self
            .session
            .batch(&batch, values)
            .await
            .map_err(unavailable)?)?;
        if answer.applied {
            return Ok(());
        }
        // Refused: the subscription moved (Conflict), or the new name is someone else's.
        let moved = answer.rows().any(|r| {
            matches!(r.get("kind"), Some(CqlValue::TinyInt(SUB)))
                && !matches!(r.get("revision"), Some(CqlValue::BigInt(v)) if *v == expected_i)
        });
        let name_taken = answer.rows().any(|r| {
            matches!(r.get("kind"), Some(CqlValue::TinyInt(NAME)))
                && matches!(r.get("id"), Some(CqlValue::Uuid(owner)) if *owner != sub.id)
        });
        Err(if moved || !name_taken {
            ControlStoreError::Conflict
        } else {
            ControlStoreError::NameTaken
        })
    }

    async fn changes_since(
        &self,
        revision: u64,
        limit: usize,
    ) -> Result<Vec<Change>, ControlStoreError> {
        let mut out = Vec::new();
        let mut after = i64::try_from(revision).map_err(unavailable)?;
        let head: Option<(Option<i64>,)> = self.first_row(&self.st.read_counter, ()).await?;
        let head = head.and_then(|(v,)| v).unwrap_or(0);
        while out.len() < limit && after < head {
            let want = i32::try_from(limit - out.len()).unwrap_or(i32::MAX);
            let rows = self
                .session
                .execute_unpaged(&self.st.changes, ((after + 1) / LOG_BUCKET, after, want))
                .await
                .map_err(unavailable)?
                .into_rows_result()
                .map_err(unavailable)?;
            let before = out.len();
            for row in rows.rows::<(i64, String, Uuid)>().map_err(unavailable)? {
                let (rev, tenant, id) = row.map_err(unavailable)?;
                out.push(Change {
                    revision: u64::try_from(rev).map_err(unavailable)?,
                    tenant,
                    id,
                });
                after = rev;
            }
            if out.len() == before {
                // A revision taken but never logged (its writer died): skip to the next bucket
                // boundary or the next revision.
                after = ((after + 1) / LOG_BUCKET + 1) * LOG_BUCKET - 1;
            }
        }
        Ok(out)
    }

    async fn idem_begin(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: [u8; 32],
        times: IdemTimes,
    ) -> Result<IdemBegin, ControlStoreError> {
        let mark = encode(&IdemRecord::InFlight {
            fingerprint,
            started_ms: times.now_ms,
        })?;
        for _ in 0..10 {
            let existing = self.read_idem(tenant, key).await?;
            let decision =
                IdemRecord::decide(existing.as_ref().map(|(_, r)| r), &fingerprint, times);
            if decision != IdemBegin::Fresh {
                return Ok(decision);
            }
            let result = match &existing {
                None => {
                    self.session
                        .execute_unpaged(
                            &self.st.idem_create,
                            (tenant, key, &mark, self.idem_ttl_s),
                        )
                        .await
                }
                Some((old, _)) => {
                    self.session
                        .execute_unpaged(
                            &self.st.idem_swap,
                            (self.idem_ttl_s, &mark, tenant, key, old),
                        )
                        .await
                }
            };
            if lwt(result.map_err(unavailable)?)?.applied {
                return Ok(IdemBegin::Fresh);
            }
            // Lost a race for the key: decide again on what won.
        }
        Ok(IdemBegin::InFlight)
    }

    async fn idem_finish(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: [u8; 32],
        response: StoredResponse,
        now_ms: i64,
    ) -> Result<(), ControlStoreError> {
        self.set_idem(
            tenant,
            key,
            &IdemRecord::Done {
                fingerprint,
                response,
                at_ms: now_ms,
            },
        )
        .await
    }

    async fn idem_release(&self, tenant: &str, key: &str) -> Result<(), ControlStoreError> {
        self.session
            .execute_unpaged(&self.st.idem_delete, (tenant, key))
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn observed_keys(&self) -> Result<Vec<(String, String, u32)>, ControlStoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.st.observed_keys, ())
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut out = Vec::new();
        for row in rows.rows::<(String, String, i32)>().map_err(unavailable)? {
            let (key, origin, major) = row.map_err(unavailable)?;
            out.push((key, origin, u32::try_from(major).unwrap_or(0)));
        }
        Ok(out)
    }

    async fn idem_unrecorded(
        &self,
        tenant: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<(), ControlStoreError> {
        self.set_idem(tenant, key, &IdemRecord::Unrecorded { at_ms: now_ms })
            .await
    }
}
