//! The per-tenant log (R-IN-8): seqs in buckets of `bucket_size`, each bucket one partition whose
//! static `head` is the last seq written in it.
//!
//! An append is one conditional batch on one bucket: `IF head = h` (or `IF head = null` for a
//! bucket's first append), writing seqs `h+1 ..= h+m` and `head = h+m`. Paxos serialises appends
//! on the partition and applies each batch whole, so the rows of a bucket are always exactly the
//! seqs up to its `head`: a reader sees a gap-free prefix, and seq `n` can never appear after a
//! reader has passed it — with any number of writers on any number of engines. A bucket is full
//! when `head` is its last seq; the next append goes to the next bucket.
//!
//! Seqs start at 1: bucket 0 holds `1 ..= size-1`, bucket `b > 0` holds `b*size ..= (b+1)*size-1`.

use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::{Consistency, SerialConsistency};
use uuid::Uuid;

use super::claim::{id_bucket, Attempt, Claim};
use super::job_rows::Part;
use super::lwt::lwt;
use super::{as_i64, unavailable, CqlStore};
use crate::store::codec::decode;
use crate::store::{InboxEvent, StoreError, StoredEvent};

/// An event of the batch (at `index`) whose claims found it open, waiting for its seq.
#[derive(Debug)]
pub(super) struct Pending<'a> {
    pub index: usize,
    pub event: &'a InboxEvent,
    /// The seq its dedup claim names; rewritten before an append that gives it another.
    pub intent: u64,
    /// The event as the log stores it.
    pub blob: Vec<u8>,
}

/// Where an append put each event (by its index in the batch): its seq, or what the claims read
/// again after a lost race said of it (another writer appended it meanwhile).
pub(super) type Placed = (usize, Result<u64, Claim>);

/// Lost races tolerated in one append before the batch is failed (and retried by the shard).
const APPEND_ATTEMPTS: usize = 1000;

pub(super) type BoxedRow<'a> = Box<dyn SerializeRow + Send + Sync + 'a>;

impl CqlStore {
    pub(super) fn bucket_of(&self, seq: u64) -> u64 {
        seq / self.settings.bucket_size
    }

    fn first_of(&self, bucket: u64) -> u64 {
        (bucket * self.settings.bucket_size).max(1)
    }

    fn last_of(&self, bucket: u64) -> u64 {
        (bucket + 1) * self.settings.bucket_size - 1
    }

    fn remember_head(&self, tenant: &str, head: u64) {
        if let Ok(mut heads) = self.heads.lock() {
            heads.insert(tenant.to_owned(), head);
        }
    }

    /// The tenant's head as far as this process knows, or the start of its hinted bucket.
    pub(super) async fn guess_head(&self, tenant: &str) -> Result<u64, StoreError> {
        if let Some(head) = self.heads.lock().ok().and_then(|h| h.get(tenant).copied()) {
            return Ok(head);
        }
        let hint: Option<(Option<i64>,)> = self.first_row(&self.st.hint_read, (tenant,)).await?;
        let bucket = hint
            .and_then(|(b,)| b)
            .and_then(|b| u64::try_from(b).ok())
            .unwrap_or(0);
        Ok(self.first_of(bucket) - 1)
    }

    /// A bucket's head (`first_of - 1` when empty); `settle` first finishes or discards an
    /// append in flight (a serial read), which writers need and readers do not.
    async fn read_head(&self, tenant: &str, bucket: u64, settle: bool) -> Result<u64, StoreError> {
        let stmt = if settle {
            &self.st.log_head_serial
        } else {
            &self.st.log_head
        };
        let row: Option<(Option<i64>,)> = self.first_row(stmt, (tenant, as_i64(bucket)?)).await?;
        Ok(row
            .and_then(|(h,)| h)
            .and_then(|h| u64::try_from(h).ok())
            .unwrap_or(self.first_of(bucket) - 1))
    }

    /// The id stored at `seq`, read at serial consistency so an append still in flight is either
    /// finished or discarded before the answer.
    pub(super) async fn log_id_at(
        &self,
        tenant: &str,
        seq: u64,
    ) -> Result<Option<Uuid>, StoreError> {
        let key = (tenant, as_i64(self.bucket_of(seq))?, as_i64(seq)?);
        let row: Option<(Option<Uuid>,)> = self.first_row(&self.st.log_id_at, key).await?;
        Ok(row.and_then(|(id,)| id))
    }

    /// Moves the attempt's claims to the seqs they are about to take, durably, before the
    /// append: a crash after the append leaves each claim naming where its event is. The moves
    /// of one dedup partition go as one batch (a wrong guess moves every claim after it).
    async fn retarget_claims(
        &self,
        attempt: &Attempt<'_>,
        pending: &mut [Pending<'_>],
        first_seq: u64,
    ) -> Result<(), StoreError> {
        let ttl = Self::ttl(self.settings.dedup_ttl_s);
        let mut moves = Vec::new();
        for (k, p) in pending.iter_mut().enumerate() {
            let seq = first_seq + k as u64;
            if p.intent == seq {
                continue;
            }
            p.intent = seq;
            let (tenant, id) = (p.event.tenant.as_str(), p.event.id);
            let row: BoxedRow<'_> =
                Box::new((ttl, as_i64(seq)?, tenant, id_bucket(&id), id, attempt.key));
            moves.push((
                Part::Dedup(tenant, id_bucket(&id)),
                &self.st.set_intent,
                row,
            ));
        }
        self.in_batches(moves).await
    }

    /// Appends one tenant's events in order, each conditional on the head `head` the writer
    /// knew before it read their claims (`claim.rs` says why that order matters). A lost race
    /// reads the claims of what is left again and drops what another writer appended meanwhile.
    pub(super) async fn append(
        &self,
        attempt: &Attempt<'_>,
        events: &[InboxEvent],
        mut head: u64,
        mut pending: Vec<Pending<'_>>,
    ) -> Result<Vec<Placed>, StoreError> {
        let Some(tenant) = pending.first().map(|p| p.event.tenant.as_str()) else {
            return Ok(Vec::new());
        };
        let ttl = Self::ttl(self.settings.retention_ttl_s);
        let mut out = Vec::with_capacity(pending.len());
        let (mut i, mut lost) = (0, 0);
        while i < pending.len() {
            let bucket = self.bucket_of(head + 1);
            let room = usize::try_from(self.last_of(bucket) - head).unwrap_or(usize::MAX);
            let (mut end, mut bytes) = (i, 0);
            while end < pending.len()
                && end - i < room
                && (end == i || bytes + pending[end].blob.len() <= self.settings.append_bytes)
            {
                bytes += pending[end].blob.len();
                end += 1;
            }
            self.retarget_claims(attempt, &mut pending[i..end], head + 1)
                .await?;

            let new_head = head + (end - i) as u64;
            let expected = (head + 1 != self.first_of(bucket)).then_some(as_i64(head)?);
            let mut batch = Batch::new(BatchType::Unlogged);
            batch.set_consistency(Consistency::LocalQuorum);
            batch.set_serial_consistency(Some(SerialConsistency::LocalSerial));
            batch.append_statement(self.st.append_head.clone());
            let mut values: Vec<BoxedRow<'_>> = Vec::with_capacity(end - i + 1);
            values.push(Box::new((
                as_i64(new_head)?,
                tenant,
                as_i64(bucket)?,
                expected,
            )));
            for (k, p) in pending[i..end].iter().enumerate() {
                batch.append_statement(self.st.append_event.clone());
                values.push(Box::new((
                    tenant,
                    as_i64(bucket)?,
                    as_i64(head + 1 + k as u64)?,
                    p.event.id,
                    p.blob.as_slice(),
                    ttl,
                )));
            }
            let answer = lwt(self
                .session
                .batch(&batch, values)
                .await
                .map_err(unavailable)?)?;
            if answer.applied {
                for (k, p) in pending[i..end].iter().enumerate() {
                    let seq = head + 1 + k as u64;
                    self.recent.keep(tenant, seq, p.event.id, &p.blob);
                    out.push((p.index, Ok(seq)));
                }
                if expected.is_none() && bucket > 0 {
                    self.session
                        .execute_unpaged(&self.st.hint_write, (as_i64(bucket)?, tenant))
                        .await
                        .map_err(unavailable)?;
                }
                head = new_head;
                i = end;
                self.remember_head(tenant, head);
                continue;
            }
            lost += 1;
            if lost > APPEND_ATTEMPTS {
                return Err(StoreError::Unavailable(format!(
                    "append for a tenant lost {APPEND_ATTEMPTS} races in a row"
                )));
            }
            head = if answer.has("head") {
                answer
                    .bigint("head")
                    .and_then(|h| u64::try_from(h).ok())
                    .unwrap_or(self.first_of(bucket) - 1)
            } else {
                self.read_head(tenant, bucket, true).await?
            };
            self.remember_head(tenant, head);
            // Another writer appended: what it appended of ours is no longer to append.
            let judged = self
                .judge_again(attempt, events, pending[i..].iter().map(|p| p.index))
                .await?;
            let rest: Vec<Pending<'_>> = pending.drain(i..).collect();
            for p in rest {
                match judged.get(&p.index) {
                    Some(&claim) if !matches!(claim, Claim::Open) => {
                        out.push((p.index, Err(claim)))
                    }
                    _ => pending.push(p),
                }
            }
        }
        Ok(out)
    }

    /// A tenant's events after `after`, in seq order. Rows of a bucket are a gap-free range, so
    /// the page continues into the next bucket only when this one is full.
    pub(super) async fn read_log(
        &self,
        tenant: &str,
        mut after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut out = Vec::with_capacity(limit.min(1024));
        while out.len() < limit {
            let bucket = self.bucket_of(after + 1);
            let want = i32::try_from(limit - out.len()).unwrap_or(i32::MAX);
            let rows = self
                .session
                .execute_unpaged(
                    &self.st.read_log,
                    (tenant, as_i64(bucket)?, as_i64(after)?, want),
                )
                .await
                .map_err(unavailable)?
                .into_rows_result()
                .map_err(unavailable)?;
            let before = out.len();
            for row in rows.rows::<(i64, Vec<u8>)>().map_err(unavailable)? {
                let (seq, blob) = row.map_err(unavailable)?;
                let seq = u64::try_from(seq).map_err(unavailable)?;
                out.push(StoredEvent {
                    seq,
                    event: decode::<InboxEvent>(&blob)?,
                });
                after = seq;
            }
            if out.len() == before {
                // Nothing readable here: either the end of the log, or a full bucket whose rows
                // all expired (retention) — then go on to the next one.
                if self.read_head(tenant, bucket, false).await? == self.last_of(bucket) {
                    after = self.last_of(bucket);
                    continue;
                }
                break;
            }
            if after != self.last_of(bucket) {
                break;
            }
        }
        Ok(out)
    }
}
